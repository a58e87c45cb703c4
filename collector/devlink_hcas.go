package collector

import (
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// Which HCAs the devlink collector asks: the RDMA devices on PCI, those
// seen before whose IB device mlx5 unloaded, and the mlx5 functions that
// lost theirs before the exporter started.

// hcas lists the RDMA devices on a PCI function, sorted, one per function
// (a bond's device shares its first port's function).
func (c *devlinkCollector) hcas() ([]devlinkHCA, error) {
	dir := c.opts.sysPath("class", "infiniband")
	names, err := sysfs.ListDir(dir, false)
	if err != nil && len(c.known) == 0 {
		return nil, checkSysfs(c.opts.SysfsPath, "no RDMA device (no "+dir+")")
	}
	slices.Sort(names)
	var out []devlinkHCA
	seen := map[string]bool{}
	for _, n := range names {
		pci, _ := sysfs.PCIFunction(filepath.Join(dir, n, "device"))
		if pci == "" || seen[pci] || len(out) == maxDevlinkHCAs {
			continue
		}
		seen[pci] = true
		c.known[pci] = n
		out = append(out, devlinkHCA{device: n, pci: pci})
	}
	// HCAs seen before whose RDMA device is gone but whose function mlx5
	// still holds: asked by their devlink instance, under their old name.
	for _, pci := range slices.Sorted(maps.Keys(c.known)) {
		if seen[pci] {
			continue
		}
		if _, err := os.Lstat(c.opts.sysPath("bus", "pci", "drivers", "mlx5_core", pci)); err != nil {
			delete(c.known, pci) // unbound, removed: gone
			continue
		}
		if len(out) < maxDevlinkHCAs {
			out = append(out, devlinkHCA{device: c.known[pci], pci: pci, unloaded: true})
		}
	}
	out = c.unnamedMLX5(out, seen, len(names) > 0)
	if len(out) == 0 {
		return nil, noHardware("no RDMA device on a PCI function in %s", dir)
	}
	return out, nil
}

// unnamedMLX5 adds the physical functions bound to mlx5_core that have no
// RDMA device and were never seen with one, while mlx5_ib is loaded (its
// module in /sys/module, or another HCA's RDMA device present): mlx5_ib
// gives every mlx5 function an RDMA device, so a function without one has
// had it unloaded — a recovery that failed before the exporter started
// (or an exporter restarted since). They are asked by their devlink
// instance, with device "" (the name went with the device). Virtual
// functions are left out (a host can bind hundreds).
func (c *devlinkCollector) unnamedMLX5(out []devlinkHCA, seen map[string]bool, ibDevices bool) []devlinkHCA {
	if !ibDevices {
		if _, err := os.Stat(c.opts.sysPath("module", "mlx5_ib")); err != nil {
			return out
		}
	}
	drv := c.opts.sysPath("bus", "pci", "drivers", "mlx5_core")
	fns, _ := sysfs.ListDir(drv, false)
	slices.Sort(fns)
	for _, pci := range fns {
		if len(out) == maxDevlinkHCAs {
			break
		}
		if !sysfs.IsPCIAddress(pci) || seen[pci] {
			continue
		}
		if _, ok := c.known[pci]; ok {
			continue // added above, under its old name
		}
		if _, err := os.Lstat(filepath.Join(drv, pci, "physfn")); err == nil {
			continue
		}
		out = append(out, devlinkHCA{pci: pci, unloaded: true})
	}
	return out
}
