package main

import (
	"net"
	"os"
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

// A bad --web.config.file (missing, garbage, an unknown key) or a port in
// use stops the exporter before it says it listens, with a message that
// names the flag and what is wrong.
func TestBadWebInputNamesTheFlag(t *testing.T) {
	dir := t.TempDir()
	garbage, unknown := dir+"/garbage.yml", dir+"/unknown.yml"
	os.WriteFile(garbage, []byte("tls_server_config: [\n"), 0o644)
	os.WriteFile(unknown, []byte("bogus_key: 1\n"), 0o644)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	free := testenv.FreeAddr(t)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--web.config.file=" + dir + "/missing.yml", "--web.listen-address=" + free}, []string{"--web.config.file", "missing.yml", "no such file"}},
		{[]string{"--web.config.file=" + garbage, "--web.listen-address=" + free}, []string{"--web.config.file", "garbage.yml", "yaml"}},
		{[]string{"--web.config.file=" + unknown, "--web.listen-address=" + free}, []string{"--web.config.file", "unknown.yml", "bogus_key"}},
		{[]string{"--web.listen-address=" + ln.Addr().String()}, []string{"--web.listen-address", ln.Addr().String(), "address already in use"}},
		{[]string{"--collector.gpu.interval=fast"}, []string{"--collector.gpu.interval", `"fast"`, "a duration"}},
		{[]string{"--collector.rdma", "--collector.rdma.device-include=(", "--web.listen-address=" + free}, []string{"--collector.rdma.device-include", "missing closing ): `(`"}},
	} {
		out, code := runBinary(t, append(c.args, "--collector.disable-defaults")...)
		if code == 0 {
			t.Errorf("%v: exit 0", c.args)
		}
		if strings.Contains(out, "^(?:") {
			t.Errorf("%v: the exporter's own wrapping shows:\n%s", c.args, out)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: the output does not say %q:\n%s", c.args, w, out)
			}
		}
		for _, bad := range []string{"Listening on", "HTTP server stopped"} {
			if strings.Contains(out, bad) {
				t.Errorf("%v: says %q:\n%s", c.args, bad, out)
			}
		}
	}
}
