package alerts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// promtool check rules, and promtool's unit tests (tests/dcgm/): the names
// and labels a dcgm-exporter dashboard selects on, for a GPU in a pod, a
// GPU shared by two pods and a GPU outside any pod; and every field of the
// mapping table of docs/kubernetes.md is recorded.
func TestDCGMCompatPromtool(t *testing.T) {
	doc, err := os.ReadFile("../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range dcgmFields {
		if !strings.Contains(string(doc), "| `"+f.DCGM+"` | `"+f.Fabric+"`") {
			t.Errorf("docs/kubernetes.md: no mapping row for %s", f.DCGM)
		}
	}
	promtool := testenv.Tool(t, "promtool")
	if out, err := exec.Command(promtool, "check", "rules", DCGMCompatFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	dir := t.TempDir()
	b, err := os.ReadFile(DCGMCompatFile)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, DCGMCompatFile), b, 0o644)
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
