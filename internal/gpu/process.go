package gpu

import (
	"slices"
	"time"
)

// ProcessSample is one of NVML's per-process utilization samples
// (nvmlProcessUtilizationSample_t): the share of one driver sampling
// period in which a kernel of the process ran (SM) and in which its
// kernels read or wrote device memory (Mem), in percent, stamped with the
// end of that period.
type ProcessSample struct {
	PID     uint32
	At      time.Time
	SM, Mem uint32
}

// ProcessActivity is a compute process's share of its GPU over a window.
type ProcessActivity struct {
	PID uint32
	// SM and Mem are ratios (0-1) of the window: a kernel of the process
	// resident, its kernels moving device memory.
	SM, Mem float64
	// Samples is how many of NVML's samples the window held for it.
	Samples int
}

// ProcessActivityOf turns the samples of one GPU that end in (to-window,
// to] into the activity of each of pids (the GPU's compute processes) and
// of each process that has samples there.
//
// A sample is the process's share of a driver sampling period. Drivers
// differ in how many they keep: some hold one per period for each process
// that ran in it (a process that ran nothing has none there), others, as
// recorded on the lent H100 (collector/fixtures/gpu/hang), hand back only
// each process's latest sample, its value smoothed over several seconds
// and its stamp the last time the process ran. So a process's share is the
// sum of its samples over the periods the window holds for it: the window
// over the period (the smallest gap between two stamps of one process),
// and at least the number of its own distinct stamps; a process with a
// single sample has the share that sample says. Stamps of different
// processes are not periods of each other: two processes that share a GPU
// are sampled at different instants. A process without a sample in the
// window ran nothing: 0.
func ProcessActivityOf(samples []ProcessSample, pids []uint32, to time.Time, window time.Duration) []ProcessActivity {
	from := to.Add(-window)
	type acc struct {
		sm, mem, n int
		stamps     []time.Time
	}
	by := map[uint32]*acc{}
	for _, s := range samples {
		if !s.At.After(from) || s.At.After(to) {
			continue
		}
		a := by[s.PID]
		if a == nil {
			a = &acc{}
			by[s.PID] = a
		}
		a.sm += int(min(s.SM, 100))
		a.mem += int(min(s.Mem, 100))
		a.n++
		a.stamps = append(a.stamps, s.At)
	}
	period := samplePeriod(samples, from, to)
	periodsOf := func(a *acc) float64 {
		slices.SortFunc(a.stamps, func(x, y time.Time) int { return x.Compare(y) })
		n := float64(len(slices.CompactFunc(a.stamps, func(x, y time.Time) bool { return x.Equal(y) })))
		if period > 0 && a.n > 1 {
			n = max(n, float64(window)/float64(period))
		}
		return n
	}
	seen := map[uint32]bool{}
	out := make([]ProcessActivity, 0, len(pids)+len(by))
	add := func(pid uint32) {
		if seen[pid] {
			return
		}
		seen[pid] = true
		p := ProcessActivity{PID: pid}
		if a := by[pid]; a != nil {
			periods := periodsOf(a)
			p.SM = min(float64(a.sm)/100/periods, 1)
			p.Mem = min(float64(a.mem)/100/periods, 1)
			p.Samples = a.n
		}
		out = append(out, p)
	}
	for _, pid := range pids {
		add(pid)
	}
	for _, s := range samples {
		if by[s.PID] != nil {
			add(s.PID)
		}
	}
	return out
}

// samplePeriod is the smallest gap between two stamps of one process in
// (from, to], 0 if no process has two.
func samplePeriod(samples []ProcessSample, from, to time.Time) time.Duration {
	last := map[uint32]time.Time{}
	var period time.Duration
	byTime := slices.Clone(samples)
	slices.SortFunc(byTime, func(a, b ProcessSample) int { return a.At.Compare(b.At) })
	for _, s := range byTime {
		if !s.At.After(from) || s.At.After(to) {
			continue
		}
		if t, ok := last[s.PID]; ok {
			if d := s.At.Sub(t); d > 0 && (period == 0 || d < period) {
				period = d
			}
		}
		last[s.PID] = s.At
	}
	return period
}
