// Command scrapebench compares the CPU cost of one /metrics scrape of
// fabric_exporter (rdma collector only) with node_exporter (infiniband
// collector only) and with the "raw floor": a loop that only opens, reads
// and closes the same sysfs attribute files with raw system calls.
//
// It is a development tool; it reads a fixture sysfs tree, never /sys.
// For every HCA count given with -hcas it builds a fixture in a temporary
// directory below -workdir: the PCI device of mlx5_0 (with
// infiniband/mlx5_0 and net/eth0) replicated N times as mlx5_0..mlx5_<N-1>,
// each under its own fake PCI address, and no other RDMA device
// (internal/fixturetree).
//
// Each exporter runs as a child process on a free 127.0.0.1 port, once per
// encoding of -encodings: "identity" (no compression) and "gzip" (the
// Accept-Encoding Prometheus sends). -baseline adds a second
// fabric_exporter binary (e.g. one built from main) to the same run. Every
// child first gets -warmup scrapes; then, in each of -rounds rounds, the
// raw floor and every child are measured in turn (the order rotates), -n
// sequential scrapes each over one keep-alive connection. A child's CPU
// time per scrape is its utime+stime (/proc/PID/stat) over the n scrapes
// divided by n; the row shows the median of the rounds. The benchmark's
// own CPU time is not part of it. The raw floor runs in this process on a
// locked OS thread while no scrape runs and is measured with
// getrusage(RUSAGE_THREAD).
//
// Run it from the repository root:
//
//	go build -o build/fabric_exporter ./cmd/fabric_exporter
//	go run ./tools/scrapebench -n 2000
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicksPerSecond is USER_HZ, the unit of utime and stime in
// /proc/PID/stat. It is 100 on every Linux architecture Go supports.
const clockTicksPerSecond = 100

// config holds the command line.
type config struct {
	fixture      string
	hcas         []int
	workdir      string
	fabricBin    string
	baselineBin  string
	baselineName string
	nodeBin      string
	encodings    []string
	warmup       int
	n            int
	rounds       int
	defaults     bool
	fabricExtra  []string // -fabric-args: more flags for the -fabric binary only
	out          string
	startTimeout time.Duration
}

func main() {
	cfg, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "scrapebench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, cfg)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "scrapebench:", err)
		os.Exit(1)
	}
}

func parseFlags() (*config, error) {
	cfg := &config{}
	hcas := flag.String("hcas", "2,8", "comma-separated HCA counts; 2 = the fixture's mlx5_0 and mlx5_3, any other N = mlx5_0 replicated N times")
	flag.StringVar(&cfg.fixture, "fixture", "collector/fixtures/sys", "fixture sysfs tree to derive the benchmark trees from")
	flag.StringVar(&cfg.workdir, "workdir", ".bench", "directory for temporary fixture trees and logs (removed at the end)")
	flag.StringVar(&cfg.fabricBin, "fabric", "build/fabric_exporter", "fabric_exporter binary")
	flag.StringVar(&cfg.baselineBin, "baseline", "", "a second fabric_exporter binary to measure in the same run (e.g. built from main); none by default")
	flag.StringVar(&cfg.baselineName, "baseline-name", "before", "what the -baseline rows are called (fabric_exporter (NAME))")
	encodings := flag.String("encodings", "identity,gzip", "comma-separated Accept-Encodings to measure: identity (uncompressed), gzip")
	flag.BoolVar(&cfg.defaults, "fabric-defaults", false, "run fabric_exporter with all its default collectors instead of rdma alone (for its memory: the CPU is then not comparable with node_exporter's infiniband collector or the floor)")
	fabricExtra := flag.String("fabric-args", "", "space-separated flags added to the -fabric binary's only (not -baseline's: flags it may not know), e.g. the kernel-events and devlink fixtures for every collector on")
	flag.IntVar(&cfg.rounds, "rounds", 3, "measured rounds; each row is the median of its rounds")
	flag.StringVar(&cfg.nodeBin, "node-exporter", "", "node_exporter binary (default $(go env GOPATH)/bin/node_exporter; skipped if missing)")
	flag.IntVar(&cfg.warmup, "warmup", 200, "unmeasured scrapes (or raw-floor iterations) before the measured ones")
	flag.IntVar(&cfg.n, "n", 2000, "measured scrapes (or raw-floor iterations) per row and round")
	flag.StringVar(&cfg.out, "out", "", "also write the report to this file")
	flag.DurationVar(&cfg.startTimeout, "start-timeout", 15*time.Second, "how long to wait for an exporter's /metrics to answer")
	flag.Parse()
	if flag.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if cfg.n < 1 || cfg.warmup < 0 || cfg.rounds < 1 {
		return nil, errors.New("-n and -rounds must be at least 1 and -warmup at least 0")
	}
	for _, e := range strings.Split(*encodings, ",") {
		e = strings.TrimSpace(e)
		if e != "identity" && e != "gzip" {
			return nil, fmt.Errorf("-encodings: %q is neither identity nor gzip", e)
		}
		if !slices.Contains(cfg.encodings, e) {
			cfg.encodings = append(cfg.encodings, e)
		}
	}
	cfg.fabricExtra = strings.Fields(*fabricExtra)
	for _, s := range strings.Split(*hcas, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(s))
		// Fake PCI bus numbers are derived from mlx5_0's bus and must stay
		// within one byte; 128 is far more HCAs than any server has.
		if err != nil || v < 1 || v > 128 {
			return nil, fmt.Errorf("-hcas: %q is not a count from 1 to 128", s)
		}
		cfg.hcas = append(cfg.hcas, v)
	}
	if cfg.nodeBin == "" {
		cfg.nodeBin = filepath.Join(goPath(), "bin", "node_exporter")
	}
	return cfg, nil
}

