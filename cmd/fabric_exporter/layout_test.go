package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/fabric-exporter/fabric_exporter/"

// layers says which of the project's packages each package may import
// (DEVELOPERS.md, "Layout"): the readers and parsers under internal/ know
// nothing of collectors or metrics, the collectors nothing of the command
// or the rules. A package not listed here may import anything but cmd/.
var layers = map[string][]string{
	"internal/exposition":     nil,
	"internal/sysfs":          nil,
	"internal/proc":           {"internal/sysfs"},
	"internal/nccl":           {"internal/nccl/inspector"},
	"internal/nccl/inspector": nil,
	"internal/ncclras":        nil,
	"internal/kmsg":           nil,
	"internal/optics":         nil,
	"internal/ethtoolnl":      nil,
	"internal/rdmanl":         nil,
	"internal/devlinknl":      nil,
	"internal/dockerapi":      nil,
	"internal/procwatch":      {"internal/proc", "internal/sysfs", "internal/rdmanl"},
	"internal/netnsdial":      nil,
	"internal/gpu":            nil,
	"internal/gpu/nvidia":     {"internal/gpu"},
	"internal/selfmetrics":    {"internal/exposition", "internal/sysfs"},
	"internal/promapi":        nil,
	"internal/testenv":        {"internal/promapi"},
	"internal/fixturetree":    nil,
	"internal/fakekubelet":    nil,
	"internal/fakeras":        nil,
	"internal/nlattr":         nil,
	"collector": {"internal/exposition", "internal/sysfs", "internal/proc", "internal/nccl", "internal/nccl/inspector",
		"internal/kmsg",
		"internal/ncclras", "internal/optics", "internal/ethtoolnl", "internal/rdmanl", "internal/gpu", "internal/gpu/nvidia",
		"internal/procwatch", "internal/netnsdial", "internal/devlinknl", "internal/dockerapi"},
	"alerts":     nil,
	"dashboards": {"alerts"},
}

// goList returns each package of the module (relative path) with the
// module packages it imports (non-test files).
func goList(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		p := strings.TrimPrefix(f[0], module)
		pkgs[p] = nil
		for _, imp := range f[1:] {
			if rel, ok := strings.CutPrefix(imp, module); ok {
				pkgs[p] = append(pkgs[p], rel)
			}
		}
	}
	return pkgs
}

// Each directory is one concern: the package graph follows the layers.
func TestPackageLayers(t *testing.T) {
	pkgs := goList(t)
	for p := range layers {
		if _, ok := pkgs[p]; !ok {
			t.Errorf("layers names %s, which is not a package (moved? update the table and DEVELOPERS.md)", p)
		}
	}
	for p, imps := range pkgs {
		allowed, listed := layers[p]
		for _, imp := range imps {
			switch {
			case strings.HasPrefix(imp, "cmd/"):
				t.Errorf("%s imports the command %s", p, imp)
			case listed && !contains(allowed, imp):
				t.Errorf("%s imports %s; its layer allows only %v", p, imp, allowed)
			}
		}
	}
}

// No non-test Go file above 500 lines, no package above 30 % of the
// module's non-test lines (generated files excluded): a newcomer can read
// one concern at a time.
func TestPackageAndFileSizes(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", root, "ls-files", "*.go").Output()
	if err != nil {
		t.Skipf("git ls-files: %v", err)
	}
	perPkg := map[string]int{}
	total := 0
	for _, f := range strings.Fields(string(out)) {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("\n// Code generated ")) || bytes.HasPrefix(b, []byte("// Code generated ")) {
			continue
		}
		n := bytes.Count(b, []byte("\n"))
		if n > 500 {
			t.Errorf("%s: %d lines (at most 500: split it by concern)", f, n)
		}
		perPkg[filepath.Dir(f)] += n
		total += n
	}
	var names []string
	for p := range perPkg {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		if share := float64(perPkg[p]) / float64(total); share > 0.30 {
			t.Errorf("%s: %d of %d non-test lines (%.0f %%, at most 30 %%)", p, perPkg[p], total, share*100)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
