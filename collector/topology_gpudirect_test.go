package collector

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The fixture: IOMMU passthrough; mlx5_0, GPU0 and GPU1 in groups of their
// own (ACS on at their switch), mlx5_3, GPU4 and GPU5 in one group and GPU6,
// GPU7 in another (switches without ACS); nvidia_peermem loaded.
func TestTopologyGPUDirectFixture(t *testing.T) {
	c, errs := newTestTopology(t, fixtureSys)
	v := updateValues(t, c)
	for _, k := range []string{
		"fabric_iommu_info{passthrough}",
		"fabric_pci_device_iommu_group_info{gpu,0,0000:19:00.0,22,identity}",
		"fabric_pci_device_iommu_group_info{gpu,1,0000:1a:00.0,23,identity}",
		"fabric_pci_device_iommu_group_info{hca,mlx5_0,0000:18:00.0,21,identity}",
		"fabric_pci_device_iommu_group_info{gpu,4,0000:9b:00.0,61,identity}",
		"fabric_pci_device_iommu_group_info{gpu,5,0000:9c:00.0,61,identity}",
		"fabric_pci_device_iommu_group_info{hca,mlx5_3,0000:9a:00.0,61,identity}",
		"fabric_pci_device_iommu_group_info{gpu,7,0000:bf:00.0,81,identity}",
	} {
		if v[k] != 1 {
			t.Errorf("%s missing", k)
		}
	}
	if got, ok := v["fabric_gpu_peer_memory_module_loaded{nvidia_peermem}"]; !ok || got != 1 {
		t.Errorf("nvidia_peermem = %v, %v; want 1", got, ok)
	}
	if got, ok := v["fabric_gpu_peer_memory_module_loaded{nv_peer_mem}"]; !ok || got != 0 {
		t.Errorf("nv_peer_mem = %v, %v; want 0", got, ok)
	}
	n := 0
	for k := range v {
		if strings.HasPrefix(k, "fabric_pci_device_iommu_group_info{") {
			n++
		}
		if strings.HasPrefix(k, "fabric_pci_device_iommu_group_info{hca,mlx4_0") || strings.HasPrefix(k, "fabric_pci_device_iommu_group_info{netdev") {
			t.Errorf("%s: mlx4_0 has no group, netdevs are not reported", k)
		}
	}
	if n != 10 { // 8 GPUs, mlx5_0, mlx5_3
		t.Errorf("%d group series, want 10", n)
	}
	if errs.Value() != 0 {
		t.Errorf("%v read errors", errs.Value())
	}
}

