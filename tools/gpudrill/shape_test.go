package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// rankOrSkip starts s, or skips where the test may not make namespaces.
func rankOrSkip(t *testing.T, s rankSpec) *rankProc {
	t.Helper()
	r, err := startRank(s)
	if err != nil {
		b, _ := os.ReadFile(s.Out)
		if s.Shape == shapeContainer && (errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) || os.Geteuid() != 0) {
			t.Skipf("no PID and mount namespaces here: %v (%s)", err, b)
		}
		t.Fatalf("%v: %s", err, b)
	}
	return r
}

// A container-shaped rank: PID 1 of its own PID namespace (two NSpid
// levels from here), its own /proc listing itself alone, this process's
// network, a hidden directory empty inside and untouched outside; stopped,
// nothing is left in its namespace.
func TestContainerRank(t *testing.T) {
	tmp := t.TempDir()
	fakeIB := filepath.Join(tmp, "infiniband")
	os.MkdirAll(fakeIB, 0o755)
	os.WriteFile(filepath.Join(fakeIB, "uverbs0"), nil, 0o644)
	r := rankOrSkip(t, rankSpec{Name: "rank0", Out: filepath.Join(tmp, "rank0.out"), Shape: shapeContainer, Hide: []string{fakeIB, filepath.Join(tmp, "absent")},
		Env: os.Environ(), Argv: []string{"sleep", "3600.0"}})
	defer r.stop(0)
	if len(r.info.NSpid) != 2 || r.info.Own != 1 || r.info.NSpid[0] != r.info.Host || r.info.Host == 1 {
		t.Errorf("container rank: %s", r.info)
	}
	if r.info.PidNS == "" || r.info.PidNS == nsLink("self", "pid") {
		t.Errorf("PID namespace %q, this process's %q", r.info.PidNS, nsLink("self", "pid"))
	}
	ps := listProcs("/proc/" + strconv.Itoa(r.info.Host) + "/root/proc")
	if len(ps) != 1 || ps[0].PID != "1" || ps[0].Cmd != "sleep 3600.0" || ps[0].NS != r.info.PidNS {
		t.Errorf("the container's /proc: %+v", ps)
	}
	if n := nsLink(strconv.Itoa(r.info.Host), "net"); n != threadNS("net") {
		t.Errorf("network %s, want this process's %s", n, threadNS("net"))
	}
	if ok, detail := hidden(r.info.Host, fakeIB); !ok {
		t.Errorf("hidden: %s", detail)
	}
	if ents, _ := os.ReadDir(fakeIB); len(ents) != 1 {
		t.Errorf("the directory outside the container: %d entries", len(ents))
	}
	if ok, detail := hidden(r.info.Host, filepath.Join(tmp, "absent")); !ok {
		t.Errorf("absent: %s", detail)
	}
	// PID 1 without a handler ignores SIGTERM: stop takes the grace,
	// then SIGKILL.
	t0 := time.Now()
	r.stop(300 * time.Millisecond)
	if d := time.Since(t0); d < 300*time.Millisecond {
		t.Errorf("the container's PID 1 stopped on SIGTERM after %s", d)
	}
	if left := leftovers([]string{r.info.PidNS}, 2*time.Second); len(left) != 0 {
		t.Errorf("left: %v", left)
	}
	// A container whose program cannot run exits during its setup, the
	// drill still its executable: never started.
	if bad, err := startRank(rankSpec{Name: "x", Out: filepath.Join(tmp, "x.out"), Shape: shapeContainer, Env: os.Environ(), Argv: []string{filepath.Join(tmp, "no-such-rank")}}); err == nil {
		bad.stop(0)
		t.Error("a container rank whose program does not exist started")
	}
}

