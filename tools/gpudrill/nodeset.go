// A node is a machine: its network namespace (nodes.go) and, made by clone
// when its first process starts, its own PID, mount and UTS namespaces,
// with a fresh /proc (nsenter.go) and its own hostname. That first process
// is the drill re-executed: on node 0 the trial (--node-trial), on node 1
// the agent (--node-agent, agent.go). The top-level drill starts both, so
// the nodes' PID namespaces are siblings, never nested; the two talk over
// a socket pair the top-level drill made (descriptor 4 of each).
//
// Stopping: a node's PID 1 has handlers for SIGINT and SIGTERM (it stops
// what it started); after the grace it gets SIGKILL, and when a PID
// namespace's PID 1 exits the kernel kills every process left in it, the
// containers' nested namespaces included. If the drill itself dies, the
// nodes get SIGKILL (Pdeathsig); if node 0 dies, the agent sees its
// socket close and stops.

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// nodeName is node i's hostname and its Prometheus instance label.
func nodeName(i int) string { return "drill-node-" + strconv.Itoa(i) }

// nodeSet is one trial's two nodes.
type nodeSet struct {
	mu    sync.Mutex
	pair  *nodePair
	procs [2]*proc
	// pidNS are the nodes' PID namespaces (/proc links), for leftovers.
	pidNS [2]string
}

// startNodes makes a node pair and starts, as PID 1 of node i, the
// command args[i] (the drill's own path and arguments for a trial), its
// output in dir/logs[i]. On error nothing is left.
func startNodes(dir string, logs [2]string, args [2][]string) (*nodeSet, error) {
	pair, err := newNodePair()
	if err != nil {
		return nil, err
	}
	n := &nodeSet{pair: pair}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		pair.teardown()
		return nil, fmt.Errorf("socket pair between the nodes: %w", err)
	}
	ctl := [2]*os.File{os.NewFile(uintptr(fds[0]), "ctl0"), os.NewFile(uintptr(fds[1]), "ctl1")}
	defer ctl[0].Close()
	defer ctl[1].Close()
	// Node 1 first: its agent starts node 1's exporter while node 0
	// starts its stack.
	for _, i := range []int{1, 0} {
		if err := n.start(i, filepath.Join(dir, logs[i]), ctl[i], args[i]); err != nil {
			n.stop(5 * time.Second)
			return nil, fmt.Errorf("node %d: %w", i, err)
		}
	}
	return n, nil
}

func (n *nodeSet) start(i int, log string, ctl *os.File, args []string) error {
	f, err := n.pair.file(i)
	if err != nil {
		return err
	}
	defer f.Close()
	s := nsSetup{NetFD: 3, Proc: true, Hostname: nodeName(i), Parent: selfNS("mnt", "uts")}
	cmd, err := reexec(s, []*os.File{f, ctl}, os.Environ(), args...)
	if err != nil {
		return err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS,
		Pdeathsig:  syscall.SIGKILL,
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	p, err := startCmd(nodeName(i), log, cmd)
	if err != nil {
		return err
	}
	n.procs[i] = p
	n.pidNS[i] = nsLink(strconv.Itoa(p.cmd.Process.Pid), "pid")
	return nil
}

// stop stops both nodes (SIGTERM, SIGKILL after grace) and removes the
// pair; safe to call twice and from the interrupt handler.
func (n *nodeSet) stop(grace time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range n.procs {
		if p != nil {
			wg.Add(1)
			go func() { defer wg.Done(); p.stop(grace) }()
		}
	}
	wg.Wait()
	n.pair.teardown()
}

// namespaces are the nodes' PID namespaces and more (the containers').
func (n *nodeSet) namespaces(more ...string) []string {
	var out []string
	for _, l := range append(n.pidNS[:], more...) {
		if l != "" && !contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

// leftovers returns the processes (pid and command line, as the drill's
// /proc names them) still in one of the PID namespaces nss, waiting up to
// wait for them to go.
func leftovers(nss []string, wait time.Duration) []string {
	deadline := time.Now().Add(wait)
	for {
		var out []string
		for _, p := range inNS(listProcs("/proc"), nss...) {
			out = append(out, p.PID+" "+p.Cmd)
		}
		if len(out) == 0 || time.Now().After(deadline) {
			return out
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// procEntry is a process of a /proc.
type procEntry struct {
	PID string // as that /proc names it
	NS  string // its PID namespace ("pid:[…]")
	Cmd string // its command line, arguments joined by spaces
}

// listProcs returns every process of the /proc at root.
func listProcs(root string) []procEntry {
	var out []procEntry
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		ns, _ := os.Readlink(root + "/" + e.Name() + "/ns/pid")
		out = append(out, procEntry{PID: e.Name(), NS: ns, Cmd: cmdline(root, e.Name())})
	}
	return out
}

// inNS returns the processes of ps in one of the PID namespaces nss.
func inNS(ps []procEntry, nss ...string) []procEntry {
	var out []procEntry
	for _, p := range ps {
		if p.NS != "" && contains(nss, p.NS) {
			out = append(out, p)
		}
	}
	return out
}

// cmdline is pid's command line in the /proc at root, arguments joined
// by spaces.
func cmdline(root, pid string) string {
	b, _ := os.ReadFile(root + "/" + pid + "/cmdline")
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// procCmd is the command line of pid in ps ("" when absent).
func procCmd(ps []procEntry, pid string) string {
	for _, p := range ps {
		if p.PID == pid {
			return p.Cmd
		}
	}
	return ""
}
