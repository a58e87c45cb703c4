// Entering namespaces: every process the drill starts in a namespace of
// its own (a node, a container-shaped rank) is the drill binary
// re-executed with GPUDRILL_NS set to an nsSetup. Before main runs, init
// applies it and execs the real command, which keeps what was set up:
//
//   - the PID, mount and UTS namespaces come from clone (the starter's
//     SysProcAttr.Cloneflags): the process is PID 1 of its new PID
//     namespace, as a container's entrypoint is;
//   - Proc: mount propagation made private first (nothing leaks to the
//     starter's mounts), then a fresh procfs on /proc, so the process and
//     its children see only their PID namespace;
//   - Hide: an empty tmpfs over each directory that exists (a launcher
//     that passes no RDMA devices: /dev/infiniband);
//   - Hostname: the node's name in its UTS namespace;
//   - NetFD: the network namespace of an inherited descriptor, entered on
//     the locked thread that execs (setns moves one thread only).
//
// It refuses to remount anything unless it runs in a mount namespace other
// than its starter's (Parent), and to mount /proc unless it is PID 1.

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/vishvananda/netns"
)

// nsEnv carries the nsSetup (JSON) of a re-executed drill.
const nsEnv = "GPUDRILL_NS"

// nsSetup is what a re-executed drill sets up before it execs its command.
type nsSetup struct {
	NetFD    int      `json:"net_fd,omitempty"` // inherited descriptor of a network namespace (≥3); 0: stay
	Proc     bool     `json:"proc,omitempty"`   // private propagation and a fresh /proc (PID 1 of new PID and mount namespaces)
	Hide     []string `json:"hide,omitempty"`   // directories covered by an empty tmpfs where they exist
	Hostname string   `json:"hostname,omitempty"`
	// Parent: the starter's namespaces by kind ("mnt", "uts") as
	// /proc/self/ns links: a setup that needs one of its own refuses to
	// run in the starter's.
	Parent map[string]string `json:"parent,omitempty"`
}

// nsLink is the /proc link of pid's namespace of kind ("mnt:[4026531841]").
func nsLink(pid, kind string) string {
	l, _ := os.Readlink("/proc/" + pid + "/ns/" + kind)
	return l
}

// threadNS is the namespace of kind of the calling thread: the drill's
// main thread may have been left in another network namespace (a
// goroutine that made one on it exited locked), so /proc/self is not
// this goroutine's.
func threadNS(kind string) string {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	l, _ := os.Readlink("/proc/thread-self/ns/" + kind)
	return l
}

// selfNS returns this process's namespaces of kinds, for nsSetup.Parent.
func selfNS(kinds ...string) map[string]string {
	m := map[string]string{}
	for _, k := range kinds {
		m[k] = nsLink("self", k)
	}
	return m
}

// reexec is a command that runs argv after the drill, re-executed with
// files as descriptors 3, 4, …, has set up s.
func reexec(s nsSetup, files []*os.File, env []string, argv ...string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, argv...)
	cmd.Env = append(withoutEnv(env, nsEnv), nsEnv+"="+string(b))
	cmd.ExtraFiles = files
	return cmd, nil
}

func withoutEnv(env []string, name string) []string {
	out := make([]string, 0, len(env))
	for _, e := range env {
		if !strings.HasPrefix(e, name+"=") {
			out = append(out, e)
		}
	}
	return out
}

// nsExec is the re-executed drill's whole work when nsEnv is set: apply
// the setup and exec argv. It returns only on error.
func nsExec(spec string, argv, env []string) error {
	var s nsSetup
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		return fmt.Errorf("%s: %w", nsEnv, err)
	}
	if s.NetFD != 0 && s.NetFD < 3 {
		return fmt.Errorf("%s: net_fd %d: not an inherited descriptor", nsEnv, s.NetFD)
	}
	if len(argv) == 0 {
		return errors.New("no command to run in the namespace")
	}
	bin, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	for _, k := range []struct {
		kind string
		need bool
	}{{"mnt", s.Proc || len(s.Hide) > 0}, {"uts", s.Hostname != ""}} {
		if !k.need {
			continue
		}
		if p := s.Parent[k.kind]; p == "" || nsLink("self", k.kind) == p {
			return fmt.Errorf("not in a %s namespace of its own (the starter's is %q): refusing to change it", k.kind, p)
		}
	}
	if s.Proc && os.Getpid() != 1 {
		return fmt.Errorf("a fresh /proc needs PID 1 of a new PID namespace, this is pid %d", os.Getpid())
	}
	runtime.LockOSThread() // never unlocked: the process execs from here
	if s.Proc || len(s.Hide) > 0 {
		if err := syscall.Mount("none", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("make mounts private: %w", err)
		}
	}
	if s.Proc {
		if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("mount a fresh /proc: %w", err)
		}
	}
	for _, h := range s.Hide {
		if fi, err := os.Stat(h); err != nil || !fi.IsDir() {
			continue
		}
		if err := syscall.Mount("tmpfs", h, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "mode=755,size=16k"); err != nil {
			return fmt.Errorf("hide %s: %w", h, err)
		}
	}
	if s.Hostname != "" {
		if err := syscall.Sethostname([]byte(s.Hostname)); err != nil {
			return fmt.Errorf("hostname: %w", err)
		}
	}
	if s.NetFD != 0 {
		if err := netns.Set(netns.NsHandle(s.NetFD)); err != nil {
			return fmt.Errorf("enter the network namespace (descriptor %d): %w", s.NetFD, err)
		}
		syscall.CloseOnExec(s.NetFD)
	}
	return syscall.Exec(bin, argv, withoutEnv(env, nsEnv))
}

func init() {
	if v, ok := os.LookupEnv(nsEnv); ok {
		err := nsExec(v, os.Args[1:], os.Environ())
		fmt.Fprintln(os.Stderr, "gpudrill:", err)
		os.Exit(2)
	}
}

// nspids returns the NSpid line of pid in the /proc at procRoot: its pid
// in each PID namespace from procRoot's down to its own.
func nspids(procRoot string, pid int) ([]int, error) {
	b, err := os.ReadFile(procRoot + "/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "NSpid:"); ok {
			var out []int
			for _, f := range strings.Fields(v) {
				n, err := strconv.Atoi(f)
				if err != nil {
					return nil, fmt.Errorf("NSpid %q: %w", v, err)
				}
				out = append(out, n)
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("%s/%d/status: no NSpid line", procRoot, pid)
}
