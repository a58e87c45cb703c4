package kubernetes

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

const kmsgFIFO = "/run/fabric-exporter/kmsg"

// checkPodValid fails where the API server would refuse the pod spec: a
// volume named twice, a path mounted twice in one container, a mount of a
// volume the pod lacks, a privileged container that may not escalate.
func checkPodValid(t *testing.T, pod corev1.PodSpec) {
	t.Helper()
	vols := map[string]bool{}
	for _, v := range pod.Volumes {
		if vols[v.Name] {
			t.Errorf("volume %s twice", v.Name)
		}
		vols[v.Name] = true
	}
	for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
		paths := map[string]bool{}
		for _, m := range c.VolumeMounts {
			if paths[m.MountPath] {
				t.Errorf("%s mounts %s twice", c.Name, m.MountPath)
			}
			paths[m.MountPath] = true
			if !vols[m.Name] {
				t.Errorf("%s mounts volume %s, which the pod lacks", c.Name, m.Name)
			}
		}
		if sc := c.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
			t.Errorf("%s: privileged with allowPrivilegeEscalation false (refused by validation)", c.Name)
		}
	}
}

// withoutKernelEvents takes out of pod what components/kernel-events adds:
// the relay container, the /dev/kmsg volume, the exporter's two flags and,
// where the pod without it has none, the in-memory volume and its mount.
func withoutKernelEvents(pod corev1.PodSpec, sharedRun bool) corev1.PodSpec {
	p := *pod.DeepCopy()
	p.Containers = slices.DeleteFunc(p.Containers, func(c corev1.Container) bool { return c.Name == "kmsg-relay" })
	p.Volumes = slices.DeleteFunc(p.Volumes, func(v corev1.Volume) bool { return v.Name == "kmsg" || !sharedRun && v.Name == "run" })
	exp := &p.Containers[0]
	exp.Args = slices.DeleteFunc(exp.Args, func(a string) bool {
		return a == "--collector.kernel-events" || a == "--collector.kernel-events.path="+kmsgFIFO
	})
	exp.VolumeMounts = slices.DeleteFunc(exp.VolumeMounts, func(m corev1.VolumeMount) bool { return !sharedRun && m.Name == "run" })
	return p
}

// components/kernel-events builds alone and with every other component,
// before or after them: it adds the privileged relay sidecar (the only
// privileged container), the FIFO's flags and the in-memory volume,
// read-only, to the exporter, shares that volume with pcie-acs-reader, and
// changes nothing else: the exporter's privileges stay those of the same
// overlay without it (the base's, where no other component changes them).
func TestKernelEventsComponent(t *testing.T) {
	for _, others := range [][]string{
		nil,
		{"pod-resources-access"},
		{"ras-pod-network"},
		{"pcie-acs-reader"},
		{"pcie-acs-reader", "pcie-acs-refresh"},
		{"pod-resources-access", "ras-pod-network", "pcie-acs-reader", "pcie-acs-refresh"},
	} {
		without := buildOverlay(t, others...).ds.Spec.Template.Spec
		sharedRun := slices.Contains(others, "pcie-acs-reader")
		for _, comps := range [][]string{append(slices.Clone(others), "kernel-events"), append([]string{"kernel-events"}, others...)} {
			if len(others) == 0 && comps[0] != "kernel-events" {
				continue
			}
			t.Run(strings.Join(comps, "+"), func(t *testing.T) {
				pod := buildOverlay(t, comps...).ds.Spec.Template.Spec
				checkPodValid(t, pod)
				exp := pod.Containers[0]
				if exp.Name != "fabric-exporter" {
					t.Fatalf("containers[0] is %s", exp.Name)
				}
				if !reflect.DeepEqual(exp.SecurityContext, without.Containers[0].SecurityContext) || !reflect.DeepEqual(pod.SecurityContext, without.SecurityContext) ||
					pod.HostNetwork != without.HostNetwork || pod.HostPID != without.HostPID || pod.HostIPC != without.HostIPC {
					t.Errorf("the exporter's privileges changed:\n%+v\n%+v\nwithout the component:\n%+v\n%+v", exp.SecurityContext, pod.SecurityContext,
						without.Containers[0].SecurityContext, without.SecurityContext)
				}
				if len(others) == 0 {
					checkBaseExporter(t, exp, pod)
				}
				n := 0
				for _, a := range exp.Args {
					if a == "--collector.kernel-events" || a == "--collector.kernel-events.path="+kmsgFIFO {
						n++
					}
				}
				if n != 2 {
					t.Errorf("exporter args %q: want --collector.kernel-events and --collector.kernel-events.path=%s once each", exp.Args, kmsgFIFO)
				}
				for _, m := range exp.VolumeMounts {
					if !m.ReadOnly {
						t.Errorf("exporter mount %s is not read-only", m.MountPath)
					}
					if m.Name == "kmsg" {
						t.Error("the exporter mounts /dev/kmsg")
					}
				}
				if !slices.ContainsFunc(exp.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "run" && m.MountPath+"/kmsg" == kmsgFIFO }) {
					t.Errorf("exporter mounts %+v: want the volume run at /run/fabric-exporter", exp.VolumeMounts)
				}
				var relay *corev1.Container
				for i, c := range slices.Concat(pod.InitContainers, pod.Containers) {
					if sc := c.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
						if c.Name != "kmsg-relay" {
							t.Errorf("%s is privileged too", c.Name)
						}
					}
					if c.Name == "kmsg-relay" {
						if relay != nil || i < len(pod.InitContainers) {
							t.Fatal("kmsg-relay twice, or as an init container")
						}
						relay = &pod.Containers[i-len(pod.InitContainers)]
					}
				}
				if relay == nil {
					t.Fatal("no kmsg-relay container")
				}
				checkRelayContainer(t, *relay, exp.Image, pod.Volumes)
				nRun := 0
				for _, v := range pod.Volumes {
					if v.Name == "run" {
						nRun++
						if v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory {
							t.Errorf("volume run %+v: want an emptyDir in memory", v.VolumeSource)
						}
					}
				}
				if nRun != 1 {
					t.Errorf("%d volumes named run", nRun)
				}
				if got := withoutKernelEvents(pod, sharedRun); !reflect.DeepEqual(got, without) {
					t.Errorf("the component changes more than it should: without what it adds the pod is\n%+v\nwant\n%+v", got, without)
				}
			})
		}
	}
}

