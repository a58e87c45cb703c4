package alerts

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite fabric-rules.yml from the template and config")

const renderedPath = "fabric-rules.yml"

// The committed rule file is what the template and config render to.
func TestRenderedRulesUpToDate(t *testing.T) {
	got, err := Render(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(renderedPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(renderedPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is out of date: run `make rules`", renderedPath)
	}
}

// promtool check rules, and the unit tests in tests/ (one firing and one
// healthy case per alert).
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool not found")
		}
		t.Skip("promtool not found")
	}
	if out, err := exec.Command(promtool, "check", "rules", renderedPath).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	tests, _ := filepathGlob("tests/*.yml")
	if len(tests) == 0 {
		t.Fatal("no rule tests")
	}
	out, err := exec.Command(promtool, append([]string{"test", "rules"}, tests...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "SUCCESS") {
		t.Errorf("promtool test rules:\n%s", out)
	}
}

func TestConfigStrict(t *testing.T) {
	if _, err := ParseConfig([]byte("exporterSelector: 'job=\"x\"'\nbogus: 1\n")); err == nil {
		t.Error("unknown key accepted")
	}
	c := DefaultConfig()
	c.RateWindow = "5m"
	b, err := Render(c)
	if err != nil || !strings.Contains(string(b), "rail:fabric_rdma_transmitted_bits:rate5m") || !strings.Contains(string(b), "[5m]") {
		t.Errorf("rate window not applied: %v", err)
	}
}

func filepathGlob(p string) ([]string, error) { return filepath.Glob(p) }
