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
		if len(k) > len("fabric_gpu_p2p_status_info{") && k[:len("fabric_gpu_p2p_status_info{")] == "fabric_gpu_p2p_status_info{" {
			n++
		}
	}
	if n != 8*7 {
		t.Errorf("%d P2P series, want 56 (8 GPUs × 7 peers, one series per ordered pair)", n)
	}
	// labels: gpu, peer_gpu, read, write, nvlink, atomics, pci
	for _, k := range []string{
		"fabric_gpu_p2p_status_info{0,1,ok,ok,ok,not_supported,ok}",
		"fabric_gpu_p2p_status_info{2,3,ok,ok,not_supported,not_supported,ok}",
		"fabric_gpu_p2p_status_info{3,4,ioh_topology_not_supported,ioh_topology_not_supported,not_supported,ioh_topology_not_supported,ioh_topology_not_supported}",
	} {
		if v[k] != 1 {
			t.Errorf("%s missing", k)
		}
	}
	for k := range v {
		if len(k) > len("fabric_gpu_p2p_status_info{0,0,") && k[:len("fabric_gpu_p2p_status_info{0,0,")] == "fabric_gpu_p2p_status_info{0,0," {
			t.Errorf("%s: a GPU is no peer of itself", k)
		}
	}
}
