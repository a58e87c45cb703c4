// Package fakeras serves NCCL's RAS client protocol on a loopback port with
// recorded answers (internal/ncclras/testdata), for tests: the nccl-ras
// collector's and the alerting end-to-end test. It answers as NCCL's RAS
// thread does (src/ras/client_support.cc): "CLIENT PROTOCOL n" → "SERVER
// PROTOCOL 2", "TIMEOUT s" → "OK", "SET FORMAT json" → "OK" where the
// server knows JSON (NCCL ≥ 2.28.7), else "ERROR: Unknown command", and
// STATUS / VERBOSE STATUS → the answer, then it closes the connection.
package fakeras

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Server is a RAS service stand-in. The answer files are read at each
// STATUS, so a test can switch them with Set; Hang makes it silent.
type Server struct {
	ln       net.Listener
	dir      string
	json     bool
	mu       sync.Mutex
	jsonFile string
	textFile string
	Hang     atomic.Bool
	wg       sync.WaitGroup
}

// Start listens on 127.0.0.1 (a free port) until the test ends. dir holds
// the answer files; json says whether the server knows SET FORMAT.
func Start(t testing.TB, dir string, json bool, jsonFile, textFile string) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &Server{ln: ln, dir: dir, json: json, jsonFile: jsonFile, textFile: textFile}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer c.Close()
				f.serve(t, c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); f.wg.Wait() })
	return f
}

// Set switches the answers.
func (f *Server) Set(jsonFile, textFile string) {
	f.mu.Lock()
	f.jsonFile, f.textFile = jsonFile, textFile
	f.mu.Unlock()
}

// Addr is the server's host:port.
func (f *Server) Addr() string { return f.ln.Addr().String() }

func (f *Server) serve(t testing.TB, c net.Conn) {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	format := "text"
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			return
		}
		if f.Hang.Load() {
			time.Sleep(2 * time.Second)
			return
		}
		u := strings.ToUpper(strings.TrimSpace(l))
		switch {
		case strings.HasPrefix(u, "CLIENT PROTOCOL "):
			c.Write([]byte("SERVER PROTOCOL 2\n"))
		case strings.HasPrefix(u, "TIMEOUT "):
			c.Write([]byte("OK\n"))
		case f.json && u == "SET FORMAT JSON":
			format = "json"
			c.Write([]byte("OK\n"))
		case u == "STATUS" || u == "VERBOSE STATUS":
			f.mu.Lock()
			name := f.textFile
			if format == "json" {
				name = f.jsonFile
			}
			f.mu.Unlock()
			b, err := os.ReadFile(filepath.Join(f.dir, name))
			if err != nil {
				t.Error(err)
			}
			c.Write(b)
			return
		default:
			c.Write([]byte("ERROR: Unknown command " + strings.TrimSpace(l) + "\n"))
		}
	}
}
