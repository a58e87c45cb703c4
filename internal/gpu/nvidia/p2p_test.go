//go:build cgo && !nogpu

package nvidia

import (
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/fabric-exporter/fabric_exporter/internal/gpu"
)

// Three GPUs: 0 and 1 under one switch (P2P over PCIe ok, no NVLink,
// atomics an NVML error), 2 on the other socket (IOH topology not
// supported); 1→2 answers a status this code does not know.
func TestNVMLP2PStatus(t *testing.T) {
	f := &fakeNVML{lost: map[int]bool{}, metrics: func(*nvml.GpmMetricsGetType) nvml.Return { return nvml.SUCCESS }}
	asked := map[[2]int]int{}
	f.p2p = func(a, b int, c nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
		asked[[2]int{a, b}]++
		switch {
		case a == b || b < 0:
			t.Errorf("P2P asked from %d to %d", a, b)
		case c == nvml.P2P_CAPS_INDEX_ATOMICS:
			return 0, nvml.ERROR_NOT_SUPPORTED
		case c == nvml.P2P_CAPS_INDEX_NVLINK:
			return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
		case a == 1 && b == 2:
			return 42, nvml.SUCCESS
		case a == 2 || b == 2:
			return nvml.P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED, nvml.SUCCESS
		case c == nvml.P2P_CAPS_INDEX_WRITE && a == 1:
			return nvml.P2P_STATUS_DISABLED_BY_REGKEY, nvml.SUCCESS
		}
		return nvml.P2P_STATUS_OK, nvml.SUCCESS
	}
	s, err := startNVML(f.lib(3, false, nvml.SUCCESS), time.Hour, false, nopLog)
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	d := s.devices()
	if len(asked) != 6 || asked[[2]int{0, 1}] != gpu.NumP2PCaps {
		t.Errorf("asked %v, want each ordered pair once per capability", asked)
	}
	get := func(a, b, c int) string {
		for _, p := range d[a].Peers {
			if p.Index == b {
				if !p.Known[c] {
					return "-"
				}
				return p.Status[c].String()
			}
		}
		return "absent"
	}
	for _, tc := range []struct {
		a, b, c int
		want    string
	}{
		{0, 1, gpu.P2PRead, "ok"}, {0, 1, gpu.P2PWrite, "ok"}, {0, 1, gpu.P2PPCI, "ok"},
		{0, 1, gpu.P2PNVLink, "not_supported"}, {0, 1, gpu.P2PAtomics, "-"},
		{1, 0, gpu.P2PWrite, "disabled_by_regkey"}, {1, 0, gpu.P2PRead, "ok"},
		{0, 2, gpu.P2PRead, "ioh_topology_not_supported"}, {2, 0, gpu.P2PPCI, "ioh_topology_not_supported"},
		{1, 2, gpu.P2PRead, "unknown"}, {0, 0, gpu.P2PRead, "absent"},
	} {
		if got := get(tc.a, tc.b, tc.c); got != tc.want {
			t.Errorf("GPU %d → %d %s = %s, want %s", tc.a, tc.b, gpu.P2PCapName(tc.c), got, tc.want)
		}
	}
	// Asked once: a later round does not ask again and keeps the answers.
	s.sample(time.Now())
	if asked[[2]int{0, 1}] != gpu.NumP2PCaps || get(0, 2, gpu.P2PRead) != "ioh_topology_not_supported" {
		t.Errorf("after a second round: asked %v", asked)
	}
}

// An NVML that answers no P2P query gives no peers.
func TestNVMLP2PUnsupported(t *testing.T) {
	f := &fakeNVML{lost: map[int]bool{}, metrics: func(*nvml.GpmMetricsGetType) nvml.Return { return nvml.SUCCESS }}
	s, err := startNVML(f.lib(2, false, nvml.SUCCESS), time.Hour, false, nopLog)
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	if p := s.devices()[0].Peers; len(p) != 0 {
		t.Errorf("peers %+v", p)
	}
}
