// Rounds: the rule groups' evaluations put side by side in the
// evaluation interval's rounds, so that a run shows its peak round (the
// groups whose evaluations start in the same interval, and wait for the
// same CPUs) and not only each group's mean.

package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"
)

// evaluation is one evaluation of one rule group, as /api/v1/rules shows
// it: when it started and how long it took.
type evaluation struct {
	Group string
	At    time.Time
	S     float64 // seconds
}

// roundStats: every round of the window that held an evaluation, its
// summed evaluation time (group-seconds), and the worst of them.
type roundStats struct {
	Rounds    int      `json:"rounds"`
	MeanS     float64  `json:"mean_s"`      // mean over the rounds of the summed evaluation time
	PeakS     float64  `json:"peak_s"`      // the round with the most
	PeakAt    string   `json:"peak_at"`     // its start (UTC)
	PeakSpanS float64  `json:"peak_span_s"` // from the first start to the last end in that round, wall seconds
	PeakParts []string `json:"peak_groups"` // "group s", slowest first
}

// rounds buckets evaluations into the interval's rounds (aligned on the
// Unix epoch, as Prometheus aligns its groups before their offset) and
// keeps only whole rounds: those that start at or after from and end by to.
func rounds(evs []evaluation, interval time.Duration, from, to time.Time) roundStats {
	type round struct {
		sum        float64
		first, end time.Time
		parts      []evaluation
	}
	byRound := map[int64]*round{}
	for _, e := range evs {
		k := e.At.UnixNano() / int64(interval)
		start := time.Unix(0, k*int64(interval))
		if start.Before(from) || start.Add(interval).After(to) {
			continue
		}
		r := byRound[k]
		if r == nil {
			r = &round{first: e.At}
			byRound[k] = r
		}
		r.sum += e.S
		if e.At.Before(r.first) {
			r.first = e.At
		}
		if end := e.At.Add(time.Duration(e.S * float64(time.Second))); end.After(r.end) {
			r.end = end
		}
		r.parts = append(r.parts, e)
	}
	var st roundStats
	var peak *round
	var peakK int64
	for k, r := range byRound {
		st.Rounds++
		st.MeanS += r.sum
		if peak == nil || r.sum > peak.sum || (r.sum == peak.sum && k < peakK) {
			peak, peakK = r, k
		}
	}
	if peak == nil {
		return st
	}
	st.MeanS /= float64(st.Rounds)
	st.PeakS = peak.sum
	st.PeakAt = time.Unix(0, peakK*int64(interval)).UTC().Format("15:04:05")
	st.PeakSpanS = peak.end.Sub(peak.first).Seconds()
	sort.Slice(peak.parts, func(i, j int) bool { return peak.parts[i].S > peak.parts[j].S })
	for _, e := range peak.parts {
		st.PeakParts = append(st.PeakParts, fmt.Sprintf("%s %.2f", strings.TrimPrefix(e.Group, "fabric_exporter."), e.S))
	}
	return st
}

// offsets: each group's start within its interval (seconds after the
// interval's epoch-aligned start), from its last evaluation: where
// Prometheus placed it (a hash of the group's name and file).
func offsets(last map[string]evaluation, every map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for g, e := range last {
		if every[g] <= 0 {
			continue
		}
		iv := int64(every[g] * float64(time.Second))
		out[g] = float64(e.At.UnixNano()%iv) / float64(time.Second)
	}
	return out
}

// slowest lists the n longest evaluations as "group s at hh:mm:ss".
func slowest(evs []evaluation, n int) []string {
	s := append([]evaluation(nil), evs...)
	sort.Slice(s, func(i, j int) bool { return s[i].S > s[j].S })
	var out []string
	for i, e := range s {
		if i == n {
			break
		}
		out = append(out, fmt.Sprintf("%s %.2f at %s", strings.TrimPrefix(e.Group, "fabric_exporter."), e.S, e.At.UTC().Format("15:04:05")))
	}
	return out
}

// placementPeak: Prometheus starts each group at an offset within its
// interval that is a hash of the group's name and its file's path, so the
// groups that share a round differ from one installation to the next (the
// same rules under /etc/prometheus/rules or a ConfigMap mount fall
// differently). placementPeak draws the offsets uniformly, trials times,
// puts each group's mean evaluation time in the rounds it starts in over
// one period of all intervals, and returns the mean and the 99th
// percentile of the peak round, and the worst case (every group in one
// round). Groups are those of one measured window.
func placementPeak(groups []groupStat, interval time.Duration, trials int, seed uint64) (mean, p99, worst float64) {
	iv := interval.Seconds()
	period := 1
	for _, g := range groups {
		k := max(1, int(math.Round(g.EveryS/iv)))
		period = lcm(period, k)
		worst += g.MeanS
	}
	rnd := rand.New(rand.NewPCG(seed, 1))
	peaks := make([]float64, trials)
	load := make([]float64, period)
	for t := range peaks {
		clear(load)
		for _, g := range groups {
			k := max(1, int(math.Round(g.EveryS/iv)))
			first := rnd.IntN(k)
			for r := first; r < period; r += k {
				load[r] += g.MeanS
			}
		}
		peaks[t] = slices.Max(load)
		mean += peaks[t]
	}
	mean /= float64(trials)
	slices.Sort(peaks)
	p99 = peaks[min(trials-1, int(math.Ceil(0.99*float64(trials)))-1)]
	return mean, p99, worst
}

func lcm(a, b int) int {
	g, x := a, b
	for x != 0 {
		g, x = x, g%x
	}
	return a / g * b
}
