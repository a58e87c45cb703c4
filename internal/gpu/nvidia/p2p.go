//go:build cgo && !nogpu

package nvidia

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/fabric-exporter/fabric_exporter/internal/gpu"
)

// p2pCaps maps gpu.P2P* capabilities to NVML's capability indices.
var p2pCaps = [gpu.NumP2PCaps]nvml.GpuP2PCapsIndex{
	gpu.P2PRead:    nvml.P2P_CAPS_INDEX_READ,
	gpu.P2PWrite:   nvml.P2P_CAPS_INDEX_WRITE,
	gpu.P2PNVLink:  nvml.P2P_CAPS_INDEX_NVLINK,
	gpu.P2PAtomics: nvml.P2P_CAPS_INDEX_ATOMICS,
	gpu.P2PPCI:     nvml.P2P_CAPS_INDEX_PROP,
}

// p2pStatus maps NVML's status to gpu.P2PStatus; values a later NVML may
// add are unknown.
func p2pStatus(s nvml.GpuP2PStatus) gpu.P2PStatus {
	switch s {
	case nvml.P2P_STATUS_OK:
		return gpu.P2POK
	case nvml.P2P_STATUS_CHIPSET_NOT_SUPPORTED:
		return gpu.P2PChipsetNotSupported
	case nvml.P2P_STATUS_GPU_NOT_SUPPORTED:
		return gpu.P2PGPUNotSupported
	case nvml.P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED:
		return gpu.P2PIOHTopologyNotSupported
	case nvml.P2P_STATUS_DISABLED_BY_REGKEY:
		return gpu.P2PDisabledByRegkey
	case nvml.P2P_STATUS_NOT_SUPPORTED:
		return gpu.P2PNotSupported
	}
	return gpu.P2PStatusUnknown
}

// readPeers asks NVML once, at start, for the P2P status of every ordered
// GPU pair and capability (n·(n-1)·5 calls: 280 for 8 GPUs). A capability
// NVML answers with an error is left unknown.
func readPeers(gpus []*nvmlGPU) {
	for _, g := range gpus {
		g.dev.Peers = nil
		for _, p := range gpus {
			if p == g {
				continue
			}
			peer := gpu.P2PPeer{Index: p.dev.Index}
			any := false
			for i, idx := range p2pCaps {
				st, ret := g.h.GetP2PStatus(p.h, idx)
				if ret != nvml.SUCCESS {
					continue
				}
				peer.Status[i], peer.Known[i], any = p2pStatus(st), true, true
			}
			if any {
				g.dev.Peers = append(g.dev.Peers, peer)
			}
		}
	}
}
