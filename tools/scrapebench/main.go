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
	"compress/gzip"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptrace"
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

	"golang.org/x/sys/unix"

	"github.com/fabric-exporter/fabric_exporter/internal/fixturetree"
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

// ---------------------------------------------------------------------------
// Fixture trees

// buildFixture writes a tree of hcas clean copies of the fixture's mlx5_0
// (internal/fixturetree) to dst and returns a one-line description of it.
// The bundled fixture itself is not used: its broken files (an "N/A"
// hw_counter, garbage, a directory in place of a counter) make
// node_exporter's infiniband collector fail as a whole.
func buildFixture(src, dst string, hcas int) (string, error) {
	if err := fixturetree.HCAs(src, dst, hcas); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d HCAs (fixture mlx5_0 replicated ×%d)", hcas, hcas), nil
}

// ---------------------------------------------------------------------------
// Measurements

// result is one row of a table.
type result struct {
	name     string
	encoding string        // "identity" or "gzip"; "" for the raw floor
	note     string        // why the row is empty, or remarks
	cpu      time.Duration // CPU time per scrape, the median round
	rounds   []time.Duration
	lat      []time.Duration
	rss200   int64    // VmRSS after the warm-up, KiB
	rssKiB   int64    // VmRSS after the last round
	hwmKiB   int64    // VmHWM after the last round
	fileKiB  int64    // RssFile after the last round (mapped file pages: the binary, libraries)
	anonKiB  int64    // RssAnon after the last round (heap, stacks, runtime)
	series   int      // non-comment lines of one scrape
	body     int      // bytes of one scrape's body as sent (compressed with gzip)
	plain    int      // bytes of one scrape's body uncompressed
	own      int      // series of the measured collector
	failed   []string // collectors reporting success 0
	failLog  string   // the exporter log line explaining the failure
	conns    int      // TCP connections opened during the measured loops
	skipped  bool
	baseline bool // a -baseline row
	node     bool // a node_exporter row
}

// target is one exporter process under measurement.
type target struct {
	res    *result
	c      *child
	scrape func(keep *[]byte) error
	client *http.Transport
}

// benchFixture measures the raw floor and every exporter and encoding on
// one tree: all children run side by side, measured in turn.
func benchFixture(ctx context.Context, w io.Writer, cfg *config, tmp, sysfs, desc, nodeNote string) error {
	files, err := attributeFiles(sysfs)
	if err != nil {
		return err
	}
	raw := &result{name: "raw floor", lat: make([]time.Duration, 0, cfg.n*cfg.rounds)}
	if err := rawFloor(ctx, nil, files, cfg.warmup); err != nil {
		return fmt.Errorf("raw floor: %w", err)
	}

	fabricArgs := func(addr string) []string {
		if cfg.defaults {
			return []string{"--path.sysfs=" + sysfs, "--web.listen-address=" + addr}
		}
		return []string{"--path.sysfs=" + sysfs, "--collector.disable-defaults", "--collector.rdma", "--web.listen-address=" + addr}
	}
	nodeArgs := func(addr string) []string {
		return []string{"--collector.disable-defaults", "--collector.infiniband", "--path.sysfs=" + sysfs, "--web.listen-address=" + addr}
	}
	var targets []*target
	var rows []*result
	defer func() {
		for _, t := range targets {
			t.client.CloseIdleConnections()
			t.c.stop()
		}
	}()
	for _, enc := range cfg.encodings {
		type exp struct {
			name, bin string
			prefixes  []string
			args      func(string) []string
			baseline  bool
			node      bool
		}
		exps := []exp{{"fabric_exporter", cfg.fabricBin, []string{"fabric_rdma_", "fabric_rail_"}, fabricArgs, false, false}}
		if cfg.baselineBin != "" {
			exps = append(exps, exp{"fabric_exporter (" + cfg.baselineName + ")", cfg.baselineBin, []string{"fabric_rdma_", "fabric_rail_"}, fabricArgs, true, false})
		}
		exps = append(exps, exp{"node_exporter", cfg.nodeBin, []string{"node_infiniband_"}, nodeArgs, false, true})
		for _, e := range exps {
			if e.bin == "" {
				rows = append(rows, &result{name: e.name, encoding: enc, skipped: true, note: nodeNote, node: e.node})
				continue
			}
			t, err := startTarget(ctx, cfg, tmp, e.name, e.bin, enc, e.prefixes, e.args)
			if err != nil {
				return err
			}
			t.res.baseline, t.res.node = e.baseline, e.node
			targets = append(targets, t)
			rows = append(rows, t.res)
		}
	}

	// Rounds: the raw floor, then every child, in an order that rotates.
	for r := range cfg.rounds {
		if err := rawFloor(ctx, raw, files, cfg.n); err != nil {
			return fmt.Errorf("raw floor: %w", err)
		}
		for i := range targets {
			t := targets[(i+r)%len(targets)]
			if err := t.measure(ctx, cfg.n); err != nil {
				return err
			}
		}
	}
	raw.cpu = median(raw.rounds)
	for _, t := range targets {
		t.res.cpu = median(t.res.rounds)
		m, err := procStatus(t.c.cmd.Process.Pid)
		if err != nil {
			return err
		}
		t.res.rssKiB, t.res.hwmKiB, t.res.fileKiB, t.res.anonKiB = m["VmRSS"], m["VmHWM"], m["RssFile"], m["RssAnon"]
		if len(t.res.failed) > 0 {
			t.res.failLog = lastError(t.c.logTail())
		}
		if t.res.conns > 0 {
			t.res.note = fmt.Sprintf("%d new connection(s) during the measured loops", t.res.conns)
		}
	}
	printTable(w, desc, len(files), cfg, raw, rows)
	return nil
}

