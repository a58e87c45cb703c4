// Command fleetbench measures what the shipped rules and dashboards cost a
// real Prometheus that scrapes a fleet of N fabric_exporter nodes.
//
// It takes the exporter's real output once: it builds the exporter (or
// takes -exporter), runs it on an 8-HCA copy of the bundled sysfs fixture
// (internal/fixturetree; ethtool fixture of eth0 for every rail netdev),
// the fixture /proc, the bundled DCGM fixture with every field filled and
// one real NCCL log that chose IB, and scrapes it once. That text is the
// template of every simulated node. Two values are made healthy by hand,
// because the fixture plants faults in them: every
// fabric_process_rdma_device_visible is 1. Then it serves N nodes from one
// HTTP server (/metrics?node=nodeNNNN) with counters that move at plausible
// rates (each scrape adds rate·Δt·U(0.8,1.2), so the samples do not
// compress better than real ones) and starts Prometheus (-prometheus) with
// the rules file (-rules, default the shipped alerts/fabric-rules.yml) at
// a 15 s scrape and evaluation interval, one scrape job "fabric" whose
// targets are the node names (relabelled onto the server's address).
//
// Planted faults (node index i, i mod 100): 1 a rail imbalance (seven of
// eight rails at 10 % of the busiest: RailImbalance, pending for its 10m),
// 2 a PFC storm on eth3 (paused half the time, a pause-storm event per
// scrape: PFCStorm), 3 retransmissions on mlx5_2 (200 local ACK timeouts/s:
// RoCERetransmissions), 4 NCCL on sockets (fabric_nccl_net_info net=Socket:
// NCCLSocketFallback). Every other alert that fires or pends is a false
// alert and fails the run.
//
// Per N (-nodes) it reports: head series and series per node; per rule
// group the mean and maximum evaluation time per round (polled from
// /api/v1/rules once per interval during the measured window) and the
// total per node per round; missed iterations and rule evaluation
// failures; Prometheus CPU (cores, mean over the window) and maximum RSS;
// the latency of every dashboard query (dashboards.Queries(), 5-minute
// range, 15 s step; instant queries at the end of the window); and which
// alerts fire or pend.
//
// Run it from the repository root (a run of N nodes takes -warmup +
// -measure, 6 minutes by default):
//
//	go run ./tools/fleetbench -nodes 50,500,1000
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fabric-exporter/fabric_exporter/dashboards"
	"github.com/fabric-exporter/fabric_exporter/internal/fixturetree"
	"github.com/fabric-exporter/fabric_exporter/internal/promapi"
)

func main() {
	var (
		nodesFlag = flag.String("nodes", "50,500,1000", "comma-separated fleet sizes, one run each")
		promBin   = flag.String("prometheus", "prometheus", "Prometheus binary")
		rules     = flag.String("rules", "alerts/fabric-rules.yml", "rules file Prometheus loads")
		exporter  = flag.String("exporter", "", "fabric_exporter binary (default: go build ./cmd/fabric_exporter)")
		template  = flag.String("template", "", "use this exposition text as the node template instead of scraping the exporter")
		interval  = flag.Duration("interval", 15*time.Second, "scrape and evaluation interval")
		warmup    = flag.Duration("warmup", 3*time.Minute, "time before the measured window (rates and the 2m alerts settle)")
		measure   = flag.Duration("measure", 3*time.Minute, "measured window")
		jsonOut   = flag.String("json", "", "also write the results as JSON to this file")
		keep      = flag.Bool("keep", false, "keep the work directory")
		railLabel = flag.Bool("rail-label", false, "what-if: add the rail label to every per-port and per-netdev series of the template (as the exporter could) and drop the rail joins from the rules (a copy of -rules)")
		costRules = flag.String("cost", "", "comma-separated rules files: after the warm-up, stop scraping and rule evaluation and measure Prometheus's CPU time for every rule of each file, and for every dashboard query, at one instant (robust on a loaded machine, unlike wall times); skips the measured window")
		dump      = flag.String("dump", "", "write the node template (the exporter's output) to this file and exit")
	)
	flag.Parse()
	if *costRules != "" {
		costFiles = strings.Split(*costRules, ",")
		*measure = 0
	}
	log := func(f string, a ...any) { fmt.Fprintf(os.Stderr, time.Now().UTC().Format("15:04:05 ")+f+"\n", a...) }

	work, err := os.MkdirTemp("", "fleetbench-")
	check(err)
	if !*keep {
		cleanups = append(cleanups, func() { os.RemoveAll(work) })
		defer os.RemoveAll(work)
	}
	var text []byte
	if *template != "" {
		text, err = os.ReadFile(*template)
		check(err)
	} else {
		text, err = exporterOutput(work, *exporter)
		check(err)
	}
	if *railLabel {
		text = addRailLabel(text)
		b, err := os.ReadFile(*rules)
		check(err)
		*rules = filepath.Join(work, "rules-rail-label.yml")
		check(os.WriteFile(*rules, dropRailJoins(b), 0o644))
	}
	for i, f := range costFiles {
		if f == "-" {
			costFiles[i] = *rules // the rules Prometheus runs (after -rail-label)
		}
	}
	if *dump != "" {
		check(os.WriteFile(*dump, text, 0o644))
		return
	}
	tmpl := parseTemplate(text)
	log("template: %d series per node (%d counters)", len(tmpl.series), tmpl.counters())

	var results []result
	for _, f := range strings.Split(*nodesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		check(err)
		log("== %d nodes", n)
		r, err := run(work, *promBin, *rules, tmpl, n, *interval, *warmup, *measure, log)
		if err != nil {
			log("run %d: %v", n, err)
			exit(1)
		}
		results = append(results, r)
		printResult(os.Stdout, r)
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(results, "", "  ")
		check(os.WriteFile(*jsonOut, b, 0o644))
	}
	for _, r := range results {
		if !r.AlertsOK {
			exit(2)
		}
	}
}

