package netnsdial

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// pod makes a network namespace with lo up and a listener on its loopback
// that echoes one line; it returns the namespace's path (a descriptor of
// this process) and the listener's address. Skipped where namespaces
// cannot be made (no CAP_SYS_ADMIN).
func pod(t testing.TB) (string, string) {
	t.Helper()
	type made struct {
		fd  int
		ln  net.Listener
		err error
	}
	ch := make(chan made, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- made{err: err}
			return
		}
		fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			var lo netlink.Link
			if lo, err = netlink.LinkByName("lo"); err == nil {
				err = netlink.LinkSetUp(lo)
			}
		}
		var ln net.Listener
		if err == nil {
			ln, err = net.Listen("tcp", "127.0.0.1:0")
		}
		ch <- made{fd, ln, err}
	}()
	m := <-ch
	if errors.Is(m.err, unix.EPERM) {
		t.Skipf("cannot make a network namespace here: %v", m.err)
	}
	if m.err != nil {
		t.Fatal(m.err)
	}
	t.Cleanup(func() { m.ln.Close(); unix.Close(m.fd) })
	go func() {
		for {
			c, err := m.ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), m.fd), m.ln.Addr().String()
}

func TestDialInNamespace(t *testing.T) {
	ns, addr := pod(t)
	// From this namespace the pod's loopback listener is not there.
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s answered from the test's own namespace: the pod's listener leaked", addr)
	}
	c, err := Dial(context.Background(), ns, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping\n" {
		t.Fatalf("echo: %q %v", buf, err)
	}
	// The threads that entered went back: a plain dial still misses it.
	for range 4 {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Fatal("a thread was left in the pod's namespace")
		}
	}
	// localhost is tried as 127.0.0.1 there too.
	_, port, _ := net.SplitHostPort(addr)
	c2, err := Dial(context.Background(), ns, "localhost:"+port)
	if err != nil {
		t.Fatalf("localhost: %v", err)
	}
	c2.Close()
}

func TestDialErrors(t *testing.T) {
	if _, err := Dial(context.Background(), "/nonexistent/ns/net", "127.0.0.1:1"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("missing namespace: %v", err)
	}
	if _, err := Dial(context.Background(), "/proc/self/ns/net", "node7:28028"); err == nil {
		t.Error("a host name was dialled")
	}
	if _, err := Dial(context.Background(), "/proc/self/ns/net", "nonsense"); err == nil {
		t.Error("an address without a port was dialled")
	}
}

// BenchmarkDial compares a dial from inside a pod's namespace with a plain
// dial of a listener in the exporter's own (docs/benchmarks.md, "RAS in a
// pod's network namespace").
func BenchmarkDial(b *testing.B) {
	ns, addr := pod(b)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
	b.Run("in-namespace", func(b *testing.B) {
		for b.Loop() {
			c, err := Dial(context.Background(), ns, addr)
			if err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
}
