package gpu

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// recordedRecords reads collector/fixtures/gpu/hang/nvml-samples.jsonl:
// what NVML answered each second on the lent H100 (driver 5xx,
// nvmlDeviceGetProcessUtilization from 0) while
// tools/gpudrill/record-states.sh took a two-rank decode job (two processes
// on GPU 0) through its states. That driver hands back one sample per
// process, its latest: a share smoothed over seconds, stamped when the
// process last ran.
type record struct {
	T       time.Time
	Label   string
	Samples []ProcessSample
}

func recordedRecords(t *testing.T) []record {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "collector", "fixtures", "gpu", "hang", "nvml-samples.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r struct {
			T       time.Time `json:"t"`
			Label   string    `json:"label"`
			Samples []struct {
				PID     uint32 `json:"pid"`
				TS      int64  `json:"ts_us"`
				SM, Mem uint32
			} `json:"samples"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		rec := record{T: r.T, Label: r.Label}
		for _, s := range r.Samples {
			rec.Samples = append(rec.Samples, ProcessSample{PID: s.PID, At: time.UnixMicro(s.TS), SM: s.SM, Mem: s.Mem})
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("no records")
	}
	return out
}

// The per-process figures, as the exporter computes them from each of
// the recorded answers (a 5 s window ending when it was read), tell two
// ranks on one GPU apart: in a hang (eager, and a CUDA-graph replay that
// stops) the waiting rank has its kernel resident all the time and the
// rank that holds it up none; a healthy job's ranks share the GPU (their
// shares add up to it); a SIGSTOPped rank keeps its last kernels resident
// (the GPU time-slices the two: the stopped process is told by its state,
// not by its GPU share); an idle job's shares fall to nothing. And how
// long after the fault the figures show the hang: NVML smooths a
// process's share over seconds, so it is not at once.
func TestProcessActivityOnRecordedStates(t *testing.T) {
	recs := recordedRecords(t)
	const window = 5 * time.Second
	shares := func(r record, pids []uint32) map[uint32]float64 {
		got := map[uint32]float64{}
		for _, a := range ProcessActivityOf(r.Samples, pids, r.T, window) {
			got[a.PID] = a.SM
		}
		return got
	}
	lastOf := func(state string) record {
		for i := len(recs) - 1; i >= 0; i-- {
			if recs[i].Label == state {
				return recs[i]
			}
		}
		t.Fatalf("%s: not recorded", state)
		return record{}
	}
	type want struct{ min, max float64 }
	resident := want{0.05, 0.9}
	for _, c := range []struct {
		state string
		pids  [2]uint32
		want  [2]want
	}{
		{"eager-healthy", [2]uint32{498, 499}, [2]want{resident, resident}},
		{"eager-idle", [2]uint32{498, 499}, [2]want{{0, 0.05}, {0, 0.05}}},
		{"eager-hang", [2]uint32{498, 499}, [2]want{{0.9, 1}, {0, 0.05}}},
		{"eager-sigstop", [2]uint32{498, 499}, [2]want{resident, resident}},
		{"eager-continued", [2]uint32{498, 499}, [2]want{resident, resident}},
		{"graph-healthy", [2]uint32{696, 697}, [2]want{resident, resident}},
		{"graph-hang", [2]uint32{696, 697}, [2]want{{0.9, 1}, {0, 0.05}}},
		{"graph-recovered", [2]uint32{696, 697}, [2]want{resident, resident}},
		{"graph-idle", [2]uint32{696, 697}, [2]want{{0, 0.05}, {0, 0.1}}},
	} {
		got := shares(lastOf(c.state), c.pids[:])
		sum := 0.0
		for i, pid := range c.pids {
			v, ok := got[pid]
			if !ok || v < c.want[i].min || v > c.want[i].max {
				t.Errorf("%s: pid %d share %.3f (present %v), want %.2f-%.2f", c.state, pid, v, ok, c.want[i].min, c.want[i].max)
			}
			sum += v
		}
		if sum > 1.01 {
			t.Errorf("%s: shares add up to %.3f of one GPU", c.state, sum)
		}
		t.Logf("%s: %v", c.state, got)
	}
	// From the first record of a hang state to the first where the waiting
	// rank has a kernel resident (> 0.05) and the other none (<= 0.05):
	// the held rank's last sample keeps the stamp of its last kernel, so
	// it leaves the 5 s window 5 s after the fault (its smoothed value
	// would take 12 s to fall); the waiting rank's share rises to 1 over
	// 12 s, which is why the rules take a resident kernel on a spinning
	// GPU as waiting, not a share of 0.9. Never in a healthy state.
	for _, c := range []struct {
		state         string
		waiting, held uint32
		within        time.Duration
	}{
		{"eager-hang", 498, 499, 10 * time.Second},
		{"graph-hang", 696, 697, 10 * time.Second},
	} {
		var start time.Time
		var took time.Duration = -1
		for _, r := range recs {
			if r.Label != c.state {
				continue
			}
			if start.IsZero() {
				start = r.T
			}
			if g := shares(r, []uint32{c.waiting, c.held}); g[c.waiting] > 0.05 && g[c.held] <= 0.05 {
				took = r.T.Sub(start)
				break
			}
		}
		if took < 0 || took > c.within {
			t.Errorf("%s: the per-process figures showed the hang after %v, want within %v", c.state, took, c.within)
		}
		t.Logf("%s: the per-process figures show the hang %v after the state began", c.state, took.Round(time.Second))
	}
	// A rank that resumes reads idle for a second or two while its
	// smoothed share rises from 0 (graph-recovered: 0.03 after 1 s): the
	// healthy states are checked from 3 s after they begin.
	began := map[string]time.Time{}
	for _, r := range recs {
		if _, ok := began[r.Label]; !ok {
			began[r.Label] = r.T
		}
		if r.Label != "eager-healthy" && r.Label != "graph-healthy" && r.Label != "eager-continued" && r.Label != "graph-recovered" {
			continue
		}
		if r.T.Sub(began[r.Label]) < 3*time.Second {
			continue
		}
		var pids []uint32
		for _, s := range r.Samples {
			pids = append(pids, s.PID)
		}
		for pid, v := range shares(r, pids) {
			if v <= 0.05 {
				t.Errorf("%s at %v: pid %d reads idle (%.3f) in a healthy job", r.Label, r.T, pid, v)
			}
		}
	}
}