// cleanups run before the process exits (deferred calls do not run on
// os.Exit).
var cleanups []func()

func exit(code int) {
	for _, f := range cleanups {
		f()
	}
	os.Exit(code)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench:", err)
		exit(1)
	}
}

// ---------------------------------------------------------------------------
// The node template: the exporter's real output.

const hcas = 8

// ncclLog is a real NCCL log (two ranks on two DGX H100 with RoCE) whose
// processes chose IB.
const ncclLog = "collector/fixtures/nccl/nccl-tests-185-roce-2.19.3-dgxh100-init.log"

func exporterOutput(work, bin string) ([]byte, error) {
	if bin == "" {
		bin = filepath.Join(work, "fabric_exporter")
		if out, err := exec.Command("go", "build", "-o", bin, "./cmd/fabric_exporter").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("build: %v\n%s", err, out)
		}
	}
	sys, eth, nccl := filepath.Join(work, "sys"), filepath.Join(work, "ethtool"), filepath.Join(work, "nccl")
	if err := fixturetree.HCAs("collector/fixtures/sys", sys, hcas); err != nil {
		return nil, err
	}
	ethBase, err := os.ReadFile("collector/fixtures/ethtool/eth0")
	if err != nil {
		return nil, err
	}
	os.MkdirAll(eth, 0o755)
	for i := range hcas {
		os.WriteFile(filepath.Join(eth, fmt.Sprintf("eth%d", i)), ethBase, 0o644)
	}
	os.MkdirAll(nccl, 0o755)
	b, err := os.ReadFile(ncclLog)
	if err != nil {
		return nil, err
	}
	os.WriteFile(filepath.Join(nccl, "rank.log"), b, 0o644)
	gpu := filepath.Join(work, "gpu.json")
	if err := fullGPUFixture("collector/fixtures/gpu/dcgm-8gpu.json", gpu); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--web.listen-address="+addr, "--path.sysfs="+sys, "--path.procfs=collector/fixtures/proc",
		"--collector.pfc.ethtool-fixtures="+eth, "--collector.gpu.fixture="+gpu,
		"--collector.nccl.log-path="+filepath.Join(nccl, "*.log"), "--collector.nccl.retention=0")
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var last error
	for range 100 {
		time.Sleep(200 * time.Millisecond)
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			last = err
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		// The nccl collector reads its logs in the background: wait for them.
		if err == nil && resp.StatusCode == 200 && bytes.Contains(body, []byte("fabric_nccl_net_info{")) {
			return body, nil
		}
		last = fmt.Errorf("status %d, no NCCL series yet", resp.StatusCode)
	}
	return nil, fmt.Errorf("scrape the exporter: %v", last)
}

// fullGPUFixture copies the DCGM fixture with every blank field filled and
// no compute PIDs (the bundled fixture has a sparse GPU, which rightly
// raises GPUActivityMissing).
func fullGPUFixture(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return err
	}
	for _, g := range doc["gpus"].([]any) {
		gm := g.(map[string]any)
		delete(gm, "pids")
		for k, v := range gm["fields"].(map[string]any) {
			if v == nil {
				gm["fields"].(map[string]any)[k] = 0.5
			}
		}
	}
	out, _ := json.Marshal(doc)
	return os.WriteFile(dst, out, 0o644)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

type tseries struct {
	name, labels string // labels with braces, "" when none
	value        float64
	rate         float64 // per second; 0 for gauges and flat counters
	gauge        bool    // jitter ±10 % (ratios, rates)
}

type template struct {
	meta   map[string]string // family name -> its HELP and TYPE lines
	series []tseries
}

func (t *template) counters() int {
	n := 0
	for _, s := range t.series {
		if s.rate > 0 {
			n++
		}
	}
	return n
}

