// Command fabric_analyze analyzes a benchmark sweep from Prometheus: RDMA
// throughput per rail, bytes per input token, the knee and a saturation
// fit, with Markdown/CSV tables and PNG/SVG plots (package analyze;
// docs/analysis.md).
//
// It is a separate binary so that the exporter, which runs privileged on
// every GPU node, carries no plotting code: gonum/plot, its fonts and
// golang.org/x/image are linked here only.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/version"

	"github.com/fabric-exporter/fabric_exporter/analyze"
)

const name = "fabric_analyze"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// command holds the parsed command line.
type command struct {
	cfg         analyze.Config
	direction   string
	timezone    string
	startOffset time.Duration
	plots       bool
}

func newApp(a *command) *kingpin.Application {
	app := kingpin.New(name, "Analyze a benchmark sweep from Prometheus: RDMA throughput per rail, bytes per input token, the knee and a saturation fit, with Markdown/CSV tables and PNG/SVG plots. See fabric_exporter's docs/analysis.md.")
	app.Flag("prometheus.url", "Prometheus base URL, e.g. http://prometheus:9090.").Required().PlaceHolder("URL").StringVar(&a.cfg.PrometheusURL)
	app.Flag("sweep", "The sweep (repeatable; a quoted glob such as 'bench/c*.log' is expanded): a sweep file (.yaml/.yml/.csv with name, concurrency, start, end) or SGLang bench_serving output (any other file; timestamped lines).").Required().PlaceHolder("FILE").StringsVar(&a.cfg.Sweep)
	app.Flag("compare", "A second sweep (repeatable, same forms) to compare point by point with --sweep (A/B mode).").PlaceHolder("FILE").StringsVar(&a.cfg.Compare)
	app.Flag("name", "Label of --sweep in reports (default: the YAML file's name:, else A in A/B mode).").StringVar(&a.cfg.Name)
	app.Flag("compare.name", "Label of --compare in reports (default: its YAML name:, else B).").StringVar(&a.cfg.CompareName)
	app.Flag("out", "Output directory (created).").Default("analysis").StringVar(&a.cfg.Out)
	app.Flag("selector.exporter", "Label matchers narrowing fabric_exporter's series, e.g. job=\"fabric\" or cluster=\"c1\" (default: none; fabric_* names are unique to the exporter, as in the rules).").Default("").StringVar(&a.cfg.Query.ExporterSelector)
	app.Flag("selector.sglang", "Label matchers narrowing SGLang's sglang:prompt_tokens_total, e.g. job=\"sglang\" (default: none, as sglangSelector in alerts/config.yml).").Default("").StringVar(&a.cfg.Query.SGLangSelector)
	app.Flag("direction", "RDMA bytes the fits use: tx (transmitted, as the recording rules), rx or both.").Default("tx").EnumVar(&a.direction, "tx", "rx", "both")
	app.Flag("knee.threshold", "The knee is the first C where both the input-TPS and the rail-throughput gain to the next point are below this fraction.").Default("0.05").Float64Var(&a.cfg.KneeThreshold)
	app.Flag("bench.start-offset", "Added to the timestamp of bench_serving's \"Starting main benchmark run\" line to get the window start (bench_serving sleeps 1 s before starting its clock).").Default("1s").DurationVar(&a.startOffset)
	app.Flag("bench.timezone", "Time zone of bench_serving timestamps that carry none (IANA name or UTC).").Default("UTC").StringVar(&a.timezone)
	app.Flag("query.timeout", "Timeout of each Prometheus query.").Default("30s").DurationVar(&a.cfg.Query.Timeout)
	app.Flag("plots", "Draw the PNG/SVG plots (--no-plots: tables only).").Default("true").BoolVar(&a.plots)
	app.Version(version.Print(name))
	app.HelpFlag.Short('h')
	return app
}

// run parses args and executes the analysis. The exit status is 2 for a
// bad command line and 1 for any other error.
func run(args []string, stdout, stderr io.Writer) int {
	a := &command{}
	app := newApp(a)
	app.UsageWriter(stdout)
	app.ErrorWriter(stderr)
	if _, err := app.Parse(args); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
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