// median returns the median of d (sorted in place; the lower middle one
// for an even count).
func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[(len(d)-1)/2]
}

// attributeFiles lists the files one scrape of fabric_exporter's rdma
// collector reads: for every class/infiniband/<dev>/ports/<p>, the state,
// phys_state, rate and gid_attrs/ndevs/0 attributes (when present) and every
// regular file of counters/, counters_ext/ and hw_counters/. Paths go
// through the class symlink, as the exporters' paths do.
func attributeFiles(sysfs string) ([]string, error) {
	files, err := fixturetree.Files(sysfs)
	if err == nil && len(files) == 0 {
		err = fmt.Errorf("%s: no RDMA attribute files found", sysfs)
	}
	return files, err
}

// rawFloor opens, reads and closes every file once per iteration with raw
// system calls, n times. With a result (nil: warm-up), it records the
// thread CPU time per iteration as one round and each iteration's
// latency. It runs
// on a locked OS thread, so RUSAGE_THREAD sees exactly the loop (and not
// the Go runtime's other threads).
func rawFloor(ctx context.Context, res *result, files []string, n int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var buf [4096]byte
	// once is one "scrape". It is written out without helper closures so
	// that the loop costs the system calls and next to nothing else.
	once := func() error {
		for _, f := range files {
			fd, err := unix.Open(f, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			for err == unix.EINTR {
				fd, err = unix.Open(f, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			}
			if err != nil {
				return fmt.Errorf("open %s: %w", f, err)
			}
			_, err = unix.Read(fd, buf[:])
			for err == unix.EINTR {
				_, err = unix.Read(fd, buf[:])
			}
			unix.Close(fd)
			if err != nil {
				return fmt.Errorf("read %s: %w", f, err)
			}
		}
		return nil
	}
	if res == nil {
		for range n {
			if err := once(); err != nil {
				return err
			}
		}
		return nil
	}
	before, err := threadCPU()
	if err != nil {
		return err
	}
	for range n {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		t := time.Now()
		if err := once(); err != nil {
			return err
		}
		res.lat = append(res.lat, time.Since(t))
	}
	after, err := threadCPU()
	if err != nil {
		return err
	}
	res.rounds = append(res.rounds, (after-before)/time.Duration(n))
	return nil
}

// threadCPU returns the user+system CPU time of the calling OS thread.
func threadCPU() (time.Duration, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// child is a running exporter.
type child struct {
	cmd    *exec.Cmd
	log    string
	exited chan struct{} // closed when the process has exited
	err    error         // Wait's result, valid after exited is closed
}

// startChild starts bin with the arguments args(address) on a free port.
func startChild(tmp, name, bin string, args func(addr string) []string) (*child, string, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	logf, err := os.CreateTemp(tmp, name+"-*.log")
	if err != nil {
		return nil, "", err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args(addr)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The child dies with the benchmark even if it is killed hard.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("starting %s: %w", name, err)
	}
	c := &child{cmd: cmd, log: logf.Name(), exited: make(chan struct{})}
	go func() { c.err = cmd.Wait(); close(c.exited) }()
	return c, addr, nil
}

// stop kills the child and waits for it.
func (c *child) stop() {
	c.cmd.Process.Kill()
	<-c.exited
}

// logTail returns the end of the child's output, for error messages.
func (c *child) logTail() string {
	b, _ := os.ReadFile(c.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// lastError returns the last line of log that carries an err= field,
// shortened; the exporters log a failing collector on every scrape.
func lastError(log string) string {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if _, e, ok := strings.Cut(lines[i], "err="); ok {
			if len(e) > 200 {
				e = e[:200] + "…"
			}
			return "err=" + e
		}
	}
	return ""
}

// freeAddr returns a 127.0.0.1 address with a port that was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startTarget starts an exporter, waits for it, warms it up with the
// given encoding and inspects one scrape. Series whose name starts with
// one of prefixes are counted as the collector's own (as opposed to go_*,
// process_* and scrape metadata).
func startTarget(ctx context.Context, cfg *config, tmp, name, bin, encoding string, prefixes []string, args func(addr string) []string) (*target, error) {
	c, addr, err := startChild(tmp, name, bin, args)
	if err != nil {
		return nil, err
	}
	url := "http://" + addr + "/metrics"

	// One client, one keep-alive connection; no transparent decompression:
	// the body is read as sent.
	tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	res := &result{name: name, encoding: encoding, lat: make([]time.Duration, 0, cfg.n*cfg.rounds)}
	t := &target{res: res, c: c, client: tr}
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if !info.Reused {
			res.conns++
		}
	}}
	t.scrape = func(keep *[]byte) error {
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Accept-Encoding", encoding)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var n int64
		if keep != nil {
			*keep, err = io.ReadAll(resp.Body)
			n = int64(len(*keep))
		} else {
			n, err = io.Copy(io.Discard, resp.Body)
		}
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: HTTP %s", url, resp.Status)
		}
		if n == 0 {
			return fmt.Errorf("%s: empty body", url)
		}
		if ce := resp.Header.Get("Content-Encoding"); (encoding == "gzip") != (ce == "gzip") {
			return fmt.Errorf("%s: asked for %s, got Content-Encoding %q", url, encoding, ce)
		}
		return nil
	}
	ok := false
	defer func() {
		if !ok {
			tr.CloseIdleConnections()
			c.stop()
		}
	}()

	// Wait until /metrics answers (or the child dies).
	deadline := time.Now().Add(cfg.startTimeout)
	for {
		err := t.scrape(nil)
		if err == nil {
			break
		}
		select {
		case <-c.exited:
			return nil, fmt.Errorf("%s exited during start-up (%v):\n%s", name, c.err, c.logTail())
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: %s did not answer within %s (%v):\n%s", name, url, cfg.startTimeout, err, c.logTail())
		}
	}

	// Warm-up, the memory after it, then one scrape whose body is kept for
	// size and series.
	for range cfg.warmup {
		if err := t.scrape(nil); err != nil {
			return nil, fmt.Errorf("%s warm-up: %w", name, err)
		}
	}
	if res.rss200, _, err = procMemory(c.cmd.Process.Pid); err != nil {
		return nil, err
	}
	var body []byte
	if err := t.scrape(&body); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	res.body = len(body)
	if encoding == "gzip" {
		// The whole stream must be valid gzip (checksum included).
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err == nil {
			body, err = io.ReadAll(zr)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: gzip answer: %w", name, err)
		}
	}
	res.plain = len(body)
	res.series, res.own, res.failed = inspectBody(body, prefixes)
	res.conns = 0
	ok = true
	return t, nil
}

// measure runs one round of n scrapes; only the child's CPU time counts.
func (t *target) measure(ctx context.Context, n int) error {
	pid := t.c.cmd.Process.Pid
	// One unmeasured scrape first: the keep-alive connection may have hit
	// the server's idle timeout while the other children were measured.
	// Only connections opened during the measured scrapes are counted.
	conns := t.res.conns
	if err := t.scrape(nil); err != nil {
		return fmt.Errorf("%s: %w", t.res.name, err)
	}
	t.res.conns = conns
	before, err := procCPU(pid)
	if err != nil {
		return err
	}
	for range n {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		start := time.Now()
		if err := t.scrape(nil); err != nil {
			return fmt.Errorf("%s: %w", t.res.name, err)
		}
		t.res.lat = append(t.res.lat, time.Since(start))
	}
	after, err := procCPU(pid)
	if err != nil {
		return err
	}
	t.res.rounds = append(t.res.rounds, (after-before)/time.Duration(n))
	return nil
}

// loadAvg returns the 1-, 5- and 15-minute load averages of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// inspectBody reads one text exposition. It counts the samples (non-empty
// lines that are not # HELP or # TYPE comments), the samples whose metric
// name starts with one of prefixes, and lists the collectors that reported
// failure through a *_scrape_collector_success{collector="X"} 0 sample:
// such a scrape skips most of the work and is not comparable.
func inspectBody(body []byte, prefixes []string) (series, own int, failed []string) {
	for line := range strings.Lines(string(body)) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		series++
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				own++
				break
			}
		}
		name, rest, ok := strings.Cut(line, "{")
		if !ok || !strings.HasSuffix(name, "_scrape_collector_success") {
			continue
		}
		labels, value, _ := strings.Cut(rest, "}")
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil && v == 0 {
			failed = append(failed, labels)
		}
	}
	return series, own, failed
}

