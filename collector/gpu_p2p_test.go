package collector

import (
	"testing"
)

// The fixture's P2P matrix: ok over PCIe within a socket, IOH topology not
// supported across, NVLink only between GPU 0 and GPU 1.
func TestGPUP2PStatus(t *testing.T) {
	o := fixtureOptions(t, fixtureSys)
	o.GPU.Fixture = "fixtures/gpu/dcgm-8gpu.json"
	v := updateValues(t, newTestGPU(t, o))
	n := 0
	for k := range v {
		if len(k) > len("fabric_gpu_p2p_status{") && k[:len("fabric_gpu_p2p_status{")] == "fabric_gpu_p2p_status{" {
			n++
		}
	}
	if n != 8*7*5 {
		t.Errorf("%d P2P series, want 280 (8 GPUs × 7 peers × 5 capabilities)", n)
	}
	for _, k := range []string{
		"fabric_gpu_p2p_status{0,1,nvlink,ok}", "fabric_gpu_p2p_status{1,0,read,ok}", "fabric_gpu_p2p_status{2,3,pci,ok}",
		"fabric_gpu_p2p_status{2,3,nvlink,not_supported}", "fabric_gpu_p2p_status{3,4,read,ioh_topology_not_supported}",
		"fabric_gpu_p2p_status{7,0,write,ioh_topology_not_supported}", "fabric_gpu_p2p_status{6,7,atomics,not_supported}",
	} {
		if v[k] != 1 {
			t.Errorf("%s missing", k)
		}
	}
	for _, k := range []string{"fabric_gpu_p2p_status{0,0,read,ok}", "fabric_gpu_p2p_status{3,4,read,ok}"} {
		if _, ok := v[k]; ok {
			t.Errorf("%s present", k)
		}
	}
}