// checkBaseExporter: the exporter of the base, uid 65534 and the two
// capabilities, not privileged.
func checkBaseExporter(t *testing.T, exp corev1.Container, pod corev1.PodSpec) {
	t.Helper()
	sc := exp.SecurityContext
	if psc := pod.SecurityContext; psc == nil || psc.RunAsUser == nil || *psc.RunAsUser != 65534 || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("pod security context %+v: want the base's uid 65534", psc)
	}
	if got := slices.Sorted(slices.Values(sc.Capabilities.Add)); !slices.Equal(got, []corev1.Capability{"DAC_READ_SEARCH", "SYS_PTRACE"}) ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.Privileged == nil || *sc.Privileged ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("exporter security context %+v: want the base's", sc)
	}
}

// checkRelayContainer fails unless c runs `fabric_exporter relay-kmsg`
// into the FIFO as uid 0, privileged, with a read-only root filesystem, no
// port, small resources, the host's /dev/kmsg read-only (a CharDevice
// hostPath) and the in-memory volume writable.
func checkRelayContainer(t *testing.T, c corev1.Container, image string, vols []corev1.Volume) {
	t.Helper()
	if want := []string{"relay-kmsg", "--output=" + kmsgFIFO}; !slices.Equal(c.Args, want) {
		t.Errorf("relay args %q, want %q", c.Args, want)
	}
	if c.Image != image {
		t.Errorf("relay image %q, the exporter's is %q", c.Image, image)
	}
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || !*sc.Privileged || sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.RunAsNonRoot == nil || *sc.RunAsNonRoot ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("relay security context %+v: want privileged, uid 0, read-only root filesystem", sc)
	}
	if len(c.Ports) != 0 {
		t.Errorf("relay ports %v", c.Ports)
	}
	if c.Resources.Limits.Memory().Cmp(*c.Resources.Requests.Memory()) < 0 || c.Resources.Limits.Memory().Value() > 64<<20 ||
		c.Resources.Limits.Cpu().MilliValue() == 0 || c.Resources.Limits.Cpu().MilliValue() > 200 {
		t.Errorf("relay resources %+v: want small limits", c.Resources)
	}
	byName := map[string]corev1.Volume{}
	for _, v := range vols {
		byName[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	kmsg := byName["kmsg"].HostPath
	if len(mounts) != 2 || mounts["kmsg"].MountPath != "/dev/kmsg" || !mounts["kmsg"].ReadOnly ||
		kmsg == nil || kmsg.Path != "/dev/kmsg" || kmsg.Type == nil || *kmsg.Type != corev1.HostPathCharDev ||
		mounts["run"].MountPath != "/run/fabric-exporter" || mounts["run"].ReadOnly {
		t.Errorf("relay mounts %+v (kmsg volume %+v): want the host's /dev/kmsg read-only and the volume run", c.VolumeMounts, kmsg)
	}
}
