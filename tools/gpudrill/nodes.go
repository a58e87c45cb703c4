// Two "nodes" on one machine: a network namespace per rank, joined by a
// veth pair (10.77.0.1/24 and 10.77.0.2/24 on the pair only), made and
// removed from Go through netlink (the lent GPU machine has no `ip`). A
// process is started inside a namespace by re-executing the drill binary
// with the namespace's descriptor: nsExec enters it on a locked thread and
// execs the command (the exec'd program keeps the thread's namespace).
//
// The namespaces are held by file descriptors only (never bind-mounted
// under /run/netns), so the kernel removes them once the drill and the
// processes inside are gone, also when the drill is killed; teardown
// deletes the pair and closes the descriptors at the end, on failure and
// on SIGINT/SIGTERM.

package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// nsFDEnv names the descriptor of the namespace nsExec enters.
const nsFDEnv = "GPUDRILL_NETNS_FD"

// The pair: interface names (NCCL_SOCKET_IFNAME=veth selects them by
// prefix; they exist only inside the namespaces) and addresses.
var (
	nodeIf   = [2]string{"veth0", "veth1"}
	nodeAddr = [2]string{"10.77.0.1", "10.77.0.2"}
)

const nodePrefix = 24

// nodePair is two network namespaces joined by a veth pair.
type nodePair struct {
	ns [2]netns.NsHandle
}

// newNodePair creates the namespaces and the pair, brings up lo and the
// pair's ends and gives them their addresses. On error nothing is left.
func newNodePair() (*nodePair, error) {
	p := &nodePair{ns: [2]netns.NsHandle{netns.None(), netns.None()}}
	// unshare(CLONE_NEWNET) moves the calling thread: do it on a thread
	// of its own, locked and never unlocked, so that the runtime discards
	// it afterwards whatever namespace it was left in.
	type made struct {
		h   netns.NsHandle
		err error
	}
	for i := range p.ns {
		ch := make(chan made, 1)
		go func() {
			runtime.LockOSThread()
			h, err := netns.New()
			ch <- made{h, err}
		}()
		m := <-ch
		if m.err != nil {
			p.teardown()
			return nil, fmt.Errorf("network namespace %d: %w (the drill's two-node trials need root or CAP_SYS_ADMIN and CAP_NET_ADMIN)", i, m.err)
		}
		p.ns[i] = m.h
	}
	if err := p.link(); err != nil {
		p.teardown()
		return nil, err
	}
	return p, nil
}

// link makes the veth pair in namespace 0 with its peer in namespace 1
// (it never exists in the drill's own namespace) and configures both ends.
func (p *nodePair) link() error {
	var h [2]*netlink.Handle
	for i := range h {
		var err error
		if h[i], err = netlink.NewHandleAt(p.ns[i]); err != nil {
			for _, o := range h[:i] {
				o.Close()
			}
			return fmt.Errorf("netlink in namespace %d: %w", i, err)
		}
	}
	defer h[0].Close()
	defer h[1].Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: nodeIf[0]}, PeerName: nodeIf[1], PeerNamespace: netlink.NsFd(int(p.ns[1]))}
	if err := h[0].LinkAdd(veth); err != nil {
		return fmt.Errorf("veth pair %s/%s: %w", nodeIf[0], nodeIf[1], err)
	}
	for i := range h {
		lo, err := h[i].LinkByName("lo")
		if err == nil {
			err = h[i].LinkSetUp(lo)
		}
		if err != nil {
			return fmt.Errorf("namespace %d: lo up: %w", i, err)
		}
		l, err := h[i].LinkByName(nodeIf[i])
		if err != nil {
			return fmt.Errorf("namespace %d: %s: %w", i, nodeIf[i], err)
		}
		a, err := netlink.ParseAddr(nodeAddr[i] + "/" + strconv.Itoa(nodePrefix))
		if err != nil {
			return err
		}
		if err := h[i].AddrAdd(l, a); err != nil {
			return fmt.Errorf("namespace %d: %s %s: %w", i, nodeIf[i], a, err)
		}
		if err := h[i].LinkSetUp(l); err != nil {
			return fmt.Errorf("namespace %d: %s up: %w", i, nodeIf[i], err)
		}
	}
	return nil
}

// file returns namespace i's descriptor as a file for exec.Cmd.ExtraFiles
// (the caller closes it; the namespace's own descriptor stays open).
func (p *nodePair) file(i int) (*os.File, error) {
	if !p.ns[i].IsOpen() {
		return nil, fmt.Errorf("namespace %d is closed", i)
	}
	fd, err := syscall.Dup(int(p.ns[i]))
	if err != nil {
		return nil, err
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), fmt.Sprintf("netns%d", i)), nil
}

// teardown deletes the pair (both ends go with either) and closes the
// namespaces; safe to call twice and on a half-made pair.
func (p *nodePair) teardown() error {
	if p == nil {
		return nil
	}
	var errs []error
	if p.ns[0].IsOpen() {
		if h, err := netlink.NewHandleAt(p.ns[0]); err != nil {
			errs = append(errs, err)
		} else {
			if l, err := h.LinkByName(nodeIf[0]); err == nil {
				if err := h.LinkDel(l); err != nil {
					errs = append(errs, fmt.Errorf("delete %s: %w", nodeIf[0], err))
				}
			}
			h.Close()
		}
	}
	for i := range p.ns {
		if p.ns[i].IsOpen() {
			if err := p.ns[i].Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// nsCommand is a command that runs cmd with args inside the namespace of
// f: the drill binary re-executed with f as descriptor 3.
func nsCommand(f *os.File, env []string, bin string, args ...string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, append([]string{bin}, args...)...)
	cmd.Env = append(withoutEnv(env, nsFDEnv), nsFDEnv+"=3")
	cmd.ExtraFiles = []*os.File{f}
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

// nsExec is the re-executed drill's whole work when nsFDEnv is set: enter
// the namespace of that descriptor and exec argv. It returns only on error.
func nsExec(fdEnv string, argv, env []string) error {
	fd, err := strconv.Atoi(fdEnv)
	if err != nil || fd < 3 {
		return fmt.Errorf("%s=%q: not an inherited descriptor", nsFDEnv, fdEnv)
	}
	if len(argv) == 0 {
		return errors.New("no command to run in the namespace")
	}
	bin, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	runtime.LockOSThread() // never unlocked: the process execs from here
	if err := netns.Set(netns.NsHandle(fd)); err != nil {
		return fmt.Errorf("enter the network namespace (descriptor %d): %w", fd, err)
	}
	syscall.CloseOnExec(fd)
	return syscall.Exec(bin, argv, withoutEnv(env, nsFDEnv))
}

func init() {
	if v, ok := os.LookupEnv(nsFDEnv); ok {
		err := nsExec(v, os.Args[1:], os.Environ())
		fmt.Fprintln(os.Stderr, "gpudrill:", err)
		os.Exit(2)
	}
}

// nodeHasAddr reports whether this process's namespace has addr (the
// child checks it is on node 0 before it starts anything).
func nodeHasAddr(addr string) bool {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok && n.IP.String() == addr {
			return true
		}
	}
	return false
}
