package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/fabric-exporter/fabric_exporter/analyze"
)

// analyzeCommand is `fabric_exporter analyze`: benchmark sweep analysis
// against Prometheus (package analyze; README "Benchmark analysis").
type analyzeCommand struct {
	cmd         *kingpin.CmdClause
	cfg         analyze.Config
	direction   string
	timezone    string
	startOffset time.Duration
	plots       bool
}

func addAnalyzeCommand(app *kingpin.Application) *analyzeCommand {
	a := &analyzeCommand{}
	c := app.Command("analyze", "Analyze a benchmark sweep from Prometheus: RDMA throughput per rail, bytes per input token, the knee and a saturation fit, with Markdown/CSV tables and PNG/SVG plots. See the README, \"Benchmark analysis\".")
	a.cmd = c
	c.Flag("prometheus.url", "Prometheus base URL, e.g. http://prometheus:9090.").Required().PlaceHolder("URL").StringVar(&a.cfg.PrometheusURL)
	c.Flag("sweep", "The sweep (repeatable; a quoted glob such as 'bench/c*.log' is expanded): a sweep file (.yaml/.yml/.csv with name, concurrency, start, end) or SGLang bench_serving output (any other file; timestamped lines).").Required().PlaceHolder("FILE").StringsVar(&a.cfg.Sweep)
	c.Flag("compare", "A second sweep (repeatable, same forms) to compare point by point with --sweep (A/B mode).").PlaceHolder("FILE").StringsVar(&a.cfg.Compare)
	c.Flag("name", "Label of --sweep in reports (default: the YAML file's name:, else A in A/B mode).").StringVar(&a.cfg.Name)
	c.Flag("compare.name", "Label of --compare in reports (default: its YAML name:, else B).").StringVar(&a.cfg.CompareName)
	c.Flag("out", "Output directory (created).").Default("analysis").StringVar(&a.cfg.Out)
	c.Flag("selector.exporter", "Label matchers selecting fabric_exporter's series (as exporterSelector in alerts/config.yml).").Default(`job="fabric"`).StringVar(&a.cfg.Query.ExporterSelector)
	c.Flag("selector.sglang", "Label matchers selecting SGLang's sglang:prompt_tokens_total (as sglangSelector in alerts/config.yml).").Default(`job="sglang"`).StringVar(&a.cfg.Query.SGLangSelector)
	c.Flag("direction", "RDMA bytes the fits use: tx (transmitted, as the recording rules), rx or both.").Default("tx").EnumVar(&a.direction, "tx", "rx", "both")
	c.Flag("knee.threshold", "The knee is the first C where both the input-TPS and the rail-throughput gain to the next point are below this fraction.").Default("0.05").Float64Var(&a.cfg.KneeThreshold)
	c.Flag("bench.start-offset", "Added to the timestamp of bench_serving's \"Starting main benchmark run\" line to get the window start (bench_serving sleeps 1 s before starting its clock).").Default("1s").DurationVar(&a.startOffset)
	c.Flag("bench.timezone", "Time zone of bench_serving timestamps that carry none (IANA name or UTC).").Default("UTC").StringVar(&a.timezone)
	c.Flag("query.timeout", "Timeout of each Prometheus query.").Default("30s").DurationVar(&a.cfg.Query.Timeout)
	c.Flag("plots", "Draw the PNG/SVG plots (--no-plots: tables only).").Default("true").BoolVar(&a.plots)
	return a
}

// run executes the analysis; the exit status is 1 on any error.
func (a *analyzeCommand) run(stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "fabric_exporter analyze: %v\n", err)
		return 1
	}
	loc, err := time.LoadLocation(a.timezone)
	if err != nil {
		return fail(fmt.Errorf("--bench.timezone: %w", err))
	}
	a.cfg.Bench = analyze.BenchOptions{StartOffset: a.startOffset, Location: loc}
	a.cfg.NoPlots = !a.plots
	if a.cfg.Direction, err = analyze.ParseDirection(a.direction); err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := analyze.Run(ctx, a.cfg, stdout); err != nil {
		return fail(err)
	}
	return 0
}
