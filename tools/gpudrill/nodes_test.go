package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/fabric-exporter/fabric_exporter/internal/ncclras"
)

// TestMain lets the test binary be the nodes' drills of the two-node
// trials (runNodesOf re-executes the running binary with --node-trial and
// --node-agent).
func TestMain(m *testing.M) {
	if code, ok := nodeMain(os.Args[1:]); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// nsExec's refusals, none of which mounts, enters a namespace or execs.
func TestNsExecErrors(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "not-a-netns")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	own := selfNS("mnt", "uts")
	for _, c := range []struct {
		name string
		s    nsSetup
		argv []string
		want string
	}{
		{"stdio", nsSetup{NetFD: 2}, []string{"sh"}, "not an inherited descriptor"},
		{"no command", nsSetup{NetFD: 3}, nil, "no command"},
		{"unknown command", nsSetup{NetFD: 3}, []string{"gpudrill-no-such-command"}, "executable file not found"},
		{"not a namespace", nsSetup{NetFD: fd}, []string{"sh"}, "enter the network namespace"},
		{"proc in the starter's mount namespace", nsSetup{Proc: true, Parent: own}, []string{"sh"}, "not in a mnt namespace of its own"},
		{"proc without the starter's", nsSetup{Proc: true}, []string{"sh"}, "not in a mnt namespace of its own"},
		{"hide in the starter's mount namespace", nsSetup{Hide: []string{"/dev"}, Parent: own}, []string{"sh"}, "not in a mnt namespace of its own"},
		{"hostname in the starter's UTS namespace", nsSetup{Hostname: "x", Parent: own}, []string{"sh"}, "not in a uts namespace of its own"},
		{"proc but not PID 1", nsSetup{Proc: true, Parent: map[string]string{"mnt": "mnt:[0]"}}, []string{"sh"}, "needs PID 1"},
	} {
		b, _ := json.Marshal(c.s)
		errc := make(chan error, 1)
		// nsExec locks its thread: run it on a goroutine of its own.
		go func() { errc <- nsExec(string(b), c.argv, os.Environ()) }()
		if err := <-errc; err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if err := nsExec("not json", []string{"sh"}, nil); err == nil || !strings.Contains(err.Error(), nsEnv) {
		t.Errorf("bad setup: %v", err)
	}
}

func TestWithoutEnv(t *testing.T) {
	got := withoutEnv([]string{"A=1", nsEnv + "=3", nsEnv + "X=4", "B=2"}, nsEnv)
	if strings.Join(got, " ") != "A=1 "+nsEnv+"X=4 B=2" {
		t.Errorf("%v", got)
	}
}

// pairOrSkip makes a node pair, or skips where the test may not (no root).
func pairOrSkip(t *testing.T) *nodePair {
	t.Helper()
	p, err := newNodePair()
	if err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
			t.Skipf("no network namespaces here: %v", err)
		}
		t.Fatal(err)
	}
	return p
}

// The pair: each namespace has lo and its end with its address, up; a
// command started in node 1 sees node 1's interfaces and nothing of the
// drill's namespace; teardown removes the pair and closes both.
func TestNodePair(t *testing.T) {
	p := pairOrSkip(t)
	defer p.teardown()
	for i := range p.ns {
		h, err := netlink.NewHandleAt(p.ns[i])
		if err != nil {
			t.Fatal(err)
		}
		l, err := h.LinkByName(nodeIf[i])
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		as, _ := h.AddrList(l, netlink.FAMILY_V4)
		if len(as) != 1 || as[0].IPNet.String() != nodeAddr[i]+"/24" || l.Attrs().Flags&1 == 0 {
			t.Errorf("node %d: %s addresses %v flags %v", i, nodeIf[i], as, l.Attrs().Flags)
		}
		links, _ := h.LinkList()
		if len(links) != 2 {
			t.Errorf("node %d: %d links, want lo and %s", i, len(links), nodeIf[i])
		}
		h.Close()
	}
	f, err := p.file(1)
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := reexec(nsSetup{NetFD: 3}, []*os.File{f}, os.Environ(), "cat", "/proc/net/dev")
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	f.Close()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if s := string(out); !strings.Contains(s, "veth1:") || !strings.Contains(s, "lo:") || strings.Contains(s, "veth0:") || strings.Count(s, ":") != 2 {
		t.Errorf("node 1's interfaces:\n%s", s)
	}
	if err := p.teardown(); err != nil {
		t.Fatal(err)
	}
	if p.ns[0].IsOpen() || p.ns[1].IsOpen() {
		t.Error("namespaces still open after teardown")
	}
	if err := p.teardown(); err != nil {
		t.Errorf("second teardown: %v", err)
	}
	if _, err := p.file(0); err == nil {
		t.Error("file of a closed namespace")
	}
	var nilPair *nodePair
	if err := nilPair.teardown(); err != nil {
		t.Error(err)
	}
}

