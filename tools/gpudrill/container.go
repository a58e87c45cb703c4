// A rank as the users run it: in a container (--shape=container), its own
// PID and mount namespaces nested in its node's, with its own /proc, the
// rank's program exec'd as PID 1 of the container (as a container's
// entrypoint is), and, where the launcher passes no RDMA devices
// (--container-rdma=false), /dev/infiniband hidden under an empty tmpfs.
// Its network is its node's (hostNetwork). Or directly in the node's PID
// namespace (--shape=host). Either way its node's exporter reports it by
// its pid in the node's PID namespace (its host pid) and NCCL's RAS by
// the pid it sees itself as (its own pid: 1 in a container).

package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// Shapes of a rank.
const (
	shapeContainer = "container"
	shapeHost      = "host"
)

// rdmaDevDir is what a launcher without RDMA devices leaves out.
const rdmaDevDir = "/dev/infiniband"

// rankSpec is how to start one rank (also sent to node 1's agent).
type rankSpec struct {
	Name  string   // "rank0": the process's name in the drill's messages
	Out   string   // its output file
	Shape string   // shapeContainer or shapeHost
	Hide  []string // container: directories hidden in its mount namespace
	Env   []string
	Argv  []string
}

// rankInfo is a started rank as its node and NCCL see it.
type rankInfo struct {
	Host  int    // pid in its node's PID namespace (its node's exporter's pid label)
	Own   int    // pid in its own PID namespace (what RAS reports)
	NSpid []int  // its NSpid line in its node's /proc
	PidNS string // its PID namespace ("pid:[…]")
}

func (r rankInfo) String() string {
	return fmt.Sprintf("host pid %d, own pid %d (NSpid %v)", r.Host, r.Own, r.NSpid)
}

// rankProc is a running rank.
type rankProc struct {
	p    *proc
	info rankInfo
}

// startRank starts s in the node this process runs in (its /proc is the
// node's).
func startRank(s rankSpec) (*rankProc, error) {
	if len(s.Argv) == 0 {
		return nil, fmt.Errorf("%s: no command", s.Name)
	}
	var cmd *exec.Cmd
	switch s.Shape {
	case shapeHost:
		cmd = exec.Command(s.Argv[0], s.Argv[1:]...)
		cmd.Env = s.Env
	case shapeContainer:
		var err error
		if cmd, err = reexec(nsSetup{Proc: true, Hide: s.Hide, Parent: selfNS("mnt")}, nil, s.Env, s.Argv...); err != nil {
			return nil, err
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
	default:
		return nil, fmt.Errorf("%s: unknown shape %q (container or host)", s.Name, s.Shape)
	}
	p, err := startCmd(s.Name, s.Out, cmd)
	if err != nil {
		return nil, err
	}
	r := &rankProc{p: p, info: rankInfo{Host: p.cmd.Process.Pid}}
	r.info.NSpid, err = nspids("/proc", r.info.Host)
	if err != nil || len(r.info.NSpid) == 0 {
		r.stop(0)
		return nil, fmt.Errorf("%s: %v", s.Name, err)
	}
	r.info.Own = r.info.NSpid[len(r.info.NSpid)-1]
	r.info.PidNS = nsLink(strconv.Itoa(r.info.Host), "pid")
	// Started: the rank's own program runs (a container's setup done,
	// the drill no longer the process's executable).
	self, _ := os.Readlink("/proc/self/exe")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		// exe changes before exec has set up the arguments: wait for both.
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", r.info.Host))
		if exe != "" && exe != self && cmdline("/proc", strconv.Itoa(r.info.Host)) != "" {
			break
		}
		if r.exited() || time.Now().After(deadline) {
			r.stop(0)
			return nil, fmt.Errorf("%s did not start %v (see %s)", s.Name, s.Argv, s.Out)
		}
	}
	return r, nil
}

// stop stops the rank: SIGTERM (which a container's PID 1 without a
// handler ignores), then SIGKILL after grace.
func (r *rankProc) stop(grace time.Duration) {
	if r != nil {
		r.p.stop(grace)
	}
}

func (r *rankProc) exited() bool { return r != nil && r.p.exited() }

// rankHide is what a container hides from its rank under cfg.
func rankHide(cfg Config) []string {
	if cfg.ContainerRDMA {
		return nil
	}
	return []string{rdmaDevDir}
}
