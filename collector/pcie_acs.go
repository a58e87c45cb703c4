package collector

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// PCIe Access Control Services of the bridges (root ports, switch ports) on
// the paths the pcie collector walks. A port with P2P request redirect or
// completion redirect enabled sends every peer-to-peer request between the
// devices below it up to the root complex: GPU↔GPU P2P and GPUDirect RDMA
// across it are closed or slow. ACS lives in the PCIe extended
// configuration space (config, offset 0x100 on), which the kernel lets
// only CAP_SYS_ADMIN read: other readers get 64 bytes, and then nothing is
// said about ACS (fabric_pcie_config_space_readable_bytes says why), unless
// a privileged reader wrote the registers into --collector.pcie.acs-file
// (pcie_acs_file.go). Configuration space is read when the tree is rebuilt
// or that file changes, never per scrape.

type pcieACS struct {
	readable, present, capability, control *exposition.Family
	gpuPath, hcaPath                       *exposition.Family
	values                                 []pcieACSValue // read at rebuild
	// ACS control of each bridge whose extended space was read (0 without
	// ACS); a bridge missing here is unknown.
	ctl map[string]uint16
	// file is --collector.pcie.acs-file (pcie_acs_file.go): the registers
	// a privileged reader wrote, for the bridges this process cannot read.
	file     acsFile
	fileTime *exposition.Series
}

type pcieACSValue struct {
	s *exposition.Series
	v float64
}

func newPCIeACS(env Env, acsFilePath string) pcieACS {
	g := prometheus.GaugeValue
	return pcieACS{
		file: acsFile{path: acsFilePath},
		fileTime: env.Families.NewFamily("fabric_pcie_acs_file_timestamp_seconds",
			"When `fabric_exporter dump-acs` read the ACS registers in --collector.pcie.acs-file (Unix seconds): the exporter uses them for the bridges whose extended configuration space it cannot read itself. Absent without the flag, or while the file is missing or unreadable.",
			g).With(),
		readable: env.Families.NewFamily("fabric_pcie_config_space_readable_bytes",
			"Bytes of the bridge's PCI configuration space (sysfs config) the exporter could read, or the privileged reader of --collector.pcie.acs-file where the exporter got fewer: 4096 with the extended space, 256 for conventional PCI or a platform without extended access, 64 for a reader without CAP_SYS_ADMIN. ACS is known only at 4096.",
			g, "pci_bus_id"),
		present: env.Families.NewFamily("fabric_pcie_acs_present",
			"1 when the bridge has the PCIe Access Control Services extended capability, 0 when its extended capability list has none. Absent when the extended configuration space could not be read.",
			g, "pci_bus_id"),
		capability: env.Families.NewFamily("fabric_pcie_acs_capability_info",
			"ACS capability register of the bridge (as lspci prints ACSCap), one label per bit, \"1\" when the port implements it: sv (source validation), tb (translation blocking), rr (P2P request redirect), cr (P2P completion redirect), uf (upstream forwarding), ec (P2P egress control), dt (direct translated P2P). Absent without ACS or readable extended space.",
			g, acsInfoLabels...),
		control: env.Families.NewFamily("fabric_pcie_acs_control_info",
			"ACS control register of the bridge (as lspci prints ACSCtl), one label per bit as in fabric_pcie_acs_capability_info, \"1\" when enabled. rr or cr enabled redirects peer-to-peer traffic between the devices below the port up to the root complex: fabric_pcie_acs_control_info{rr=\"1\"}. Absent without ACS or readable extended space.",
			g, acsInfoLabels...),
		gpuPath: env.Families.NewFamily("fabric_pcie_gpu_p2p_acs_info",
			"Whether ACS lets P2P between two GPUs stay inside their PCIe switch: acs=redirect (a port between them has P2P request or completion redirect enabled; bridge names the first, from the GPU up), open (every port between them was read and none redirects), unknown (a port between them could not be read: see fabric_pcie_config_space_readable_bytes), root_complex (they meet only at the host bridge or beyond, where the chipset decides: fabric_gpu_p2p_status). bridge is \"\" unless acs=redirect.",
			g, "gpu", "peer_gpu", "acs", "bridge"),
		hcaPath: env.Families.NewFamily("fabric_pcie_gpu_rdma_acs_info",
			"Whether ACS lets GPUDirect RDMA between a GPU and an RDMA device stay inside their PCIe switch; acs and bridge as in fabric_pcie_gpu_p2p_acs_info.",
			g, "gpu", "device", "acs", "bridge"),
	}
}

