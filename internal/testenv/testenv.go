// Package testenv holds what the tests that start real processes share:
// free loopback addresses, external tools, readiness waits.
//
// External tools: Tool for one that .ci/run installs (promtool,
// prometheus, amtool, alertmanager, kubectl, systemd-analyze): the test
// skips where it is missing locally and fails under CI, so that CI never
// passes by skipping. OptionalTool for one that CI does not promise
// (docker compose): the test checks less without it and says so.
package testenv

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/promapi"
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
// found the test is skipped, or fails when $CI is set (.ci/run installs
// the Debian packages that provide these tools).
func Tool(t testing.TB, names ...string) string {
	t.Helper()
	if p := OptionalTool(names...); p != "" {
		return p
	}
	pkg := debianPackage(names[0])
	if os.Getenv("CI") != "" {
		t.Fatalf("%v not found; .ci/run installs Debian's %s", names, pkg)
		return ""
	}
	t.Skipf("%v not found (Debian: apt-get install %s)", names, pkg)
	return ""
}

// OptionalTool returns the path of the first of names found on PATH, or ""
// when none is: for a tool that CI does not install, whose absence only
// narrows what the test checks (the caller says what it left out).
func OptionalTool(names ...string) string {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// debianPackage is the package that provides tool on Debian, the one
// .ci/run installs (TestCIInstallsTools holds the two together).
func debianPackage(tool string) string {
	switch tool {
	case "prometheus", "promtool":
		return "prometheus"
	case "alertmanager", "prometheus-alertmanager", "amtool":
		return "prometheus-alertmanager"
	case "kubectl":
		return "kubernetes-client"
	case "systemd-analyze":
		return "systemd"
	}
	return "the package that provides " + tool
}

// WaitHTTP waits until url answers 200, for 30 seconds at most.
func WaitHTTP(t testing.TB, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := promapi.WaitReady(ctx, nil, url, nil); err != nil {
		t.Fatal(err)
	}
}

// WriteFile writes content to path, creating its parent directories.
func WriteFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// RewriteFile replaces the content of an existing file without replacing
// its inode, as a sysfs value changes under a descriptor kept open.
func RewriteFile(t testing.TB, path, content string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
}

// AppendFile appends content to path, creating it (a log that grows).
func AppendFile(t testing.TB, path, content string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
}

// Run runs a built binary with args and returns its combined output and
// exit code; it fails the test only when the binary could not be run.
func Run(t testing.TB, binary string, args ...string) (out string, code int) {
	t.Helper()
	b, err := exec.Command(binary, args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(b), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(b), 0
}

// MapDiff is a key on which two string maps differ.
type MapDiff struct {
	Key, Got, Want string
	InGot, InWant  bool
}

// DiffMaps returns the keys on which got and want differ, sorted.
func DiffMaps[M ~map[string]string](got, want M) []MapDiff {
	var out []MapDiff
	for k, g := range got {
		if w, ok := want[k]; !ok || w != g {
			out = append(out, MapDiff{Key: k, Got: g, Want: w, InGot: true, InWant: ok})
		}
	}
	for k, w := range want {
		if _, ok := got[k]; !ok {
			out = append(out, MapDiff{Key: k, Want: w, InWant: true})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}