// Healthy rates of the counters that move; every other counter is flat
// (errors, pauses, retransmissions and link events stay 0/s on a healthy node).
var rates = map[string]float64{
	"fabric_rdma_port_transmitted_bytes_total":           3e9, // 24 Gbit/s per rail
	"fabric_rdma_port_received_bytes_total":              3e9,
	"fabric_rdma_port_transmitted_packets_total":         7.5e5,
	"fabric_rdma_port_received_packets_total":            7.5e5,
	"fabric_rdma_port_transmitted_unicast_packets_total": 7.5e5,
	"fabric_rdma_port_received_unicast_packets_total":    7.5e5,
	"fabric_netdev_vport_rdma_bytes_total":               3e9,
	"fabric_netdev_transmitted_bytes_total":              1e5, // a little TCP
	"fabric_netdev_received_bytes_total":                 1e5,
	"fabric_netdev_transmitted_packets_total":            100,
	"fabric_netdev_received_packets_total":               100,
	"fabric_process_cpu_seconds_total":                   1,
	"fabric_process_context_switches_total":              1000,
	"fabric_rdma_hw_rx_write_requests_total":             1e4,
	"fabric_rdma_hw_rx_read_requests_total":              1e4,
}

func parseTemplate(text []byte) *template {
	t := &template{meta: map[string]string{}}
	types := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "# ") {
			f := strings.Fields(line)
			if len(f) >= 3 {
				t.meta[f[2]] += line + "\n"
				if f[1] == "TYPE" && len(f) >= 4 {
					types[f[2]] = f[3]
				}
			}
			continue
		}
		if line == "" {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		s := line[:i]
		name, labels := s, ""
		if j := strings.IndexByte(s, '{'); j >= 0 {
			name, labels = s[:j], s[j:]
		}
		ts := tseries{name: name, labels: labels, value: v}
		if name == "fabric_process_rdma_device_visible" {
			ts.value = 1 // made healthy (see the package comment)
		}
		if types[name] == "counter" {
			ts.rate = rates[name]
		} else if strings.HasSuffix(name, "_ratio") || strings.HasSuffix(name, "_per_second") && !strings.Contains(name, "rate_bytes") {
			ts.gauge = true
		}
		t.series = append(t.series, ts)
	}
	return t
}

// The what-if of -rail-label.
var (
	devPortRe = regexp.MustCompile(`device="([^"]*)".*port="([^"]*)"`)
	netdevRe  = regexp.MustCompile(`netdev="([^"]*)"`)
	railRe    = regexp.MustCompile(`rail="([^"]*)"`)
	joinRe    = regexp.MustCompile(`\s*\* on \(cluster, instance, (device, port|netdev)\) group_left \(rail\) fabric_(rdma_port|netdev)_info(\{rail!=""\})?`)
)

// addRailLabel puts rail="<rail>" on every series (but the *_info ones and
// those that have it) whose device and port, or netdev, is a rail's, by
// fabric_rdma_port_info and fabric_netdev_info.
func addRailLabel(text []byte) []byte {
	lines := strings.Split(string(text), "\n")
	ports, netdevs := map[string]string{}, map[string]string{}
	for _, l := range lines {
		r := railRe.FindStringSubmatch(l)
		if r == nil || r[1] == "" {
			continue
		}
		if strings.HasPrefix(l, "fabric_rdma_port_info{") {
			if m := devPortRe.FindStringSubmatch(l); m != nil {
				ports[m[1]+"/"+m[2]] = r[1]
			}
		} else if strings.HasPrefix(l, "fabric_netdev_info{") {
			if m := netdevRe.FindStringSubmatch(l); m != nil {
				netdevs[m[1]] = r[1]
			}
		}
	}
	for i, l := range lines {
		j := strings.IndexByte(l, '{')
		if strings.HasPrefix(l, "#") || j < 0 || strings.HasPrefix(l, "fabric_process_") || strings.HasPrefix(l, "fabric_rail_") || strings.Contains(l[:j], "_info") || railRe.MatchString(l) {
			continue
		}
		rail, ok := "", false
		if m := devPortRe.FindStringSubmatch(l); m != nil {
			rail, ok = ports[m[1]+"/"+m[2]]
		} else if m := netdevRe.FindStringSubmatch(l); m != nil {
			rail, ok = netdevs[m[1]]
		}
		if ok {
			k := strings.IndexByte(l, '}')
			lines[i] = l[:k] + `,rail="` + rail + `"` + l[k:]
		}
	}
	return []byte(strings.Join(lines, "\n"))
}

// dropRailJoins removes the "* on (...) group_left (rail) fabric_*_info"
// joins from the rules: with the rail on the series they are not needed.
func dropRailJoins(rules []byte) []byte {
	return joinRe.ReplaceAll(rules, nil)
}

// ---------------------------------------------------------------------------
// The fleet.

type node struct {
	mu     sync.Mutex
	series []tseries
	vals   []float64
	last   time.Time
	rnd    *rand.Rand
	prefix [][]byte
}

type fleet struct {
	tmpl  *template
	nodes map[string]*node
	names []string
}

// planted returns the fault of node i and the alerts it must raise
// (fire: must fire by the end of the run; pend: pending or firing).
func planted(i int) (kind string, fire, pend []string) {
	switch i % 100 {
	case 1:
		return "imbalance", nil, []string{"RailImbalance"}
	case 2:
		return "pfc", []string{"PFCStorm"}, nil
	case 3:
		return "retrans", []string{"RoCERetransmissions"}, nil
	case 4:
		return "socket", []string{"NCCLSocketFallback"}, nil
	}
	return "", nil, nil
}

