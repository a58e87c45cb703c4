package analyze

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// ReportInfo describes where the numbers came from, for the report header.
type ReportInfo struct {
	PrometheusURL string
	Query         QueryOptions
}

// Model is the saturation model as stated in reports.
const Model = "y = a·C/(b+C)"

func fnum(v float64, prec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

func pct(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	return strconv.FormatFloat(100*v, 'f', 2, 64) + " %"
}

// threshold renders a fraction as a short percentage ("5 %").
func threshold(v float64) string { return strconv.FormatFloat(100*v, 'g', 4, 64) + " %" }

func mb(bytes float64) string { return fnum(bytes/1e6, 4) }

// stepName is "8 → 16".
func stepName(s KneeStep) string { return fmt.Sprintf("%d → %d", s.From, s.To) }

func kneeText(k Knee) string {
	if k.C == 0 {
		last := 0
		if n := len(k.Steps); n > 0 {
			last = k.Steps[n-1].To
		}
		return fmt.Sprintf("none: a gain stays at or above %s up to C = %d", threshold(k.Threshold), last)
	}
	return fmt.Sprintf("C = %d", k.C)
}

// WriteMarkdown writes the report of one sweep. Plot file names are
// linked when plots is true.
func WriteMarkdown(w io.Writer, r *Result, info ReportInfo, plots bool) error {
	p := &printer{w: w}
	title := "Benchmark analysis"
	if r.Name != "" {
		title += ": " + r.Name
	}
	p.f("# %s\n\n", title)
	p.f("Prometheus `%s`; exporter series `%s`, SGLang series `%s`. %d windows, %d rails; fits use %s RDMA bytes. "+
		"Per window and rail: increase of `%s` and `%s` joined to `%s{rail!=\"\"}`; Gbit/s = bytes·8 / duration; input tokens = increase of `%s` (summed).\n\n",
		info.PrometheusURL, sel(info.Query.ExporterSelector), sel(info.Query.SGLangSelector), len(r.Windows), len(r.Rails),
		r.Direction.describe(), MetricTxBytes, MetricRxBytes, MetricPortInfo, MetricPromptToken)

	p.f("## Summary\n\n")
	p.f("| | value |\n| --- | --- |\n")
	if len(r.BytesPerToken) > 0 {
		p.f("| bytes per input token per rail (mean of rails' slopes) | %s MB |\n", mb(r.MeanBytesPerToken()))
	}
	p.f("| knee (input-TPS and mean rail-throughput gains to the next point both below %s) | %s |\n", threshold(r.Knee.Threshold), kneeText(r.Knee))
	if a, n := r.MeanAsymptote(); n > 0 {
		p.f("| saturation asymptote a per rail (mean of %d rails; %s) | %s Gbit/s |\n", n, Model, fnum(a, 2))
	}
	if r.TPSSatErr == nil {
		p.f("| input tokens/s asymptote (same model) | %s ± %s tok/s |\n", fnum(r.TPSSaturation.A, 1), fnum(r.TPSSaturation.ASE, 1))
	}
	p.f("\n")

	p.f("## Windows\n\n")
	p.f("| window | C | start (UTC) | duration (s) | input tokens | input tok/s | bench_serving input tok/s |\n")
	p.f("| --- | ---: | --- | ---: | ---: | ---: | ---: |\n")
	for _, m := range r.Windows {
		bench := "—"
		if m.Bench != nil && m.Bench.InputThroughput > 0 {
			bench = fnum(m.Bench.InputThroughput, 1)
		}
		p.f("| %s | %d | %s | %s | %s | %s | %s |\n", m.Name, m.Concurrency, m.Start.UTC().Format(time.RFC3339),
			fnum(m.Seconds(), 2), fnum(m.InputTokens, 0), fnum(m.InputTPS(), 1), bench)
	}
	p.f("\n## Rails per window\n\n")
	p.f("| window | C | rail | tx Gbit/s | rx Gbit/s | tx MB/token | rx MB/token |\n")
	p.f("| --- | ---: | --- | ---: | ---: | ---: | ---: |\n")
	for _, m := range r.Windows {
		for _, k := range r.Rails {
			b := m.Rails[k]
			p.f("| %s | %d | %s | %s | %s | %s | %s |\n", m.Name, m.Concurrency, k,
				fnum(Gbps(b.Tx, m.Seconds()), 2), fnum(Gbps(b.Rx, m.Seconds()), 2),
				mb(b.Tx/m.InputTokens), mb(b.Rx/m.InputTokens))
		}
	}

	p.f("\n## Bytes per input token\n\n")
	if len(r.BytesPerToken) == 0 {
		p.f("Needs at least 2 windows.\n")
	} else {
		p.f("Least squares per rail across windows: bytes = k·tokens + c (%s bytes of the rail, input tokens of the deployment). "+
			"k is the bytes the rail carries per input token; c absorbs traffic that does not scale with tokens.\n\n", r.Direction.describe())
		p.f("| rail | k (MB/token) | SE of k (MB) | c (MB) | R² | windows |\n| --- | ---: | ---: | ---: | ---: | ---: |\n")
		for _, k := range r.Rails {
			f := r.BytesPerToken[k]
			p.f("| %s | %s | %s | %s | %s | %d |\n", k, mb(f.Slope), mb(f.SlopeSE), fnum(f.Intercept/1e6, 1), fnum(f.R2, 6), f.N)
		}
		p.f("\nResiduals:\n\n| window | C | rail | input tokens | GB | fitted GB | residual MB | residual %% |\n| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n")
		for _, k := range r.Rails {
			f := r.BytesPerToken[k]
			for i, m := range r.Windows {
				y := r.Direction.Bytes(m.Rails[k])
				p.f("| %s | %d | %s | %s | %s | %s | %s | %s |\n", m.Name, m.Concurrency, k, fnum(m.InputTokens, 0),
					fnum(y/1e9, 3), fnum(f.Fitted[i]/1e9, 3), fnum(f.Residuals[i]/1e6, 1), pct(f.Residuals[i]/y))
			}
		}
	}

	p.f("\n## Knee\n\n")
	p.f("The knee is the first C from which both the input-TPS gain and the rail-throughput gain to the next point fall below %s "+
		"(rail throughput: the mean of the rails; per rail below).\n\n", threshold(r.Knee.Threshold))
	p.f("| step | input tok/s gain | mean rail Gbit/s gain | both below |\n| --- | ---: | ---: | --- |\n")
	for _, s := range r.Knee.Steps {
		yes := "no"
		if s.Below {
			yes = "**yes**"
		}
		p.f("| %s | %s | %s | %s |\n", stepName(s), pct(s.TPSGain), pct(s.RailGain), yes)
	}
	p.f("\n**Knee: %s.**", kneeText(r.Knee))
	var per []string
	for _, k := range r.Rails {
		per = append(per, fmt.Sprintf("%s %s", k, kneeText(r.RailKnees[k])))
	}
	p.f(" Per rail: %s.\n", strings.Join(per, "; "))

	p.f("\n## Saturation\n\n")
	p.f("Model %s per rail (y in Gbit/s, C the concurrency), fitted by nonlinear least squares: "+
		"a is the asymptote (the traffic ceiling as C → ∞), b the concurrency at half of it. "+
		"SE from s²·(JᵀJ)⁻¹ at the optimum, s² = SSE/(n−2); 95 %% CI with Student's t.\n\n", Model)
	p.f("| series | a | SE of a | 95 %% CI of a | b | SE of b | RMSE | R² |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	row := func(name string, f SaturationFit, prec int, unit string) {
		ci := "—"
		if !math.IsNaN(f.ACI95) {
			ci = fmt.Sprintf("%s … %s", fnum(f.A-f.ACI95, prec), fnum(f.A+f.ACI95, prec))
		}
		note := ""
		if f.Extrapolated {
			note = " (b > largest C: not saturated, a is an extrapolation)"
		}
		p.f("| %s | %s %s%s | %s | %s | %s | %s | %s | %s |\n", name, fnum(f.A, prec), unit, note, fnum(f.ASE, prec), ci,
			fnum(f.B, 3), fnum(f.BSE, 3), fnum(f.RMSE, prec), fnum(f.R2, 6))
	}
	for _, k := range r.Rails {
		if f, ok := r.Saturation[k]; ok {
			row(k.String(), f, 2, "Gbit/s")
		} else {
			p.f("| %s | %v | | | | | | |\n", k, r.SatErr[k])
		}
	}
	if r.TPSSatErr == nil {
		row("input tokens/s", r.TPSSaturation, 1, "tok/s")
	} else {
		p.f("| input tokens/s | %v | | | | | | |\n", r.TPSSatErr)
	}
	if len(r.Saturation) > 0 {
		p.f("\nResiduals (Gbit/s):\n\n| C |")
		for _, k := range r.Rails {
			p.f(" %s |", k)
		}
		p.f("\n| ---: |%s\n", strings.Repeat(" ---: |", len(r.Rails)))
		for i, m := range r.Windows {
			p.f("| %d |", m.Concurrency)
			for _, k := range r.Rails {
				if f, ok := r.Saturation[k]; ok {
					p.f(" %s |", fnum(f.Residuals[i], 3))
				} else {
					p.f(" — |")
				}
			}
			p.f("\n")
		}
	}
	if plots {
		p.f("\n## Plots\n\n![throughput per rail vs concurrency](throughput.png)\n\n![bytes per input token](bytes_per_token.png)\n")
	}
	return p.err
}

type printer struct {
	w   io.Writer
	err error
}

func (p *printer) f(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

func g(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// WriteWindowsCSV writes one row per window and rail.
func WriteWindowsCSV(w io.Writer, r *Result) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"window", "concurrency", "start", "end", "duration_s", "instance", "rail",
		"tx_bytes", "rx_bytes", "tx_gbps", "rx_gbps", "input_tokens", "input_tps",
		"tx_bytes_per_token", "rx_bytes_per_token", "bench_input_tps"})
	for _, m := range r.Windows {
		bench := ""
		if m.Bench != nil && m.Bench.InputThroughput > 0 {
			bench = g(m.Bench.InputThroughput)
		}
		for _, k := range r.Rails {
			b := m.Rails[k]
			s := m.Seconds()
			cw.Write([]string{m.Name, strconv.Itoa(m.Concurrency), m.Start.UTC().Format(time.RFC3339Nano), m.End.UTC().Format(time.RFC3339Nano),
				g(s), k.Instance, k.Rail, g(b.Tx), g(b.Rx), g(Gbps(b.Tx, s)), g(Gbps(b.Rx, s)), g(m.InputTokens), g(m.InputTPS()),
				g(b.Tx / m.InputTokens), g(b.Rx / m.InputTokens), bench})
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteFitsCSV writes the fitted parameters: fit, instance, rail,
// parameter, value, std_error.
func WriteFitsCSV(w io.Writer, r *Result) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"fit", "instance", "rail", "parameter", "value", "std_error"})
	opt := func(v float64) string {
		if math.IsNaN(v) {
			return ""
		}
		return g(v)
	}
	for _, k := range r.Rails {
		if f, ok := r.BytesPerToken[k]; ok {
			cw.Write([]string{"bytes_per_token", k.Instance, k.Rail, "slope_bytes_per_token", g(f.Slope), opt(f.SlopeSE)})
			cw.Write([]string{"bytes_per_token", k.Instance, k.Rail, "intercept_bytes", g(f.Intercept), ""})
			cw.Write([]string{"bytes_per_token", k.Instance, k.Rail, "r_squared", opt(f.R2), ""})
		}
		if f, ok := r.Saturation[k]; ok {
			cw.Write([]string{"saturation_gbps", k.Instance, k.Rail, "a_gbps", g(f.A), opt(f.ASE)})
			cw.Write([]string{"saturation_gbps", k.Instance, k.Rail, "b_concurrency", g(f.B), opt(f.BSE)})
			cw.Write([]string{"saturation_gbps", k.Instance, k.Rail, "r_squared", opt(f.R2), ""})
		}
		cw.Write([]string{"knee", k.Instance, k.Rail, "concurrency", strconv.Itoa(r.RailKnees[k].C), ""})
	}
	if r.TPSSatErr == nil {
		f := r.TPSSaturation
		cw.Write([]string{"saturation_input_tps", "", "", "a_tps", g(f.A), opt(f.ASE)})
		cw.Write([]string{"saturation_input_tps", "", "", "b_concurrency", g(f.B), opt(f.BSE)})
		cw.Write([]string{"saturation_input_tps", "", "", "r_squared", opt(f.R2), ""})
	}
	cw.Write([]string{"knee", "", "", "concurrency", strconv.Itoa(r.Knee.C), ""})
	cw.Write([]string{"knee", "", "", "threshold", g(r.Knee.Threshold), ""})
	cw.Flush()
	return cw.Error()
}

// WriteResidualsCSV writes the residuals of both fits.
func WriteResidualsCSV(w io.Writer, r *Result) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"fit", "instance", "rail", "window", "concurrency", "x", "y", "fitted", "residual"})
	for _, k := range r.Rails {
		if f, ok := r.BytesPerToken[k]; ok {
			for i, m := range r.Windows {
				cw.Write([]string{"bytes_per_token", k.Instance, k.Rail, m.Name, strconv.Itoa(m.Concurrency),
					g(m.InputTokens), g(r.Direction.Bytes(m.Rails[k])), g(f.Fitted[i]), g(f.Residuals[i])})
			}
		}
		if f, ok := r.Saturation[k]; ok {
			for i, m := range r.Windows {
				cw.Write([]string{"saturation_gbps", k.Instance, k.Rail, m.Name, strconv.Itoa(m.Concurrency),
					strconv.Itoa(m.Concurrency), g(r.Gbps(m, k)), g(f.Fitted[i]), g(f.Residuals[i])})
			}
		}
	}
	cw.Flush()
	return cw.Error()
}