// acsInfoLabels are the labels of the ACS register series: the bridge and
// one label per bit, in the register's order (one series per bridge and
// register instead of one per bit).
var acsInfoLabels = func() []string {
	l := []string{"pci_bus_id"}
	for i := 0; i < sysfs.NumACSBits; i++ {
		l = append(l, sysfs.ACSBitName(i))
	}
	return l
}()

// acsLabelValues returns the label values of a register: the bridge, then
// "1" or "0" per bit.
func acsLabelValues(bdf string, reg uint16) []string {
	v := []string{bdf}
	for i := 0; i < sysfs.NumACSBits; i++ {
		v = append(v, strconv.Itoa(int(reg>>i&1)))
	}
	return v
}

// rebuild reads the configuration space of every bridge in funcs.
func (a *pcieACS) rebuild(env Env, funcs []*pcieFunc) {
	a.values, a.ctl = a.values[:0], map[string]uint16{}
	for _, f := range funcs {
		if f.role == "endpoint" {
			continue
		}
		p := filepath.Join(f.dir, "config")
		cfg, err := readConfig(p)
		if err != nil {
			if !sysfs.IsGone(err) {
				skipValue(env, p, err)
			}
			continue
		}
		var acs sysfs.ACS
		found := false
		if e, ok := a.file.dump.bridges[f.bdf]; ok && a.file.ok && len(cfg) < sysfs.PCIConfigExtended && e.bytes > len(cfg) {
			// what the privileged reader got
			a.values = append(a.values, pcieACSValue{a.readable.With(f.bdf), float64(e.bytes)})
			if !e.extended {
				continue
			}
			acs, found = sysfs.ACS{Cap: e.cap, Control: e.ctl}, e.found
		} else {
			a.values = append(a.values, pcieACSValue{a.readable.With(f.bdf), float64(len(cfg))})
			acs, found, err = sysfs.ParsePCIACS(cfg)
			if errors.Is(err, sysfs.ErrNoExtendedConfig) {
				continue
			}
			if err != nil {
				skipValue(env, p, err)
				continue
			}
		}
		a.ctl[f.bdf] = acs.Control
		if !found {
			a.values = append(a.values, pcieACSValue{a.present.With(f.bdf), 0})
			continue
		}
		a.values = append(a.values, pcieACSValue{a.present.With(f.bdf), 1},
			pcieACSValue{a.capability.With(acsLabelValues(f.bdf, acs.Cap)...), 1},
			pcieACSValue{a.control.With(acsLabelValues(f.bdf, acs.Control)...), 1})
	}
}

// paths judges ACS between each GPU pair and each GPU and RDMA device.
func (a *pcieACS) paths(gpus, hcas []*pciLoc) {
	for _, g := range gpus {
		for _, p := range gpus {
			if p != g {
				st, br := a.between(g, p)
				a.values = append(a.values, pcieACSValue{a.gpuPath.With(g.name, p.name, st, br), 1})
			}
		}
		for _, h := range hcas {
			st, br := a.between(g, h)
			a.values = append(a.values, pcieACSValue{a.hcaPath.With(g.name, h.name, st, br), 1})
		}
	}
}

// between returns the ACS state of the ports that a request from x to y,
// or back, enters below the bridge where their paths meet.
func (a *pcieACS) between(x, y *pciLoc) (state, bridge string) {
	if x.root != y.root {
		return "root_complex", ""
	}
	k := 0
	for k < len(x.chain) && k < len(y.chain) && x.chain[k] == y.chain[k] {
		k++
	}
	if k == 0 {
		return "root_complex", "" // they meet at the host bridge
	}
	state = "open"
	for _, l := range [2]*pciLoc{x, y} {
		below := l.chain[k : len(l.chain)-1]   // the ports below the meeting bridge
		for i := len(below) - 1; i >= 0; i-- { // from the device up
			bdf := below[i]
			if !isBDF(bdf) {
				continue
			}
			c, ok := a.ctl[bdf]
			switch {
			case !ok:
				state = "unknown"
			case c&(sysfs.ACSRequestRedirect|sysfs.ACSCompletionRedirect) != 0:
				return "redirect", bdf
			}
		}
	}
	return state, ""
}

func (a *pcieACS) add(b *exposition.Batch) {
	for _, v := range a.values {
		b.Add(v.s, v.v)
	}
	if a.file.ok {
		b.Add(a.fileTime, float64(a.file.dump.time.Unix()))
	}
}

// readConfig reads up to 4096 bytes of a sysfs config file: as many as
// the kernel lets this reader have.
func readConfig(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, sysfs.PCIConfigExtended))
}