// procCPU returns utime+stime of process pid (all its threads) from
// /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may contain spaces;
	// the fields after it start with field 3, state.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	const utime, stime = 14 - 3, 15 - 3
	if len(f) <= stime {
		return 0, fmt.Errorf("/proc/%d/stat: only %d fields", pid, len(f)+2)
	}
	u, err1 := strconv.ParseInt(f[utime], 10, 64)
	s, err2 := strconv.ParseInt(f[stime], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(u+s) * time.Second / clockTicksPerSecond, nil
}

// procMemory returns VmRSS and VmHWM of process pid in KiB.
func procMemory(pid int) (rss, hwm int64, err error) {
	m, err := procStatus(pid)
	return m["VmRSS"], m["VmHWM"], err
}

// procStatus returns the "kB" fields of /proc/PID/status (VmRSS, VmHWM,
// RssAnon, RssFile, …) in KiB.
func procStatus(pid int) (map[string]int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	m := map[string]int64{}
	for line := range strings.Lines(string(b)) {
		key, val, ok := strings.Cut(line, ":")
		f := strings.Fields(val) // "12345 kB"
		if !ok || len(f) != 2 || f[1] != "kB" {
			continue
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("/proc/%d/status: bad %s line %q", pid, key, line)
		}
		m[key] = v
	}
	if _, ok := m["VmRSS"]; !ok {
		return nil, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
	}
	return m, nil
}

