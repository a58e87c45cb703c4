// The drill: its configuration, its result and checks, the ranks as their
// log files name them, and Run, which runs every trial.

package main

import (
	_ "embed"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

//go:embed allreduce.py
var allreduceScript []byte

// Config is one drill.
type Config struct {
	Repo         string // repository root: alerts/fabric-rules.yml, deploy/…
	Exporter     string // fabric_exporter binary
	Prometheus   string
	Alertmanager string
	Python       string // python3 with PyTorch (live mode)
	WorkDir      string // everything the drill writes goes here
	Trials       int    // socket-fallback trials (time to page)
	Replay       string // directory of recorded logs: replay them instead of running PyTorch
	// ReplayInspector is a directory of recorded NCCL Inspector JSON dumps
	// of the same run as Replay's socket/ logs (same hosts and pids): the
	// replay's trial 1 writes them into its Inspector dump directory.
	ReplayInspector string
	Inspector       string // NCCL Inspector plugin (.so); "" = none
	SocketIf        string // NCCL_SOCKET_IFNAME of the socket run
	GPU             int    // CUDA device of both ranks
	// Ports on 127.0.0.1.
	ExporterPort, PrometheusPort, AlertmanagerPort, WebhookPort, TorchPort int
	PageTimeout                                                            time.Duration
	// Intervals; "" = deploy/lab/prometheus.yml's (CI's replay test
	// shortens them; the drill's time to page is measured with the shipped).
	ScrapeInterval, EvalInterval string
	// The two-node trials (nodetrial.go): RASTrials kills of rank 1, the
	// first after the job ran healthy for RASHealthy; NoDebug the socket
	// fallback without NCCL logs; RASParallel runs them at the same time,
	// each in its own pair of namespaces.
	// RASStagger delays kill trial i's kill by (i-1)×RASStagger more, so
	// that parallel trials kill at different phases of the 15 s cycles.
	RASTrials   int
	RASHealthy  time.Duration
	RASStagger  time.Duration
	NoDebug     bool
	RASParallel bool
	// Shape of the two-node trials' ranks: shapeContainer (each rank in
	// PID and mount namespaces of its own inside its node's, container.go)
	// or shapeHost; ContainerRDMA: /dev/infiniband stays visible in the
	// containers (false: hidden, as by a launcher that passes none).
	Shape         string
	ContainerRDMA bool
	// DestroyTrial: rank 1 destroys the communicator of a second process
	// group that rank 0 keeps (RAS: NOCOMM); NonblockingTrial: the job
	// with TORCH_NCCL_USE_COMM_NONBLOCKING=1, RAS polled fast
	// (rastrials.go). SelftestShape: the nodes and containers with sleep
	// for ranks, no GPU or Python (selftest.go).
	DestroyTrial, NonblockingTrial, SelftestShape bool
	// HangTrials: trials of each hung-group kind (hangtrials.go), one
	// after another; QuietFor: the quiet trials' length (0: none).
	HangTrials int
	QuietFor   time.Duration
	// HangTogether: the three kinds of hang trial i at once on the one
	// GPU, faulting together (nodeTrial.Barrier).
	HangTogether bool
	// RankCmdline is the exporters' --collector.process.cmdline ("":
	// allreduce\.py).
	RankCmdline string
	Out         io.Writer `json:"-"` // the report (also written to WorkDir/report.txt)
}

// check is one assertion of the drill.
type check struct {
	name   string
	ok     bool
	detail string
}

// Result is what a drill measured and checked.
type Result struct {
	Checks     []check
	TimeToPage []time.Duration // per socket trial
	InitPage   time.Duration   // forced-IB run: first line → NCCLInitFailed notification
	// KillToPage: per kill trial, the kill → the first NCCLRankMissing or
	// NCCLAsyncError notification; FallbackPage: per two-node trial that
	// paged it, RAS reporting the two-node communicator → NCCLSocketFallback
	// (kernel evidence) for rank 0; Rows: the two-node trials' summary.
	KillToPage   []time.Duration
	FallbackPage []time.Duration
	// HangToPage: per hung-group kind, the fault → the first
	// NCCLCommunicatorHung or NCCLRankUnresponsive notification.
	HangToPage map[string][]time.Duration
	Rows       []trialRow
	Lines      []string // the report
}

// Failed reports whether any check failed.
func (r *Result) Failed() bool {
	for _, c := range r.Checks {
		if !c.ok {
			return true
		}
	}
	return len(r.Checks) == 0
}

func (r *Result) check(name string, ok bool, format string, a ...any) {
	r.Checks = append(r.Checks, check{name: name, ok: ok, detail: fmt.Sprintf(format, a...)})
}

func (r *Result) printf(format string, a ...any) {
	r.Lines = append(r.Lines, fmt.Sprintf(format, a...))
}

// rank is one NCCL process as its log file names it (NCCL_DEBUG_FILE=%h.%p.log).
type rank struct {
	host, pid string
	file      string
}

var logName = regexp.MustCompile(`^(.+)\.([0-9]+)\.log$`)

func ranksIn(dir string) []rank {
	ents, _ := os.ReadDir(dir)
	var out []rank
	for _, e := range ents {
		if m := logName.FindStringSubmatch(e.Name()); m != nil {
			out = append(out, rank{host: m[1], pid: m[2], file: filepath.Join(dir, e.Name())})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out
}

func pidRegexp(rs []rank) string {
	var p []string
	for _, r := range rs {
		p = append(p, r.pid)
	}
	return strings.Join(p, "|")
}

// Run runs the drill: Trials socket-fallback runs, then the forced-IB run,
// each against a fresh exporter, Prometheus and Alertmanager.
func Run(cfg Config) (*Result, error) {
	res := &Result{}
	nodes := cfg.RASTrials > 0 || cfg.HangTrials > 0 || cfg.QuietFor > 0 || cfg.NoDebug || cfg.DestroyTrial || cfg.NonblockingTrial || cfg.SelftestShape
	if cfg.SelftestShape {
		cfg.Trials = 0 // the plumbing alone
	}
	if cfg.Trials < 1 && !nodes {
		cfg.Trials = 1
	}
	if err := portsFree(cfg.ExporterPort, cfg.PrometheusPort, cfg.AlertmanagerPort, cfg.WebhookPort, cfg.TorchPort); err != nil {
		return nil, err
	}
	sh, err := loadShipped(cfg.Repo)
	if err != nil {
		return nil, err
	}
	if cfg.ScrapeInterval == "" {
		cfg.ScrapeInterval = sh.scrapeInterval
	}
	if cfg.EvalInterval == "" {
		cfg.EvalInterval = sh.evalInterval
	}
	host, _ := os.Hostname()
	mode := "live (PyTorch, real NCCL)"
	switch {
	case cfg.Replay != "":
		mode = "replay of " + cfg.Replay
	case cfg.SelftestShape:
		mode = "selftest of the two-node shape (sleep for ranks; no GPU, Python or NCCL)"
	case cfg.Python != "python3":
		// The stand-in ranks (testdata/fakerank.py) come in through
		// --python: the drill cannot tell them from a PyTorch.
		mode = "ranks run by --python=" + cfg.Python + " (live only if that is a Python with PyTorch; testdata/fakerank.py is a stand-in)"
	}
	res.printf("fabric_exporter GPU fire drill, %s on %s, %s", time.Now().UTC().Format("2006-01-02 15:04 UTC"), host, mode)
	res.printf("settings: scrape %s, evaluation %s (deploy/lab/prometheus.yml: %s/%s), NCCLSocketFallback for: %s, page route group_wait %s, nccl poll 1s",
		cfg.ScrapeInterval, cfg.EvalInterval, sh.scrapeInterval, sh.evalInterval, sh.ncclFor, sh.pageGroupWait)
	if nodes {
		res.printf("two-node trials: RAS asked at each scrape (--collector.nccl-ras.scrape-wait) and every 15s, NCCLRankMissing for: %s, NCCLAsyncError for: %s, NCCLSocketFallback for: %s",
			sh.forOf("NCCLRankMissing"), sh.forOf("NCCLAsyncError"), sh.ncclFor)
	}
	for i := 1; i <= cfg.Trials; i++ {
		inspector := ""
		if cfg.Replay != "" && cfg.ReplayInspector != "" && i == 1 {
			inspector = "json"
		}
		if cfg.Inspector != "" && cfg.Replay == "" {
			// JSON lines in the first trial, Prometheus textfiles in the second.
			switch i {
			case 1:
				inspector = "json"
			case 2:
				inspector = "prom"
			}
		}
		if err := runTrial(cfg, sh, res, fmt.Sprintf("trial%d", i), "socket", inspector); err != nil {
			return res, err
		}
	}
	if cfg.Trials > 0 {
		if err := runTrial(cfg, sh, res, "ib-failure", "ib", ""); err != nil {
			return res, err
		}
	}
	if nodes {
		if err := runNodeTrials(cfg, res); err != nil {
			return res, err
		}
	}
	var med []float64
	for _, d := range res.TimeToPage {
		med = append(med, d.Seconds())
	}
	if len(med) > 0 {
		res.printf("time to page (median of %d): %.1f s  [%s]", len(med), median(med), joinFloats(med, " s, ")+" s")
	}
	res.printf("checks:")
	for _, c := range res.Checks {
		st := "PASS"
		if !c.ok {
			st = "FAIL"
		}
		res.printf("  %s %s: %s", st, c.name, c.detail)
	}
	res.Lines = append(res.Lines, nodeSummary(cfg, res)...)
	return res, nil
}
