package alerts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The committed dcgm-compat-rules.yml is what RenderDCGMCompat writes
// (`make rules` rewrites it with -update).
func TestDCGMCompatUpToDate(t *testing.T) {
	got := RenderDCGMCompat(DefaultConfig())
	if *update {
		if err := os.WriteFile(dcgmCompatPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(dcgmCompatPath)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("%s is stale: run make rules", dcgmCompatPath)
	}
}

// promtool check rules, and promtool's unit tests (tests/dcgm/): the names
// and labels a dcgm-exporter dashboard selects on, for a GPU in a pod, a
// GPU shared by two pods and a GPU outside any pod; and every field of the
// mapping table of docs/kubernetes.md is recorded.
func TestDCGMCompatPromtool(t *testing.T) {
	doc, err := os.ReadFile("../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range DCGMFields {
		if !strings.Contains(string(doc), "| `"+f.DCGM+"` | `"+f.Fabric+"`") {
			t.Errorf("docs/kubernetes.md: no mapping row for %s", f.DCGM)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool not found")
		}
		t.Skip("promtool not found")
	}
	if out, err := exec.Command(promtool, "check", "rules", dcgmCompatPath).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	dir := t.TempDir()
	b, err := os.ReadFile(dcgmCompatPath)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, dcgmCompatPath), b, 0o644)
	files, _ := filepath.Glob("tests/dcgm/*_test.yml")
	if len(files) == 0 {
		t.Fatal("no tests")
	}
	var args []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.Base(f))
		os.WriteFile(dst, b, 0o644)
		args = append(args, dst)
	}
	out, err := exec.Command(promtool, append([]string{"test", "rules"}, args...)...).CombinedOutput()
	if err != nil || strings.Count(string(out), "SUCCESS") != len(files) {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}
