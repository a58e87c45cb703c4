package alerts

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

const renderedPath = RulesFile

// The committed rule files are what the templates, dcgm.go and config.yml
// render to. The test only compares; `make rules` (go run ./alerts/gen)
// writes them.
func TestGeneratedUpToDate(t *testing.T) {
	files, err := Generated(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("%d generated files, want %s and %s", len(files), RulesFile, DCGMCompatFile)
	}
	for name, got := range files {
		want, err := os.ReadFile(name)
		if err != nil {
			t.Errorf("%v: run make rules", err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is out of date: run make rules", name)
		}
	}
}

// promtool check rules on the rendered file (this also parses the
// annotation templates), then promtool's unit tests in tests/ (a firing and
// a healthy case per alert). promtool compares annotations too, so the unit
// tests run against a copy of the rules without annotations;
// TestAlertAnnotations checks those.
func TestPromtool(t *testing.T) {
	promtool := testenv.Tool(t, "promtool")
	if out, err := exec.Command(promtool, "check", "rules", renderedPath).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	dir := t.TempDir()
	stripped, err := stripAnnotations(renderedPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, renderedPath), stripped, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, _ := filepath.Glob("tests/*_test.yml")
	if len(tests) == 0 {
		t.Fatal("no rule tests")
	}
	var args []string
	for _, f := range tests {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.Base(f))
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, dst)
	}
	out, err := exec.Command(promtool, append([]string{"test", "rules"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "SUCCESS"); n != len(tests) {
		t.Errorf("promtool test rules: %d of %d files passed\n%s", n, len(tests), out)
	}

	// tests/annotations/: annotations built from queries (the reason of
	// FabricCollectorFailing, the paused priorities of PFCStorm), checked
	// against the rules with their annotations.
	adir := t.TempDir()
	rendered, err := os.ReadFile(renderedPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(adir, renderedPath), rendered, 0o644); err != nil {
		t.Fatal(err)
	}
	atests, _ := filepath.Glob("tests/annotations/*_test.yml")
	if len(atests) == 0 {
		t.Fatal("no annotation tests")
	}
	args = args[:0]
	for _, f := range atests {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(adir, filepath.Base(f))
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, dst)
	}
	out, err = exec.Command(promtool, append([]string{"test", "rules"}, args...)...).CombinedOutput()
	if err != nil || strings.Count(string(out), "SUCCESS") != len(atests) {
		t.Fatalf("promtool test rules (annotations): %v\n%s", err, out)
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record      string            `yaml:"record,omitempty"`
			Alert       string            `yaml:"alert,omitempty"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for,omitempty"`
			KeepFiring  string            `yaml:"keep_firing_for,omitempty"`
			Labels      map[string]string `yaml:"labels,omitempty"`
			Annotations map[string]string `yaml:"annotations,omitempty"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readRules(path string) (ruleFile, error) {
	var rf ruleFile
	b, err := os.ReadFile(path)
	if err != nil {
		return rf, err
	}
	return rf, yaml.Unmarshal(b, &rf)
}

// renderRules renders c and parses the rules file it makes.
func renderRules(t *testing.T, c Config) ruleFile {
	t.Helper()
	b, err := Render(c)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	return rf
}

func stripAnnotations(path string) ([]byte, error) {
	rf, err := readRules(path)
	if err != nil {
		return nil, err
	}
	for g := range rf.Groups {
		for r := range rf.Groups[g].Rules {
			rf.Groups[g].Rules[r].Annotations = nil
		}
	}
	return yaml.Marshal(rf)
}

// runbookPath is the runbook document, relative to this package.
const runbookPath = "../docs/runbooks.md"

// githubAnchor is the anchor GitHub gives a Markdown heading: lower case,
// spaces to '-', every other character but letters, digits, '-' and '_'
// dropped.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// runbookSections returns the anchors of the level-2 headings ("## X",
// one per alert) of a runbook document, outside code blocks.
func runbookSections(doc string) map[string]bool {
	sections := map[string]bool{}
	fence := false
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, "```") {
			fence = !fence
		}
		if h, ok := strings.CutPrefix(l, "## "); ok && !fence {
			sections[githubAnchor(h)] = true
		}
	}
	return sections
}

func TestGitHubAnchor(t *testing.T) {
	for h, want := range map[string]string{
		"NCCLSocketFallback":         "ncclsocketfallback",
		"Time to page":               "time-to-page",
		"`nccl-inspector`":           "nccl-inspector",
		"Try it: the GPU fire drill": "try-it-the-gpu-fire-drill",
		"snake_case (v2.1)":          "snake_case-v21",
	} {
		if got := githubAnchor(h); got != want {
			t.Errorf("githubAnchor(%q) = %q, want %q", h, got, want)
		}
	}
}

