// Package netnsdial opens a TCP connection from inside another network
// namespace: the namespace of a process (its /proc/PID/ns/net), entered
// with setns(2) on a locked OS thread for the socket(2) and connect(2)
// only. A socket stays in the namespace it was made in, so the connection
// is read and written from any thread afterwards.
//
// It is how an exporter in the node's network (hostNetwork) asks a
// service that listens on the loopback of a pod's own network namespace,
// such as NCCL's RAS service on localhost:28028, without the pod's help.
// setns needs CAP_SYS_ADMIN in the user namespace that owns the target
// namespace (the initial one for a pod's), and opening /proc/PID/ns/net
// needs ptrace read access to the process (root or CAP_SYS_PTRACE).
//
// The thread: runtime.LockOSThread keeps the goroutine alone on its thread
// while it is in the other namespace; the thread goes back to its own
// namespace before it is unlocked, and if that fails it is never unlocked,
// so the runtime ends the thread with the goroutine instead of reusing it
// in the wrong namespace. Name resolution and happy-eyeballs fallbacks,
// which could run on other threads, are avoided: the address must be an IP
// literal or localhost (tried as 127.0.0.1, then ::1, one after the other,
// on the same thread).
package netnsdial

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"

	"golang.org/x/sys/unix"
)

// EnterError is a failure to get into the namespace (opening it, setns):
// no privilege, or the process gone; never a failure of the connection
// made inside.
type EnterError struct {
	Op  string
	Err error
}

func (e *EnterError) Error() string { return e.Op + ": " + e.Err.Error() }
func (e *EnterError) Unwrap() error { return e.Err }

// Dial connects to addr (an IP literal or localhost, with a port) over TCP
// from inside the network namespace nsPath (/proc/PID/ns/net).
func Dial(ctx context.Context, nsPath, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var ips []string
	if host == "localhost" {
		ips = []string{"127.0.0.1", "::1"}
	} else if ip, err := netip.ParseAddr(host); err == nil {
		ips = []string{ip.String()}
	} else {
		return nil, fmt.Errorf("netnsdial: %q is not an IP address or localhost", host)
	}
	target, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &EnterError{Op: "open " + nsPath, Err: err}
	}
	defer unix.Close(target)
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := dialIn(ctx, target, ips, port)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// dialIn runs on its own goroutine: lock, enter, dial, return, unlock.
func dialIn(ctx context.Context, target int, ips []string, port string) (net.Conn, error) {
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("open this thread's network namespace: %w", err)
	}
	defer unix.Close(orig)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		if errors.Is(err, unix.EPERM) {
			return nil, &EnterError{Op: "setns (entering another network namespace needs CAP_SYS_ADMIN)", Err: err}
		}
		return nil, &EnterError{Op: "setns", Err: err}
	}
	d := net.Dialer{FallbackDelay: -1} // no parallel dials on other threads
	var c net.Conn
	for _, ip := range ips {
		if c, err = d.DialContext(ctx, "tcp", net.JoinHostPort(ip, port)); err == nil {
			break
		}
	}
	if rerr := unix.Setns(orig, unix.CLONE_NEWNET); rerr != nil {
		// Stay locked: the runtime ends this thread with the goroutine.
		if c != nil {
			c.Close()
		}
		return nil, fmt.Errorf("setns back: %w", rerr)
	}
	runtime.UnlockOSThread()
	return c, err
}
