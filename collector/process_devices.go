package collector

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
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
// --collector.process.numa-maps-interval, and at once when the host's rail
// devices change. Only devices the host has now, with a verbs node, are
// checked: a device gone from the host (fabric_rail_up says so) or without
// ib_uverbs is not the container's fault, and has no series.

const (
	rdmaCMNode   = "rdma_cm" // /dev/infiniband/rdma_cm
	procFileRoot = "root"    // read-error label for /proc/PID/root lookups
)

// railVerbs maps the rails' RDMA devices to their uverbs nodes.
type railVerbs struct {
	verbs    map[string]string // RDMA device -> uverbsN
	verbsAt  time.Time
	verbsFor []string // the devices verbs was read for
	roots    proc.RootResolver
}

// railDev is a rail RDMA device present on the host in this scrape and the
// ports of its rails.
type railDev struct {
	name  string
	ports []int
}

// procVis is one looked-up node of one rail device in a process's root.
type procVis struct {
	device, node string
	ok           bool
	failed       bool // the lookup failed: no verdict
	s            *exposition.Series
}

// railDevices returns the RDMA devices that carry rails present on the
// host now, sorted, each with its rails' ports; a rail whose device is gone
// is left out.
func (c *processCollector) railDevices(ctx context.Context) []railDev {
	if c.rails == nil {
		return nil
	}
	out := c.devs[:0]
	for _, r := range c.rails.Current(ctx) {
		if !r.Present {
			continue
		}
		port, _ := strconv.Atoi(r.Port)
		i := slices.IndexFunc(out, func(d railDev) bool { return d.name == r.Device })
		if i < 0 {
			i = len(out)
			if i < cap(out) { // reuse the last scrape's ports array
				out = out[:i+1]
				out[i].name, out[i].ports = r.Device, out[i].ports[:0]
			} else {
				out = append(out, railDev{name: r.Device})
			}
		}
		if !slices.Contains(out[i].ports, port) {
			out[i].ports = append(out[i].ports, port)
		}
	}
	slices.SortFunc(out, func(a, b railDev) int { return strings.Compare(a.name, b.name) })
	c.devs = out
	return out
}

// visibleDevices returns the devices of devs that have a verbs node on the
// host, reusing c.visDevs.
func (c *processCollector) visibleDevices(devs []railDev) []string {
	out := c.visDevs[:0]
	for _, d := range devs {
		if c.verbs[d.name] != "" {
			out = append(out, d.name)
		}
	}
	c.visDevs = out
	return out
}

// refreshVerbs re-reads the uverbs nodes if older than the interval or
// read for other devices.
func (c *processCollector) refreshVerbs(devs []railDev, now time.Time) {
	same := len(devs) == len(c.verbsFor)
	for i := 0; same && i < len(devs); i++ {
		same = devs[i].name == c.verbsFor[i]
	}
	if c.verbs == nil || !same || now.Sub(c.verbsAt) >= c.interval {
		c.verbs, c.verbsAt = c.readVerbs(), now
		c.verbsFor = c.verbsFor[:0]
		for _, d := range devs {
			c.verbsFor = append(c.verbsFor, d.name)
		}
	}
}

// readVerbs maps RDMA devices to their uverbs character devices.
func (c *processCollector) readVerbs() map[string]string { return readVerbsNodes(c.sysfs) }

// readVerbsNodes maps RDMA devices to their uverbs character devices
// (class/infiniband_verbs/uverbsN/ibdev under the sysfs root).
func readVerbsNodes(sysfsRoot string) map[string]string {
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

// checkVisibility looks up each device's verbs node (devices have one) and
// rdma_cm under /dev/infiniband in the process's root.
func (c *processCollector) checkVisibility(st *procState, devices []string) {
	old := st.vis
	st.vis = nil
	st.visDevs = append(st.visDevs[:0], devices...)
	root := st.dir + "/root"
	rootFD, err := c.openRoot(root)
	if err != nil {
		c.readError(procFileRoot, root, err)
		return
	}
	defer unix.Close(rootFD)
	for _, dev := range devices {
		for _, node := range [2]string{c.verbs[dev], rdmaCMNode} {
			ok, err := c.roots.Exists(rootFD, root, "dev/infiniband/"+node)
			if err != nil {
				c.readError(procFileRoot, root, err)
			}
			v := procVis{device: dev, node: node, ok: ok, failed: err != nil}
			if i := len(st.vis); i < len(old) && old[i].device == dev && old[i].node == node {
				v.s = old[i].s
			} else {
				v.s = c.visible.With(st.pidS, st.comm, dev, node)
			}
			st.vis = append(st.vis, v)
		}
	}
}
