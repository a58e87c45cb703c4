// Package testenv holds what the tests that start real processes share:
// free loopback addresses, external tools that CI installs, readiness waits.
package testenv

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"
)

// FreeAddr returns a free 127.0.0.1 address.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Tool returns the path of the first of names found on PATH. When none is
// found the test is skipped, or fails under CI (where .ci/run installs the
// Debian packages that provide them).
func Tool(t testing.TB, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%v not found; .ci/run installs Debian's prometheus and prometheus-alertmanager", names)
	}
	t.Skipf("%v not found", names)
	return ""
}

// WaitHTTP waits until url answers 200.
func WaitHTTP(t testing.TB, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not answer", url)
}
