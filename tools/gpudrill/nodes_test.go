package main

import (
	"bufio"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/fabric-exporter/fabric_exporter/internal/ncclras"
	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// TestMain lets the test binary be the child drill of the two-node trials
// (runNodeChildOf re-executes the running binary with --node-trial).
func TestMain(m *testing.M) {
	for _, a := range os.Args[1:] {
		if spec, ok := strings.CutPrefix(a, "--node-trial="); ok {
			os.Exit(runNodeChild(spec))
		}
	}
	os.Exit(m.Run())
}

// nsExec's refusals, none of which enters a namespace or execs.
func TestNsExecErrors(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "not-a-netns")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := f.Fd()
	for _, c := range []struct {
		name, env string
		argv      []string
		want      string
	}{
		{"not a number", "x", []string{"sh"}, "not an inherited descriptor"},
		{"stdio", "2", []string{"sh"}, "not an inherited descriptor"},
		{"no command", "3", nil, "no command"},
		{"unknown command", "3", []string{"gpudrill-no-such-command"}, "executable file not found"},
		{"not a namespace", strconv.Itoa(int(fd)), []string{"sh"}, "enter the network namespace"},
	} {
		errc := make(chan error, 1)
		// nsExec locks its thread: run it on a goroutine of its own.
		go func() { errc <- nsExec(c.env, c.argv, os.Environ()) }()
		if err := <-errc; err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func TestWithoutEnv(t *testing.T) {
	got := withoutEnv([]string{"A=1", nsFDEnv + "=3", nsFDEnv + "X=4", "B=2"}, nsFDEnv)
	if strings.Join(got, " ") != "A=1 "+nsFDEnv+"X=4 B=2" {
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
	cmd, err := nsCommand(f, os.Environ(), "cat", "/proc/net/dev")
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
	res := &Result{KillToPage: []time.Duration{41 * time.Second, 33500 * time.Millisecond, 50 * time.Second}, NodebugPage: 27300 * time.Millisecond}
	got := strings.Join(nodeSummary(Config{RASTrials: 3, NoDebug: true}, res), "\n")
	want := "kill → page (median of 3): 41.0 s  [41.0 s, 33.5 s, 50.0 s]\nsocket fallback without NCCL logs (nodebug): paged, 27.3 s after RAS reported the two-node communicator"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	got = strings.Join(nodeSummary(Config{RASTrials: 2, NoDebug: true}, &Result{}), "\n")
	if got != "kill → page: no page in 2 trials\nsocket fallback without NCCL logs (nodebug): not paged" {
		t.Error(got)
	}
	if len(nodeSummary(Config{}, res)) != 0 {
		t.Error("summary without two-node trials")
	}
}

// rasReady on recorded answers: the drill's own two-node capture on the
// H200 (collector/fixtures/nccl-drill/ras) is ready for its pids and not
// for others, not once rank 1 is killed; the earlier capture's ranks
// shared one RAS address (one node) and are not.
func TestRASReady(t *testing.T) {
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
	healthy := read("collector/fixtures/nccl-drill/ras/healthy.json")
	c, ok := rasReady(healthy, [2]int{883, 885})
	if !ok || c.Hash != "0xd0bcdba0f7e2d49a" || describeComm(c) != "communicator 0xd0bcdba0f7e2d49a, 2 ranks on 2 nodes (rank 0 pid 883 on 10.77.0.1, rank 1 pid 885 on 10.77.0.2)" {
		t.Errorf("%v %s", ok, describeComm(c))
	}
	if _, ok := rasReady(healthy, [2]int{883, 700}); ok {
		t.Error("ready with another process's pid")
	}
	if _, ok := rasReady(read("collector/fixtures/nccl-drill/ras/killed.json"), [2]int{883, 885}); ok {
		t.Error("ready with a rank missing")
	}
	if _, ok := rasReady(read("internal/ncclras/testdata/2.28.9-json-healthy.txt"), [2]int{658, 659}); ok {
		t.Error("ready on one node")
	}
	if _, ok := rasReady(nil, [2]int{883, 885}); ok {
		t.Error("ready on no answer")
	}
}

// TestNodeTrials runs the two-node trials end to end where the test may
// make network namespaces (root): the real exporter, Prometheus and
// Alertmanager inside node 0, and testdata/fakerank.py in place of
// PyTorch (a RAS service that answers like NCCL's and loses rank 1 when
// it is killed). Two kill trials at once, 2 s intervals.
func TestNodeTrials(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	pairOrSkip(t).teardown()
	prom := testenv.Tool(t, "prometheus")
	am := testenv.Tool(t, "prometheus-alertmanager", "alertmanager")
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	tmp := t.TempDir()
	exporter := filepath.Join(tmp, "fabric_exporter")
	if out, err := exec.Command("go", "build", "-o", exporter, "../../cmd/fabric_exporter").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	fake, _ := filepath.Abs("testdata/fakerank.py")
	wrapper := filepath.Join(tmp, "python")
	os.WriteFile(wrapper, []byte("#!/bin/sh\nexec "+py+" "+fake+" \"$@\"\n"), 0o755)
	cfg := Config{Repo: repo, Exporter: exporter, Prometheus: prom, Alertmanager: am, Python: wrapper, WorkDir: filepath.Join(tmp, "work"),
		RASTrials: 2, RASHealthy: 3 * time.Second, RASStagger: time.Second, RASParallel: true, NoDebug: true,
		ExporterPort: freePort(t), PrometheusPort: freePort(t), AlertmanagerPort: freePort(t), WebhookPort: freePort(t), TorchPort: freePort(t),
		PageTimeout: 90 * time.Second, ScrapeInterval: "2s", EvalInterval: "2s"}
	res, err := Run(cfg)
	if res != nil {
		t.Logf("report:\n%s", strings.Join(res.Lines, "\n"))
		for _, c := range res.Checks {
			t.Logf("%v %s: %s", c.ok, c.name, c.detail)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed() {
		t.Fatal("two-node trials failed")
	}
	var names []string
	for _, c := range res.Checks {
		names = append(names, c.name)
	}
	want := []string{"RAS reports both ranks on two nodes", "the exporter reports the communicator on 2 nodes", "nothing pages on the healthy job",
		"the killed rank paged", "NCCLRankMissing names the killed rank", "NCCLAsyncError names the survivor"}
	var all []string
	for _, k := range []string{"kill1", "kill2"} {
		for _, w := range want {
			all = append(all, k+": "+w)
		}
	}
	for _, w := range []string{"RAS reports both ranks on two nodes", "the exporter reports the communicator on 2 nodes",
		"NCCLSocketFallback paged without NCCL logs", "nothing else pages", "no NCCL log"} {
		all = append(all, "nodebug: "+w)
	}
	if strings.Join(names, "\n") != strings.Join(all, "\n") {
		t.Errorf("checks:\n%s\nwant:\n%s", strings.Join(names, "\n"), strings.Join(all, "\n"))
	}
	if len(res.KillToPage) != 2 || res.NodebugPage <= 0 {
		t.Errorf("kill → page %v, nodebug page %v", res.KillToPage, res.NodebugPage)
	}
	// RAS's answers as written, healthy and after the kill.
	for what, missing := range map[string]int{"healthy": 0, "killed": 1} {
		b, err := os.ReadFile(filepath.Join(cfg.WorkDir, "kill1", "ras-"+what+".json"))
		if err != nil {
			t.Fatal(err)
		}
		st, err := ncclras.ParseJSON(b)
		if err != nil || len(st.Communicators) != 1 || st.Communicators[0].Nodes != 2 || st.Communicators[0].MissingCount != missing {
			t.Errorf("ras-%s.json: %v %+v", what, err, st)
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
