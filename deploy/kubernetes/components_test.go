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

// An overlay of the base with components/pod-resources-access builds, and
// its DaemonSet runs as root with DAC_OVERRIDE added to the base's two
// capabilities, everything else dropped, the pod-resources directory still
// read-only.
func TestPodResourcesAccessComponent(t *testing.T) {
	kubectl := testenv.Tool(t, "kubectl")
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(t.TempDir(), "overlay")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	base, _ := filepath.Rel(overlay, wd)
	comp, _ := filepath.Rel(overlay, filepath.Join(wd, "components", "pod-resources-access"))
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [" + base + "]\ncomponents: [" + comp + "]\n"
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
	pod := m.ds.Spec.Template.Spec
	if psc := pod.SecurityContext; psc == nil || psc.RunAsUser == nil || *psc.RunAsUser != 0 || psc.RunAsNonRoot == nil || *psc.RunAsNonRoot {
		t.Errorf("pod security context %+v: want uid 0", psc)
	}
	sc := pod.Containers[0].SecurityContext
	if add := slices.Sorted(slices.Values(sc.Capabilities.Add)); !slices.Equal(add, []corev1.Capability{"DAC_OVERRIDE", "DAC_READ_SEARCH", "SYS_PTRACE"}) {
		t.Errorf("capabilities added %v", add)
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || (sc.Privileged != nil && *sc.Privileged) {
		t.Errorf("container security context loosened: %+v", sc)
	}
	for _, vm := range pod.Containers[0].VolumeMounts {
		if !vm.ReadOnly {
			t.Errorf("mount %s is not read-only", vm.MountPath)
		}
	}
}
