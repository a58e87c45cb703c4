// Package deploy holds deployment examples; its tests validate them.
package deploy

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// amtool (Debian's prometheus-alertmanager) accepts the example
// Alertmanager configuration.
func TestAlertmanagerConfig(t *testing.T) {
	amtool, err := exec.LookPath("amtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("amtool not found; .ci/run installs prometheus-alertmanager")
		}
		t.Skip("amtool not found")
	}
	out, err := exec.Command(amtool, "check-config", "alertmanager/alertmanager.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("amtool check-config: %v\n%s", err, out)
	}
}

// Every package the exporter binary is built from is in the Docker build
// context (.dockerignore is an allow-list).
func TestDockerContextHasEveryPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "../cmd/fabric_exporter").Output()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if d, ok := strings.CutPrefix(strings.TrimSpace(l), "!"); ok {
			allowed[strings.TrimSuffix(d, "/")] = true
		}
	}
	const mod = "github.com/fabric-exporter/fabric_exporter/"
	for _, p := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(p, mod)
		if !ok {
			continue
		}
		top, _, _ := strings.Cut(rel, "/")
		if !allowed[top] {
			t.Errorf("package %s is built into the exporter but %s/ is not in .dockerignore's allow-list", p, top)
		}
	}
}
