package alerts

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// promqlBlock is a ```promql block of a document.
var promqlBlock = regexp.MustCompile("(?s)```promql\n(.*?)```")

// docQueries returns the queries of a document's ```promql blocks: one
// query per block, its # comment lines dropped.
func docQueries(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range promqlBlock.FindAllStringSubmatch(string(b), -1) {
		var lines []string
		for _, l := range strings.Split(m[1], "\n") {
			if !strings.HasPrefix(strings.TrimSpace(l), "#") {
				lines = append(lines, l)
			}
		}
		if q := strings.TrimSpace(strings.Join(lines, "\n")); q != "" {
			out = append(out, q)
		}
	}
	return out
}

// The PromQL joins that docs/kubernetes.md gives users are tested with
// promtool against kube-state-metrics and cAdvisor series (tests/joins/),
// and every query of the document is one of the tested ones, verbatim.
func TestDocumentedJoins(t *testing.T) {
	files, _ := filepath.Glob("tests/joins/*_test.yml")
	if len(files) == 0 {
		t.Fatal("no join tests")
	}
	tested := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Tests []struct {
				PromQLExprTest []struct {
					Expr string `yaml:"expr"`
				} `yaml:"promql_expr_test"`
			} `yaml:"tests"`
		}
		if err := yaml.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, tc := range doc.Tests {
			for _, e := range tc.PromQLExprTest {
				tested[strings.TrimSpace(e.Expr)] = true
			}
		}
	}
	queries := docQueries(t, "../docs/kubernetes.md")
	if len(queries) == 0 {
		t.Fatal("no queries in docs/kubernetes.md")
	}
	for _, q := range queries {
		if !tested[q] {
			t.Errorf("docs/kubernetes.md query not tested in tests/joins/:\n%s", q)
		}
	}

	promtool := testenv.Tool(t, "promtool")
	out, err := exec.Command(promtool, append([]string{"test", "rules"}, files...)...).CombinedOutput()
	if err != nil || strings.Count(string(out), "SUCCESS") != len(files) {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}
