package analyze

import (
	"fmt"
	"sort"
)

// Direction selects which RDMA bytes the fits use.
type Direction string

const (
	Transmitted Direction = "tx"
	Received    Direction = "rx"
	Both        Direction = "both"
)

// ParseDirection checks a --direction value.
func ParseDirection(s string) (Direction, error) {
	switch d := Direction(s); d {
	case Transmitted, Received, Both:
		return d, nil
	}
	return "", fmt.Errorf("direction %q: want tx, rx or both", s)
}

// Bytes picks the direction's bytes.
func (d Direction) Bytes(b RailBytes) float64 {
	switch d {
	case Received:
		return b.Rx
	case Both:
		return b.Tx + b.Rx
	}
	return b.Tx
}

func (d Direction) describe() string {
	switch d {
	case Received:
		return "received"
	case Both:
		return "transmitted + received"
	}
	return "transmitted"
}

// Gbps is bytes·8/seconds/1e9.
func Gbps(bytes, seconds float64) float64 { return bytes * 8 / seconds / 1e9 }

// Result is the analysis of one sweep.
type Result struct {
	Name      string
	Direction Direction
	// Windows sorted by concurrency.
	Windows []Measurement
	// Rails present in every window, sorted.
	Rails []RailKey
	// BytesPerToken fits each rail's bytes against the window's input tokens.
	BytesPerToken map[RailKey]LinearFit
	// Saturation fits each rail's Gbit/s against concurrency; SatErr holds
	// why a rail has no fit.
	Saturation map[RailKey]SaturationFit
	SatErr     map[RailKey]error
	// TPSSaturation fits input tokens/s against concurrency.
	TPSSaturation SaturationFit
	TPSSatErr     error
	// Knee uses the mean Gbit/s of the rails; RailKnees each rail's own.
	Knee      Knee
	RailKnees map[RailKey]Knee
}

// Gbps is the rail's throughput in the window.
func (r *Result) Gbps(m Measurement, k RailKey) float64 {
	return Gbps(r.Direction.Bytes(m.Rails[k]), m.Seconds())
}

// MeanGbps is the mean throughput of the rails in the window.
func (r *Result) MeanGbps(m Measurement) float64 {
	var s float64
	for _, k := range r.Rails {
		s += r.Gbps(m, k)
	}
	return s / float64(len(r.Rails))
}

// MeanBytesPerToken is the mean fitted slope of the rails.
func (r *Result) MeanBytesPerToken() float64 {
	var s float64
	for _, k := range r.Rails {
		s += r.BytesPerToken[k].Slope
	}
	return s / float64(len(r.Rails))
}

// MeanAsymptote is the mean asymptote over the rails that have a fit (0
// when none has).
func (r *Result) MeanAsymptote() (a float64, n int) {
	for _, k := range r.Rails {
		if f, ok := r.Saturation[k]; ok {
			a += f.A
			n++
		}
	}
	if n == 0 {
		return 0, 0
	}
	return a / float64(n), n
}

// Concurrencies lists the windows' concurrencies.
func (r *Result) Concurrencies() []int {
	var c []int
	for _, m := range r.Windows {
		c = append(c, m.Concurrency)
	}
	return c
}

// Analyze fits the measurements of one sweep.
func Analyze(name string, ms []Measurement, dir Direction, kneeThreshold float64) (*Result, error) {
	if len(ms) == 0 {
		return nil, fmt.Errorf("no windows")
	}
	r := &Result{
		Name: name, Direction: dir,
		Windows:       append([]Measurement(nil), ms...),
		BytesPerToken: map[RailKey]LinearFit{},
		Saturation:    map[RailKey]SaturationFit{},
		SatErr:        map[RailKey]error{},
		RailKnees:     map[RailKey]Knee{},
	}
	sort.SliceStable(r.Windows, func(i, j int) bool { return r.Windows[i].Concurrency < r.Windows[j].Concurrency })

	// Every rail must be in every window: a rail missing from some windows
	// means a node or port was not scraped, and its fits would mix sweeps.
	count := map[RailKey]int{}
	for _, m := range r.Windows {
		for k := range m.Rails {
			count[k]++
		}
	}
	for k, n := range count {
		if n != len(r.Windows) {
			for _, m := range r.Windows {
				if _, ok := m.Rails[k]; !ok {
					return nil, windowErr(m.Window, "no data for rail %s, which other windows have", k)
				}
			}
		}
		r.Rails = append(r.Rails, k)
	}
	sort.Slice(r.Rails, func(i, j int) bool { return r.Rails[i].String() < r.Rails[j].String() })

	var conc []int
	var cf, tokens, tps []float64
	for _, m := range r.Windows {
		conc = append(conc, m.Concurrency)
		cf = append(cf, float64(m.Concurrency))
		tokens = append(tokens, m.InputTokens)
		tps = append(tps, m.InputTPS())
	}
	if len(r.Windows) >= 2 {
		for _, k := range r.Rails {
			var bytes []float64
			for _, m := range r.Windows {
				bytes = append(bytes, dir.Bytes(m.Rails[k]))
			}
			f, err := FitLinear(tokens, bytes)
			if err != nil {
				return nil, fmt.Errorf("bytes per token of rail %s: %w", k, err)
			}
			r.BytesPerToken[k] = f
		}
	}
	for _, k := range r.Rails {
		var g []float64
		for _, m := range r.Windows {
			g = append(g, r.Gbps(m, k))
		}
		if f, err := FitSaturation(cf, g); err != nil {
			r.SatErr[k] = err
		} else {
			r.Saturation[k] = f
		}
		knee, err := FindKnee(conc, tps, g, kneeThreshold)
		if err != nil {
			return nil, err
		}
		r.RailKnees[k] = knee
	}
	r.TPSSaturation, r.TPSSatErr = FitSaturation(cf, tps)
	var mean []float64
	for _, m := range r.Windows {
		mean = append(mean, r.MeanGbps(m))
	}
	var err error
	if r.Knee, err = FindKnee(conc, tps, mean, kneeThreshold); err != nil {
		return nil, err
	}
	return r, nil
}
