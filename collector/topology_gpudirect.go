package collector

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// What the kernel says about the GPUDirect paths (P2P between GPUs,
// GPUDirect RDMA between a GPU and an HCA), next to the topology:
//
//   - the IOMMU: kernel/iommu_groups/<n>/type ("DMA", "DMA-FQ": translation;
//     "identity": passthrough; "blocked", "unmanaged" for devices given to
//     VFIO) and each GPU's and HCA's group (the iommu_group link of its PCI
//     function). Translation puts every peer-to-peer access through the
//     IOMMU; devices that share a group could not be isolated from each
//     other (the kernel groups the devices below a switch without ACS).
//     Read when the tree is rebuilt: the mode is set at boot.
//   - peer memory: module/nvidia_peermem (and the old nv_peer_mem) exists
//     while the module is loaded; looked at each scrape (two lstat calls).
//     Whether the kernel and driver support DMA-BUF, the other peer-memory
//     path, is not in sysfs (CUDA answers it: CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED),
//     so it is not reported.

var peerMemModules = [...]string{"nvidia_peermem", "nv_peer_mem"}

type gpuDirectFacts struct {
	iommuInfo, groupInfo, peerMem *exposition.Family
	series                        []*exposition.Series // value 1, built at rebuild
	modDir                        string               // sysfs module/, "" when absent or no GPU
	loaded                        [len(peerMemModules)]*exposition.Series
}

func newGPUDirectFacts(env Env) gpuDirectFacts {
	g := prometheus.GaugeValue
	f := gpuDirectFacts{
		iommuInfo: env.Families.NewFamily("fabric_iommu_info",
			"The IOMMU mode of the node's GPUs and HCAs, from their IOMMU groups' type (kernel/iommu_groups/*/type): none (no IOMMU groups: absent or disabled), translated (DMA, DMA-FQ: peer-to-peer accesses are translated), passthrough (identity), or mixed when their groups differ (the types are in fabric_pci_device_iommu_group_info). Absent when the sysfs tree has no kernel/ directory.",
			g, "mode"),
		groupInfo: env.Families.NewFamily("fabric_pci_device_iommu_group_info",
			"The IOMMU group of a GPU or RDMA device (kind, name as in fabric_pci_device_info) and the group's type as the kernel prints it (DMA, DMA-FQ, identity, blocked, unmanaged). Devices with the same group could not be isolated from each other: the kernel groups the devices below a switch without ACS.",
			g, "kind", "name", "pci_bus_id", "group", "type"),
		peerMem: env.Families.NewFamily("fabric_gpu_peer_memory_module_loaded",
			"1 when the peer-memory kernel module that lets an RDMA device reach GPU memory (GPUDirect RDMA) is loaded (sysfs module/<module> exists), 0 when it is not: nvidia_peermem (the driver's) and nv_peer_mem (the old Mellanox one). DMA-BUF, the other path, cannot be seen in sysfs. Absent on nodes without a GPU.",
			g, "module"),
	}
	for i, m := range peerMemModules {
		f.loaded[i] = f.peerMem.With(m)
	}
	return f
}

// rebuild reads the IOMMU groups of the GPUs and HCAs.
func (f *gpuDirectFacts) rebuild(sysRoot, devRoot string, gpus, hcas []*pciLoc) {
	f.series, f.modDir = f.series[:0], ""
	if len(gpus) == 0 && len(hcas) == 0 {
		return
	}
	if len(gpus) > 0 {
		if fi, err := os.Stat(filepath.Join(sysRoot, "module")); err == nil && fi.IsDir() {
			f.modDir = filepath.Join(sysRoot, "module")
		}
	}
	if _, err := os.Stat(filepath.Join(sysRoot, "kernel")); err != nil {
		return // not a full sysfs tree: say nothing about the IOMMU
	}
	groups := filepath.Join(sysRoot, "kernel", "iommu_groups")
	types := map[string]bool{}
	for i, locs := range [][]*pciLoc{gpus, hcas} {
		kind := [...]string{"gpu", "hca"}[i]
		for _, l := range locs {
			p := filepath.Join(devRoot, l.root, filepath.Join(l.chain...), "iommu_group")
			link, err := os.Readlink(p)
			if err != nil {
				continue // no group: no IOMMU for this device
			}
			if _, err := os.Stat(p); err != nil {
				continue // the group is gone
			}
			g := filepath.Base(link)
			t := sysfs.ReadSmall(sysRoot, filepath.Join(groups, g, "type"))
			f.series = append(f.series, f.groupInfo.With(kind, l.name, l.bdf, g, t))
			if t != "" {
				types[t] = true
			}
		}
	}
	mode := "none"
	if names, _ := sysfs.ListDir(groups, false); len(names) > 0 || len(types) > 0 {
		mode = iommuMode(types)
	}
	f.series = append(f.series, f.iommuInfo.With(mode))
}

// iommuMode names the mode of a set of IOMMU group types.
func iommuMode(types map[string]bool) string {
	modes := map[string]bool{}
	for t := range types {
		switch t {
		case "DMA", "DMA-FQ":
			modes["translated"] = true
		case "identity":
			modes["passthrough"] = true
		default:
			modes[strings.ToLower(t)] = true
		}
	}
	if len(modes) == 0 {
		return "unknown" // groups exist, but no GPU's or HCA's group type could be read
	}
	if len(modes) > 1 {
		return "mixed"
	}
	for m := range modes {
		return m
	}
	return ""
}

func (f *gpuDirectFacts) add(b *exposition.Batch) {
	for _, s := range f.series {
		b.Add(s, 1)
	}
	if f.modDir == "" {
		return
	}
	for i, m := range peerMemModules {
		_, err := os.Lstat(filepath.Join(f.modDir, m))
		v := 0.0
		if err == nil {
			v = 1
		}
		b.Add(f.loaded[i], v)
	}
}
