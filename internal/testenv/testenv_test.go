package testenv

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// recorder stands in for a test: it records Fatalf and Skipf instead of
// ending the goroutine.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper()                      {}
func (r *recorder) Fatalf(f string, args ...any) { r.fatal = fmt.Sprintf(f, args...) }
func (r *recorder) Skipf(f string, args ...any)  { r.skip = fmt.Sprintf(f, args...) }

func TestTool(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "promtool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)

	t.Setenv("CI", "true")
	r := &recorder{TB: t}
	if p := Tool(r, "nonexistent-tool", "promtool"); p != tool || r.fatal != "" || r.skip != "" {
		t.Errorf("found: %q, fatal %q, skip %q", p, r.fatal, r.skip)
	}
	// Missing under CI: the test fails, naming the Debian package.
	r = &recorder{TB: t}
	Tool(r, "amtool")
	if !strings.Contains(r.fatal, "amtool") || !strings.Contains(r.fatal, "prometheus-alertmanager") || r.skip != "" {
		t.Errorf("CI: fatal %q, skip %q", r.fatal, r.skip)
	}
	// Missing locally: skipped.
	t.Setenv("CI", "")
	r = &recorder{TB: t}
	Tool(r, "kubectl")
	if !strings.Contains(r.skip, "kubernetes-client") || r.fatal != "" {
		t.Errorf("local: fatal %q, skip %q", r.fatal, r.skip)
	}
	// An optional tool neither fails nor skips.
	t.Setenv("CI", "true")
	if p := OptionalTool("docker-compose"); p != "" {
		t.Errorf("OptionalTool = %q", p)
	}
	if p := OptionalTool("docker-compose", "promtool"); p != tool {
		t.Errorf("OptionalTool = %q, want %q", p, tool)
	}
}

// Every tool Tool names a package for is one .ci/run installs, under the
// `command -v` check of that tool or of its sibling in the same package.
func TestCIInstallsTools(t *testing.T) {
	b, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	installs := map[string]string{} // tool checked -> packages installed when missing
	for _, m := range regexp.MustCompile(`command -v (\S+) .*\|\| need\+=\(([^)]*)\)`).FindAllStringSubmatch(string(b), -1) {
		installs[m[1]] = m[2]
	}
	for _, tool := range []string{"promtool", "prometheus", "amtool", "alertmanager", "prometheus-alertmanager", "kubectl", "systemd-analyze"} {
		pkg := debianPackage(tool)
		found := false
		for _, pkgs := range installs {
			found = found || strings.Contains(" "+pkgs+" ", " "+pkg+" ")
		}
		if !found {
			t.Errorf("%s: .ci/run does not install %q (it installs %v)", tool, pkg, installs)
		}
	}
	if !strings.Contains(installs["promtool"], "prometheus") || !strings.Contains(installs["kubectl"], "kubernetes-client") {
		t.Errorf(".ci/run parsed as %v", installs)
	}
}

func TestWaitHTTP(t *testing.T) {
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n++; n < 3 {
			w.WriteHeader(503)
		}
	}))
	defer srv.Close()
	WaitHTTP(t, srv.URL)
	if n != 3 {
		t.Errorf("ready after %d requests, want 3", n)
	}
	if a, b := FreeAddr(t), FreeAddr(t); a == b || !strings.HasPrefix(a, "127.0.0.1:") {
		t.Errorf("FreeAddr: %s, %s", a, b)
	}
}
