package collector

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The fixture: ACS on (SV, RR, CR, UF) at the downstream ports of the
// socket-0 switch of GPU0, GPU1 and mlx5_0, off at the other switches; the
// same four enabled at the root ports; upstream ports without ACS; the old
// root ports of mlx4_0 and the ixgbe with 256 bytes (ACS unknown).
func TestPCIeACSFixture(t *testing.T) {
	c, errs := newTestPCIe(t, fixtureSys)
	v := updateValues(t, c)
	ctl := func(bdf, bit string) (float64, bool) { return acsBit(v, "control", bdf, bit) }
	for _, tc := range []struct {
		bdf, bit string
		want     float64
	}{
		{"0000:17:01.0", "rr", 1}, {"0000:17:01.0", "cr", 1}, {"0000:17:01.0", "sv", 1}, {"0000:17:01.0", "uf", 1},
		{"0000:17:01.0", "tb", 0}, {"0000:17:01.0", "ec", 0}, {"0000:17:01.0", "dt", 0},
		{"0000:17:00.0", "rr", 1}, {"0000:99:01.0", "rr", 0}, {"0000:99:01.0", "cr", 0}, {"0000:bb:00.0", "rr", 0},
		{"0000:15:01.0", "rr", 1}, {"0000:b7:01.0", "cr", 1},
	} {
		if got, ok := ctl(tc.bdf, tc.bit); !ok || got != tc.want {
			t.Errorf("control %s %s = %v (present %v), want %v", tc.bdf, tc.bit, got, ok, tc.want)
		}
	}
	if got, _ := acsBit(v, "capability", "0000:99:01.0", "dt"); got != 1 {
		t.Errorf("capability dt of 0000:99:01.0 = %v, want 1 (0x7f)", got)
	}
	if got, ok := acsBit(v, "capability", "0000:15:01.0", "tb"); !ok || got != 0 {
		t.Errorf("capability tb of the root port = %v, %v; want 0 (0x1d)", got, ok)
	}
	for bdf, want := range map[string]float64{"0000:16:00.0": 0, "0000:ba:00.0": 0, "0000:17:02.0": 1, "0000:be:00.0": 1} {
		if got, ok := v["fabric_pcie_acs_present{"+bdf+"}"]; !ok || got != want {
			t.Errorf("present %s = %v, %v; want %v", bdf, got, ok, want)
		}
	}
	// 256 bytes: readable size said, ACS neither present nor absent.
	if got := v["fabric_pcie_config_space_readable_bytes{0000:00:02.0}"]; got != 256 {
		t.Errorf("readable bytes of 0000:00:02.0 = %v, want 256", got)
	}
	if got := v["fabric_pcie_config_space_readable_bytes{0000:17:01.0}"]; got != 4096 {
		t.Errorf("readable bytes of 0000:17:01.0 = %v, want 4096", got)
	}
	if _, ok := acsBit(v, "control", "0000:00:1c.0", "rr"); ok {
		t.Errorf("ACS control of 0000:00:1c.0 present: unknown ACS (256 bytes)")
	}
	for _, k := range []string{"fabric_pcie_acs_present{0000:00:02.0}",
		"fabric_pcie_config_space_readable_bytes{0000:18:00.0}", "fabric_pcie_acs_present{0000:19:00.0}"} {
		if _, ok := v[k]; ok {
			t.Errorf("%s present: unknown ACS (256 bytes) or an endpoint", k)
		}
	}
	if errs.Value() != 0 {
		t.Errorf("%v read errors", errs.Value())
	}
}

// A reader without CAP_SYS_ADMIN gets 64 bytes: nothing about ACS is said.
// The configuration space is read when the tree changes, not per scrape.
func TestPCIeACSUnprivilegedAndCached(t *testing.T) {
	dir := copyTree(t, fixtureSys)
	p := filepath.Join(dir, "devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/config")
	if err := os.Truncate(p, 64); err != nil {
		t.Fatal(err)
	}
	c, _ := newTestPCIe(t, dir)
	v := updateValues(t, c)
	if got := v["fabric_pcie_config_space_readable_bytes{0000:17:01.0}"]; got != 64 {
		t.Errorf("readable bytes = %v, want 64", got)
	}
	for k := range v {
		if k == "fabric_pcie_acs_present{0000:17:01.0}" || strings.HasPrefix(k, "fabric_pcie_acs_control_info{0000:17:01.0,") {
			t.Errorf("%s from 64 bytes", k)
		}
	}
	// Turning ACS off in the file is not seen until the tree changes.
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	v = updateValues(t, c)
	if got := v["fabric_pcie_config_space_readable_bytes{0000:17:01.0}"]; got != 64 {
		t.Errorf("config read again without a tree change: %v", got)
	}
	if err := os.Remove(filepath.Join(dir, "bus/pci/devices/0000:19:00.0")); err != nil {
		t.Fatal(err)
	}
	v = updateValues(t, c)
	if _, ok := v["fabric_pcie_config_space_readable_bytes{0000:17:01.0}"]; ok {
		t.Error("config of 0000:17:01.0 still reported after the tree changed and the file went away")
	}
}

