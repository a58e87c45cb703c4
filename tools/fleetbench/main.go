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
// RoCERetransmissions), 4 NCCL on sockets (fabric_nccl_net_info net=Socket and
// NET/Socket channel connections, fabric_nccl_connections: NCCLSocketFallback). Every other alert that fires or pends is a false
// alert and fails the run.
//
// Planted fault 5: rail mlx5_1 down (fabric_rdma_port_up 0: RailLinkDown).
// With -serve it only serves the fleet (e2e/thanos_test.go scrapes it).
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
// Every evaluation of every group is read (every 2 s, in the warm-up too)
// and put in the interval's round it starts in: the report gives the peak
// and mean round, the missed iterations per group in the warm-up and the
// window, and the peak round over random placements of the groups
// (Prometheus places a group in its interval by a hash of its name and
// file). -rules takes several files, run one after the other on the same
// fleet from one path; -restart restarts Prometheus on the same data after
// the warm-up (a first start on an empty TSDB creates every series in its
// first round; a restart replays them).
//
// -backfill 6h measures the long view instead: hours of history written as
// OpenMetrics and imported with promtool, the recording rules backfilled
// with promtool level by level, then every dashboard query for one node
// over the whole span (backfill.go).
//
// Run it from the repository root (a run of N nodes takes -warmup +
// -measure, 6 minutes by default):
//
//	go run ./tools/fleetbench -nodes 50,500,1000
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	var (
		nodesFlag = flag.String("nodes", "50,500,1000", "comma-separated fleet sizes, one run each")
		promBin   = flag.String("prometheus", "prometheus", "Prometheus binary")
		rules     = flag.String("rules", "alerts/fabric-rules.yml", "rules file Prometheus loads; several, comma-separated, run one after the other on the same fleet (before and after a change, in one run)")
		exporter  = flag.String("exporter", "", "fabric_exporter binary (default: go build ./cmd/fabric_exporter)")
		template  = flag.String("template", "", "use this exposition text as the node template instead of scraping the exporter")
		interval  = flag.Duration("interval", 15*time.Second, "scrape and evaluation interval")
		warmup    = flag.Duration("warmup", 3*time.Minute, "time before the measured window (rates and the 2m alerts settle)")
		measure   = flag.Duration("measure", 3*time.Minute, "measured window")
		jsonOut   = flag.String("json", "", "also write the results as JSON to this file")
		keep      = flag.Bool("keep", false, "keep the work directory")
		railLabel = flag.Bool("rail-label", false, "what-if: add the rail label to every per-port and per-netdev series of the template (as the exporter could) and drop the rail joins from the rules (a copy of -rules)")
		costRules = flag.String("cost", "", "comma-separated rules files: after the warm-up, stop scraping and rule evaluation and measure Prometheus's CPU time for every rule of each file, and for every dashboard query, at one instant (robust on a loaded machine, unlike wall times); skips the measured window")
	)
	flag.IntVar(&repeats, "repeats", repeats, "with -cost: evaluations of each rule and dashboard query (their CPU time is averaged; more repeats, less noise from the garbage collector)")
	flag.BoolVar(&restart, "restart", restart, "restart Prometheus on the same data at the end of the warm-up and measure the restarted server (a first start on an empty TSDB creates every series in its first round; a restart replays them from the WAL)")
	flag.BoolVar(&costQueries, "cost-queries", costQueries, "also measure every dashboard query (with -cost at the instant, else after the measured window)")
	var (
		dump         = flag.String("dump", "", "write the node template (the exporter's output) to this file and exit")
		serve        = flag.String("serve", "", "serve the fleet of -nodes nodes (one size) at this address until killed, without Prometheus: /metrics?node=nodeNNNN (the distributed test, e2e/thanos_test.go)")
		backfillSpan = flag.Duration("backfill", 0, "the long view instead of a live run: this much history of -nodes nodes (one size) written as OpenMetrics, imported with promtool, the recording rules of -rules backfilled over it with promtool, then every dashboard query for one node over the whole span (backfill.go)")
		indexNodes   = flag.Int("backfill-index", 0, "with -backfill: the index of this many nodes (the nodes beyond -nodes get one sample per series at the span's end)")
		promtool     = flag.String("promtool", "promtool", "with -backfill: promtool binary")
		step         = flag.Duration("step", 30*time.Second, "with -backfill: the panels' step over the span (Grafana: the span over about 1,000 data points)")
		steady       = flag.Bool("steady", false, "with -serve: counters grow at exactly their rate and gauges keep their template value, so that every server scraping a node stores the same curve")
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
	rulesFiles := strings.Split(*rules, ",")
	*rules = rulesFiles[0]
	if *railLabel {
		if len(rulesFiles) > 1 {
			check(fmt.Errorf("-rail-label takes one -rules file"))
		}
		text = addRailLabel(text)
		b, err := os.ReadFile(*rules)
		check(err)
		*rules = filepath.Join(work, "rules-rail-label.yml")
		check(os.WriteFile(*rules, dropRailJoins(b), 0o644))
		rulesFiles[0] = *rules
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
	if *serve != "" {
		n, err := strconv.Atoi(*nodesFlag)
		check(err)
		f := newFleet(tmpl, n)
		f.steady, f.t0 = *steady, time.Now()
		log("serving %d nodes at http://%s/metrics?node=node0000", n, *serve)
		check(http.ListenAndServe(*serve, f))
	}

	if *backfillSpan > 0 {
		n, err := strconv.Atoi(*nodesFlag)
		check(err)
		log("== the long view: %d nodes, %s", n, *backfillSpan)
		lv, err := backfill(work, *promBin, *promtool, rulesFiles[0], tmpl, n, *indexNodes, *interval, *backfillSpan, *step, log)
		check(err)
		printLongView(os.Stdout, lv)
		if *jsonOut != "" {
			b, _ := json.MarshalIndent(lv, "", "  ")
			check(os.WriteFile(*jsonOut, b, 0o644))
		}
		if len(lv.Errors) > 0 {
			exit(2)
		}
		return
	}
	var results []result
	for _, f := range strings.Split(*nodesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		check(err)
		for _, rf := range rulesFiles {
			log("== %d nodes, rules %s", n, rf)
			r, err := run(work, *promBin, rf, tmpl, n, *interval, *warmup, *measure, log)
			if err != nil {
				log("run %d: %v", n, err)
				exit(1)
			}
			results = append(results, r)
			printResult(os.Stdout, r)
		}
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
