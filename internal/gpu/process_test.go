package gpu

import (
	"testing"
	"time"
)

func TestProcessActivityOf(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	var ss []ProcessSample
	// 167 ms periods over 5 s: pid 10 spins in every period (a resident
	// NCCL kernel), pid 11 runs in the first half only, pid 12 is a compute
	// process that launched nothing; pid 13 left samples before the window.
	period := 167 * time.Millisecond
	for i := 1; i <= 30; i++ {
		at := t0.Add(time.Duration(i) * period)
		ss = append(ss, ProcessSample{PID: 10, At: at, SM: 100, Mem: 1})
		if i <= 15 {
			ss = append(ss, ProcessSample{PID: 11, At: at, SM: 80, Mem: 40})
		}
	}
	ss = append(ss, ProcessSample{PID: 13, At: t0.Add(-time.Second), SM: 100})
	to := t0.Add(30 * period)
	got := map[uint32]ProcessActivity{}
	for _, p := range ProcessActivityOf(ss, []uint32{10, 11, 12}, to, 30*period) {
		got[p.PID] = p
	}
	near := func(a, b float64) bool { return a-b < 0.01 && b-a < 0.01 }
	if p := got[10]; !near(p.SM, 1) || !near(p.Mem, 0.01) || p.Samples != 30 {
		t.Errorf("spinning pid 10: %+v, want sm 1, mem 0.01, 30 samples", p)
	}
	if p := got[11]; !near(p.SM, 0.4) || !near(p.Mem, 0.2) {
		t.Errorf("half-busy pid 11: %+v, want sm 0.4 mem 0.2", p)
	}
	if p, ok := got[12]; !ok || p.SM != 0 || p.Samples != 0 {
		t.Errorf("idle compute pid 12: %+v (present %v), want 0 with no samples", p, ok)
	}
	if _, ok := got[13]; ok {
		t.Errorf("pid 13 has samples only before the window: %+v", got[13])
	}
	// A process alone on the GPU that ran in 3 of 30 periods: 0.1, not 1
	// (the window's periods come from the sampling period, not from the
	// stamps seen).
	var few []ProcessSample
	for i := 1; i <= 3; i++ {
		few = append(few, ProcessSample{PID: 20, At: t0.Add(time.Duration(i) * period), SM: 100})
	}
	if p := ProcessActivityOf(few, []uint32{20}, to, 30*period); len(p) != 1 || !near(p[0].SM, 0.1) {
		t.Errorf("pid 20, 3 busy periods of 30: %+v, want sm 0.1", p)
	}
	// No sample at all (NVML's NOT_FOUND): every compute process 0.
	if p := ProcessActivityOf(nil, []uint32{1, 2}, to, 5*time.Second); len(p) != 2 || p[0].SM != 0 || p[1].SM != 0 {
		t.Errorf("no samples: %+v", p)
	}
	// Percentages out of range are clamped.
	bad := []ProcessSample{{PID: 5, At: to, SM: 4000, Mem: 255}}
	if p := ProcessActivityOf(bad, nil, to, time.Second); len(p) != 1 || p[0].SM > 1 || p[0].Mem > 1 {
		t.Errorf("clamping: %+v", p)
	}
}
