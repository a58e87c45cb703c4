package analyze

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
)

// Config is one invocation of `fabric_analyze`.
type Config struct {
	PrometheusURL string
	// Sweep and Compare are sweep sources (YAML/CSV sweep files or
	// bench_serving output); Compare non-empty selects A/B mode.
	Sweep, Compare    []string
	Name, CompareName string
	Out               string
	Query             QueryOptions
	Direction         Direction
	KneeThreshold     float64
	Bench             BenchOptions
	// NoPlots skips the PNG/SVG plots.
	NoPlots bool
}

// Run loads the sweeps, queries Prometheus, fits and writes the outputs
// into cfg.Out; a one-paragraph summary goes to stdout.
func Run(ctx context.Context, cfg Config, stdout io.Writer) error {
	_, _, err := run(ctx, cfg, stdout)
	return err
}

// run is Run returning the results (b is nil without a comparison).
func run(ctx context.Context, cfg Config, stdout io.Writer) (a, b *Result, err error) {
	if cfg.Out == "" {
		return nil, nil, errors.New("no output directory")
	}
	if !(cfg.KneeThreshold > 0 && cfg.KneeThreshold < 1) {
		return nil, nil, fmt.Errorf("knee threshold %g: want a fraction between 0 and 1 (0.05 = 5 %%)", cfg.KneeThreshold)
	}
	if cfg.Direction == "" {
		cfg.Direction = Transmitted
	}
	swA, err := LoadSweep(cfg.Sweep, cfg.Bench)
	if err != nil {
		return nil, nil, fmt.Errorf("sweep: %w", err)
	}
	var swB *Sweep
	if len(cfg.Compare) > 0 {
		if swB, err = LoadSweep(cfg.Compare, cfg.Bench); err != nil {
			return nil, nil, fmt.Errorf("compare sweep: %w", err)
		}
	}
	prom, err := NewPrometheus(cfg.PrometheusURL, cfg.Query)
	if err != nil {
		return nil, nil, err
	}
	info := ReportInfo{PrometheusURL: cfg.PrometheusURL, Query: prom.opts}

	analyzeOne := func(sw *Sweep, name string) (*Result, error) {
		if name == "" {
			name = sw.Name
		}
		ms, err := prom.Measure(ctx, sw)
		if err != nil {
			return nil, err
		}
		return Analyze(name, ms, cfg.Direction, cfg.KneeThreshold)
	}
	a, err = analyzeOne(swA, cfg.Name)
	if err != nil {
		return nil, nil, err
	}
	if swB == nil {
		files, err := writeResult(cfg.Out, a, info, !cfg.NoPlots)
		if err != nil {
			return nil, nil, err
		}
		summary(stdout, "", a)
		fmt.Fprintf(stdout, "wrote %d files to %s\n", len(files), cfg.Out)
		return a, nil, nil
	}
	b, err = analyzeOne(swB, cfg.CompareName)
	if err != nil {
		return nil, nil, fmt.Errorf("compare sweep: %w", err)
	}
	if a.Name == "" {
		a.Name = "A"
	}
	if b.Name == "" {
		b.Name = "B"
	}
	if _, err := writeResult(filepath.Join(cfg.Out, "a"), a, info, !cfg.NoPlots); err != nil {
		return nil, nil, err
	}
	if _, err := writeResult(filepath.Join(cfg.Out, "b"), b, info, !cfg.NoPlots); err != nil {
		return nil, nil, err
	}
	c := Compare(a, b)
	if err := writeFile(cfg.Out, "compare.md", func(w io.Writer) error { return WriteCompareMarkdown(w, c, !cfg.NoPlots) }); err != nil {
		return nil, nil, err
	}
	if err := writeFile(cfg.Out, "compare.csv", func(w io.Writer) error { return WriteCompareCSV(w, c) }); err != nil {
		return nil, nil, err
	}
	if !cfg.NoPlots {
		if _, err := WriteComparePlot(cfg.Out, c); err != nil {
			return nil, nil, fmt.Errorf("plot: %w", err)
		}
	}
	summary(stdout, "A ", a)
	summary(stdout, "B ", b)
	fmt.Fprintf(stdout, "wrote compare.md, compare.csv, compare_throughput.{png,svg} and a/, b/ to %s\n", cfg.Out)
	return a, b, nil
}

func summary(w io.Writer, prefix string, r *Result) {
	name := r.Name
	if name != "" {
		name = " (" + name + ")"
	}
	fmt.Fprintf(w, "%s%d windows, %d rails%s: ", prefix, len(r.Windows), len(r.Rails), name)
	if len(r.BytesPerToken) > 0 {
		fmt.Fprintf(w, "%.4f MB per input token per rail; ", r.MeanBytesPerToken()/1e6)
	}
	fmt.Fprintf(w, "knee %s; ", kneeText(r.Knee))
	if a, n := r.MeanAsymptote(); n > 0 {
		var se float64
		for _, k := range r.Rails {
			if f, ok := r.Saturation[k]; ok {
				se = math.Max(se, f.ASE)
			}
		}
		fmt.Fprintf(w, "asymptote %.2f Gbit/s per rail (largest SE %.2f)", a, se)
	} else {
		fmt.Fprintf(w, "no saturation fit")
	}
	fmt.Fprintln(w)
}

func writeFile(dir, name string, write func(io.Writer) error) error {
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644)
}

func writeResult(dir string, r *Result, info ReportInfo, plots bool) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for _, f := range []struct {
		name  string
		write func(io.Writer) error
	}{
		{"report.md", func(w io.Writer) error { return WriteMarkdown(w, r, info, plots) }},
		{"windows.csv", func(w io.Writer) error { return WriteWindowsCSV(w, r) }},
		{"fits.csv", func(w io.Writer) error { return WriteFitsCSV(w, r) }},
		{"residuals.csv", func(w io.Writer) error { return WriteResidualsCSV(w, r) }},
	} {
		if err := writeFile(dir, f.name, f.write); err != nil {
			return nil, err
		}
		files = append(files, filepath.Join(dir, f.name))
	}
	if !plots {
		return files, nil
	}
	images, err := WritePlots(dir, r)
	if err != nil {
		return nil, fmt.Errorf("plot: %w", err)
	}
	return append(files, images...), nil
}