// Translation, mixed modes, no IOMMU, a tree without kernel/; the module
// is looked at each scrape.
func TestTopologyGPUDirectModes(t *testing.T) {
	dir := copyTree(t, fixtureSys)
	groups := filepath.Join(dir, "kernel/iommu_groups")
	setType := func(g, typ string) {
		if err := os.WriteFile(filepath.Join(groups, g, "type"), []byte(typ+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range []string{"21", "22", "23", "41", "42", "61", "81"} {
		setType(g, "DMA-FQ")
	}
	c, _ := newTestTopology(t, dir)
	v := updateValues(t, c)
	if v["fabric_iommu_info{translated}"] != 1 || v["fabric_pci_device_iommu_group_info{gpu,3,0000:3d:00.0,42,DMA-FQ}"] != 1 {
		t.Errorf("translated: %v", keysWith(v, "iommu"))
	}
	if err := os.RemoveAll(filepath.Join(dir, "module/nvidia_peermem")); err != nil {
		t.Fatal(err)
	}
	if v = updateValues(t, c); v["fabric_gpu_peer_memory_module_loaded{nvidia_peermem}"] != 0 {
		t.Error("unloaded nvidia_peermem still seen")
	}

	setType("81", "identity")
	c, _ = newTestTopology(t, dir)
	if v = updateValues(t, c); v["fabric_iommu_info{mixed}"] != 1 {
		t.Errorf("mixed: %v", keysWith(v, "iommu"))
	}

	// IOMMU off: groups directory empty, no links.
	if err := os.RemoveAll(groups); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(groups, 0o755)
	c, _ = newTestTopology(t, dir)
	if v = updateValues(t, c); v["fabric_iommu_info{none}"] != 1 || len(keysWith(v, "iommu")) != 1 {
		t.Errorf("none: %v", keysWith(v, "iommu"))
	}

	// No kernel/ (not a full sysfs), no module/: nothing said.
	os.RemoveAll(filepath.Join(dir, "kernel"))
	os.RemoveAll(filepath.Join(dir, "module"))
	c, _ = newTestTopology(t, dir)
	v = updateValues(t, c)
	if k := keysWith(v, "iommu"); len(k) != 0 {
		t.Errorf("without kernel/: %v", k)
	}
	if k := keysWith(v, "peer_memory"); len(k) != 0 {
		t.Errorf("without module/: %v", k)
	}
}

func keysWith(v map[string]float64, sub string) []string {
	var out []string
	for k := range v {
		if strings.Contains(k, sub) {
			out = append(out, k)
		}
	}
	return out
}

// The lent H200 VM (Firecracker, kernel 6.18, run as root on 2026-12-02):
// the GPU 0000:00:06.0 sits on the root bus with no bridge above it,
// kernel/iommu_groups exists and is empty, class/iommu is empty, module/
// has nvidia and nvidia_uvm but no peer-memory module; config reads 4096
// bytes for the GPU as root (64 as nobody). The exporter must say: IOMMU
// none, no peer-memory module, and nothing about ACS (no bridge to read).
func TestGPUDirectH200VM(t *testing.T) {
	dir := t.TempDir()
	for p, v := range map[string]string{
		"devices/pci0000:00/0000:00:06.0/vendor": "0x10de", "devices/pci0000:00/0000:00:06.0/device": "0x2335",
		"devices/pci0000:00/0000:00:06.0/class": "0x030200", "devices/pci0000:00/0000:00:06.0/numa_node": "-1",
		"devices/pci0000:00/0000:00:06.0/local_cpulist": "0-15", "devices/pci0000:00/0000:00:06.0/config": strings.Repeat("\x00", 4096),
		"devices/pci0000:00/0000:00:06.0/current_link_speed": "32.0 GT/s PCIe", "devices/pci0000:00/0000:00:06.0/max_link_speed": "32.0 GT/s PCIe",
		"module/nvidia/initstate": "live", "module/nvidia_uvm/initstate": "live",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"kernel/iommu_groups", "class/iommu", "class/infiniband", "bus/pci/devices"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	if err := os.Symlink("../../../devices/pci0000:00/0000:00:06.0", filepath.Join(dir, "bus/pci/devices/0000:00:06.0")); err != nil {
		t.Fatal(err)
	}
	topo, errs := newTestTopology(t, dir)
	v := updateValues(t, topo)
	if v["fabric_iommu_info{none}"] != 1 || len(keysWith(v, "iommu")) != 1 {
		t.Errorf("IOMMU: %v", keysWith(v, "iommu"))
	}
	if got, ok := v["fabric_gpu_peer_memory_module_loaded{nvidia_peermem}"]; !ok || got != 0 {
		t.Errorf("nvidia_peermem %v %v, want 0", got, ok)
	}
	pv := updateValues(t, mustPCIe(t, dir))
	for k := range pv {
		if strings.Contains(k, "acs") || strings.Contains(k, "config_space") {
			t.Errorf("%s on a VM without bridges", k)
		}
	}
	if _, ok := pv["fabric_pcie_link_info{0000:00:06.0,endpoint,,0x10de,0x2335}"]; !ok {
		t.Errorf("the GPU is not on the pcie path: %v", pv)
	}
	if errs.Value() != 0 {
		t.Errorf("%v read errors", errs.Value())
	}
}

// A real IOMMU in translation mode (collector/fixtures/iommu-translated/
// README.md: a QEMU q35 guest with intel-iommu and an NVIDIA MX250 passed
// through, posted to qemu-devel): every group's type is DMA, so the
// exporter must say translated, with the GPU's group and its type.
func TestGPUDirectIOMMUTranslatedVM(t *testing.T) {
	dir := t.TempDir()
	write := func(p, v string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	// lspci's classes of the eight functions behind dmar0, and their groups.
	funcs := []struct{ bdf, vendor, class, group string }{
		{"0000:00:00.0", "0x8086", "0x060000", "0"}, // Host bridge
		{"0000:00:01.0", "0x1234", "0x030000", "1"}, // VGA compatible controller
		{"0000:00:02.0", "0x8086", "0x020000", "2"}, // Ethernet controller
		{"0000:00:03.0", "0x10de", "0x030200", "3"}, // 3D controller: NVIDIA GP108M [GeForce MX250]
		{"0000:00:04.0", "0x1af4", "0x010000", "4"}, // SCSI storage controller: virtio block
		{"0000:00:1f.0", "0x8086", "0x060100", "5"}, // ISA bridge
		{"0000:00:1f.2", "0x8086", "0x010601", "5"}, // SATA controller [AHCI mode]
		{"0000:00:1f.3", "0x8086", "0x0c0500", "5"}, // SMBus
	}
	for _, f := range funcs {
		dev := "devices/pci0000:00/" + f.bdf
		write(dev+"/vendor", f.vendor)
		write(dev+"/class", f.class)
		write(dev+"/numa_node", "-1")
		link("../../../devices/pci0000:00/"+f.bdf, "bus/pci/devices/"+f.bdf)
		link("../../../../devices/pci0000:00/"+f.bdf, "class/iommu/dmar0/devices/"+f.bdf)
		link("../../../../devices/pci0000:00/"+f.bdf, "kernel/iommu_groups/"+f.group+"/devices/"+f.bdf)
		link("../../../kernel/iommu_groups/"+f.group, dev+"/iommu_group")
	}
	for g := range 6 {
		write("kernel/iommu_groups/"+strconv.Itoa(g)+"/type", "DMA")
	}
	os.MkdirAll(filepath.Join(dir, "class/infiniband"), 0o755)
	os.MkdirAll(filepath.Join(dir, "module/nouveau"), 0o755)

	topo, errs := newTestTopology(t, dir)
	v := updateValues(t, topo)
	if v["fabric_iommu_info{translated}"] != 1 || len(keysWith(v, "fabric_iommu_info")) != 1 {
		t.Errorf("IOMMU: %v", keysWith(v, "iommu"))
	}
	if v["fabric_pci_device_iommu_group_info{gpu,0,0000:00:03.0,3,DMA}"] != 1 || len(keysWith(v, "iommu_group_info")) != 1 {
		t.Errorf("the GPU's group: %v", keysWith(v, "iommu_group_info"))
	}
	if got, ok := v["fabric_gpu_peer_memory_module_loaded{nvidia_peermem}"]; !ok || got != 0 {
		t.Errorf("nvidia_peermem %v %v, want 0", got, ok)
	}
	if errs.Value() != 0 {
		t.Errorf("%v read errors", errs.Value())
	}
}
