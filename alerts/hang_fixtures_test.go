package alerts

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The hang thresholds of config.yml against the fields recorded on the
// lent H100 (collector/fixtures/gpu/hang: the exporter's scrape at the end
// of each state of tools/gpudrill/record-states.sh, two ranks of a decode
// job on one GPU, eager and replayed from a CUDA graph): only the hung
// states spin (a rank that stopped launching, a SIGSTOPped rank); the
// healthy states make progress; the idle job neither. RAS's collective
// counts do not tell the graph states apart (TestGraphCountsFlat).
func TestHangThresholdsOnRecordedStates(t *testing.T) {
	h := DefaultConfig().Hang
	for _, c := range []struct {
		state              string
		spinning, progress bool
	}{
		{"eager-healthy", false, true},
		{"eager-busy-again", false, true},
		{"eager-continued", false, true},
		{"eager-idle", false, false},
		{"eager-hang", true, false},
		{"eager-sigstop", true, false},
		{"eager-recovered", false, true},
		{"graph-healthy", false, true},
		{"graph-hang", true, false},
		{"graph-recovered", false, true},
		{"graph-idle", false, false},
	} {
		v := recordedGPUFields(t, filepath.Join("..", "collector", "fixtures", "gpu", "hang", c.state+".prom"))
		busy := v["fabric_gpu_graphics_engine_active_ratio"] >= h.BusyMin || v["fabric_gpu_utilization_ratio"] >= h.BusyMin
		spinning := busy && v["fabric_gpu_tensor_active_ratio"] < h.TensorMax && v["fabric_gpu_dram_active_ratio"] < h.DRAMMax
		progress := v["fabric_gpu_tensor_active_ratio"] >= h.TensorMax || v["fabric_gpu_dram_active_ratio"] >= h.DRAMMax
		if spinning != c.spinning || progress != c.progress {
			t.Errorf("%s: spinning %v progress %v, want %v %v (fields %v)", c.state, spinning, progress, c.spinning, c.progress, v)
		}
	}
}

// recordedGPUFields reads GPU 0's activity fields from a scrape.
func recordedGPUFields(t *testing.T, path string) map[string]float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") || !strings.Contains(l, `gpu="0"`) {
			continue
		}
		name, rest, ok := strings.Cut(l, "{")
		if !ok {
			continue
		}
		_, val, ok := strings.Cut(rest, "} ")
		if v, err := strconv.ParseFloat(val, 64); ok && err == nil && strings.HasPrefix(name, "fabric_gpu_") && strings.HasSuffix(name, "_ratio") {
			out[name] = v
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no GPU fields", path)
	}
	return out
}

// RAS counts no graph-replayed collective (NVIDIA/nccl: graph-captured
// collectives are left out of comm->seqNumber's count): the recorded
// CUDA-graph job's AllReduce counts are the same healthy and hung, so no
// rule may read a flat count as idle or a hang.
func TestGraphCountsFlat(t *testing.T) {
	counts := func(state string) string {
		b, err := os.ReadFile(filepath.Join("..", "collector", "fixtures", "gpu", "hang", state+".prom"))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "fabric_nccl_ras_rank_collectives_total{") && strings.Contains(l, `op="AllReduce"`) {
				out = append(out, l)
			}
		}
		if len(out) == 0 {
			t.Fatalf("%s: no AllReduce counts", state)
		}
		return strings.Join(out, "\n")
	}
	if h, g := counts("graph-healthy"), counts("graph-hang"); h != g {
		t.Errorf("graph counts moved between healthy and hung:\n%s\n--\n%s", h, g)
	}
	if h, g := counts("eager-healthy"), counts("eager-hang"); h == g {
		t.Errorf("eager counts did not move:\n%s", h)
	}
}
