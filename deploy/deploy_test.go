// Package deploy holds deployment examples; its tests validate them.
package deploy

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// amtool (Debian's prometheus-alertmanager) accepts the example
// Alertmanager configuration.
func TestAlertmanagerConfig(t *testing.T) {
	amtool := testenv.Tool(t, "amtool")
	out, err := exec.Command(amtool, "check-config", "alertmanager/alertmanager.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("amtool check-config: %v\n%s", err, out)
	}
}

// The example routing fits the shipped alerts: every alert reaches the
// receiver of its severity (amtool's routing test), and every alert name an
// inhibit rule matches is a shipped alert.
func TestAlertmanagerRoutesShippedAlerts(t *testing.T) {
	amtool := testenv.Tool(t, "amtool")
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert  string            `yaml:"alert"`
				Labels map[string]string `yaml:"labels"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	b, err := os.ReadFile("../alerts/fabric-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	alerts := map[string]bool{}
	receiver := map[string]string{"page": "pager", "warning": "team-chat"}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts[r.Alert] = true
			want := receiver[r.Labels["severity"]]
			out, err := exec.Command(amtool, "config", "routes", "test", "--config.file=alertmanager/alertmanager.yml",
				"--verify.receivers="+want, "alertname="+r.Alert, "severity="+r.Labels["severity"], "instance=n1", "rail=mlx5_0").CombinedOutput()
			if err != nil {
				t.Errorf("%s (severity %s) does not route to %s: %v\n%s", r.Alert, r.Labels["severity"], want, err, out)
			}
		}
	}
	if len(alerts) < 15 {
		t.Fatalf("only %d alerts in the rule file", len(alerts))
	}
	var am struct {
		InhibitRules []struct {
			Source []string `yaml:"source_matchers"`
			Target []string `yaml:"target_matchers"`
		} `yaml:"inhibit_rules"`
	}
	b, err = os.ReadFile("alertmanager/alertmanager.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &am); err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`^alertname=~?"([^"]+)"$`)
	for _, ir := range am.InhibitRules {
		for _, m := range append(ir.Source, ir.Target...) {
			sm := name.FindStringSubmatch(m)
			if sm == nil {
				continue
			}
			for _, a := range strings.Split(sm[1], "|") {
				if !alerts[a] {
					t.Errorf("inhibit rule matcher %s: no alert %s in the rules", m, a)
				}
			}
		}
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
