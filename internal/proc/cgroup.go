package proc

import (
	"bytes"
	"strings"
)

// Container attribution from /proc/PID/cgroup.
//
// Each line of /proc/PID/cgroup is "hierarchy-ID:controller-list:path"
// (cgroup(7)): one line "0::path" on a cgroup v2 host, one line per v1
// hierarchy on a v1 host, both on a hybrid host. Container runtimes name
// the cgroup of a container after its ID; the kubelet names the cgroup of a
// pod after its UID. The shapes recognised (systemd and cgroupfs cgroup
// drivers):
//
//	/system.slice/docker-<id>.scope                                      docker, systemd driver
//	/docker/<id>                                                         docker, cgroupfs driver
//	/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid_>.slice/cri-containerd-<id>.scope
//	/kubepods.slice/kubepods-pod<uid_>.slice/crio-<id>.scope             Guaranteed pods have no QoS level
//	/kubepods.slice/…/docker-<id>.scope                                  cri-dockerd, systemd driver
//	/kubepods/<qos>/pod<uid>/<id>                                        cgroupfs driver: containerd or cri-dockerd
//	/kubepods/<qos>/pod<uid>/crio-<id>                                   CRI-O, cgroupfs driver
//	/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-<qos>.slice/kubelet-kubepods-<qos>-pod<uid_>.slice/cri-containerd-<id>.scope
//	/kubelet/kubepods/<qos>/pod<uid>/<id>                                a kubelet --cgroup-root (/kubelet in kind), either driver
//	/machine.slice/libpod-<id>.scope, …/user.slice/libpod-<id>.scope     podman (rootful, rootless)
//	/libpod_parent/libpod-<id>                                           podman, cgroupfs driver
//
// <id> is the 64-hex container ID; <uid> the pod UID (a UUID, or the
// 32-hex hash the kubelet gives static pods), written with underscores
// instead of dashes in systemd slice names. Segments before them ("..",
// when the reader is in another cgroup namespace, or a kubelet
// --cgroup-root) are skipped. What is not one of these shapes is not
// attributed: no label rather than a wrong one. In particular:
//   - a bare ID under a pod's cgroupfs directory has runtime "" (containerd
//     and cri-dockerd write the same path);
//   - conmon (crio-conmon-<id>.scope, libpod-conmon-<id>.scope) is not the
//     container;
//   - a container inside a container (Docker in a pod) is attributed to the
//     outermost one, the container the host's runtime and the kubelet know;
//   - a bare ID under any other parent (containerd's own namespaces,
//     /default/<id>) is not attributed;
//   - hierarchies that disagree (two different containers or pods) give no
//     attribution at all.

// Container runtimes (the runtime label).
const (
	RuntimeDocker     = "docker"
	RuntimeContainerd = "containerd"
	RuntimeCRIO       = "cri-o"
	RuntimePodman     = "podman"
)

// MaxCgroupFile bounds the bytes of /proc/PID/cgroup parsed (a v1 host has
// about 13 lines of at most a few hundred bytes).
const MaxCgroupFile = 64 << 10

// Container is the container of a process.
type Container struct {
	Runtime string // "" when the path does not say (a bare ID under a cgroupfs pod)
	ID      string // 64 lowercase hex digits
	PodUID  string // with dashes; "" outside Kubernetes
}

// ParseCgroupFile returns the container of a process from its
// /proc/PID/cgroup; false when it is in none or the file cannot be trusted.
func ParseCgroupFile(data []byte) (Container, bool) {
	var found Container
	ok := false
	for len(data) > 0 {
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
		}
		if len(line) == 0 {
			continue
		}
		// hierarchy-ID:controller-list:path; the path may hold colons.
		i := bytes.IndexByte(line, ':')
		if i <= 0 || !allDigits(line[:i]) {
			return Container{}, false
		}
		rest := line[i+1:]
		j := bytes.IndexByte(rest, ':')
		if j < 0 {
			return Container{}, false
		}
		path := rest[j+1:]
		if len(path) == 0 || path[0] != '/' {
			return Container{}, false
		}
		ref, in, valid := parseCgroupPath(string(path))
		if !valid {
			return Container{}, false
		}
		if !in {
			continue
		}
		if ok && ref != found {
			return Container{}, false
		}
		found, ok = ref, true
	}
	return found, ok
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}

