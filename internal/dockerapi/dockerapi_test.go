package dockerapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// inspectRunning is the start of what Docker Engine 28 answers to GET
// /containers/{id}/json for a running container (fields trimmed; the ones
// read here as the daemon writes them).
const inspectRunning = `{"Id":"f6f6b9c6a78875c26e65a60448dec9ec0d21dcc5e801662a1444eabcdb85255e","Created":"2026-12-01T10:00:00.000000000Z","Path":"python3","Args":["-m","sglang.launch_server"],"State":{"Status":"running","Running":true,"Paused":false,"Restarting":false,"OOMKilled":false,"Dead":false,"Pid":4311,"ExitCode":0,"Error":"","StartedAt":"2026-12-01T10:00:01.000000000Z","FinishedAt":"0001-01-01T00:00:00Z"},"Image":"sha256:0123","Name":"/sglang-tp16-node0","RestartCount":0,"Driver":"overlay2","Platform":"linux"}`

// daemon serves a fake Engine API on a unix socket and records the paths
// it was asked for.
func daemon(t *testing.T, h http.HandlerFunc) (host string, paths func() []string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "dockerapi") // short: a socket path has 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "d.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.EscapedPath())
		mu.Unlock()
		h(w, r)
	}))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return "unix://" + sock, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), seen...) }
}

func TestInspect(t *testing.T) {
	host, paths := daemon(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/containers/f6f6b9c6a788/json", "/containers/sglang-tp16-node0/json":
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(inspectRunning))
		case "/containers/stopped/json":
			w.Write([]byte(`{"Id":"abc","Name":"/stopped","State":{"Status":"exited","Pid":0}}`))
		case "/containers/gone/json":
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"message":"No such container: gone"}`))
		case "/containers/broken/json":
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte(`{"message":"container store: database is locked"}`))
		case "/containers/proxy/json":
			w.WriteHeader(http.StatusBadGateway)
			w.Write([]byte(`<html>bad gateway</html>`))
		case "/containers/garbage/json":
			w.Write([]byte(`[1,2`))
		case "/containers/noid/json":
			w.Write([]byte(`{"message":"ok"}`))
		default:
			http.NotFound(w, r)
		}
	})
	c, err := New(host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	for _, id := range []string{"f6f6b9c6a788", "sglang-tp16-node0"} {
		got, err := c.Inspect(ctx, id)
		want := Container{ID: "f6f6b9c6a78875c26e65a60448dec9ec0d21dcc5e801662a1444eabcdb85255e", Name: "sglang-tp16-node0", Pid: 4311}
		if err != nil || got != want {
			t.Errorf("%s: %+v, %v; want %+v", id, got, err, want)
		}
	}
	if got, err := c.Inspect(ctx, "stopped"); err != nil || got != (Container{ID: "abc", Name: "stopped"}) {
		t.Errorf("stopped: %+v, %v", got, err)
	}
	if _, err := c.Inspect(ctx, "gone"); !errors.Is(err, ErrNotFound) {
		t.Errorf("gone: %v, want ErrNotFound", err)
	}
	for id, want := range map[string]string{
		"broken":   "container broken: 500 Internal Server Error: container store: database is locked",
		"proxy":    "container proxy: 502 Bad Gateway",
		"garbage":  "container garbage: the answer is not an inspection",
		"noid":     "container noid: the answer has no Id",
		"":         `container "": not an ID or name`,
		"../../v1": `container "../../v1": not an ID or name`,
		"a?b":      `container "a?b": not an ID or name`,
	} {
		_, err := c.Inspect(ctx, id)
		if err == nil || errors.Is(err, ErrNotFound) || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: %v, want %q", id, err, want)
		}
	}
	// No version prefix: the daemon answers in its own version.
	for _, p := range paths() {
		if !strings.HasPrefix(p, "GET /containers/") || strings.Contains(p, "/v1.") {
			t.Errorf("asked %s", p)
		}
	}
}

func TestTooLong(t *testing.T) {
	host, _ := daemon(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"Id":"x","Name":"/` + strings.Repeat("a", maxBody) + `"}`))
	})
	c, _ := New(host)
	if _, err := c.Inspect(t.Context(), "x"); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("%v", err)
	}
}

// A daemon that accepts and never answers: the caller's deadline ends the
// request.
func TestDeadline(t *testing.T) {
	release := make(chan struct{})
	host, _ := daemon(t, func(w http.ResponseWriter, r *http.Request) { <-release })
	defer close(release)
	c, _ := New(host)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	if _, err := c.Inspect(ctx, "x"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v", err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("took %s", d)
	}
}

func TestTCP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(inspectRunning))
	}))
	defer srv.Close()
	for _, host := range []string{"tcp://" + srv.Listener.Addr().String(), srv.URL} {
		c, err := New(host)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := c.Inspect(t.Context(), "x"); err != nil || got.Name != "sglang-tp16-node0" {
			t.Errorf("%s: %+v, %v", host, got, err)
		}
	}
}

func TestNewBadHost(t *testing.T) {
	for host, want := range map[string]string{
		"unix://":                     "no socket path",
		"tcp://":                      "no host:port",
		"npipe:////./pipe/docker":     `scheme "npipe" is neither unix, tcp nor http`,
		"https://docker.example:2376": `scheme "https" is neither unix, tcp nor http`,
		"/var/run/docker.sock":        `scheme "" is neither unix, tcp nor http`,
		"unix://%zz":                  "invalid URL escape",
	} {
		if _, err := New(host); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", host, err, want)
		}
	}
	if c, err := New("unix:///var/run/docker.sock"); err != nil || c.base != "http://docker" {
		t.Errorf("%v", err)
	}
}
