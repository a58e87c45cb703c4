package gpu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeJSON(t *testing.T, s string) string {
	p := filepath.Join(t.TempDir(), "gpu.json")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFileBackendP2P(t *testing.T) {
	fb, err := NewFileBackend(writeJSON(t, `{"source":"nvml","gpus":[{"index":0,"uuid":"GPU-a",
		"p2p":[{"peer":1,"status":{"read":"ok","pci":"ok","nvlink":"not_supported"}},
		       {"peer":2,"status":{"read":"ioh_topology_not_supported"}}]},{"index":1,"uuid":"GPU-b"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := fb.Snapshot()
	p := s.Devices[0].Peers
	if len(p) != 2 || p[0].Index != 1 || !p[0].Known[P2PRead] || p[0].Status[P2PRead] != P2POK ||
		p[0].Status[P2PNVLink] != P2PNotSupported || p[0].Known[P2PWrite] || p[1].Status[P2PRead] != P2PIOHTopologyNotSupported {
		t.Errorf("peers %+v", p)
	}
	if len(s.Devices[1].Peers) != 0 {
		t.Errorf("GPU 1 peers %+v", s.Devices[1].Peers)
	}
	for _, bad := range []string{`"status":{"reed":"ok"}`, `"status":{"read":"fine"}`} {
		_, err := NewFileBackend(writeJSON(t, `{"gpus":[{"index":0,"p2p":[{"peer":1,`+bad+`}]}]}`))
		if err == nil || !strings.Contains(err.Error(), "unknown P2P") {
			t.Errorf("%s: err %v", bad, err)
		}
	}
	if P2PStatus(42).String() != "unknown" || P2PStatusByName("disabled_by_regkey") != P2PDisabledByRegkey || P2PCapName(P2PPCI) != "pci" {
		t.Error("names")
	}
}