// A host-shaped rank is a plain child: one NSpid level from here, its own
// pid what it sees itself as.
func TestHostRank(t *testing.T) {
	tmp := t.TempDir()
	r := rankOrSkip(t, rankSpec{Name: "rank1", Out: filepath.Join(tmp, "rank1.out"), Shape: shapeHost, Env: os.Environ(), Argv: []string{"sleep", "3600.1"}})
	defer r.stop(0)
	if len(r.info.NSpid) != len(mustNSpid(t)) || r.info.Own != r.info.Host || r.info.PidNS != nsLink("self", "pid") {
		t.Errorf("host rank: %s in %s", r.info, r.info.PidNS)
	}
	if _, err := startRank(rankSpec{Name: "x", Out: filepath.Join(tmp, "x.out"), Shape: "vm", Argv: []string{"true"}}); err == nil {
		t.Error("an unknown shape started")
	}
	if _, err := startRank(rankSpec{Name: "x", Out: filepath.Join(tmp, "x.out"), Shape: shapeHost}); err == nil {
		t.Error("a rank without a command started")
	}
	// Not `true`: a program that exits at once may still be seen running
	// (its own exe and arguments) before it exits, and then it did start.
	if _, err := startRank(rankSpec{Name: "x", Out: filepath.Join(tmp, "x.out"), Shape: shapeHost, Argv: []string{filepath.Join(tmp, "no-such-rank")}}); err == nil {
		t.Error("a rank whose program does not exist started")
	}
}

func mustNSpid(t *testing.T) []int {
	p, err := nspids("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// nodesOrSkip starts two nodes running args, or skips where the test may
// not make namespaces.
func nodesOrSkip(t *testing.T, dir string, args [2][]string) *nodeSet {
	t.Helper()
	pairOrSkip(t).teardown()
	n, err := startNodes(dir, [2]string{"node0.log", "node1.log"}, args)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The nodes: PID 1 of sibling PID namespaces (neither nested in the
// other), each with its hostname; stop ends PID 1s that ignore SIGTERM
// and leaves nothing.
func TestNodesStop(t *testing.T) {
	dir := t.TempDir()
	n := nodesOrSkip(t, dir, [2][]string{{"sleep", "600"}, {"sleep", "601"}})
	defer n.stop(0)
	var ns [2][]int
	for i, p := range n.procs {
		var err error
		if ns[i], err = nspids("/proc", p.cmd.Process.Pid); err != nil || len(ns[i]) != len(mustNSpid(t))+1 || ns[i][len(ns[i])-1] != 1 {
			t.Errorf("node %d: NSpid %v (%v)", i, ns[i], err)
		}
	}
	if n.pidNS[0] == n.pidNS[1] || n.pidNS[0] == "" {
		t.Errorf("PID namespaces %v", n.pidNS)
	}
	t0 := time.Now()
	n.stop(200 * time.Millisecond)
	if left := leftovers(n.namespaces(), 2*time.Second); len(left) != 0 || time.Since(t0) > 10*time.Second {
		t.Errorf("left %v after %s", left, time.Since(t0))
	}
	if n.pair.ns[0].IsOpen() || n.pair.ns[1].IsOpen() {
		t.Error("the network namespaces are still held")
	}
	n.stop(0) // twice: nothing happens
}

// Node 0 dies (SIGKILL): node 1's agent sees its socket close, stops and
// exits, and nothing is left in either node.
func TestAgentEndsWithNode0(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "trial.json")
	b, _ := json.Marshal(nodeTrial{Name: "crash", Kind: "selftest", Shape: shapeContainer, Cfg: Config{WorkDir: dir}})
	os.WriteFile(spec, b, 0o644)
	os.MkdirAll(filepath.Join(dir, "crash", "node1"), 0o755)
	self, _ := os.Executable()
	n := nodesOrSkip(t, dir, [2][]string{{"sleep", "600"}, {self, "--node-agent=" + spec}})
	defer n.stop(0)
	time.Sleep(500 * time.Millisecond)
	if n.procs[1].exited() {
		log, _ := os.ReadFile(filepath.Join(dir, "node1.log"))
		t.Fatalf("the agent did not start: %v: %s", n.procs[1].err, log)
	}
	syscall.Kill(n.procs[0].cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-n.procs[1].done:
	case <-time.After(20 * time.Second):
		t.Fatal("the agent runs on without node 0")
	}
	if n.procs[1].err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "node1.log"))
		t.Errorf("the agent ended with %v: %s", n.procs[1].err, log)
	}
	if left := leftovers(n.namespaces(), 2*time.Second); len(left) != 0 {
		t.Errorf("left %v", left)
	}
}
