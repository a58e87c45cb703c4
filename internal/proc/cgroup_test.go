package proc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

const (
	cid1  = "5734f5e6da28ef2a7d30683d72d881d34cc20c195221ed1f200ac9d5a2ffd388"
	cid2  = "b7813833eb092b66317b20e88d6d7b56cac5643cf1ac9aa8aa70812711bde274"
	uid1  = "8f4c2a1e-6b3d-4e59-9a7c-1d2e3f4a5b6c"
	uid1u = "8f4c2a1e_6b3d_4e59_9a7c_1d2e3f4a5b6c"
	// A static pod's UID: the kubelet's 32-hex hash of its manifest.
	staticUID = "0c1d3b5e7a9f2468ace013579bdf2468"
)

// A cgroup v1 host (Kubernetes with the cgroupfs driver and containerd): one
// line per hierarchy, in the order and with the controllers a 5.x kernel
// prints; the hierarchies without a kubepods path are those the kubelet does
// not manage.
const cgroupV1Kubepods = `12:rdma:/
11:hugetlb:/kubepods/burstable/pod` + uid1 + `/` + cid1 + `
10:devices:/kubepods/burstable/pod` + uid1 + `/` + cid1 + `
9:cpu,cpuacct:/kubepods/burstable/pod` + uid1 + `/` + cid1 + `
8:perf_event:/kubepods/burstable/pod` + uid1 + `/` + cid1 + `
7:pids:/kubepods/burstable/pod` + uid1 + `/` + cid1 + `
6:net_cls,net_prio:/kubepods/burstable/pod` + uid1 + `/` + cid1 + `
5:cpuset:/kubepods/burstable/pod` + uid1 + `/` + cid1 + `
4:memory:/kubepods/burstable/pod` + uid1 + `/` + cid1 + `
3:freezer:/kubepods/burstable/pod` + uid1 + `/` + cid1 + `
2:blkio:/kubepods/burstable/pod` + uid1 + `/` + cid1 + `
1:name=systemd:/kubepods/burstable/pod` + uid1 + `/` + cid1 + `
0::/
`

// A real /proc/PID/cgroup: a container of Debian 12's dockerd 20.10
// (cgroupfs driver) on a cgroup v1 host with the unified hierarchy mounted
// too, recorded on the build machine (TestDockerNamesRealDaemon reads such
// files live).
const cgroupDockerV1Real = `9:name=systemd:/docker/e1fcc96640b099d06d28c48bc3ef9aaf13197f333d685b021ee4822b2d151d7c
8:pids:/docker/e1fcc96640b099d06d28c48bc3ef9aaf13197f333d685b021ee4822b2d151d7c
7:blkio:/docker/e1fcc96640b099d06d28c48bc3ef9aaf13197f333d685b021ee4822b2d151d7c
6:freezer:/docker/e1fcc96640b099d06d28c48bc3ef9aaf13197f333d685b021ee4822b2d151d7c
5:devices:/docker/e1fcc96640b099d06d28c48bc3ef9aaf13197f333d685b021ee4822b2d151d7c
4:memory:/docker/e1fcc96640b099d06d28c48bc3ef9aaf13197f333d685b021ee4822b2d151d7c
3:cpuset:/docker/e1fcc96640b099d06d28c48bc3ef9aaf13197f333d685b021ee4822b2d151d7c
2:cpuacct:/docker/e1fcc96640b099d06d28c48bc3ef9aaf13197f333d685b021ee4822b2d151d7c
1:cpu:/docker/e1fcc96640b099d06d28c48bc3ef9aaf13197f333d685b021ee4822b2d151d7c
0::/docker/e1fcc96640b099d06d28c48bc3ef9aaf13197f333d685b021ee4822b2d151d7c
`

