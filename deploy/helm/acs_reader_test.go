package helm

import (
	"os/exec"
	"strings"
	"testing"
)

// pcieACSReader renders what the base with the kustomize components
// builds: enabled the init container of components/pcie-acs-reader,
// refreshInterval 10m the sidecar of components/pcie-acs-refresh too, and
// both with the exporter's privilege values and their components;
// refreshInterval alone changes nothing.
func TestHelmPCIeACSReaderMatchesComponents(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		components   []string
	}{
		{"enabled", "pcieACSReader:\n  enabled: true\n", []string{"components/pcie-acs-reader"}},
		{"refreshInterval", "pcieACSReader:\n  enabled: true\n  refreshInterval: 10m\n",
			[]string{"components/pcie-acs-reader", "components/pcie-acs-refresh"}},
		{"refreshInterval without enabled", "pcieACSReader:\n  refreshInterval: 10m\n", nil},
		{"with every privilege value", "podResources:\n  access: true\nncclRAS:\n  enterPodNetwork: true\npcieACSReader:\n  enabled: true\n  refreshInterval: 10m\n",
			[]string{"components/pod-resources-access", "components/ras-pod-network", "components/pcie-acs-reader", "components/pcie-acs-refresh"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sameObjects(t, helmTemplate(t, tc.values), kustomize(t, tc.components...))
		})
	}
}

func TestHelmLintPCIeACSReader(t *testing.T) {
	h := helmBin(t)
	args := []string{"lint", "--strict", chart, "--set", "pcieACSReader.enabled=true,pcieACSReader.refreshInterval=5m,image.pullPolicy=IfNotPresent"}
	if out, err := exec.Command(h, args...).CombinedOutput(); err != nil {
		t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
