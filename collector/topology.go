package collector

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// The topology collector places GPUs, RDMA devices and PCI network
// interfaces in the sysfs PCI tree and classifies the path between each GPU
// and each RDMA device, and between GPUs, the way `nvidia-smi topo -m`
// does for PCIe (NVLink is not visible in sysfs):
//
//	PIX  at most one PCIe switch between them
//	PXB  several switches, no host bridge
//	PHB  through a PCIe host bridge (same host bridge, different root ports)
//	NODE different host bridges of one NUMA node
//	SYS  across NUMA nodes
//
// It reads sysfs only, so it works without NVML and on fixtures. The tree
// is static: it is rebuilt only when bus/pci/devices, class/infiniband or
// class/net change.

const nvidiaVendor = "0x10de"

// pciLoc is a PCI function's place in the tree.
type pciLoc struct {
	name      string   // GPU index, RDMA device or netdev
	bdf       string   // 0000:18:00.0
	root      string   // host bridge directory, pci0000:15
	chain     []string // devices/pci0000:15/<chain...>: bridges down to the function itself
	numa      int      // -1 when the kernel does not know
	numaLabel string   // "" for -1
	cpulist   string
}

// pciPathClass returns the nvidia-smi path class between two PCI functions.
// A NUMA node of -1 (unknown) only matches another -1.
func pciPathClass(a, b *pciLoc) string {
	if a.root != b.root {
		if a.numa == b.numa {
			return "NODE"
		}
		return "SYS"
	}
	k := 0
	for k < len(a.chain) && k < len(b.chain) && a.chain[k] == b.chain[k] {
		k++
	}
	if k == 0 {
		return "PHB" // they meet only at the host bridge
	}
	// They meet at bridge chain[k-1]. Up to two hops from a function to that
	// bridge (function -> downstream port -> upstream port) stay inside one
	// switch; more means a switch below another switch.
	if len(a.chain)-k <= 2 && len(b.chain)-k <= 2 {
		return "PIX"
	}
	return "PXB"
}

// isBDF reports whether s names a PCI function (domain:bus:device.function).
func isBDF(s string) bool {
	d, rest, ok := strings.Cut(s, ":")
	if !ok || len(d) < 4 || !isHex(d) || len(rest) != 7 || rest[2] != ':' || rest[5] != '.' {
		return false
	}
	return isHex(rest[:2]) && isHex(rest[3:5]) && rest[6] >= '0' && rest[6] <= '7'
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return s != ""
}

type topologyCollector struct {
	env    Env
	sysfs  string
	dirs   [3]string // bus/pci/devices, class/infiniband, class/net
	sig    uint64
	built  bool
	series []*exposition.Series
	gd     gpuDirectFacts // IOMMU groups and peer memory (topology_gpudirect.go)

	deviceInfo, pathInfo, gpuPathInfo *exposition.Family
}

func newTopologyCollector(env Env, o *Options) (Collector, error) {
	g := prometheus.GaugeValue
	return &topologyCollector{
		env: env, sysfs: o.SysfsPath, gd: newGPUDirectFacts(env),
		dirs: [3]string{o.sysPath("bus", "pci", "devices"), o.sysPath("class", "infiniband"), o.sysPath("class", "net")},
		deviceInfo: env.Families.NewFamily("fabric_pci_device_info",
			"A GPU (PCI vendor 0x10de, display or 3D class; name is its index in PCI bus order, as nvidia-smi numbers GPUs), RDMA device or PCI network interface, with its PCI function, NUMA node (\"\" when unknown) and local CPUs.",
			g, "kind", "name", "pci_bus_id", "numa_node", "local_cpulist"),
		pathInfo: env.Families.NewFamily("fabric_topology_path_info",
			"PCIe path class between a GPU and an RDMA device, as nvidia-smi topo -m prints it: PIX (one PCIe switch), PXB (several switches), PHB (through a host bridge), NODE (host bridges of one NUMA node), SYS (across NUMA nodes).",
			g, "gpu", "device", "path"),
		gpuPathInfo: env.Families.NewFamily("fabric_topology_gpu_path_info",
			"PCIe path class between two GPUs (PIX, PXB, PHB, NODE, SYS; NVLink is not visible in sysfs).",
			g, "gpu", "peer_gpu", "path"),
	}, nil
}

func (c *topologyCollector) Update(ctx context.Context, b *exposition.Batch) error {
	sig, found := uint64(14695981039346656037), 0
	for _, d := range c.dirs {
		var err error
		sig, err = sysfs.DirHash(d, sig)
		if err == nil {
			found++
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("listing %s: %w", d, err)
		}
	}
	if found == 0 {
		return checkSysfs(c.sysfs, "none of "+strings.Join(c.dirs[:], ", ")+" exists")
	}
	if !c.built || sig != c.sig {
		c.rebuild()
		c.sig, c.built = sig, true
	}
	if len(c.series) == 0 {
		return noHardware("no GPU, RDMA device or PCI network interface in %s", c.sysfs)
	}
	for _, s := range c.series {
		b.Add(s, 1)
	}
	c.gd.add(b)
	return nil
}

