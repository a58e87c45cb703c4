package kubernetes

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// buildOverlay builds an overlay of the base with the components given
// (directories under components/), as a user would write it, and decodes
// its objects strictly.
func buildOverlay(t *testing.T, components ...string) manifests {
	t.Helper()
	kubectl := testenv.Tool(t, "kubectl")
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(t.TempDir(), "overlay")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	rel := func(p string) string {
		r, err := filepath.Rel(overlay, p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	var comps []string
	for _, c := range components {
		comps = append(comps, rel(filepath.Join(wd, "components", c)))
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [" + rel(wd) + "]\ncomponents: [" + strings.Join(comps, ", ") + "]\n"
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubectl, "kustomize", "--load-restrictor=LoadRestrictionsNone", overlay).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, out)
	}
	var m manifests
	for doc := range strings.SplitSeq(string(out), "\n---\n") {
		if strings.TrimSpace(doc) != "" {
			decodeStrict(t, "overlay", []byte(doc), &m)
		}
	}
	if m.ds == nil {
		t.Fatal("no DaemonSet")
	}
	return m
}

// checkRootExporter fails unless the DaemonSet runs the exporter as uid 0
// with exactly the capabilities add (sorted) on top of nothing, every other
// one dropped, and everything else as tight as in the base: read-only root
// filesystem and mounts, no privilege escalation, not privileged, the
// host's network and PID namespaces, RuntimeDefault seccomp.
func checkRootExporter(t *testing.T, m manifests, add ...corev1.Capability) {
	t.Helper()
	pod := m.ds.Spec.Template.Spec
	if psc := pod.SecurityContext; psc == nil || psc.RunAsUser == nil || *psc.RunAsUser != 0 || psc.RunAsNonRoot == nil || *psc.RunAsNonRoot {
		t.Errorf("pod security context %+v: want uid 0", psc)
	} else if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("seccomp profile %+v: want RuntimeDefault", psc.SeccompProfile)
	}
	if !pod.HostNetwork || !pod.HostPID {
		t.Error("want hostNetwork and hostPID, as in the base")
	}
	sc := pod.Containers[0].SecurityContext
	if got := slices.Sorted(slices.Values(sc.Capabilities.Add)); !slices.Equal(got, add) {
		t.Errorf("capabilities added %v, want %v", got, add)
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || (sc.Privileged != nil && *sc.Privileged) ||
		sc.RunAsNonRoot == nil || *sc.RunAsNonRoot {
		t.Errorf("container security context: %+v", sc)
	}
	for _, vm := range pod.Containers[0].VolumeMounts {
		if !vm.ReadOnly {
			t.Errorf("mount %s is not read-only", vm.MountPath)
		}
	}
}

// Each component builds on the base, alone and with the others, and its
// DaemonSet runs as root with the component's capability added to the
// base's two and nothing else:
//   - pod-resources-access: DAC_OVERRIDE, to connect to the kubelet's
//     root-only pod-resources socket;
//   - ras-pod-network: SYS_ADMIN, to setns into a pod's network namespace
//     and ask NCCL's RAS service on the pod's loopback.
//
// Both run the exporter as uid 0 by idempotent replacements and append
// their own capability, so they compose, in either order.
func TestComponents(t *testing.T) {
	base := []corev1.Capability{"DAC_READ_SEARCH", "SYS_PTRACE"}
	with := func(c ...corev1.Capability) []corev1.Capability {
		return slices.Sorted(slices.Values(append(slices.Clone(base), c...)))
	}
	for _, tc := range []struct {
		components []string
		add        []corev1.Capability
	}{
		{[]string{"pod-resources-access"}, with("DAC_OVERRIDE")},
		{[]string{"ras-pod-network"}, with("SYS_ADMIN")},
		{[]string{"pod-resources-access", "ras-pod-network"}, with("DAC_OVERRIDE", "SYS_ADMIN")},
		{[]string{"ras-pod-network", "pod-resources-access"}, with("DAC_OVERRIDE", "SYS_ADMIN")},
	} {
		t.Run(strings.Join(tc.components, "+"), func(t *testing.T) {
			checkRootExporter(t, buildOverlay(t, tc.components...), tc.add...)
		})
	}
}

// Every directory under components/ is a kustomize Component that
// TestComponents, TestPCIeACSReaderComponent (acs_reader_test.go) or
// TestKernelEventsComponent (kernel_events_test.go) builds.
func TestComponentsTested(t *testing.T) {
	dirs, err := os.ReadDir("components")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range dirs {
		if !d.IsDir() {
			t.Errorf("components/%s is not a directory", d.Name())
			continue
		}
		b, err := os.ReadFile(filepath.Join("components", d.Name(), "kustomization.yaml"))
		if err != nil {
			t.Error(err)
		} else if !strings.Contains(string(b), "\nkind: Component\n") {
			t.Errorf("components/%s/kustomization.yaml is not a kustomize Component", d.Name())
		}
		got = append(got, d.Name())
	}
	if want := []string{"kernel-events", "pcie-acs-reader", "pcie-acs-refresh", "pod-resources-access", "ras-pod-network"}; !slices.Equal(got, want) {
		t.Errorf("components %v; TestComponents, TestPCIeACSReaderComponent and TestKernelEventsComponent build %v", got, want)
	}
}