// ---------------------------------------------------------------------------
// Output

// percentile returns the nearest-rank p-th percentile of d (sorted in place).
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(float64(len(d))*p/100+0.999999) - 1
	return d[max(0, min(i, len(d)-1))]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func printTable(w io.Writer, desc string, files int, cfg *config, raw *result, rows []*result) {
	fmt.Fprintf(w, "\n## %s — %d attribute files per scrape\n\n", desc, files)
	fmt.Fprintln(w, "| | encoding | CPU µs/scrape | × raw floor | × node_exporter | p50 ms | p99 ms | RSS MiB after warm-up / end (max) | bytes sent | series |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	nodeCPU := map[string]time.Duration{}
	for _, r := range rows {
		if r.node && !r.skipped && len(r.failed) == 0 {
			nodeCPU[r.encoding] = r.cpu
		}
	}
	for _, r := range rows {
		if r.skipped {
			fmt.Fprintf(w, "| %s | %s | — | — | — | — | — | — | — | — |\n", r.name, r.encoding)
			continue
		}
		ratio, nodeRatio := "—", "—"
		if raw.cpu > 0 {
			ratio = fmt.Sprintf("%.2f", float64(r.cpu)/float64(raw.cpu))
		}
		if nc := nodeCPU[r.encoding]; nc > 0 && !r.node {
			nodeRatio = fmt.Sprintf("%.2f", float64(r.cpu)/float64(nc))
		}
		fmt.Fprintf(w, "| %s | %s | %.1f | %s | %s | %.3f | %.3f | %.1f / %.1f (%.1f) | %d | %d |\n",
			r.name, r.encoding, us(r.cpu), ratio, nodeRatio, ms(percentile(r.lat, 50)), ms(percentile(r.lat, 99)),
			float64(r.rss200)/1024, float64(r.rssKiB)/1024, float64(r.hwmKiB)/1024, r.body, r.series)
	}
	fmt.Fprintf(w, "| raw floor | | %.1f | 1.00 | — | %.3f | %.3f | — | — | — |\n", us(raw.cpu), ms(percentile(raw.lat, 50)), ms(percentile(raw.lat, 99)))
	fmt.Fprintln(w)
	fmt.Fprintf(w, "CPU µs per scrape in each round (%d scrapes each):\n\n", cfg.n)
	for _, r := range append(slices.Clone(rows), raw) {
		if r.skipped {
			continue
		}
		var rs []string
		for _, d := range r.rounds {
			rs = append(rs, fmt.Sprintf("%.1f", us(d)))
		}
		label := r.name
		if r.encoding != "" {
			label += ", " + r.encoding
		}
		fmt.Fprintf(w, "- %s: %s\n", label, strings.Join(rs, ", "))
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		if r.skipped {
			if r.encoding == cfg.encodings[0] {
				fmt.Fprintf(w, "- %s: %s\n", r.name, r.note)
			}
			continue
		}
		fmt.Fprintf(w, "- %s, %s: %d body bytes uncompressed", r.name, r.encoding, r.plain)
		if r.encoding == "gzip" {
			fmt.Fprintf(w, " (%d sent, %.1f %%)", r.body, 100*float64(r.body)/float64(r.plain))
		}
		fmt.Fprintf(w, ", %d of the %d series from the collector; RSS at the end %.1f MiB file-backed + %.1f MiB anonymous",
			r.own, r.series, float64(r.fileKiB)/1024, float64(r.anonKiB)/1024)
		if r.note != "" {
			fmt.Fprintf(w, "; %s", r.note)
		}
		fmt.Fprintln(w)
		if len(r.failed) > 0 {
			fmt.Fprintf(w, "  - **WARNING**: %s reports a failed collector (%s), so its row measures a failed scrape, not a full one",
				r.name, strings.Join(r.failed, ", "))
			if r.failLog != "" {
				fmt.Fprintf(w, "; its log says: `%s`", r.failLog)
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintf(w, "- raw floor: %d × open+read+close per scrape, %.2f µs CPU per file\n", files, us(raw.cpu)/float64(files))
}