// parseCgroupPath returns the container a cgroup path names. in is false
// for a path outside any recognised container; valid is false for a path
// whose pod or container segments contradict each other.
func parseCgroupPath(path string) (ref Container, in, valid bool) {
	var prev string
	kubepods := false
	for len(path) > 0 {
		var seg string
		if i := strings.IndexByte(path, '/'); i >= 0 {
			seg, path = path[:i], path[i+1:]
		} else {
			seg, path = path, ""
		}
		if seg == "" || seg == "." || seg == ".." {
			continue
		}
		if seg == "kubepods" || seg == "kubepods.slice" {
			kubepods = true
		}
		if uid, pod, ok := podSegment(seg, kubepods); pod {
			if !ok || ref.PodUID != "" && ref.PodUID != uid {
				// A pod's cgroup with a malformed UID, or two pods.
				return Container{}, false, false
			}
			ref.PodUID = uid
			prev = seg
			continue
		}
		if rt, id, ok := containerSegment(seg, prev, ref.PodUID != "" && strings.HasPrefix(prev, "pod")); ok {
			// The outermost container: the one the host's runtime and
			// the kubelet know.
			ref.Runtime, ref.ID = rt, id
			return ref, true, true
		}
		prev = seg
	}
	return Container{}, false, true
}

// podSegment recognises the cgroup of a pod: "pod<uid>" (cgroupfs driver,
// under kubepods) and "[<root>-]kubepods[-<qos>]-pod<uid_>.slice" (systemd
// driver). pod says the segment has the shape of one; ok that its UID and
// QoS class are well-formed.
//
// The systemd driver names a slice after its whole cgroup path, the
// components joined with '-' (dashes within a component, as in a UID,
// become underscores), so a kubelet --cgroup-root (/kubelet in kind) puts
// its components in front: kubelet-kubepods-besteffort-pod<uid_>.slice.
func podSegment(seg string, kubepods bool) (uid string, pod, ok bool) {
	if kubepods && strings.HasPrefix(seg, "pod") {
		uid, ok = podUID(seg[len("pod"):], false)
		return uid, true, ok
	}
	s, slice := strings.CutSuffix(seg, ".slice")
	if !slice || !strings.HasPrefix(s, "kubepods-") && !strings.Contains(s, "-kubepods-") {
		return "", false, false
	}
	i := strings.LastIndex(s, "-pod")
	if i < 0 {
		return "", false, false
	}
	head := s[:i]
	k := strings.LastIndex(head, "kubepods")
	if k < 0 {
		return "", true, false
	}
	switch head[k:] {
	case "kubepods", "kubepods-burstable", "kubepods-besteffort":
	default:
		return "", true, false
	}
	if root := head[:k]; root != "" && !sliceRoot(root) {
		return "", true, false
	}
	uid, ok = podUID(s[i+len("-pod"):], true)
	return uid, true, ok
}

// sliceRoot checks the --cgroup-root part of a systemd pod slice name: one
// or more non-empty components, each followed by '-'.
func sliceRoot(root string) bool {
	if !strings.HasSuffix(root, "-") {
		return false
	}
	for _, c := range strings.Split(root[:len(root)-1], "-") {
		if c == "" {
			return false
		}
	}
	return true
}

// podUID checks a pod UID: a UUID (8-4-4-4-12 hex, with underscores for
// dashes in systemd names) or 32 hex digits (static pods); it returns it
// with dashes.
func podUID(s string, underscores bool) (string, bool) {
	switch len(s) {
	case 32:
		if !isHex(s) {
			return "", false
		}
		return s, true
	case 36:
		sep := byte('-')
		if underscores {
			sep = '_'
		}
		b := []byte(s)
		for i, c := range b {
			switch i {
			case 8, 13, 18, 23:
				if c != sep {
					return "", false
				}
				b[i] = '-'
			default:
				if !isHexDigit(c) {
					return "", false
				}
			}
		}
		return string(b), true
	}
	return "", false
}

// containerSegment recognises the cgroup of a container. prev is the
// segment before it; underPod says prev is a cgroupfs pod directory.
func containerSegment(seg, prev string, underPod bool) (runtime, id string, ok bool) {
	if IsContainerID(seg) {
		switch {
		case prev == "docker":
			return RuntimeDocker, seg, true
		case underPod:
			return "", seg, true
		}
		return "", "", false
	}
	name, scope := strings.CutSuffix(seg, ".scope")
	for _, p := range [...]struct {
		prefix, runtime string
		cgroupfs        bool // also without .scope (cgroupfs driver)
	}{
		{"docker-", RuntimeDocker, false},
		{"cri-containerd-", RuntimeContainerd, false},
		{"crio-", RuntimeCRIO, true},
		{"libpod-", RuntimePodman, true},
	} {
		if id, found := strings.CutPrefix(name, p.prefix); found && (scope || p.cgroupfs) && IsContainerID(id) {
			return p.runtime, id, true
		}
	}
	return "", "", false
}

// IsContainerID reports a container ID: 64 lowercase hex digits.
func IsContainerID(s string) bool {
	return len(s) == 64 && isHex(s)
}

func isHexDigit(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f'
}

// isHex: lowercase hex digits, at least one.
func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isHexDigit(s[i]) {
			return false
		}
	}
	return s != ""
}