func TestParseCgroupFile(t *testing.T) {
	none := Container{}
	for _, tc := range []struct {
		name, in string
		want     Container
		ok       bool
	}{
		{"real docker 20.10 v1", cgroupDockerV1Real, Container{RuntimeDocker, "e1fcc96640b099d06d28c48bc3ef9aaf13197f333d685b021ee4822b2d151d7c", ""}, true},
		{"v2 containerd burstable", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid1u + ".slice/cri-containerd-" + cid1 + ".scope\n",
			Container{RuntimeContainerd, cid1, uid1}, true},
		{"v2 containerd besteffort", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uid1u + ".slice/cri-containerd-" + cid1 + ".scope\n",
			Container{RuntimeContainerd, cid1, uid1}, true},
		{"v2 guaranteed crio", "0::/kubepods.slice/kubepods-pod" + uid1u + ".slice/crio-" + cid1 + ".scope\n",
			Container{RuntimeCRIO, cid1, uid1}, true},
		{"v2 static pod", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + staticUID + ".slice/cri-containerd-" + cid1 + ".scope\n",
			Container{RuntimeContainerd, cid1, staticUID}, true},
		{"v2 cri-dockerd systemd", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid1u + ".slice/docker-" + cid1 + ".scope\n",
			Container{RuntimeDocker, cid1, uid1}, true},
		{"v2 docker systemd", "0::/system.slice/docker-" + cid1 + ".scope\n", Container{RuntimeDocker, cid1, ""}, true},
		{"v2 docker cgroupfs", "0::/docker/" + cid1 + "\n", Container{RuntimeDocker, cid1, ""}, true},
		{"v2 podman rootful", "0::/machine.slice/libpod-" + cid1 + ".scope\n", Container{RuntimePodman, cid1, ""}, true},
		{"v2 podman rootless", "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + cid1 + ".scope\n", Container{RuntimePodman, cid1, ""}, true},
		{"v2 podman rootless nested container cgroup", "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + cid1 + ".scope/container\n", Container{RuntimePodman, cid1, ""}, true},
		{"podman cgroupfs", "0::/libpod_parent/libpod-" + cid1 + "\n", Container{RuntimePodman, cid1, ""}, true},
		{"crio cgroupfs", "0::/kubepods/besteffort/pod" + uid1 + "/crio-" + cid1 + "\n", Container{RuntimeCRIO, cid1, uid1}, true},
		{"v1 kubepods cgroupfs", cgroupV1Kubepods, Container{"", cid1, uid1}, true},
		{"v1 guaranteed cgroupfs", "4:memory:/kubepods/pod" + uid1 + "/" + cid1 + "\n", Container{"", cid1, uid1}, true},
		{"v1 docker", "4:memory:/docker/" + cid1 + "\n1:name=systemd:/docker/" + cid1 + "\n0::/\n", Container{RuntimeDocker, cid1, ""}, true},
		{"other cgroup namespace", "0::/../../kubepods-burstable-pod" + uid1u + ".slice/cri-containerd-" + cid1 + ".scope\n", Container{RuntimeContainerd, cid1, uid1}, true},
		{"container in a pod's container", "0::/kubepods.slice/kubepods-pod" + uid1u + ".slice/cri-containerd-" + cid1 + ".scope/docker/" + cid2 + "\n",
			Container{RuntimeContainerd, cid1, uid1}, true},
		// The kubelet's --cgroup-root (kind nodes, some distributions)
		// nests kubepods: systemd names every slice after the whole path.
		{"nested kubelet root systemd besteffort", "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + uid1u + ".slice/cri-containerd-" + cid1 + ".scope\n",
			Container{RuntimeContainerd, cid1, uid1}, true},
		{"nested kubelet root systemd guaranteed", "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod" + uid1u + ".slice/crio-" + cid1 + ".scope\n",
			Container{RuntimeCRIO, cid1, uid1}, true},
		{"nested two-level root systemd static pod", "0::/infra.slice/infra-gpu.slice/infra-gpu-kubepods.slice/infra-gpu-kubepods-burstable.slice/infra-gpu-kubepods-burstable-pod" + staticUID + ".slice/cri-containerd-" + cid1 + ".scope\n",
			Container{RuntimeContainerd, cid1, staticUID}, true},
		{"nested kubelet root other cgroup namespace", "0::/../kubelet-kubepods-besteffort-pod" + uid1u + ".slice/cri-containerd-" + cid1 + ".scope\n",
			Container{RuntimeContainerd, cid1, uid1}, true},
		{"nested kubelet root cgroupfs", "0::/kubelet/kubepods/besteffort/pod" + uid1 + "/" + cid1 + "\n", Container{"", cid1, uid1}, true},
		{"nested kubelet root cgroupfs crio", "0::/kubelet/kubepods/pod" + uid1 + "/crio-" + cid1 + "\n", Container{RuntimeCRIO, cid1, uid1}, true},
		{"no trailing newline", "0::/system.slice/docker-" + cid1 + ".scope", Container{RuntimeDocker, cid1, ""}, true},

		{"host session", "0::/user.slice/user-1000.slice/session-3.scope\n", none, false},
		{"host root", "0::/\n", none, false},
		{"empty", "", none, false},
		{"pod but no container", "0::/kubepods.slice/kubepods-pod" + uid1u + ".slice\n", none, false},
		{"crio conmon", "0::/kubepods.slice/kubepods-pod" + uid1u + ".slice/crio-conmon-" + cid1 + ".scope\n", none, false},
		{"podman conmon", "0::/machine.slice/libpod-conmon-" + cid1 + ".scope\n", none, false},
		{"containerd namespace", "0::/default/" + cid1 + "\n", none, false},
		{"bare id under a systemd pod slice", "0::/kubepods.slice/kubepods-pod" + uid1u + ".slice/" + cid1 + "\n", none, false},
		{"short id", "0::/docker/" + cid1[:12] + "\n", none, false},
		{"uppercase id", "0::/docker/" + strings.ToUpper(cid1) + "\n", none, false},
		{"docker without scope", "0::/system.slice/docker-" + cid1 + "\n", none, false},
		{"docker.service", "0::/system.slice/docker.service\n", none, false},
		{"bad pod uid", "0::/kubepods/burstable/pod" + uid1[:35] + "x/" + cid1 + "\n", none, false},
		{"dashes in systemd pod uid", "0::/kubepods.slice/kubepods-pod" + uid1 + ".slice/crio-" + cid1 + ".scope\n", none, false},
		{"pod without kubepods", "0::/burstable/pod" + uid1 + "/" + cid1 + "\n", none, false},
		{"nested kubelet root unknown qos", "0::/kubelet.slice/kubelet-kubepods-gold-pod" + uid1u + ".slice/crio-" + cid1 + ".scope\n", none, false},
		{"nested kubelet root dashes in uid", "0::/kubelet.slice/kubelet-kubepods-besteffort-pod" + uid1 + ".slice/crio-" + cid1 + ".scope\n", none, false},
		{"nested kubelet root empty component", "0::/kubelet.slice/kubelet--kubepods-pod" + uid1u + ".slice/crio-" + cid1 + ".scope\n", none, false},
		{"nested kubelet root leading dash", "0::/-kubepods-pod" + uid1u + ".slice/crio-" + cid1 + ".scope\n", none, false},
		{"unknown qos", "0::/kubepods.slice/kubepods-gold-pod" + uid1u + ".slice/crio-" + cid1 + ".scope\n", none, false},
		{"hierarchies disagree", "4:memory:/docker/" + cid1 + "\n0::/docker/" + cid2 + "\n", none, false},
		{"two pods", "0::/kubepods/pod" + uid1 + "/pod" + strings.ReplaceAll(uid1, "8", "9") + "/" + cid1 + "\n", none, false},
		{"garbage line", "0::/docker/" + cid1 + "\nnot a cgroup line\n", none, false},
		{"relative path", "0::docker/" + cid1 + "\n", none, false},
		{"bad hierarchy id", "x::/docker/" + cid1 + "\n", none, false},
	} {
		got, ok := ParseCgroupFile([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: got %+v %v, want %+v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// The fixture's processes are attributed as build-proc.sh describes.
func TestCgroupFixture(t *testing.T) {
	want := map[string]Container{
		"4242":  {RuntimeContainerd, cid1, uid1},
		"4310":  {RuntimeContainerd, cid2, "2b7e9d40-51c3-4f8a-b6e2-7c9d0a1b3e4f"},
		"4311":  {RuntimeDocker, "f6f6b9c6a78875c26e65a60448dec9ec0d21dcc5e801662a1444eabcdb85255e", ""},
		"5001":  {},
		"98621": {},
	}
	for pid, w := range want {
		b, err := os.ReadFile(filepath.Join(fixtureProc, pid, "cgroup"))
		if err != nil {
			t.Fatal(err)
		}
		got, ok := ParseCgroupFile(b)
		if got != w || ok != (w.ID != "") {
			t.Errorf("%s: got %+v %v, want %+v", pid, got, ok, w)
		}
	}
}

func FuzzParseCgroupFile(f *testing.F) {
	f.Add([]byte(cgroupV1Kubepods))
	f.Add([]byte(cgroupDockerV1Real))
	for _, pid := range []string{"4242", "4310", "4311", "5001"} {
		if b, err := os.ReadFile(filepath.Join(fixtureProc, pid, "cgroup")); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("0::/kubepods.slice/kubepods-pod" + uid1u + ".slice/crio-conmon-" + cid1 + ".scope\n"))
	f.Add([]byte("0::/machine.slice/libpod-" + cid1 + ".scope\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ref, ok := ParseCgroupFile(data)
		if !ok {
			if ref != (Container{}) {
				t.Fatalf("not attributed but %+v", ref)
			}
			return
		}
		// Whatever is attributed is a well-formed ID, UID and runtime that
		// the file spells out.
		if !IsContainerID(ref.ID) || !strings.Contains(string(data), ref.ID) {
			t.Fatalf("container_id %q", ref.ID)
		}
		switch ref.Runtime {
		case "", RuntimeDocker, RuntimeContainerd, RuntimeCRIO, RuntimePodman:
		default:
			t.Fatalf("runtime %q", ref.Runtime)
		}
		if ref.PodUID != "" {
			if _, ok := podUID(ref.PodUID, false); !ok || !utf8.ValidString(ref.PodUID) {
				t.Fatalf("pod_uid %q", ref.PodUID)
			}
			if !strings.Contains(string(data), ref.PodUID) && !strings.Contains(string(data), strings.ReplaceAll(ref.PodUID, "-", "_")) {
				t.Fatalf("pod_uid %q not in the file", ref.PodUID)
			}
		}
		// The same file again gives the same answer.
		if again, ok2 := ParseCgroupFile(data); again != ref || !ok2 {
			t.Fatalf("not deterministic")
		}
	})
}