func note(alert, pid, sev string, at time.Time, extra ...string) notification {
	l := map[string]string{"alertname": alert, "pid": pid, "severity": sev, "comm": "0xf8e68da1f581fed5"}
	for i := 0; i+1 < len(extra); i += 2 {
		l[extra[i]] = extra[i+1]
	}
	return notification{at: at, receiver: "pager", status: "firing", labels: l}
}

// The kill → page timing: the first notification of each alert after the
// kill, the earliest of them, and the healthy window's pages.
func TestPageTiming(t *testing.T) {
	k := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	notes := []notification{
		note("RailLinkDown", "", "page", k.Add(-time.Minute)),
		note("NCCLSocketFallback", "658", "page", k.Add(-30*time.Second), "evidence", "kernel"),
		note("NCCLSocketFallback", "658", "page", k.Add(-20*time.Second), "evidence", "log"),
		note("NodeWarning", "", "warning", k.Add(-10*time.Second)),
		note("NCCLAsyncError", "658", "page", k.Add(-time.Second)), // before the kill: not its page
		note("NCCLAsyncError", "658", "page", k.Add(41*time.Second)),
		note("NCCLRankMissing", "659", "page", k.Add(72*time.Second)),
		note("NCCLAsyncError", "658", "page", k.Add(56*time.Second)),
		{at: k.Add(30 * time.Second), status: "resolved", labels: map[string]string{"alertname": "NCCLRankMissing", "comm": "0xf8e68da1f581fed5"}},
		note("NCCLRankMissing", "700", "page", k.Add(35*time.Second), "comm", "0x1"), // another communicator
	}
	ofComm := func(l map[string]string) bool { return l["comm"] == "0xf8e68da1f581fed5" }
	got := firstPages(notes, rankLoss, ofComm, k)
	if got["NCCLAsyncError"].at != k.Add(41*time.Second) || got["NCCLRankMissing"].at != k.Add(72*time.Second) {
		t.Errorf("first pages %v", got)
	}
	if f, ok := earliest(got); !ok || f.labels["alertname"] != "NCCLAsyncError" {
		t.Errorf("earliest %v", f)
	}
	if _, ok := earliest(nil); ok {
		t.Error("earliest of nothing")
	}
	un, ex := pagesBefore(notes, k)
	if len(un) != 3 || len(ex) != 1 || listNotes(un) != " (RailLinkDown{pid=}, NCCLSocketFallback{pid=658}, NCCLAsyncError{pid=658})" {
		t.Errorf("unexpected %s, expected %d", listNotes(un), len(ex))
	}
	if !strings.Contains(expectedNote(ex), "1 NCCLSocketFallback") || expectedNote(nil) != "" {
		t.Error(expectedNote(ex))
	}
}

// waitPages returns once every alert came, or grace after the first, or
// at the timeout.
func TestWaitPages(t *testing.T) {
	w := &webhook{}
	start := time.Now()
	w.notes = []notification{note("NCCLAsyncError", "1", "page", start)}
	t0 := time.Now()
	got := waitPages(w, rankLoss, func(map[string]string) bool { return true }, start, 10*time.Second, 200*time.Millisecond)
	if d := time.Since(t0); len(got) != 1 || d > 2*time.Second {
		t.Errorf("%d pages after %s, want 1 after the 200ms grace", len(got), d)
	}
	w.notes = append(w.notes, note("NCCLRankMissing", "2", "page", start))
	if got := waitPages(w, rankLoss, func(map[string]string) bool { return true }, start, 10*time.Second, time.Minute); len(got) != 2 {
		t.Errorf("%d pages", len(got))
	}
	t0 = time.Now()
	if got := waitPages(&webhook{}, rankLoss, func(map[string]string) bool { return true }, time.Now(), 100*time.Millisecond, 0); len(got) != 0 || time.Since(t0) > 2*time.Second {
		t.Errorf("%v", got)
	}
}

