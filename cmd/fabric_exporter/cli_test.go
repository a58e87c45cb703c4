package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// These tests run the built binary: its commands, and what it links.

func runBinary(t *testing.T, args ...string) (out string, code int) {
	t.Helper()
	return testenv.Run(t, binary, args...)
}

func TestHelpListsFlags(t *testing.T) {
	out, code := runBinary(t, "--help")
	if code != 0 {
		t.Fatalf("--help: exit %d\n%s", code, out)
	}
	for _, want := range []string{"--path.sysfs", "--web.listen-address", "--collector.rdma", "serve*"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	if strings.Contains(out, "analyze") {
		t.Errorf("--help still lists the analysis:\n%s", out)
	}
}

// The analysis moved to its own binary; the old subcommand says where.
func TestAnalyzeMoved(t *testing.T) {
	out, code := runBinary(t, "analyze", "--prometheus.url=http://127.0.0.1:1", "--sweep=x.yaml")
	if code != 2 || !strings.Contains(out, "fabric_analyze") {
		t.Errorf("analyze: exit %d, output %q; want exit 2 naming fabric_analyze", code, out)
	}
}

// TestServeCommand: "serve" may be named explicitly; flags before it are
// the exporter's.
func TestServeCommand(t *testing.T) {
	addr, _ := startExporter(t, "--path.sysfs="+fixtureSys, "serve", "--collector.disable-defaults", "--collector.rdma")
	if m := get(t, "http://"+addr+"/metrics"); !strings.Contains(m, `fabric_scrape_collector_success{collector="rdma"} 1`) {
		t.Errorf("serve: no rdma collector:\n%s", grep(m, "collector_success"))
	}
}

// The exporter runs privileged on every node: it must not link the
// analysis' plotting stack (gonum, gonum/plot and its fonts, x/image).
func TestExporterLinksNoPlotting(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, bad := range []string{"gonum.org/", "golang.org/x/image", "codeberg.org/go-fonts", "codeberg.org/go-latex", "codeberg.org/go-pdf", "git.sr.ht/~sbinet/gg", "github.com/fabric-exporter/fabric_exporter/analyze"} {
			if strings.HasPrefix(dep, bad) {
				t.Errorf("the exporter links %s", dep)
			}
		}
	}
}