// The judgement per GPU pair and GPU↔RDMA device pair on the fixture:
// redirect below the socket-0 switch (GPU0, GPU1, mlx5_0), open below the
// others, root_complex where the paths meet at a host bridge or beyond.
func TestPCIeACSPaths(t *testing.T) {
	v := updateValues(t, mustPCIe(t, fixtureSys))
	for _, k := range []string{
		"fabric_pcie_gpu_p2p_acs_info{0,1,redirect,0000:17:01.0}",
		"fabric_pcie_gpu_p2p_acs_info{1,0,redirect,0000:17:02.0}",
		"fabric_pcie_gpu_rdma_acs_info{0,mlx5_0,redirect,0000:17:01.0}",
		"fabric_pcie_gpu_rdma_acs_info{1,mlx5_0,redirect,0000:17:02.0}",
		"fabric_pcie_gpu_p2p_acs_info{4,5,open,}",
		"fabric_pcie_gpu_rdma_acs_info{5,mlx5_3,open,}",
		"fabric_pcie_gpu_p2p_acs_info{6,7,open,}",         // PXB: two switches, none redirects
		"fabric_pcie_gpu_p2p_acs_info{2,3,root_complex,}", // PHB
		"fabric_pcie_gpu_p2p_acs_info{0,4,root_complex,}", // SYS
		"fabric_pcie_gpu_rdma_acs_info{0,mlx5_3,root_complex,}",
		"fabric_pcie_gpu_rdma_acs_info{2,mlx5_0,root_complex,}", // NODE
	} {
		if v[k] != 1 {
			t.Errorf("%s missing", k)
		}
	}
	n := 0
	for k := range v {
		if strings.HasPrefix(k, "fabric_pcie_gpu_p2p_acs_info{") {
			n++
		}
	}
	if n != 56 {
		t.Errorf("%d GPU pairs, want 56", n)
	}

	// GPU5's port unreadable, then ACS turned on at GPU4's port: unknown,
	// then redirect (a known redirect decides over an unknown port).
	dir := copyTree(t, fixtureSys)
	sw := filepath.Join(dir, "devices/pci0000:97/0000:97:01.0/0000:98:00.0")
	if err := os.Truncate(filepath.Join(sw, "0000:99:02.0/config"), 64); err != nil {
		t.Fatal(err)
	}
	v = updateValues(t, mustPCIe(t, dir))
	if v["fabric_pcie_gpu_p2p_acs_info{4,5,unknown,}"] != 1 || v["fabric_pcie_gpu_rdma_acs_info{4,mlx5_3,open,}"] != 1 {
		t.Errorf("unknown: %v", keysWith(v, "{4,"))
	}
	f, err := os.OpenFile(filepath.Join(sw, "0000:99:01.0/config"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0x1d, 0x00}, 0x14e); err != nil {
		t.Fatal(err)
	}
	f.Close()
	v = updateValues(t, mustPCIe(t, dir))
	for _, k := range []string{"fabric_pcie_gpu_p2p_acs_info{5,4,redirect,0000:99:01.0}", "fabric_pcie_gpu_rdma_acs_info{4,mlx5_3,redirect,0000:99:01.0}"} {
		if v[k] != 1 {
			t.Errorf("%s missing: %v", k, keysWith(v, "{4,"))
		}
	}
}

// acsBit reads one bit of an ACS register series (fabric_pcie_acs_<reg>_info,
// labels pci_bus_id then one per bit in the register's order).
func acsBit(v map[string]float64, reg, bdf, bit string) (float64, bool) {
	prefix := "fabric_pcie_acs_" + reg + "_info{" + bdf + ","
	for k := range v {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		bits := strings.Split(strings.TrimSuffix(k[len(prefix):], "}"), ",")
		for i, name := range acsInfoLabels[1:] {
			if name == bit && i < len(bits) {
				return map[string]float64{"1": 1, "0": 0}[bits[i]], true
			}
		}
	}
	return 0, false
}
