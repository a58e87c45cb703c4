package analyze

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
)

// Comparison sets two sweeps side by side, point by point (same
// concurrency) and rail by rail (same instance and rail).
type Comparison struct {
	A, B *Result
	// Conc is the union of both sweeps' concurrencies, sorted.
	Conc []int
	// Rails is the union of both sweeps' rails, sorted.
	Rails []RailKey
	// MeanA, MeanB fit the mean rail throughput of each sweep (nil error
	// when fitted).
	MeanA, MeanB       SaturationFit
	MeanAErr, MeanBErr error
}

// Compare builds the A/B comparison.
func Compare(a, b *Result) *Comparison {
	c := &Comparison{A: a, B: b}
	seenC := map[int]bool{}
	seenR := map[RailKey]bool{}
	for _, r := range []*Result{a, b} {
		for _, m := range r.Windows {
			if !seenC[m.Concurrency] {
				seenC[m.Concurrency] = true
				c.Conc = append(c.Conc, m.Concurrency)
			}
		}
		for _, k := range r.Rails {
			if !seenR[k] {
				seenR[k] = true
				c.Rails = append(c.Rails, k)
			}
		}
	}
	sort.Ints(c.Conc)
	sort.Slice(c.Rails, func(i, j int) bool { return c.Rails[i].String() < c.Rails[j].String() })
	c.MeanA, c.MeanAErr = meanFit(a)
	c.MeanB, c.MeanBErr = meanFit(b)
	return c
}

func meanFit(r *Result) (SaturationFit, error) {
	var cs, ys []float64
	for _, m := range r.Windows {
		cs = append(cs, float64(m.Concurrency))
		ys = append(ys, r.MeanGbps(m))
	}
	return FitSaturation(cs, ys)
}

func window(r *Result, c int) (Measurement, bool) {
	for _, m := range r.Windows {
		if m.Concurrency == c {
			return m, true
		}
	}
	return Measurement{}, false
}

// pointValues are the per-point metrics of one sweep at one concurrency
// (NaN when absent). rail == nil: mean over rails.
func pointValues(r *Result, c int, rail *RailKey) (gbps, tps, mbPerToken float64) {
	m, ok := window(r, c)
	if !ok {
		return math.NaN(), math.NaN(), math.NaN()
	}
	tps = m.InputTPS()
	if rail == nil {
		var bytes float64
		for _, k := range r.Rails {
			bytes += r.Direction.Bytes(m.Rails[k])
		}
		bytes /= float64(len(r.Rails))
		return Gbps(bytes, m.Seconds()), tps, bytes / m.InputTokens / 1e6
	}
	b, ok := m.Rails[*rail]
	if !ok {
		return math.NaN(), tps, math.NaN()
	}
	bytes := r.Direction.Bytes(b)
	return Gbps(bytes, m.Seconds()), tps, bytes / m.InputTokens / 1e6
}

func ratio(a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) || a == 0 {
		return math.NaN()
	}
	return b / a
}

