// Package fakeras serves NCCL's RAS client protocol on a loopback port with
// recorded or constructed answers (internal/ncclras/testdata: one file per
// RAS state: healthy, killed, dead, NOCOMM, in progress, finalize, abort,
// …), for tests: the nccl-ras collector's and the alerting end-to-end
// test. It answers as NCCL's RAS thread does (rasClientEventLoop in
// src/ras/client_support.cc), one command a line, in any order, any case:
// "CLIENT PROTOCOL n" → "SERVER PROTOCOL 2"; "TIMEOUT s" → "OK", or
// "ERROR: Invalid timeout value s" for a negative or non-numeric s (the
// command is optional: a client that sends none gets the answer all the
// same); "SET FORMAT json|text" → "OK" where the server knows formats
// (NCCL ≥ 2.28.7; another format: "ERROR: Invalid format f"), else
// "ERROR: Unknown command …"; STATUS / VERBOSE STATUS → the answer, then
// it closes the connection. Commands lists what clients sent.
package fakeras

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"strconv"
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
	cmds     []string
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

// Commands returns the command lines clients sent, in order, every
// connection's (without the line end).
func (f *Server) Commands() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.cmds...)
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
		cmd := strings.TrimSuffix(strings.TrimSuffix(l, "\n"), "\r")
		f.mu.Lock()
		f.cmds = append(f.cmds, cmd)
		f.mu.Unlock()
		u := strings.ToUpper(cmd)
		switch {
		case strings.HasPrefix(u, "CLIENT PROTOCOL "):
			c.Write([]byte("SERVER PROTOCOL 2\n"))
		case strings.HasPrefix(u, "TIMEOUT "):
			arg := cmd[len("TIMEOUT "):]
			if validTimeout(arg) {
				c.Write([]byte("OK\n"))
			} else {
				c.Write([]byte("ERROR: Invalid timeout value " + arg + "\n"))
			}
		case f.json && strings.HasPrefix(u, "SET FORMAT "):
			switch arg := cmd[len("SET FORMAT "):]; strings.ToLower(arg) {
			case "json", "text":
				format = strings.ToLower(arg)
				c.Write([]byte("OK\n"))
			default:
				c.Write([]byte("ERROR: Invalid format " + arg + "\n"))
			}
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
			c.Write([]byte("ERROR: Unknown command " + cmd + "\n"))
		}
	}
}

// validTimeout is the check of rasClientEventLoop: strtol must read the
// whole argument (leading blanks and one sign before the digits; an empty
// argument reads 0) and the value must not be negative.
func validTimeout(arg string) bool {
	if arg == "" {
		return true
	}
	num := strings.TrimLeft(arg, " \t\n\v\f\r")
	digits := strings.TrimPrefix(strings.TrimPrefix(num, "+"), "-")
	if len(num)-len(digits) > 1 || digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return false
	}
	n, err := strconv.Atoi(num)
	return err == nil && n >= 0
}