// goPath returns the first element of `go env GOPATH`, falling back to
// $GOPATH and then to Go's default, $HOME/go.
func goPath() string {
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		if p := filepath.SplitList(strings.TrimSpace(string(out))); len(p) > 0 && p[0] != "" {
			return p[0]
		}
	}
	if p := filepath.SplitList(os.Getenv("GOPATH")); len(p) > 0 && p[0] != "" {
		return p[0]
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, "go")
}

func run(ctx context.Context, cfg *config) (err error) {
	if _, err := os.Stat(cfg.fabricBin); err != nil {
		return fmt.Errorf("fabric_exporter binary: %w (build it with: go build -o build/fabric_exporter ./cmd/fabric_exporter)", err)
	}
	if cfg.baselineBin != "" {
		if _, err := os.Stat(cfg.baselineBin); err != nil {
			return fmt.Errorf("-baseline: %w", err)
		}
	}
	nodeNote := ""
	if _, err := os.Stat(cfg.nodeBin); err != nil {
		nodeNote = fmt.Sprintf("skipped: %s not found (install with: cd /tmp && GOFLAGS=-mod=mod go install github.com/prometheus/node_exporter@v1.12.1)", cfg.nodeBin)
		cfg.nodeBin = ""
	}

	createdWorkdir := false
	if _, err := os.Stat(cfg.workdir); errors.Is(err, fs.ErrNotExist) {
		createdWorkdir = true
	}
	if err := os.MkdirAll(cfg.workdir, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(cfg.workdir, "scrapebench-")
	if err != nil {
		return err
	}
	defer func() {
		if rerr := os.RemoveAll(tmp); rerr != nil && err == nil {
			err = rerr
		}
		if createdWorkdir {
			os.Remove(cfg.workdir) // only succeeds if nothing else is in it
		}
	}()

	var report bytes.Buffer
	w := io.MultiWriter(os.Stdout, &report)
	start := time.Now()
	fmt.Fprintf(w, "# Scrape cost: fabric_exporter vs node_exporter vs raw sysfs reads\n\n")
	fmt.Fprintf(w, "%s, %s/%s, %d CPUs, %s, load average %s at the start; warm-up %d scrapes, then %d rounds of %d measured scrapes per row (the median round is shown).\n",
		start.Format("2006-01-02 15:04 MST"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), loadAvg(), cfg.warmup, cfg.rounds, cfg.n)
	fmt.Fprintf(w, "Exporter CPU = utime+stime of the child (USER_HZ %d, so one tick is %.1f µs per scrape at this -n); "+
		"raw floor CPU = getrusage(RUSAGE_THREAD) of a locked thread.\n\n",
		clockTicksPerSecond, 1e6/clockTicksPerSecond/float64(cfg.n))
	if cfg.defaults {
		fmt.Fprintln(w, "**fabric_exporter runs with all its default collectors** (-fabric-defaults): its CPU is not comparable with the other rows.")
		fmt.Fprintln(w)
	}
	if len(cfg.fabricExtra) > 0 {
		fmt.Fprintf(w, "fabric_exporter (not the baseline) also runs with `%s`.\n\n", strings.Join(cfg.fabricExtra, " "))
	}
	fmt.Fprintln(w, "| binary | size |")
	fmt.Fprintln(w, "|---|---:|")
	for _, b := range []struct{ name, path string }{{"fabric_exporter", cfg.fabricBin}, {"fabric_exporter (" + cfg.baselineName + ")", cfg.baselineBin}, {"node_exporter", cfg.nodeBin}} {
		if b.path == "" {
			continue
		}
		if fi, err := os.Stat(b.path); err == nil {
			fmt.Fprintf(w, "| %s | %.1f MB (%d bytes) |\n", b.name, float64(fi.Size())/1e6, fi.Size())
		}
	}

	for i, hcas := range cfg.hcas {
		if err := ctx.Err(); err != nil {
			return err
		}
		dir := filepath.Join(tmp, fmt.Sprintf("sys-%d-%d", i, hcas))
		desc, err := buildFixture(cfg.fixture, dir, hcas)
		if err != nil {
			return fmt.Errorf("building the %d-HCA fixture: %w", hcas, err)
		}
		if err := benchFixture(ctx, w, cfg, tmp, dir, desc, nodeNote); err != nil {
			return err
		}
		// Each fixture tree is removed as soon as it is measured.
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "\nTotal run time: %s; load average %s at the end.\n", time.Since(start).Round(100*time.Millisecond), loadAvg())
	if cfg.out != "" {
		if err := os.WriteFile(cfg.out, report.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}