func fratio(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

func label(r *Result, def string) string {
	if r.Name != "" {
		return r.Name
	}
	return def
}

// WriteCompareMarkdown writes compare.md.
func WriteCompareMarkdown(w io.Writer, c *Comparison, plots bool) error {
	p := &printer{w: w}
	la, lb := label(c.A, "A"), label(c.B, "B")
	p.f("# A/B: %s (A) vs %s (B)\n\n", la, lb)
	p.f("Ratios are B/A. Points are matched by concurrency, rails by instance and rail; a point or rail missing from one sweep shows —. " +
		"Each sweep's own report is in `a/report.md` and `b/report.md`.\n\n")
	p.f("| | A | B | B/A |\n| --- | ---: | ---: | ---: |\n")
	bptA, bptB := math.NaN(), math.NaN()
	if len(c.A.BytesPerToken) > 0 {
		bptA = c.A.MeanBytesPerToken() / 1e6
	}
	if len(c.B.BytesPerToken) > 0 {
		bptB = c.B.MeanBytesPerToken() / 1e6
	}
	p.f("| bytes per input token per rail, fitted (MB) | %s | %s | %s |\n", fnum(bptA, 4), fnum(bptB, 4), fratio(ratio(bptA, bptB)))
	aA, nA := c.A.MeanAsymptote()
	aB, nB := c.B.MeanAsymptote()
	if nA == 0 {
		aA = math.NaN()
	}
	if nB == 0 {
		aB = math.NaN()
	}
	p.f("| asymptote a per rail, mean of rails' fits (Gbit/s) | %s | %s | %s |\n", fnum(aA, 2), fnum(aB, 2), fratio(ratio(aA, aB)))
	tA, tB := math.NaN(), math.NaN()
	if c.A.TPSSatErr == nil {
		tA = c.A.TPSSaturation.A
	}
	if c.B.TPSSatErr == nil {
		tB = c.B.TPSSaturation.A
	}
	p.f("| input tokens/s asymptote | %s | %s | %s |\n", fnum(tA, 0), fnum(tB, 0), fratio(ratio(tA, tB)))
	kA, kB := "none", "none"
	if c.A.Knee.C > 0 {
		kA = strconv.Itoa(c.A.Knee.C)
	}
	if c.B.Knee.C > 0 {
		kB = strconv.Itoa(c.B.Knee.C)
	}
	p.f("| knee C | %s | %s | |\n\n", kA, kB)

	p.f("## Per point (mean of rails)\n\n")
	p.f("| C | input tok/s A | input tok/s B | B/A | Gbit/s per rail A | Gbit/s per rail B | B/A | MB/token per rail A | MB/token per rail B | B/A |\n")
	p.f("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, cc := range c.Conc {
		ga, ta, ba := pointValues(c.A, cc, nil)
		gb, tb, bb := pointValues(c.B, cc, nil)
		p.f("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", cc, fnum(ta, 1), fnum(tb, 1), fratio(ratio(ta, tb)),
			fnum(ga, 2), fnum(gb, 2), fratio(ratio(ga, gb)), fnum(ba, 4), fnum(bb, 4), fratio(ratio(ba, bb)))
	}
	p.f("\n## Per point and rail\n\n| C | rail | Gbit/s A | Gbit/s B | B/A | MB/token A | MB/token B | B/A |\n| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, cc := range c.Conc {
		for _, k := range c.Rails {
			ga, _, ba := pointValues(c.A, cc, &k)
			gb, _, bb := pointValues(c.B, cc, &k)
			p.f("| %d | %s | %s | %s | %s | %s | %s | %s |\n", cc, k, fnum(ga, 2), fnum(gb, 2), fratio(ratio(ga, gb)), fnum(ba, 4), fnum(bb, 4), fratio(ratio(ba, bb)))
		}
	}
	if plots {
		p.f("\n![mean rail throughput, A and B](compare_throughput.png)\n")
	}
	return p.err
}

// WriteCompareCSV writes one row per concurrency, rail ("" = mean of
// rails) and metric with both values and B/A.
func WriteCompareCSV(w io.Writer, c *Comparison) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"concurrency", "instance", "rail", "metric", "a", "b", "b_over_a"})
	opt := func(v float64) string {
		if math.IsNaN(v) {
			return ""
		}
		return g(v)
	}
	row := func(cc int, k RailKey, metric string, a, b float64) {
		cw.Write([]string{strconv.Itoa(cc), k.Instance, k.Rail, metric, opt(a), opt(b), opt(ratio(a, b))})
	}
	for _, cc := range c.Conc {
		ga, ta, ba := pointValues(c.A, cc, nil)
		gb, tb, bb := pointValues(c.B, cc, nil)
		row(cc, RailKey{}, "input_tps", ta, tb)
		row(cc, RailKey{}, "gbps_mean_rail", ga, gb)
		row(cc, RailKey{}, "mb_per_token_mean_rail", ba, bb)
		for _, k := range c.Rails {
			ga, _, ba := pointValues(c.A, cc, &k)
			gb, _, bb := pointValues(c.B, cc, &k)
			row(cc, k, "gbps", ga, gb)
			row(cc, k, "mb_per_token", ba, bb)
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteComparePlot writes compare_throughput.{png,svg}: the mean rail
// throughput of both sweeps against C with their saturation fits.
func WriteComparePlot(dir string, c *Comparison) ([]string, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("A/B: mean RDMA Gbit/s per rail, fit %s", Model)
	p.Y.Label.Text = "Gbit/s per rail (mean of rails)"
	concAxis(p, c.Conc)
	lo, hi := float64(c.Conc[0]), float64(c.Conc[len(c.Conc)-1])
	top := 0.0
	for i, s := range []struct {
		r   *Result
		def string
		f   SaturationFit
		err error
	}{{c.A, "A", c.MeanA, c.MeanAErr}, {c.B, "B", c.MeanB, c.MeanBErr}} {
		var xys plotter.XYs
		for _, m := range s.r.Windows {
			y := s.r.MeanGbps(m)
			xys = append(xys, plotter.XY{X: float64(m.Concurrency), Y: y})
			top = math.Max(top, y)
		}
		sc, err := scatter(xys, i)
		if err != nil {
			return nil, err
		}
		p.Add(sc)
		name := s.def + ": " + label(s.r, s.def)
		if s.err != nil {
			p.Legend.Add(name, sc)
			continue
		}
		l, err := line(curve(s.f.Eval, lo, hi), plotutil.Color(i), nil)
		if err != nil {
			return nil, err
		}
		p.Add(l)
		top = math.Max(top, s.f.A)
		p.Legend.Add(fmt.Sprintf("%s, a = %.2f ± %.2f Gbit/s", name, s.f.A, s.f.ASE), sc, l)
	}
	p.Y.Min, p.Y.Max = 0, top*1.08
	p.Add(plotter.NewGrid())
	return savePlot(p, dir, "compare_throughput")
}
