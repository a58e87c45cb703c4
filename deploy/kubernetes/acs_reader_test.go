package kubernetes

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

const acsFile = "/run/fabric-exporter/pcie-acs"

// checkACSReaderContainer fails unless c runs `fabric_exporter dump-acs`
// into acsFile (with the extra args given) as uid 0 with SYS_ADMIN and
// the binary's two file capabilities, everything else dropped, a read-only
// root filesystem, no privilege escalation, not privileged, the host's
// /sys read-only and only the ACS volume writable.
func checkACSReaderContainer(t *testing.T, c corev1.Container, image string, extra ...string) {
	t.Helper()
	if want := append([]string{"dump-acs", "--output=" + acsFile}, extra...); !slices.Equal(c.Args, want) {
		t.Errorf("%s: args %q, want %q", c.Name, c.Args, want)
	}
	if c.Image != image {
		t.Errorf("%s: image %q, the exporter's is %q", c.Name, c.Image, image)
	}
	sc := c.SecurityContext
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.RunAsNonRoot == nil || *sc.RunAsNonRoot {
		t.Fatalf("%s: security context %+v: want uid 0", c.Name, sc)
	}
	if got := slices.Sorted(slices.Values(sc.Capabilities.Add)); !slices.Equal(got, []corev1.Capability{"DAC_READ_SEARCH", "SYS_ADMIN", "SYS_PTRACE"}) {
		t.Errorf("%s: capabilities added %v", c.Name, got)
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Privileged == nil || *sc.Privileged {
		t.Errorf("%s: security context %+v", c.Name, sc)
	}
	if len(c.Ports) != 0 {
		t.Errorf("%s: ports %v", c.Name, c.Ports)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	if len(mounts) != 2 || mounts["sys"].MountPath != "/host/sys" || !mounts["sys"].ReadOnly ||
		mounts["run"].MountPath != "/run/fabric-exporter" || mounts["run"].ReadOnly {
		t.Errorf("%s: mounts %+v: want /sys read-only and the ACS volume", c.Name, c.VolumeMounts)
	}
}

// components/pcie-acs-reader: an init container reads ACS with SYS_ADMIN
// into an in-memory emptyDir, the exporter reads the file with the volume
// read-only and keeps its own privileges; components/pcie-acs-refresh adds
// the same reader as a sidecar every 10 minutes. Both compose with the
// other components (which change only the exporter, containers/0).
func TestPCIeACSReaderComponent(t *testing.T) {
	for _, tc := range []struct {
		components []string
		refresh    bool
		root       bool
	}{
		{[]string{"pcie-acs-reader"}, false, false},
		{[]string{"pcie-acs-reader", "pcie-acs-refresh"}, true, false},
		{[]string{"pod-resources-access", "ras-pod-network", "pcie-acs-reader", "pcie-acs-refresh"}, true, true},
	} {
		t.Run(strings.Join(tc.components, "+"), func(t *testing.T) {
			m := buildOverlay(t, tc.components...)
			pod := m.ds.Spec.Template.Spec
			exp := pod.Containers[0]
			if exp.Name != "fabric-exporter" {
				t.Fatalf("containers[0] is %s", exp.Name)
			}
			if !slices.Contains(exp.Args, "--collector.pcie.acs-file="+acsFile) {
				t.Errorf("exporter args %q lack --collector.pcie.acs-file=%s", exp.Args, acsFile)
			}
			for _, vm := range exp.VolumeMounts {
				if !vm.ReadOnly {
					t.Errorf("exporter mount %s is not read-only", vm.MountPath)
				}
				if vm.Name == "run" && vm.MountPath+"/pcie-acs" != acsFile {
					t.Errorf("exporter mounts the ACS volume at %s", vm.MountPath)
				}
			}
			if !tc.root {
				if got := slices.Sorted(slices.Values(exp.SecurityContext.Capabilities.Add)); !slices.Equal(got, []corev1.Capability{"DAC_READ_SEARCH", "SYS_PTRACE"}) {
					t.Errorf("exporter capabilities %v: the component must not add any", got)
				}
				if psc := pod.SecurityContext; psc.RunAsUser == nil || *psc.RunAsUser != 65534 {
					t.Errorf("pod runs as %v, want the base's 65534", psc.RunAsUser)
				}
			}
			if len(pod.InitContainers) != 1 || pod.InitContainers[0].Name != "pcie-acs-reader" {
				t.Fatalf("init containers %v", pod.InitContainers)
			}
			checkACSReaderContainer(t, pod.InitContainers[0], exp.Image)
			if want := 1 + map[bool]int{true: 1}[tc.refresh]; len(pod.Containers) != want {
				t.Fatalf("%d containers, want %d", len(pod.Containers), want)
			}
			if tc.refresh {
				if pod.Containers[1].Name != "pcie-acs-refresh" {
					t.Fatalf("containers[1] is %s", pod.Containers[1].Name)
				}
				checkACSReaderContainer(t, pod.Containers[1], exp.Image, "--interval=10m")
			}
			n := 0
			for _, v := range pod.Volumes {
				if v.Name == "run" {
					n++
					if v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory {
						t.Errorf("ACS volume %+v: want an emptyDir in memory", v.VolumeSource)
					}
				}
			}
			if n != 1 {
				t.Errorf("%d ACS volumes", n)
			}
		})
	}
}