// rebuild walks the PCI tree again.
func (c *topologyCollector) rebuild() {
	c.series, c.gd.series, c.gd.modDir = c.series[:0], c.gd.series[:0], ""
	devRoot, err := filepath.EvalSymlinks(filepath.Join(c.sysfs, "devices"))
	if err != nil {
		return
	}
	gpus := c.findGPUs(devRoot)
	hcas := c.locateClass(devRoot, c.dirs[1])
	nets := c.locateClass(devRoot, c.dirs[2])
	c.gd.rebuild(c.sysfs, devRoot, gpus, hcas)
	for i, locs := range [][]*pciLoc{gpus, hcas, nets} {
		kind := [...]string{"gpu", "hca", "netdev"}[i]
		for _, l := range locs {
			c.series = append(c.series, c.deviceInfo.With(kind, l.name, l.bdf, l.numaLabel, l.cpulist))
		}
	}
	for _, g := range gpus {
		for _, h := range hcas {
			c.series = append(c.series, c.pathInfo.With(g.name, h.name, pciPathClass(g, h)))
		}
		for _, p := range gpus {
			if p != g {
				c.series = append(c.series, c.gpuPathInfo.With(g.name, p.name, pciPathClass(g, p)))
			}
		}
	}
}

// findGPUs lists NVIDIA display (0x0300) and 3D (0x0302) controllers in
// bus/pci/devices, in PCI bus order, named by index.
func (c *topologyCollector) findGPUs(devRoot string) []*pciLoc {
	names, _ := sysfs.ListDir(c.dirs[0], false)
	sort.Strings(names)
	var gpus []*pciLoc
	for _, bdf := range names {
		dir := filepath.Join(c.dirs[0], bdf)
		if sysfs.ReadSmall(c.sysfs, filepath.Join(dir, "vendor")) != nvidiaVendor {
			continue
		}
		class := sysfs.ReadSmall(c.sysfs, filepath.Join(dir, "class"))
		if !strings.HasPrefix(class, "0x0300") && !strings.HasPrefix(class, "0x0302") {
			continue
		}
		l, err := c.locate(devRoot, dir)
		if err != nil {
			c.skip(dir, err)
			continue
		}
		l.name = strconv.Itoa(len(gpus))
		gpus = append(gpus, l)
	}
	return gpus
}

// locateClass places every entry of a class directory that sits on a PCI
// function; virtual devices (lo, bridges, rxe) are left out.
func (c *topologyCollector) locateClass(devRoot, dir string) []*pciLoc {
	names, _ := sysfs.ListDir(dir, false)
	sort.Strings(names)
	var out []*pciLoc
	for _, n := range names {
		l, err := c.locate(devRoot, filepath.Join(dir, n))
		if err != nil {
			c.skip(filepath.Join(dir, n), err)
			continue
		}
		if l != nil {
			l.name = n
			out = append(out, l)
		}
	}
	return out
}

func (c *topologyCollector) skip(path string, err error) {
	if sysfs.IsGone(err) {
		return
	}
	c.env.ReadErrors.Inc()
	c.env.Once.Debug("topology:"+path, "msg", "skipping device", "path", path, "err", err)
}

// locate resolves a sysfs path (a class entry or bus/pci/devices link) to
// the PCI function it belongs to. It returns nil, nil for a device that is
// not on PCI.
func (c *topologyCollector) locate(devRoot, path string) (*pciLoc, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(devRoot, real)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return nil, nil
	}
	parts := strings.Split(rel, string(filepath.Separator))
	if !strings.HasPrefix(parts[0], "pci") {
		return nil, nil
	}
	last := -1
	for i := 1; i < len(parts); i++ {
		if isBDF(parts[i]) {
			last = i
		}
	}
	if last < 0 {
		return nil, nil
	}
	l := &pciLoc{bdf: parts[last], root: parts[0], chain: parts[1 : last+1], numa: -1}
	fn := filepath.Join(devRoot, filepath.Join(parts[:last+1]...))
	if v, err := sysfs.ParseInt([]byte(sysfs.ReadSmall(c.sysfs, filepath.Join(fn, "numa_node")))); err == nil && v >= 0 {
		l.numa, l.numaLabel = int(v), strconv.FormatInt(v, 10)
	}
	l.cpulist = sysfs.ReadSmall(c.sysfs, filepath.Join(fn, "local_cpulist"))
	return l, nil
}