func newFleet(t *template, n int) *fleet {
	f := &fleet{tmpl: t, nodes: map[string]*node{}}
	for i := range n {
		name := fmt.Sprintf("node%04d", i)
		kind, _, _ := planted(i)
		nd := &node{rnd: rand.New(rand.NewPCG(uint64(i), 42))}
		for _, s := range t.series {
			s := s
			switch {
			case kind == "imbalance" && strings.HasPrefix(s.name, "fabric_rdma_port_") && strings.HasSuffix(s.name, "_bytes_total") && !strings.Contains(s.labels, `device="mlx5_0"`):
				s.rate /= 10
			case kind == "pfc" && s.name == "fabric_pfc_pause_duration_seconds_total" && strings.Contains(s.labels, `netdev="eth3"`) && strings.Contains(s.labels, `direction="rx"`):
				s.rate = 0.5
			case kind == "pfc" && s.name == "fabric_pause_storm_events_total" && strings.Contains(s.labels, `netdev="eth3"`):
				s.rate = 1.0 / 15
			case kind == "retrans" && s.name == "fabric_rdma_hw_local_ack_timeout_err_total" && strings.Contains(s.labels, `device="mlx5_2"`):
				s.rate = 200
			case kind == "socket" && s.name == "fabric_nccl_net_info":
				s.labels = strings.Replace(s.labels, `net="IB"`, `net="Socket"`, 1)
			}
			nd.series = append(nd.series, s)
			nd.vals = append(nd.vals, s.value)
			nd.prefix = append(nd.prefix, []byte(s.name+s.labels+" "))
		}
		f.nodes[name] = nd
		f.names = append(f.names, name)
	}
	return f
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func (f *fleet) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	nd := f.nodes[r.URL.Query().Get("node")]
	if nd == nil {
		http.NotFound(w, r)
		return
	}
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer bufPool.Put(buf)
	nd.mu.Lock()
	now := time.Now()
	dt := 0.0
	if !nd.last.IsZero() {
		dt = now.Sub(nd.last).Seconds()
	}
	nd.last = now
	var b []byte
	lastName := ""
	for i, s := range nd.series {
		if s.name != lastName {
			buf.WriteString(f.tmpl.meta[s.name])
			lastName = s.name
		}
		v := nd.vals[i]
		switch {
		case s.rate > 0:
			v += s.rate * dt * (0.8 + 0.4*nd.rnd.Float64())
			nd.vals[i] = v
		case s.gauge:
			v = s.value * (0.9 + 0.2*nd.rnd.Float64())
		}
		buf.Write(nd.prefix[i])
		b = strconv.AppendFloat(b[:0], v, 'g', -1, 64)
		buf.Write(b)
		buf.WriteByte('\n')
	}
	nd.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	w.Write(buf.Bytes())
}

// ---------------------------------------------------------------------------
// One run.

type groupStat struct {
	Name    string  `json:"name"`
	Rules   int     `json:"rules"`
	MinS    float64 `json:"min_s"`
	MeanS   float64 `json:"mean_s"`
	MaxS    float64 `json:"max_s"`
	Samples int     `json:"rounds"`
}

type ruleStat struct {
	Group string  `json:"group"`
	Rule  string  `json:"rule"`
	MeanS float64 `json:"mean_s"`
}

type queryStat struct {
	Dashboard string  `json:"dashboard"`
	Panel     string  `json:"panel"`
	Expr      string  `json:"expr"`
	Seconds   float64 `json:"seconds"`
	Series    int     `json:"series"`
	Scope     string  `json:"scope"` // "all": every instance (dashboards.DefaultValues); "one": $instance = one node
	Error     string  `json:"error,omitempty"`
}

type result struct {
	Nodes          int         `json:"nodes"`
	Prometheus     string      `json:"prometheus"`
	Rules          string      `json:"rules"`
	HeadSeries     float64     `json:"head_series"`
	Groups         []groupStat `json:"groups"`
	TopRules       []ruleStat  `json:"top_rules"`
	TotalMeanS     float64     `json:"all_groups_mean_s_per_round"`
	PerNodeMs      float64     `json:"all_groups_ms_per_node_per_round"`
	TotalMinS      float64     `json:"all_groups_min_s_per_round"`
	Missed         float64     `json:"missed_iterations"`
	Failures       float64     `json:"rule_evaluation_failures"`
	CPUCores       float64     `json:"cpu_cores"`
	RSSBytes       float64     `json:"rss_bytes_max"`
	Queries        []queryStat `json:"queries"`
	Firing         []string    `json:"firing"`
	Pending        []string    `json:"pending"`
	AlertsOK       bool        `json:"alerts_ok"`
	AlertProblems  []string    `json:"alert_problems,omitempty"`
	Load           string      `json:"load"`
	Costs          []fileCost  `json:"rule_cpu,omitempty"`
	QueryCosts     []queryCost `json:"query_cpu,omitempty"`
	Date           string      `json:"date"`
	ScrapeFailures float64     `json:"scrape_failures"`
}

