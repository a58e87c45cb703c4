// Two "nodes" on one machine, the network part: a network namespace per
// node, joined by a veth pair (10.77.0.1/24 and 10.77.0.2/24 on the pair
// only), made and removed from Go through netlink (the lent GPU machine
// has no `ip`). The rest of a node (its PID, mount and UTS namespaces and
// its first process) is nodeset.go's.
//
// The network namespaces are held by file descriptors only (never
// bind-mounted under /run/netns), so the kernel removes them once the
// drill and the processes inside are gone, also when the drill is killed;
// teardown deletes the pair and closes the descriptors at the end, on
// failure and on SIGINT/SIGTERM.

package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

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
	// unshare(CLONE_NEWNET) moves the calling thread: do it on a locked
	// thread of its own and move the thread back; unlock it only if that
	// worked, so that the runtime discards it otherwise (except the main
	// thread, which it parks for good: the move back keeps it out of the
	// node's namespace).
	type made struct {
		h   netns.NsHandle
		err error
	}
	for i := range p.ns {
		ch := make(chan made, 1)
		go func() {
			runtime.LockOSThread()
			orig, err := netns.Get()
			if err != nil {
				ch <- made{netns.None(), err}
				return
			}
			defer orig.Close()
			h, err := netns.New()
			if netns.Set(orig) == nil {
				runtime.UnlockOSThread()
			}
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
	syscall.ForkLock.RLock() // no other trial's child inherits it
	fd, err := syscall.Dup(int(p.ns[i]))
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, err
	}
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
