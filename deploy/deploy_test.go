// Package deploy holds deployment examples; its tests validate them.
package deploy

import (
	"os"
	"os/exec"
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