func TestNodeSummary(t *testing.T) {
	res := &Result{KillToPage: []time.Duration{41 * time.Second, 33500 * time.Millisecond, 50 * time.Second},
		FallbackPage: []time.Duration{27300 * time.Millisecond, 31 * time.Second, 50 * time.Second, 33 * time.Second},
		Rows: []trialRow{
			{Name: "kill1", Kind: "kill", Shape: shapeContainer, Ranks: [2]rankInfo{{Host: 7, Own: 1}, {Host: 3, Own: 1}}, FallbackPage: 27300 * time.Millisecond, KillPage: 41 * time.Second, Pass: 9},
			{Name: "destroy", Kind: "destroy", Shape: shapeContainer, Pass: 6, Fail: 1},
		}}
	res.HangToPage = map[string][]time.Duration{"hang-eager": {29 * time.Second, 41 * time.Second}, "hang-sigstop": {70 * time.Second}}
	got := strings.Join(nodeSummary(Config{RASTrials: 3, NoDebug: true, HangTrials: 2}, res), "\n")
	want := `summary of the two-node trials:
  kill → page: p50 41.0 s, p95 50.0 s over 3  [41.0 s, 33.5 s, 50.0 s], OVER the 30 s p95 target
  hang-eager: fault → hung-group page naming rank 1: p50 35.0 s, p95 41.0 s over 2  [29.0 s, 41.0 s], within the 60 s p95 target
  hang-graph: fault → hung-group page: no page in 2 trials
  hang-sigstop: fault → hung-group page naming rank 1: p50 70.0 s, p95 70.0 s over 1  [70.0 s], OVER the 60 s p95 target
  socket fallback without NCCL logs, RAS → NCCLSocketFallback (kernel) for rank 0's host pid (4 of 2 trials paged): p50 32.0 s, p95 50.0 s over 4  [27.3 s, 31.0 s, 50.0 s, 33.0 s], OVER the 30 s p95 target
  trial                shape     rank 0 host/own    rank 1 host/own    RAS→fallback   kill→page  fault→page checks
  kill1                container 7/1                3/1                27.3 s         41.0 s     -          9/9 PASS
  destroy              container -                  -                  -              -          -          6/7 FAIL`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	got = strings.Join(nodeSummary(Config{RASTrials: 2, NoDebug: true}, &Result{Rows: []trialRow{{Name: "kill1", Kind: "kill"}, {Name: "kill2", Kind: "kill"}}}), "\n")
	if !strings.Contains(got, "kill → page: no page in 2 trials\n  socket fallback without NCCL logs: not paged in 2 trials\n") {
		t.Error(got)
	}
	if len(nodeSummary(Config{}, &Result{KillToPage: res.KillToPage})) != 0 {
		t.Error("summary without two-node trials")
	}
}

// jobComms on recorded answers: the drill's own two-node capture on the
// H200 (collector/fixtures/nccl-drill/ras) holds the job for its ranks
// (RAS address and pid) and not for others, not once rank 1 is killed;
// the earlier capture's ranks shared one RAS address (one node) and are
// not; container-shaped ranks are both pid 1, told apart by their nodes;
// ncclInProgress passes only where allowed.
func TestJobComms(t *testing.T) {
	read := func(path string) *ncclras.Status {
		b, err := os.ReadFile(filepath.Join(repo, path))
		if err != nil {
			t.Fatal(err)
		}
		st, err := ncclras.ParseJSON(b)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	ranks := func(p0, p1 int) [2]rasRank { return [2]rasRank{{"10.77.0.1", p0}, {"10.77.0.2", p1}} }
	healthy := read("collector/fixtures/nccl-drill/ras/healthy.json")
	cs := jobComms(healthy, ranks(883, 885), false)
	if len(cs) != 1 || cs[0].Hash != "0xd0bcdba0f7e2d49a" || describeComm(cs[0]) != "communicator 0xd0bcdba0f7e2d49a, 2 ranks on 2 nodes (rank 0 pid 883 on 10.77.0.1, rank 1 pid 885 on 10.77.0.2)" {
		t.Errorf("%v", cs)
	}
	if cs := jobComms(healthy, [2]rasRank{{"10.77.0.2", 883}, {"10.77.0.1", 885}}, false); len(cs) != 0 {
		t.Error("the job with the ranks' nodes swapped")
	}
	if len(jobComms(healthy, ranks(883, 700), false)) != 0 {
		t.Error("the job with another process's pid")
	}
	if len(jobComms(read("collector/fixtures/nccl-drill/ras/killed.json"), ranks(883, 885), false)) != 0 {
		t.Error("the job with a rank missing")
	}
	if len(jobComms(read("internal/ncclras/testdata/2.28.9-json-healthy.txt"), [2]rasRank{{"10.77.0.1", 658}, {"10.77.0.1", 659}}, false)) != 0 {
		t.Error("the job on one node")
	}
	if len(jobComms(nil, ranks(883, 885), false)) != 0 {
		t.Error("the job in no answer")
	}
	ctr := &ncclras.Status{Communicators: []ncclras.Communicator{{Hash: "0x1", Size: 2, Nodes: 2, Ranks: []ncclras.Rank{
		{Rank: 0, Host: "10.77.0.1", PID: 1}, {Rank: 1, Host: "10.77.0.2", PID: 1, AsyncError: ncclInProgress}}}}}
	if len(jobComms(ctr, ranks(1, 1), false)) != 0 || len(jobComms(ctr, ranks(1, 1), true)) != 1 {
		t.Error("container-shaped ranks, async error 7")
	}
	if i7, a7 := inProgressIn(ctr); i7 || !a7 {
		t.Errorf("inProgressIn %v %v", i7, a7)
	}
	ctr.Communicators[0].Ranks[1].InitState = ncclInProgress
	if len(jobComms(ctr, ranks(1, 1), true)) != 0 {
		t.Error("a rank in init is not the job running")
	}
}

func TestHasHostPid(t *testing.T) {
	for text, want := range map[string]bool{
		"process 1 (host pid 4711) on drill-node-1": true,
		"host pid 47110":   false,
		"ghost pid 4711":   false,
		"host pid 4711.":   true,
		"the host pid 471": false,
	} {
		if hasHostPid(text, 4711) != want {
			t.Errorf("%q: %v", text, !want)
		}
	}
}

// rawRAS: each command's one-line answer, then STATUS until EOF; a server
// that closes early is an error.
func TestRawRAS(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					switch strings.TrimSpace(line) {
					case "CLIENT PROTOCOL 2":
						c.Write([]byte("SERVER PROTOCOL 2\n"))
					case "STATUS":
						c.Write([]byte("{\"answer\": 1}\n"))
						return
					case "HANGUP":
						return
					default:
						c.Write([]byte("OK\n"))
					}
				}
			}()
		}
	}()
	b, err := rawRAS(l.Addr().String(), []string{"CLIENT PROTOCOL 2", "TIMEOUT 5"}, 5*time.Second)
	if err != nil || string(b) != "{\"answer\": 1}\n" {
		t.Errorf("%q %v", b, err)
	}
	if _, err := rawRAS(l.Addr().String(), []string{"HANGUP"}, 5*time.Second); err == nil {
		t.Error("no error from a server that hung up")
	}
}

