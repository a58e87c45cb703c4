package alerts

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// noKeepFiring are the pages without keep_firing_for, each with the reason
// in a comment above it in the template.
var noKeepFiring = []string{"PCIeUncorrectableErrors"}

// Every page has keep_firing_for: for.keepFiring (one incident, one page),
// but those of noKeepFiring; no warning has one.
func TestPagesKeepFiring(t *testing.T) {
	c := DefaultConfig()
	c.For.KeepFiring = "42s"
	rf := renderRules(t, c)
	pages := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			want := ""
			if r.Labels["severity"] == "page" {
				pages++
				if !slices.Contains(noKeepFiring, r.Alert) {
					want = "42s"
				}
			}
			if r.KeepFiring != want {
				t.Errorf("%s (severity %s): keep_firing_for %q, want %q", r.Alert, r.Labels["severity"], r.KeepFiring, want)
			}
		}
	}
	if pages < 8 {
		t.Errorf("only %d pages", pages)
	}
	for _, a := range noKeepFiring {
		i := strings.Index(rulesTemplate, "  - alert: "+a+"\n")
		if i < 0 || !strings.Contains(rulesTemplate[max(0, i-600):i], "No keep_firing_for") {
			t.Errorf("%s has no keep_firing_for and no comment above it saying why", a)
		}
	}
}

// for.keepFiring and causeLatchWindow are validated: durations, the latch
// longer than the gap a page bridges.
func TestKeepFiringConfig(t *testing.T) {
	for _, tc := range []struct{ keep, latch, err string }{
		{"5m", "10m", ""},
		{"0s", "1m", ""},
		{"", "10m", "for.keepFiring"},
		{"x", "10m", "for.keepFiring"},
		{"5m", "5m", "causeLatchWindow"},
		{"5m", "1m", "causeLatchWindow"},
		{"5m", "", "causeLatchWindow"},
	} {
		b := strings.Replace(string(defaultConfig), "  keepFiring: 5m\n", "  keepFiring: '"+tc.keep+"'\n", 1)
		b = strings.Replace(b, "causeLatchWindow: 10m\n", "causeLatchWindow: '"+tc.latch+"'\n", 1)
		if b == string(defaultConfig) {
			t.Fatal("config.yml has no keepFiring: 5m or causeLatchWindow: 10m")
		}
		_, err := ParseConfig([]byte(b))
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("keepFiring %q, causeLatchWindow %q: err = %v, want %q", tc.keep, tc.latch, err, tc.err)
		}
	}
	c := DefaultConfig()
	c.CauseLatchWindow = "17m"
	b, err := Render(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range []string{"pid:fabric_nccl_fallback_cause:latched", "pid:fabric_process_rdma_fallback_cause:latched"} {
		if n := strings.Count(string(b), "last_over_time("+rec+"[17m])"); n != 2 {
			t.Errorf("%s reads itself over causeLatchWindow %d times, want 2", rec, n)
		}
	}
}

// The tests of tests/incident_*_test.yml can fail: with for.keepFiring 0s
// the failed-scrape tests fail for every page with keep_firing_for (and
// PCIeUncorrectableErrors, which has none, still passes); with a latch that
// holds nothing the cause tests fail for both alerts that carry a cause.
func TestIncidentTestsFailWithout(t *testing.T) {
	promtool := testenv.Tool(t, "promtool")
	run := func(c Config, test string) string {
		t.Helper()
		dir := t.TempDir()
		b, err := Render(c)
		if err != nil {
			t.Fatal(err)
		}
		full := filepath.Join(dir, "full.yml")
		if err := os.WriteFile(full, b, 0o644); err != nil {
			t.Fatal(err)
		}
		stripped, err := stripAnnotations(full)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, renderedPath), stripped, 0o644); err != nil {
			t.Fatal(err)
		}
		tb, err := os.ReadFile(test)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(test)), tb, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(promtool, "test", "rules", filepath.Base(test))
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("%s passes with %+v", test, c.For)
		}
		return string(out)
	}
	failed := func(out string) map[string]bool {
		m := map[string]bool{}
		for _, s := range regexp.MustCompile(`(?m)^\s*alertname: (\w+), time:`).FindAllStringSubmatch(out, -1) {
			m[s[1]] = true
		}
		for _, s := range regexp.MustCompile(`(?m)^\s*expr: "([^"]+)", time:`).FindAllStringSubmatch(out, -1) {
			m[s[1]] = true
		}
		return m
	}

	c := DefaultConfig()
	c.For.KeepFiring = "0s"
	got := failed(run(c, "tests/incident_gap_test.yml"))
	for _, a := range []string{"NCCLSocketFallback", "NCCLInitFailed", "RailLinkDown", "NCCLRankMissing", "NCCLAsyncError", "RoCERetransmissions", "NCCLCollectiveStall"} {
		if !got[a] {
			t.Errorf("tests/incident_gap_test.yml: %s passes without keep_firing_for", a)
		}
	}
	if got["PCIeUncorrectableErrors"] {
		t.Error("tests/incident_gap_test.yml: PCIeUncorrectableErrors fails without keep_firing_for (it has none)")
	}

	c = DefaultConfig()
	c.CauseLatchWindow = "1s" // shorter than an evaluation: the latch holds nothing (Render does not validate)
	got = failed(run(c, "tests/incident_cause_test.yml"))
	for _, a := range []string{"NCCLSocketFallback", "NCCLInitFailed", "pid:fabric_nccl_fallback_cause:latched", "pid:fabric_process_rdma_fallback_cause:latched"} {
		if !got[a] {
			t.Errorf("tests/incident_cause_test.yml: %s passes without the latch", a)
		}
	}
}
