package ncclras

import (
	"bufio"
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// peer serves one behaviour on a loopback listener and records the
// commands it received.
type peer struct {
	ln   net.Listener
	mu   sync.Mutex
	cmds []string
	wg   sync.WaitGroup
}

func newPeer(t testing.TB, serve func(p *peer, c net.Conn, br *bufio.Reader)) *peer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &peer{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer c.Close()
				serve(p, c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *peer) addr() string { return p.ln.Addr().String() }

func (p *peer) read(br *bufio.Reader) (string, bool) {
	l, err := br.ReadString('\n')
	if err != nil {
		return "", false
	}
	l = strings.TrimSpace(l)
	p.mu.Lock()
	p.cmds = append(p.cmds, l)
	p.mu.Unlock()
	return l, true
}

// rasServer behaves like NCCL's RAS thread: json tells whether it knows
// SET FORMAT (2.28.7+); it answers STATUS with jsonAns or textAns.
func rasServer(json bool, jsonAns, textAns []byte) func(*peer, net.Conn, *bufio.Reader) {
	return func(p *peer, c net.Conn, br *bufio.Reader) {
		format := "text"
		for {
			l, ok := p.read(br)
			if !ok {
				return
			}
			u := strings.ToUpper(l)
			switch {
			case strings.HasPrefix(u, "CLIENT PROTOCOL "):
				c.Write([]byte("SERVER PROTOCOL 2\n"))
			case strings.HasPrefix(u, "TIMEOUT "):
				c.Write([]byte("OK\n"))
			case json && u == "SET FORMAT JSON":
				format = "json"
				c.Write([]byte("OK\n"))
			case u == "STATUS" || u == "VERBOSE STATUS":
				if format == "json" {
					c.Write(jsonAns)
				} else {
					c.Write(textAns)
				}
				return
			default:
				c.Write([]byte("ERROR: Unknown command " + l + "\n"))
			}
		}
	}
}

func TestQueryJSONAndText(t *testing.T) {
	j, x := fixture(t, "2.28.9-json-killed.txt"), fixture(t, "2.28.9-text-killed.txt")
	p := newPeer(t, rasServer(true, j, x))
	st, err := Query(context.Background(), p.addr(), Options{Timeout: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if st.Format != "json" || st.Protocol != 2 || !st.Communicators[0].Incomplete {
		t.Fatalf("%+v", st)
	}
	p.mu.Lock()
	got := strings.Join(p.cmds, "|")
	p.mu.Unlock()
	if got != "CLIENT PROTOCOL 2|SET FORMAT json|STATUS" {
		t.Fatalf("commands %s", got)
	}
	// A server before 2.28.7 refuses SET FORMAT: the client reads text.
	old := newPeer(t, rasServer(false, nil, fixture(t, "2.25.1-text-constructed-killed.txt")))
	st, err = Query(context.Background(), old.addr(), Options{Timeout: 4 * time.Second, RASTimeout: 2500 * time.Millisecond, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.Format != "text" || st.Version != "2.25.1" || !st.Communicators[0].Mismatch {
		t.Fatalf("%+v", st)
	}
	old.mu.Lock()
	got = strings.Join(old.cmds, "|")
	old.mu.Unlock()
	if got != "CLIENT PROTOCOL 2|TIMEOUT 2|SET FORMAT json|VERBOSE STATUS" { // whole seconds, truncated
		t.Fatalf("commands %s", got)
	}
}

// TestQueryTimeoutCommand: TIMEOUT only when RASTimeout asks, in whole
// seconds and never 0 (TIMEOUT 0 turns RAS's collective timeout off).
func TestQueryTimeoutCommand(t *testing.T) {
	j := fixture(t, "2.28.9-json-healthy.txt")
	for _, tc := range []struct {
		ras  time.Duration
		want string
	}{
		{0, "CLIENT PROTOCOL 2|SET FORMAT json|STATUS"},
		{-time.Second, "CLIENT PROTOCOL 2|SET FORMAT json|STATUS"},
		{300 * time.Millisecond, "CLIENT PROTOCOL 2|TIMEOUT 1|SET FORMAT json|STATUS"},
		{5 * time.Second, "CLIENT PROTOCOL 2|TIMEOUT 5|SET FORMAT json|STATUS"},
		{12900 * time.Millisecond, "CLIENT PROTOCOL 2|TIMEOUT 12|SET FORMAT json|STATUS"},
	} {
		p := newPeer(t, rasServer(true, j, nil))
		if _, err := Query(context.Background(), p.addr(), Options{RASTimeout: tc.ras}); err != nil {
			t.Fatal(err)
		}
		p.mu.Lock()
		got := strings.Join(p.cmds, "|")
		p.mu.Unlock()
		if got != tc.want {
			t.Errorf("RASTimeout %s: commands %s, want %s", tc.ras, got, tc.want)
		}
	}
}

func TestQueryRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = Query(context.Background(), addr, Options{Timeout: time.Second})
	if !Refused(err) {
		t.Fatalf("err %v: not refused", err)
	}
}

// TestHostilePeers: every misbehaving server ends the query within its
// deadline, with an error naming the step, and memory stays bounded.
func TestHostilePeers(t *testing.T) {
	const timeout = 1500 * time.Millisecond
	handshake := func(p *peer, c net.Conn, br *bufio.Reader) bool {
		for i := 0; i < 3; i++ { // CLIENT PROTOCOL, TIMEOUT, SET FORMAT
			l, ok := p.read(br)
			if !ok {
				return false
			}
			if strings.HasPrefix(l, "CLIENT") {
				c.Write([]byte("SERVER PROTOCOL 2\n"))
			} else {
				c.Write([]byte("OK\n"))
			}
		}
		_, ok := p.read(br) // STATUS
		return ok
	}
	chunk := []byte(strings.Repeat("x", 64<<10))
	for _, tc := range []struct {
		name, step string
		serve      func(p *peer, c net.Conn, br *bufio.Reader)
		max        int64
	}{
		{"garbage handshake", "handshake", func(p *peer, c net.Conn, br *bufio.Reader) {
			p.read(br)
			c.Write([]byte("\x00\xffHELLO garbage\n"))
		}, 0},
		{"wrong protocol line", "handshake", func(p *peer, c net.Conn, br *bufio.Reader) {
			p.read(br)
			c.Write([]byte("SERVER PROTOCOL two\n"))
		}, 0},
		{"endless handshake line", "handshake", func(p *peer, c net.Conn, br *bufio.Reader) {
			p.read(br)
			for {
				if _, err := c.Write(chunk); err != nil {
					return
				}
			}
		}, 0},
		{"silent", "handshake", func(p *peer, c net.Conn, br *bufio.Reader) {
			p.read(br)
			time.Sleep(3 * timeout)
		}, 0},
		{"closed socket", "handshake", func(p *peer, c net.Conn, br *bufio.Reader) {}, 0},
		{"timeout refused", "timeout", func(p *peer, c net.Conn, br *bufio.Reader) {
			p.read(br)
			c.Write([]byte("SERVER PROTOCOL 2\n"))
			p.read(br)
			c.Write([]byte("ERROR: Invalid timeout value\n"))
		}, 0},
		{"garbage answer", "parse", func(p *peer, c net.Conn, br *bufio.Reader) {
			if handshake(p, c, br) {
				c.Write([]byte("{\"this is\": not RAS\n"))
			}
		}, 0},
		{"empty answer", "answer", func(p *peer, c net.Conn, br *bufio.Reader) {
			handshake(p, c, br)
		}, 0},
		{"endless answer", "answer", func(p *peer, c net.Conn, br *bufio.Reader) {
			if handshake(p, c, br) {
				for {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			}
		}, 1 << 20},
		{"slow answer", "answer", func(p *peer, c net.Conn, br *bufio.Reader) {
			if handshake(p, c, br) {
				for i := 0; i < 10; i++ {
					if _, err := c.Write([]byte("{")); err != nil {
						return
					}
					time.Sleep(time.Second)
				}
			}
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPeer(t, tc.serve)
			var before runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			st, err := Query(context.Background(), p.addr(), Options{Timeout: timeout, RASTimeout: time.Second, MaxAnswer: tc.max})
			took := time.Since(start)
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Fatalf("accepted %+v", st)
			}
			var qe *Error
			if !errors.As(err, &qe) || qe.Step != tc.step {
				t.Fatalf("err %v, want step %s", err, tc.step)
			}
			if Refused(err) {
				t.Fatalf("%v classified as refused", err)
			}
			if took > timeout+500*time.Millisecond {
				t.Fatalf("took %s, deadline %s", took, timeout)
			}
			if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 8<<20 {
				t.Fatalf("heap grew %d bytes", grew)
			}
			t.Logf("%s after %s", err, took.Round(time.Millisecond))
		})
	}
}

func TestQueryContextCancel(t *testing.T) {
	p := newPeer(t, func(p *peer, c net.Conn, br *bufio.Reader) {
		p.read(br)
		time.Sleep(2 * time.Second)
	})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	if _, err := Query(ctx, p.addr(), Options{Timeout: 10 * time.Second}); err == nil {
		t.Fatal("no error")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("cancel took %s", d)
	}
}
