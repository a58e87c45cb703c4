package procwatch

import (
	"bytes"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// The rails' RDMA devices as a process sees them:
//
//   - visibility: their verbs node (uverbsN) and rdma_cm under
//     /dev/infiniband in the process's root (its mount namespace), looked
//     up without ever leaving that root (proc.RootResolver). Only devices
//     the host has now, with a verbs node, are checked: a device gone from
//     the host or without ib_uverbs is not the container's fault;
//   - verbs fds: its open file descriptors on any /dev/infiniband/uverbsN
//     (one per device context a process opens with ibv_open_device), read
//     with readlink from /proc/PID/fd and mapped to the devices through the
//     host's class/infiniband_verbs/uverbsN/ibdev, at most MaxVerbsFDs links.
//
// Both are read at most every Options.Slow, at once when the host's rail
// devices change, and at once for a nudged process.

const (
	// RDMACMNode is /dev/infiniband/rdma_cm.
	RDMACMNode = "rdma_cm"
	// MaxVerbsFDs bounds the fd links read per process and read.
	MaxVerbsFDs = 4096
	verbsDir    = "/dev/infiniband/"
)

// railVerbs maps the rails' RDMA devices to their uverbs nodes.
type railVerbs struct {
	verbs    map[string]string // RDMA device -> uverbsN
	verbsAt  time.Time
	verbsFor []string // the devices verbs was read for
}

// refreshVerbs re-reads the uverbs nodes if older than the interval or
// read for other devices.
func (r *railVerbs) refreshVerbs(sysfsRoot string, devs []RailDevice, now time.Time, every time.Duration) {
	same := len(devs) == len(r.verbsFor)
	for i := 0; same && i < len(devs); i++ {
		same = devs[i].Name == r.verbsFor[i]
	}
	if r.verbs == nil || !same || now.Sub(r.verbsAt) >= every {
		r.verbs, r.verbsAt = ReadVerbsNodes(sysfsRoot), now
		r.verbsFor = r.verbsFor[:0]
		for _, d := range devs {
			r.verbsFor = append(r.verbsFor, d.Name)
		}
	}
}

// visibleDevices returns the devices of devs that have a verbs node.
func (r *railVerbs) visibleDevices(devs []RailDevice) []string {
	var out []string
	for _, d := range devs {
		if r.verbs[d.Name] != "" {
			out = append(out, d.Name)
		}
	}
	return out
}

// ReadVerbsNodes maps RDMA devices to their uverbs character devices
// (class/infiniband_verbs/uverbsN/ibdev under the sysfs root).
func ReadVerbsNodes(sysfsRoot string) map[string]string {
	m := map[string]string{}
	dir := filepath.Join(sysfsRoot, "class", "infiniband_verbs")
	names, _ := sysfs.ListDir(dir, false)
	for _, n := range names {
		if !strings.HasPrefix(n, "uverbs") {
			continue
		}
		if dev := sysfs.ReadSmall(sysfsRoot, filepath.Join(dir, n, "ibdev")); dev != "" {
			m[dev] = n
		}
	}
	return m
}

// checkVisibility looks up each device's verbs node and rdma_cm under
// /dev/infiniband in the process's root.
func (w *Watcher) checkVisibility(st *procState, devices []string) {
	st.Vis, st.visDevs = nil, append([]string(nil), devices...)
	root := st.dir + "/root"
	rootFD, err := w.IO.OpenRoot(root)
	if err != nil {
		w.readError(FileRoot, root, err)
		return
	}
	defer unix.Close(rootFD)
	vis := make([]Vis, 0, 2*len(devices))
	for _, dev := range devices {
		for _, node := range [2]string{w.verbs[dev], RDMACMNode} {
			ok, err := w.IO.Roots.Exists(rootFD, root, "dev/infiniband/"+node)
			if err != nil {
				w.readError(FileRoot, root, err)
			}
			vis = append(vis, Vis{Device: dev, Node: node, OK: ok, Failed: err != nil})
		}
	}
	st.Vis = vis
}

// IsUverbs reports whether a node under /dev/infiniband is a verbs node,
// uverbsN.
func IsUverbs(node []byte) bool {
	n, ok := bytes.CutPrefix(node, []byte("uverbs"))
	if !ok || len(n) == 0 {
		return false
	}
	for _, ch := range n {
		if ch < '0' || ch > '9' {
			return false
		}
	}
	return true
}

// countVerbsFDs counts a process's fds on the verbs node of each device
// (devices have one) and on any verbs node. An fd directory that cannot be
// read leaves FDsRead false; an fd closed between the listing and its
// readlink is not counted.
func (w *Watcher) countVerbsFDs(st *procState, devices []string) {
	st.RailFDs, st.VerbsFDs, st.Sockets = nil, 0, nil
	dir := st.dir + "/fd"
	w.fdNums = w.fdNums[:0]
	err := w.IO.ScanDir(dir, func(name []byte) {
		if len(w.fdNums) < w.IO.MaxFDs {
			if fd, err := strconv.Atoi(string(name)); err == nil && fd >= 0 {
				w.fdNums = append(w.fdNums, fd)
			}
		}
	})
	st.FDsRead = err == nil
	if err != nil {
		w.readError(FileFD, dir, err)
		return
	}
	counts := make([]DevCount, len(devices))
	for i, d := range devices {
		counts[i].Device = d
	}
	var path []byte
	for _, fd := range w.fdNums {
		path = strconv.AppendInt(append(append(path[:0], dir...), '/'), int64(fd), 10)
		n, err := w.IO.Readlink(string(path), w.linkBuf[:])
		if err != nil || n >= len(w.linkBuf) {
			continue
		}
		if ino, ok := socketInode(w.linkBuf[:n]); ok {
			if len(st.Sockets) < maxSockets {
				st.Sockets = append(st.Sockets, ino)
			}
			continue
		}
		node, ok := bytes.CutPrefix(w.linkBuf[:n], []byte(verbsDir))
		if !ok || !IsUverbs(node) {
			continue
		}
		st.VerbsFDs++
		for i, dev := range devices {
			if string(node) == w.verbs[dev] {
				counts[i].N++
				break
			}
		}
	}
	st.RailFDs = counts
}

// maxSockets bounds the socket inodes kept of one process.
const maxSockets = 4096

// socketInode parses an fd link of the form socket:[INODE].
func socketInode(link []byte) (uint64, bool) {
	n, ok := bytes.CutPrefix(link, []byte("socket:["))
	if !ok {
		return 0, false
	}
	n, ok = bytes.CutSuffix(n, []byte("]"))
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseUint(string(n), 10, 64)
	return v, err == nil
}