// Every alert the issues name exists, has a severity, a summary, a
// description and a runbook_url that points at its section of
// docs/runbooks.md (docs/runbooks.md#<alert in lower case>), which exists;
// docs/runbooks.md has no section for an alert that does not exist; every
// alert has a promtool test.
func TestAlertAnnotations(t *testing.T) {
	rf, err := readRules(renderedPath)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(runbookPath)
	if err != nil {
		t.Fatal(err)
	}
	sections := runbookSections(string(doc))
	if len(sections) == 0 {
		t.Fatalf("%s has no '## ' sections", runbookPath)
	}
	var tests []byte
	files, _ := filepath.Glob("tests/*_test.yml")
	for _, f := range files {
		b, _ := os.ReadFile(f)
		tests = append(tests, b...)
	}
	want := map[string]bool{}
	for _, a := range []string{"NCCLSocketFallback", "RailTCPFallbackSuspected", "NonRailNICTraffic", "RDMADevicesMissingInContainer",
		"PFCStorm", "RoCERetransmissions", "RoCECNPIgnored", "RailLinkDown", "RailLinkDegraded", "RailLinkFlapping", "RailImbalance",
		"GPUActivityMissing", "CrossNUMAPlacement", "FabricCollectorFailing", "FabricExporterDown", "PodWithoutRDMADevice"} {
		want[a] = true
	}
	linked := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			delete(want, r.Alert)
			if s := r.Labels["severity"]; s != "page" && s != "warning" {
				t.Errorf("%s: severity %q", r.Alert, s)
			}
			for _, k := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[k]) == "" {
					t.Errorf("%s: no %s", r.Alert, k)
				}
			}
			anchor := strings.ToLower(r.Alert)
			linked[anchor] = true
			if !strings.HasSuffix(r.Annotations["runbook_url"], "docs/runbooks.md#"+anchor) {
				t.Errorf("%s: runbook_url %q, want …docs/runbooks.md#%s", r.Alert, r.Annotations["runbook_url"], anchor)
			}
			if !sections[anchor] {
				t.Errorf("%s: %s has no section '## %s' (anchor #%s)", r.Alert, runbookPath, r.Alert, anchor)
			}
			if n := strings.Count(string(tests), "alertname: "+r.Alert+"\n"); n < 2 {
				t.Errorf("%s: %d promtool cases, want a firing and a healthy one", r.Alert, n)
			}
		}
	}
	for a := range want {
		t.Errorf("alert %s is missing", a)
	}
	for s := range sections {
		if !linked[s] {
			t.Errorf("%s: section #%s is the runbook of no alert (stale?)", runbookPath, s)
		}
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

var jobMatcher = regexp.MustCompile(`\bjob\s*(=|!=|=~|!~)`)

// The rules select by metric name: no expression but FabricExporterDown's
// names a job, and exporterSelector lands in that one (issue 15: rules that
// only worked under job="fabric").
func TestOnlyExporterDownSelectsJob(t *testing.T) {
	c := DefaultConfig()
	c.ExporterSelector = `job="serviceMonitor/monitoring/fabric-exporter/0"`
	c.SGLangSelector = ""
	rf := renderRules(t, c)
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			n++
			name := r.Alert + r.Record
			if r.Alert == "FabricExporterDown" {
				if want := "up{" + c.ExporterSelector + "} == 0"; strings.TrimSpace(r.Expr) != want {
					t.Errorf("FabricExporterDown: %q, want %q", r.Expr, want)
				}
				continue
			}
			if jobMatcher.MatchString(r.Expr) {
				t.Errorf("%s selects by job: %s", name, r.Expr)
			}
			if strings.Contains(r.Expr, "{}") {
				t.Errorf("%s has an empty selector: %s", name, r.Expr)
			}
		}
	}
	if n < 40 {
		t.Errorf("only %d rules", n)
	}
	c.SGLangSelector = `job="sglang"`
	if b, _ := Render(c); !strings.Contains(string(b), `sglang:prompt_tokens_total{job="sglang"}[`) {
		t.Error("sglangSelector not applied")
	}
	if _, err := ParseConfig([]byte("exporterSelector: ' '\nsglangSelector: ''\n")); err == nil {
		t.Error("empty exporterSelector accepted")
	}
}

// FuzzParseConfig: any config text is rejected or renders rules; no panic.
func FuzzParseConfig(f *testing.F) {
	f.Add(defaultConfig)
	f.Add([]byte("exporterSelector: x\n"))
	f.Add([]byte("for: {short: 1s}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		if _, err := Render(c); err != nil {
			t.Fatalf("a config that parses does not render: %v", err)
		}
	})
}
