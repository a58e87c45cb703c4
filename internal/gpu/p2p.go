package gpu

import "fmt"

// Peer-to-peer capabilities NVML reports for a GPU pair
// (nvmlGpuP2PCapsIndex_t, nvmlDeviceGetP2PStatus).
const (
	P2PRead    = iota // NVML_P2P_CAPS_INDEX_READ
	P2PWrite          // NVML_P2P_CAPS_INDEX_WRITE
	P2PNVLink         // NVML_P2P_CAPS_INDEX_NVLINK
	P2PAtomics        // NVML_P2P_CAPS_INDEX_ATOMICS
	P2PPCI            // NVML_P2P_CAPS_INDEX_PROP (formerly _PCI): P2P over PCIe
	NumP2PCaps
)

var p2pCapNames = [NumP2PCaps]string{"read", "write", "nvlink", "atomics", "pci"}

// P2PCapName returns the capability label value of P2P capability i
// (0 <= i < NumP2PCaps).
func P2PCapName(i int) string { return p2pCapNames[i] }

// P2PStatus is NVML's answer for one capability of a GPU pair
// (nvmlGpuP2PStatus_t): OK, or why not.
type P2PStatus int8

// The statuses, in NVML's order.
const (
	P2POK                      P2PStatus = iota // NVML_P2P_STATUS_OK
	P2PChipsetNotSupported                      // the chipset (root complex) does not support P2P
	P2PGPUNotSupported                          // the GPU does not
	P2PIOHTopologyNotSupported                  // the PCIe topology (e.g. across CPU sockets) does not
	P2PDisabledByRegkey                         // disabled by a driver registry key
	P2PNotSupported                             // not supported
	P2PStatusUnknown                            // NVML does not know
	numP2PStatus
)

var p2pStatusNames = [numP2PStatus]string{"ok", "chipset_not_supported", "gpu_not_supported",
	"ioh_topology_not_supported", "disabled_by_regkey", "not_supported", "unknown"}

// String returns the status label value; values NVML may add later are
// "unknown".
func (s P2PStatus) String() string {
	if s < 0 || s >= numP2PStatus {
		return "unknown"
	}
	return p2pStatusNames[s]
}

// P2PStatusByName is the inverse of String (-1 for a name it does not know).
func P2PStatusByName(name string) P2PStatus {
	for i, n := range p2pStatusNames {
		if n == name {
			return P2PStatus(i)
		}
	}
	return -1
}

func p2pCapByName(name string) int {
	for i, n := range p2pCapNames {
		if n == name {
			return i
		}
	}
	return -1
}

// P2PPeer is what NVML says about P2P from a GPU to one peer GPU. NVML's
// answer depends on the driver and the PCIe topology, not on load: backends
// ask once, when they start.
type P2PPeer struct {
	Index  int // the peer's index
	Status [NumP2PCaps]P2PStatus
	Known  [NumP2PCaps]bool // false where NVML returned an error
}

// fileP2P is a peer in the JSON of FileBackend: "p2p": [{"peer": 1,
// "status": {"read": "ok", "pci": "ok", "nvlink": "not_supported"}}];
// capabilities left out are not known.
type fileP2P struct {
	Peer   int               `json:"peer"`
	Status map[string]string `json:"status"`
}

func checkFileP2P(ps []fileP2P) error {
	for _, p := range ps {
		for c, st := range p.Status {
			if p2pCapByName(c) < 0 {
				return fmt.Errorf("peer %d: unknown P2P capability %q", p.Peer, c)
			}
			if P2PStatusByName(st) < 0 {
				return fmt.Errorf("peer %d: unknown P2P status %q", p.Peer, st)
			}
		}
	}
	return nil
}

func filePeers(ps []fileP2P) []P2PPeer {
	var out []P2PPeer
	for _, p := range ps {
		peer := P2PPeer{Index: p.Peer}
		for c, st := range p.Status {
			i := p2pCapByName(c)
			peer.Status[i], peer.Known[i] = P2PStatusByName(st), true
		}
		out = append(out, peer)
	}
	return out
}