func run(work, promBin, rules string, t *template, n int, interval, warmup, measure time.Duration, log func(string, ...any)) (result, error) {
	r := result{Nodes: n, Rules: rules, Date: time.Now().UTC().Format("2006-01-02 15:04 UTC")}
	if out, err := exec.Command(promBin, "--version").CombinedOutput(); err == nil {
		r.Prometheus = strings.Fields(string(out))[2]
	}
	f := newFleet(t, n)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return r, err
	}
	srv := &http.Server{Handler: f}
	go srv.Serve(ln)
	defer srv.Close()

	dir := filepath.Join(work, fmt.Sprintf("prom-%d", n))
	os.MkdirAll(dir, 0o755)
	absRules, _ := filepath.Abs(rules)
	var targets []string
	for _, name := range f.names {
		targets = append(targets, "'"+name+"'")
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: %s
  evaluation_interval: %s
  scrape_timeout: 10s
rule_files: ['%s']
scrape_configs:
- job_name: fabric
  metrics_path: /metrics
  static_configs:
  - targets: [%s]
    labels: {cluster: fleet}
  relabel_configs:
  - source_labels: [__address__]
    target_label: __param_node
  - source_labels: [__address__]
    target_label: instance
  - target_label: __address__
    replacement: '%s'
`, interval, interval, absRules, strings.Join(targets, ", "), ln.Addr())
	os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644)
	promAddr, err := freeAddr()
	if err != nil {
		return r, err
	}
	logf, _ := os.Create(filepath.Join(dir, "prometheus.log"))
	defer logf.Close()
	cmd := exec.Command(promBin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return r, err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		os.RemoveAll(dir)
	}()
	p := &prom{promapi.New("http://"+promAddr, 2*time.Minute)}
	readyCtx, cancelReady := context.WithTimeout(context.Background(), time.Minute)
	err = p.WaitReady(readyCtx)
	cancelReady()
	if err != nil {
		return r, fmt.Errorf("prometheus not ready: %w", err)
	}
	log("prometheus %s ready; warm-up %s", r.Prometheus, warmup)
	time.Sleep(warmup)

	m0, err := p.selfMetrics()
	if err != nil {
		return r, err
	}
	start := time.Now()
	type acc struct {
		rules      int
		sum, max   float64
		min        float64
		n          int
		lastEvalAt time.Time
	}
	groups := map[string]*acc{}
	ruleSum, ruleN := map[[2]string]float64{}, map[[2]string]int{}
	var order []string
	rss := m0["process_resident_memory_bytes"]
	for measure > 0 && time.Since(start) < measure {
		time.Sleep(interval)
		gs, err := p.Rules(context.Background())
		if err != nil {
			return r, err
		}
		for _, g := range gs {
			a := groups[g.Name]
			if a == nil {
				a = &acc{rules: len(g.Rules)}
				groups[g.Name] = a
				order = append(order, g.Name)
			}
			if g.LastEvaluation.Equal(a.lastEvalAt) {
				continue // not evaluated since the last poll
			}
			a.lastEvalAt = g.LastEvaluation
			a.sum += g.EvaluationTime
			a.max = math.Max(a.max, g.EvaluationTime)
			if a.n == 0 || g.EvaluationTime < a.min {
				a.min = g.EvaluationTime
			}
			a.n++
			for i, rl := range g.Rules {
				k := [2]string{g.Name, fmt.Sprintf("%02d %s", i, rl.Name)}
				ruleSum[k] += rl.EvaluationTime
				ruleN[k]++
			}
		}
		if m, err := p.selfMetrics(); err == nil {
			rss = math.Max(rss, m["process_resident_memory_bytes"])
		}
	}
	m1, err := p.selfMetrics()
	if err != nil {
		return r, err
	}
	if wall := time.Since(start).Seconds(); wall > 1 {
		r.CPUCores = (m1["process_cpu_seconds_total"] - m0["process_cpu_seconds_total"]) / wall
	}
	r.RSSBytes = math.Max(rss, m1["process_resident_memory_bytes"])
	r.HeadSeries = m1["prometheus_tsdb_head_series"]
	r.Missed = m1["prometheus_rule_group_iterations_missed_total"]
	r.Failures = m1["prometheus_rule_evaluation_failures_total"]
	for _, name := range order {
		a := groups[name]
		g := groupStat{Name: name, Rules: a.rules, MinS: a.min, MaxS: a.max, Samples: a.n}
		if a.n > 0 {
			g.MeanS = a.sum / float64(a.n)
		}
		r.Groups = append(r.Groups, g)
		r.TotalMeanS += g.MeanS
		r.TotalMinS += g.MinS
	}
	for k, v := range ruleSum {
		r.TopRules = append(r.TopRules, ruleStat{Group: k[0], Rule: k[1], MeanS: v / float64(ruleN[k])})
	}
	sort.Slice(r.TopRules, func(i, j int) bool { return r.TopRules[i].MeanS > r.TopRules[j].MeanS })
	r.PerNodeMs = r.TotalMeanS / float64(n) * 1000
	if v, err := p.Query(context.Background(), `sum(up{job="fabric"} == 0)`, time.Time{}); err == nil && len(v) > 0 {
		r.ScrapeFailures = v[0].Value // (no result when none is down)
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		r.Load = strings.Join(strings.Fields(string(b))[:3], " ")
	}

	// Alerts, before the queries load the machine.
	als, err := p.Alerts(context.Background())
	if err != nil {
		return r, err
	}
	active := map[string]string{} // alertname/instance -> state
	for _, a := range als {
		k := a.Labels["alertname"] + "/" + a.Labels["instance"]
		if active[k] != "firing" {
			active[k] = a.State
		}
		if a.State == "firing" {
			r.Firing = append(r.Firing, k)
		} else {
			r.Pending = append(r.Pending, k)
		}
	}
	r.Firing, r.Pending = dedup(r.Firing), dedup(r.Pending)
	want := map[string]bool{}
	for i, name := range f.names {
		_, fire, pend := planted(i)
		for _, a := range fire {
			want[a+"/"+name] = true
			if active[a+"/"+name] != "firing" {
				r.AlertProblems = append(r.AlertProblems, fmt.Sprintf("planted %s on %s is %q, want firing", a, name, active[a+"/"+name]))
			}
		}
		for _, a := range pend {
			want[a+"/"+name] = true
			if active[a+"/"+name] == "" {
				r.AlertProblems = append(r.AlertProblems, fmt.Sprintf("planted %s on %s is inactive, want pending or firing", a, name))
			}
		}
	}
	for k, st := range active {
		if !want[k] {
			r.AlertProblems = append(r.AlertProblems, fmt.Sprintf("false alert %s (%s)", k, st))
		}
	}
	sort.Strings(r.AlertProblems)
	r.AlertsOK = len(r.AlertProblems) == 0

	if len(costFiles) > 0 {
		r.Costs, r.QueryCosts, err = measureCost(p, cmd.Process.Pid, filepath.Join(dir, "prometheus.yml"), n, log)
		return r, err
	}

	// Dashboard queries: 5-minute range, 15 s step, one at a time; for
	// every instance (the dashboards' default "All") and for one.
	end := time.Now()
	instant := map[int]bool{}
	one := dashboards.DefaultValues()
	one["instance"] = f.names[len(f.names)-1]
	var todo []queryStat
	for _, q := range dashboards.Queries() {
		todo = append(todo, queryStat{Dashboard: q.Dashboard, Panel: q.Panel, Expr: q.Expr, Scope: "all"})
		e, err := dashboards.Expand(q.Template, one)
		if err != nil {
			return r, err
		}
		todo = append(todo, queryStat{Dashboard: q.Dashboard, Panel: q.Panel, Expr: e, Scope: "one"})
		instant[len(todo)-1], instant[len(todo)-2] = q.Instant, q.Instant
	}
	for i, qs := range todo {
		q := struct {
			Expr    string
			Instant bool
		}{qs.Expr, instant[i]}
		v := url.Values{"query": {q.Expr}}
		path := "/api/v1/query_range"
		if q.Instant {
			path = "/api/v1/query"
			v.Set("time", fmt.Sprint(end.Unix()))
		} else {
			v.Set("start", fmt.Sprint(end.Add(-5*time.Minute).Unix()))
			v.Set("end", fmt.Sprint(end.Unix()))
			v.Set("step", "15")
		}
		t0 := time.Now()
		n, err := p.count(path, v)
		qs.Seconds = time.Since(t0).Seconds()
		qs.Series = n
		if err != nil {
			qs.Error = err.Error()
		}
		r.Queries = append(r.Queries, qs)
	}
	sort.SliceStable(r.Queries, func(i, j int) bool { return r.Queries[i].Seconds > r.Queries[j].Seconds })
	return r, nil
}

func dedup(s []string) []string {
	sort.Strings(s)
	return slices.Compact(s)
}

// ---------------------------------------------------------------------------
// Prometheus client.

// prom is the benchmark's Prometheus: the shared API client, and its own
// /metrics.
type prom struct{ *promapi.Client }

// count runs a query (path /api/v1/query or /api/v1/query_range) and
// counts the series of the answer without decoding them: the per-query
// wall times include the client's decoding, kept as it was when
// docs/benchmarks.md was measured.
func (p *prom) count(path string, v url.Values) (int, error) {
	var d struct {
		Result []json.RawMessage `json:"result"`
	}
	err := p.Get(context.Background(), path, v, &d)
	return len(d.Result), err
}

var client = &http.Client{Timeout: 2 * time.Minute}

// selfMetrics sums Prometheus's own metrics by name over their labels.
func (p *prom) selfMetrics() (map[string]float64, error) {
	resp, err := client.Get(p.Base() + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		m[name] += v
	}
	return m, sc.Err()
}

// ---------------------------------------------------------------------------
// Report.

func printResult(w io.Writer, r result) {
	fmt.Fprintf(w, "\n## %d nodes, Prometheus %s, rules %s (%s, load %s, %d CPUs)\n\n", r.Nodes, r.Prometheus, r.Rules, r.Date, r.Load, runtime.NumCPU())
	fmt.Fprintf(w, "head series %.0f (%.0f per node); all groups %.3f s per round = %.2f ms per node per round (sum of the groups' fastest rounds: %.3f s = %.2f ms per node); missed iterations %.0f; rule failures %.0f; targets down %.0f\n",
		r.HeadSeries, r.HeadSeries/float64(r.Nodes), r.TotalMeanS, r.PerNodeMs, r.TotalMinS, r.TotalMinS/float64(r.Nodes)*1000, r.Missed, r.Failures, r.ScrapeFailures)
	fmt.Fprintf(w, "Prometheus CPU %.2f cores, RSS max %.0f MiB\n\n", r.CPUCores, r.RSSBytes/(1<<20))
	fmt.Fprintln(w, "| group | rules | min s/round | mean s/round | max s/round | mean ms/node/round | rounds |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, g := range r.Groups {
		fmt.Fprintf(w, "| %s | %d | %.3f | %.3f | %.3f | %.3f | %d |\n", g.Name, g.Rules, g.MinS, g.MeanS, g.MaxS, g.MeanS/float64(r.Nodes)*1000, g.Samples)
	}
	fmt.Fprintln(w, "\nslowest rules (mean s per round):\n\n| s | group | rule |\n|---:|---|---|")
	for i, rl := range r.TopRules {
		if i == 10 {
			break
		}
		fmt.Fprintf(w, "| %.4f | %s | %s |\n", rl.MeanS, rl.Group, rl.Rule)
	}
	fmt.Fprintf(w, "\ndashboard queries: %d, each for all instances and for one; slowest:\n\n| s | series | instances | dashboard / panel |\n|---:|---:|---|---|\n", len(r.Queries)/2)
	shown := map[string]int{}
	for _, q := range r.Queries {
		if shown[q.Scope] == 6 {
			continue
		}
		shown[q.Scope]++
		e := ""
		if q.Error != "" {
			e = " ERROR " + q.Error
		}
		fmt.Fprintf(w, "| %.3f | %d | %s | %s / %s%s |\n", q.Seconds, q.Series, q.Scope, q.Dashboard, q.Panel, e)
	}
	for _, c := range r.Costs {
		fmt.Fprintf(w, "\nrule CPU at one instant, %s: %.3f s per round = %.3f ms per node per round\n\n| group | CPU s per round | ms per node |\n|---|---:|---:|\n", c.File, c.TotalS, c.TotalS/float64(r.Nodes)*1000)
		for _, g := range c.Groups {
			fmt.Fprintf(w, "| %s | %.3f | %.3f |\n", g.Name, g.CPUS, g.CPUS/float64(r.Nodes)*1000)
		}
		fmt.Fprintf(w, "\nmost expensive rules:\n\n| CPU s | group | rule |\n|---:|---|---|\n")
		for i, rl := range c.Rules {
			if i == 8 {
				break
			}
			fmt.Fprintf(w, "| %.3f | %s | %s |\n", rl.CPUS, rl.Group, rl.Name)
		}
	}
	if len(r.QueryCosts) > 0 {
		fmt.Fprintf(w, "\ndashboard queries (5 m range, 15 s step, ending at the instant), CPU and wall seconds, most expensive:\n\n| CPU s | wall s | series | instances | dashboard / panel |\n|---:|---:|---:|---|---|\n")
		for i, q := range r.QueryCosts {
			if i == 12 {
				break
			}
			fmt.Fprintf(w, "| %.3f | %.3f | %d | %s | %s / %s |\n", q.CPUS, q.WallS, q.Series, q.Scope, q.Dashboard, q.Panel)
		}
	}
	fmt.Fprintf(w, "\nfiring: %s\npending: %s\nalerts ok: %v\n", summarize(r.Firing), summarize(r.Pending), r.AlertsOK)
	for _, p := range r.AlertProblems {
		fmt.Fprintln(w, "  -", p)
	}
}

// summarize counts alerts by name.
func summarize(keys []string) string {
	c := map[string]int{}
	for _, k := range keys {
		c[strings.SplitN(k, "/", 2)[0]]++
	}
	var parts []string
	for k, v := range c {
		parts = append(parts, fmt.Sprintf("%s×%d", k, v))
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// ---------------------------------------------------------------------------
// CPU cost at one instant (-cost).

var costFiles []string

type ruleCost struct {
	Group string  `json:"group"`
	Name  string  `json:"name"`
	CPUS  float64 `json:"cpu_s"`
}

type groupCost struct {
	Name string  `json:"name"`
	CPUS float64 `json:"cpu_s"`
}

type fileCost struct {
	File   string      `json:"file"`
	TotalS float64     `json:"cpu_s_per_round"`
	Groups []groupCost `json:"groups"`
	Rules  []ruleCost  `json:"rules"`
}

type queryCost struct {
	Dashboard string  `json:"dashboard"`
	Panel     string  `json:"panel"`
	Scope     string  `json:"scope"`
	CPUS      float64 `json:"cpu_s"`
	WallS     float64 `json:"wall_s"`
	Series    int     `json:"series"`
}

// cpuTicks is the utime+stime of a process, in clock ticks (1/100 s).
func cpuTicks(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return u + st, nil
}

const repeats = 5

// measureCost stops scraping and rule evaluation (a reload with an empty
// config), then evaluates every rule of every -cost file and every dashboard
// query at one instant T (30 s ago, so the fleet's last scrapes are in),
// each `repeats` times, and takes Prometheus's CPU time for it less its idle
// rate. Rule expressions are wrapped in count() so that the JSON of large
// results is not counted (a rule evaluation encodes nothing).
func measureCost(p *prom, pid int, cfgPath string, n int, log func(string, ...any)) ([]fileCost, []queryCost, error) {
	T := time.Now().Add(-30 * time.Second)
	if err := os.WriteFile(cfgPath, []byte("global:\n  scrape_interval: 15s\n"), 0o644); err != nil {
		return nil, nil, err
	}
	proc, _ := os.FindProcess(pid)
	if err := proc.Signal(syscall.SIGHUP); err != nil {
		return nil, nil, err
	}
	time.Sleep(10 * time.Second)
	c0, _ := cpuTicks(pid)
	t0 := time.Now()
	time.Sleep(10 * time.Second)
	c1, _ := cpuTicks(pid)
	idle := (c1 - c0) / 100 / time.Since(t0).Seconds() // cores while idle
	log("idle after reload: %.3f cores", idle)
	measureQ := func(path string, v url.Values) (cpu, wall float64, series int, err error) {
		c0, _ := cpuTicks(pid)
		t0 := time.Now()
		for range repeats {
			if series, err = p.count(path, v); err != nil {
				return
			}
		}
		wall = time.Since(t0).Seconds()
		c1, _ := cpuTicks(pid)
		cpu = math.Max(0, ((c1-c0)/100-idle*wall)/repeats)
		return cpu, wall / repeats, series, nil
	}
	var out []fileCost
	for _, file := range costFiles {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, nil, err
		}
		var doc struct {
			Groups []struct {
				Name  string `yaml:"name"`
				Rules []struct {
					Record string `yaml:"record"`
					Alert  string `yaml:"alert"`
					Expr   string `yaml:"expr"`
				} `yaml:"rules"`
			} `yaml:"groups"`
		}
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return nil, nil, fmt.Errorf("%s: %v", file, err)
		}
		fc := fileCost{File: file}
		for _, g := range doc.Groups {
			gc := groupCost{Name: g.Name}
			for _, rl := range g.Rules {
				v := url.Values{"query": {"count((" + rl.Expr + "))"}, "time": {fmt.Sprintf("%.3f", float64(T.UnixMilli())/1000)}}
				cpu, _, _, err := measureQ("/api/v1/query", v)
				if err != nil {
					return nil, nil, fmt.Errorf("%s %s: %v", g.Name, rl.Record+rl.Alert, err)
				}
				gc.CPUS += cpu
				fc.Rules = append(fc.Rules, ruleCost{Group: g.Name, Name: rl.Record + rl.Alert, CPUS: cpu})
			}
			fc.Groups = append(fc.Groups, gc)
			fc.TotalS += gc.CPUS
		}
		sort.Slice(fc.Rules, func(i, j int) bool { return fc.Rules[i].CPUS > fc.Rules[j].CPUS })
		log("%s: %.3f CPU s per round", file, fc.TotalS)
		out = append(out, fc)
	}
	var qc []queryCost
	one := dashboards.DefaultValues()
	one["instance"] = fmt.Sprintf("node%04d", n-1)
	for _, q := range dashboards.Queries() {
		for _, scope := range []string{"all", "one"} {
			e := q.Expr
			if scope == "one" {
				var err error
				if e, err = dashboards.Expand(q.Template, one); err != nil {
					return nil, nil, err
				}
			}
			v := url.Values{"query": {e}}
			path := "/api/v1/query_range"
			if q.Instant {
				path = "/api/v1/query"
				v.Set("time", fmt.Sprint(T.Unix()))
			} else {
				v.Set("start", fmt.Sprint(T.Add(-5*time.Minute).Unix()))
				v.Set("end", fmt.Sprint(T.Unix()))
				v.Set("step", "15")
			}
			cpu, wall, series, err := measureQ(path, v)
			if err != nil {
				return nil, nil, fmt.Errorf("%s / %s: %v", q.Dashboard, q.Panel, err)
			}
			qc = append(qc, queryCost{Dashboard: q.Dashboard, Panel: q.Panel, Scope: scope, CPUS: cpu, WallS: wall, Series: series})
		}
	}
	sort.SliceStable(qc, func(i, j int) bool { return qc[i].CPUS > qc[j].CPUS })
	return out, qc, nil
}
