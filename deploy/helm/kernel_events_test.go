package helm

import (
	"os/exec"
	"strings"
	"testing"
)

// kernelEvents renders what the base with components/kernel-events
// builds: enabled alone, with the ACS reader and its sidecar (the two share
// the in-memory volume), and with every privilege value; false, the
// default, renders the base.
func TestHelmKernelEventsMatchesComponent(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		components   []string
	}{
		{"enabled", "kernelEvents:\n  enabled: true\n", []string{"components/kernel-events"}},
		{"disabled", "kernelEvents:\n  enabled: false\n", nil},
		{"with pcieACSReader", "pcieACSReader:\n  enabled: true\n  refreshInterval: 10m\nkernelEvents:\n  enabled: true\n",
			[]string{"components/pcie-acs-reader", "components/pcie-acs-refresh", "components/kernel-events"}},
		{"with every privilege value", "podResources:\n  access: true\nncclRAS:\n  enterPodNetwork: true\npcieACSReader:\n  enabled: true\nkernelEvents:\n  enabled: true\n",
			[]string{"components/pod-resources-access", "components/ras-pod-network", "components/pcie-acs-reader", "components/kernel-events"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sameObjects(t, helmTemplate(t, tc.values), kustomize(t, tc.components...))
		})
	}
}

func TestHelmLintKernelEvents(t *testing.T) {
	h := helmBin(t)
	args := []string{"lint", "--strict", chart, "--set", "kernelEvents.enabled=true,pcieACSReader.enabled=true,image.pullPolicy=IfNotPresent"}
	if out, err := exec.Command(h, args...).CombinedOutput(); err != nil {
		t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