// The hung-group trials run one after another, interleaved by kind, with
// their faults spread over the scrape interval (or the kinds of a trial
// together, faulting at one barrier); the quiet trials beside the
// parallel kill trials; the kill trials start and kill at staggered
// phases.
func TestNodeTrialListBatches(t *testing.T) {
	ts := nodeTrialList(Config{RASTrials: 2, RASStagger: 2500 * time.Millisecond, RASParallel: true, HangTrials: 2, QuietFor: 5 * time.Minute, ScrapeInterval: "15s", Shape: shapeContainer})
	var got []string
	for _, x := range ts {
		got = append(got, fmt.Sprintf("%s:b%d:p%v:d%s:s%s", x.Name, x.Batch, x.Parallel, x.Delay, x.StartDelay))
	}
	want := []string{"kill1:b0:ptrue:d0s:s0s", "kill2:b0:ptrue:d2.5s:s2.5s", "quiet-graph:b0:ptrue:d0s:s0s", "quiet-idle:b0:ptrue:d0s:s0s",
		"hang-eager1:b1:pfalse:d5s:s0s", "hang-graph1:b2:pfalse:d5s:s0s", "hang-sigstop1:b3:pfalse:d5s:s0s",
		"hang-eager2:b4:pfalse:d10s:s0s", "hang-graph2:b5:pfalse:d10s:s0s", "hang-sigstop2:b6:pfalse:d10s:s0s"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got  %v\nwant %v", got, want)
	}
	ts = nodeTrialList(Config{RASTrials: 1, RASParallel: true, HangTrials: 2, HangTogether: true, QuietFor: time.Minute, ScrapeInterval: "15s", WorkDir: "/w"})
	got = nil
	for _, x := range ts {
		got = append(got, fmt.Sprintf("%s:b%d:p%v:%s/%d", x.Name, x.Batch, x.Parallel, x.Barrier, x.BarrierN))
	}
	want = []string{"kill1:b0:ptrue:/0", "quiet-graph:b0:ptrue:/0", "quiet-idle:b0:ptrue:/0",
		"hang-eager1:b1:ptrue:/w/barrier1/3", "hang-graph1:b1:ptrue:/w/barrier1/3", "hang-sigstop1:b1:ptrue:/w/barrier1/3",
		"hang-eager2:b2:ptrue:/w/barrier2/3", "hang-graph2:b2:ptrue:/w/barrier2/3", "hang-sigstop2:b2:ptrue:/w/barrier2/3"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("together: got  %v\nwant %v", got, want)
	}
}
