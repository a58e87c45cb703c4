package collector

import (
	"context"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/proc"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// Device visibility: whether the RDMA devices of the rails are visible in a
// process's container — their verbs node (uverbsN) and rdma_cm under
// /dev/infiniband in the process's root (its mount namespace), looked up
// without ever leaving that root (proc.RootResolver). Checked at most every
// --collector.process.numa-maps-interval.

const (
	rdmaCMNode   = "rdma_cm" // /dev/infiniband/rdma_cm
	procFileRoot = "root"    // read-error label for /proc/PID/root lookups
)

// railVerbs maps the rails' RDMA devices to their uverbs nodes.
type railVerbs struct {
	verbs   map[string]string // RDMA device -> uverbsN
	verbsAt time.Time
	roots   proc.RootResolver
}

// procVis is one looked-up node of one rail device in a process's root.
type procVis struct {
	device, node string
	ok           bool
	s            *exposition.Series
}

// railDevices returns the RDMA devices that carry rails, sorted.
func (c *processCollector) railDevices(ctx context.Context) []string {
	if c.rails == nil {
		return nil
	}
	var out []string
	for _, r := range c.rails.Current(ctx) {
		if !slices.Contains(out, r.Device) {
			out = append(out, r.Device)
		}
	}
	sort.Strings(out)
	return out
}

// refreshVerbs re-reads the uverbs nodes if older than the interval.
func (c *processCollector) refreshVerbs(now time.Time) {
	if c.verbs == nil || now.Sub(c.verbsAt) >= c.interval {
		c.verbs, c.verbsAt = c.readVerbs(), now
	}
}

// readVerbs maps RDMA devices to their uverbs character devices
// (class/infiniband_verbs/uverbsN/ibdev).
func (c *processCollector) readVerbs() map[string]string {
	m := map[string]string{}
	dir := filepath.Join(c.sysfs, "class", "infiniband_verbs")
	names, _ := sysfs.ListDir(dir, false)
	for _, n := range names {
		if !strings.HasPrefix(n, "uverbs") {
			continue
		}
		if dev := sysfs.ReadSmall(c.sysfs, filepath.Join(dir, n, "ibdev")); dev != "" {
			m[dev] = n
		}
	}
	return m
}

// checkVisibility looks up each rail device's verbs node and rdma_cm under
// /dev/infiniband in the process's root.
func (c *processCollector) checkVisibility(st *procState, devices []string) {
	old := st.vis
	st.vis = nil
	root := st.dir + "/root"
	rootFD, err := c.openRoot(root)
	if err != nil {
		c.readError(procFileRoot, root, err)
		return
	}
	defer unix.Close(rootFD)
	for _, dev := range devices {
		for _, node := range [2]string{c.verbs[dev], rdmaCMNode} {
			ok := false
			if node != "" {
				var err error
				if ok, err = c.roots.Exists(rootFD, root, "dev/infiniband/"+node); err != nil {
					c.readError(procFileRoot, root, err)
				}
			}
			v := procVis{device: dev, node: node, ok: ok}
			if i := len(st.vis); i < len(old) && old[i].device == dev && old[i].node == node {
				v.s = old[i].s
			} else {
				v.s = c.visible.With(st.pidS, st.comm, dev, node)
			}
			st.vis = append(st.vis, v)
		}
	}
}
