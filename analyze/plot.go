package analyze

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plot size: about 750×450 pixels as PNG.
const plotW, plotH = 20 * vg.Centimeter, 12 * vg.Centimeter

// concAxis puts concurrency on a log2 axis with a tick at every point.
func concAxis(p *plot.Plot, conc []int) {
	p.X.Label.Text = "concurrency C (log scale)"
	p.X.Scale = plot.LogScale{}
	var ticks []plot.Tick
	for _, c := range conc {
		ticks = append(ticks, plot.Tick{Value: float64(c), Label: strconv.Itoa(c)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	lo, hi := float64(conc[0]), float64(conc[len(conc)-1])
	if lo == hi {
		lo, hi = lo/2, hi*2
	}
	p.X.Min, p.X.Max = lo/math.Pow(hi/lo, 0.04), hi*math.Pow(hi/lo, 0.04)
}

// curve samples f at log-spaced points between lo and hi.
func curve(f func(float64) float64, lo, hi float64) plotter.XYs {
	const n = 200
	xys := make(plotter.XYs, n)
	for i := range xys {
		x := lo * math.Pow(hi/lo, float64(i)/(n-1))
		xys[i] = plotter.XY{X: x, Y: f(x)}
	}
	return xys
}

func savePlot(p *plot.Plot, dir, name string) ([]string, error) {
	var files []string
	for _, ext := range []string{"png", "svg"} {
		wt, err := p.WriterTo(plotW, plotH, ext)
		if err != nil {
			return nil, err
		}
		var buf bytes.Buffer
		if _, err := wt.WriteTo(&buf); err != nil {
			return nil, err
		}
		path := filepath.Join(dir, name+"."+ext)
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return nil, err
		}
		files = append(files, path)
	}
	return files, nil
}

func scatter(xys plotter.XYs, i int) (*plotter.Scatter, error) {
	s, err := plotter.NewScatter(xys)
	if err != nil {
		return nil, err
	}
	s.GlyphStyle.Color = plotutil.Color(i)
	s.GlyphStyle.Shape = plotutil.Shape(i)
	s.GlyphStyle.Radius = vg.Points(3)
	return s, nil
}

func line(xys plotter.XYs, c color.Color, dashes []vg.Length) (*plotter.Line, error) {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return nil, err
	}
	l.Color = c
	l.Dashes = dashes
	l.Width = vg.Points(1.2)
	return l, nil
}

// knee marks C = k with a vertical dashed line up to top.
func markKnee(p *plot.Plot, k int, top float64) error {
	if k == 0 {
		return nil
	}
	l, err := line(plotter.XYs{{X: float64(k), Y: 0}, {X: float64(k), Y: top}}, color.Gray{Y: 80}, []vg.Length{vg.Points(4), vg.Points(3)})
	if err != nil {
		return err
	}
	lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: float64(k), Y: top}}, Labels: []string{fmt.Sprintf(" knee C = %d", k)}})
	if err != nil {
		return err
	}
	lbl.Offset = vg.Point{X: vg.Points(2), Y: vg.Points(-10)}
	p.Add(l, lbl)
	return nil
}

// WritePlots writes throughput.{png,svg} (Gbit/s per rail vs C with the
// saturation fit and the knee) and bytes_per_token.{png,svg} (MB per input
// token per rail and window with the fitted value) into dir.
func WritePlots(dir string, r *Result) ([]string, error) {
	conc := r.Concurrencies()
	lo, hi := float64(conc[0]), float64(conc[len(conc)-1])

	p := plot.New()
	p.Title.Text = fmt.Sprintf("RDMA %s per rail vs concurrency, fit %s", r.Direction.describe(), Model)
	if r.Name != "" {
		p.Title.Text = r.Name + ": " + p.Title.Text
	}
	p.Y.Label.Text = "Gbit/s per rail"
	concAxis(p, conc)
	top := 0.0
	for i, k := range r.Rails {
		var xys plotter.XYs
		for _, m := range r.Windows {
			y := r.Gbps(m, k)
			xys = append(xys, plotter.XY{X: float64(m.Concurrency), Y: y})
			top = math.Max(top, y)
		}
		s, err := scatter(xys, i)
		if err != nil {
			return nil, err
		}
		p.Add(s)
		if f, ok := r.Saturation[k]; ok {
			l, err := line(curve(f.Eval, lo, hi), plotutil.Color(i), nil)
			if err != nil {
				return nil, err
			}
			p.Add(l)
			p.Legend.Add(fmt.Sprintf("%s: a = %.2f ± %.2f Gbit/s, b = %.2f", k, f.A, f.ASE, f.B), s, l)
			top = math.Max(top, f.A)
		} else {
			p.Legend.Add(k.String()+" (no fit)", s)
		}
	}
	if a, n := r.MeanAsymptote(); n > 0 {
		l, err := line(plotter.XYs{{X: p.X.Min, Y: a}, {X: p.X.Max, Y: a}}, color.Gray{Y: 120}, []vg.Length{vg.Points(2), vg.Points(2)})
		if err != nil {
			return nil, err
		}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("asymptote a = %.2f Gbit/s (mean of rails)", a), l)
	}
	top *= 1.08
	p.Y.Min, p.Y.Max = 0, top
	if err := markKnee(p, r.Knee.C, top); err != nil {
		return nil, err
	}
	p.Add(plotter.NewGrid())
	files, err := savePlot(p, dir, "throughput")
	if err != nil {
		return nil, err
	}

	if len(r.BytesPerToken) == 0 {
		return files, nil
	}
	p = plot.New()
	p.Title.Text = fmt.Sprintf("RDMA %s bytes per input token per rail", r.Direction.describe())
	if r.Name != "" {
		p.Title.Text = r.Name + ": " + p.Title.Text
	}
	p.Y.Label.Text = "MB per input token (window bytes / tokens)"
	concAxis(p, conc)
	k := r.MeanBytesPerToken() / 1e6
	// Zoom on the fitted value (at least ±5 %) so that the spread between
	// windows and rails shows.
	lo, hi = k*0.95, k*1.05
	for i, rk := range r.Rails {
		var xys plotter.XYs
		for _, m := range r.Windows {
			y := r.Direction.Bytes(m.Rails[rk]) / m.InputTokens / 1e6
			xys = append(xys, plotter.XY{X: float64(m.Concurrency), Y: y})
			lo, hi = math.Min(lo, y), math.Max(hi, y)
		}
		s, err := scatter(xys, i)
		if err != nil {
			return nil, err
		}
		p.Add(s)
		p.Legend.Add(fmt.Sprintf("%s: fit k = %.4f MB/token", rk, r.BytesPerToken[rk].Slope/1e6), s)
	}
	l, err := line(plotter.XYs{{X: p.X.Min, Y: k}, {X: p.X.Max, Y: k}}, color.Black, []vg.Length{vg.Points(4), vg.Points(3)})
	if err != nil {
		return nil, err
	}
	p.Add(l, plotter.NewGrid())
	p.Legend.Add(fmt.Sprintf("fitted k = %.4f MB/token (mean of rails)", k), l)
	p.Legend.Top = false
	// Room below the points for the legend.
	p.Y.Min, p.Y.Max = lo-(hi-lo)*0.6, hi+(hi-lo)*0.05
	more, err := savePlot(p, dir, "bytes_per_token")
	if err != nil {
		return nil, err
	}
	return append(files, more...), nil
}
