package alerts

import (
	"path"
	"strings"
	"testing"
)

// Each file of rules/ starts with a comment saying what it covers and holds
// whole groups; the first is rendered right after the header's groups:.
func TestRuleFilesPerConcern(t *testing.T) {
	names := ruleFiles()
	if len(names) < 2 {
		t.Fatalf("rule templates %v", names)
	}
	for _, name := range names {
		lines := strings.Split(ruleSource(name), "\n")
		if !strings.HasPrefix(lines[0], "# ") {
			t.Errorf("%s does not start with a comment saying what it covers", path.Base(name))
		}
		for _, l := range lines {
			if strings.HasPrefix(l, "#") {
				continue
			}
			if !strings.HasPrefix(l, "- name: fabric_exporter.") {
				t.Errorf("%s: first line after its comment is %q, want a group", path.Base(name), l)
			}
			break
		}
	}
	if !strings.HasSuffix(rulesHeader, "\ngroups:\n") {
		t.Error("the header does not end with groups:")
	}
}
