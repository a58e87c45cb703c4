// One run of N nodes: Prometheus started on the fleet, its rule groups,
// CPU and memory measured over the window, the alerts checked against the
// planted faults, and the dashboard queries timed.

package main

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fabric-exporter/fabric_exporter/dashboards"
	"github.com/fabric-exporter/fabric_exporter/internal/promapi"
)

type groupStat struct {
	Name    string  `json:"name"`
	Rules   int     `json:"rules"`
	MinS    float64 `json:"min_s"`
	MeanS   float64 `json:"mean_s"`
	MaxS    float64 `json:"max_s"`
	Samples int     `json:"rounds"`
	EveryS  float64 `json:"every_s"` // the group's interval
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
	// The rounds of the measured window (rounds.go), the iterations each
	// group missed (in the warm-up and in the window) and where in its
	// interval Prometheus placed each group.
	Rounds roundStats `json:"rounds"`
	// -restart: the misses of the first start (an empty TSDB: the first
	// scrapes create every series) and how long the restart took to be
	// ready (WAL replay); the other missed counts are then the restarted
	// server's.
	MissedFirstStart map[string]float64 `json:"missed_first_start_by_group,omitempty"`
	RestartS         float64            `json:"restart_s,omitempty"`
	RestartSlowest   []string           `json:"restart_slowest,omitempty"` // the first minute after the restart
	// The peak round over random placements of the groups (placementPeak):
	// mean and 99th percentile of 10,000 draws, and every group in one round.
	PlacementMeanS  float64            `json:"placement_peak_mean_s"`
	PlacementP99S   float64            `json:"placement_peak_p99_s"`
	PlacementWorstS float64            `json:"placement_peak_worst_s"`
	WarmupRounds    roundStats         `json:"warmup_rounds"`
	WarmupSlowest   []string           `json:"warmup_slowest"`
	MissedWarmup    map[string]float64 `json:"missed_warmup_by_group,omitempty"`
	MissedWindow    map[string]float64 `json:"missed_window_by_group,omitempty"`
	OffsetS         map[string]float64 `json:"offset_s,omitempty"`
}

// pollEvery: how often the measured window reads /api/v1/rules, several
// times per round so that every evaluation of every group is seen.
const pollEvery = 2 * time.Second

// restart (-restart): restart Prometheus at the end of the warm-up.
var restart bool

func run(work, promBin, rules string, t *template, n int, interval, warmup, measure time.Duration, log func(string, ...any)) (result, error) {
	r := result{Nodes: n, Rules: rules, Date: time.Now().UTC().Format("2006-01-02 15:04 UTC")}
	if out, err := exec.Command(promBin, "--version").CombinedOutput(); err == nil {
		r.Prometheus = versionOf(string(out), promBin)
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
	// Every rules file is loaded from the same path: Prometheus places a
	// group in its interval by a hash of its name and file, so a group
	// keeps its place from one rules file to the next (before and after a
	// change, in one run).
	absRules := filepath.Join(dir, "rules.yml")
	if b, err := os.ReadFile(rules); err != nil {
		return r, err
	} else if err := os.WriteFile(absRules, b, 0o644); err != nil {
		return r, err
	}
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
	p := &prom{promapi.New("http://"+promAddr, 2*time.Minute)}
	ps := &server{bin: promBin, log: logf, api: p, args: []string{"--config.file=" + filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(dir, "tsdb"), "--web.listen-address=" + promAddr}}
	defer os.RemoveAll(dir)
	if err := ps.start(); err != nil {
		return r, err
	}
	defer ps.stop()
	log("prometheus %s ready; warm-up %s", r.Prometheus, warmup)
	// The warm-up's evaluations too: a group that misses its round while
	// Prometheus creates every node's series shows here.
	poll := func(d time.Duration) []evaluation {
		var evs []evaluation
		last := map[string]time.Time{}
		t0 := time.Now()
		for time.Since(t0) < d {
			time.Sleep(min(pollEvery, d-time.Since(t0)))
			gs, err := p.Rules(context.Background())
			if err != nil {
				continue // a busy server; the next poll
			}
			for _, g := range gs {
				if g.LastEvaluation.IsZero() || g.LastEvaluation.Before(t0) || g.LastEvaluation.Equal(last[g.Name]) {
					continue
				}
				last[g.Name] = g.LastEvaluation
				evs = append(evs, evaluation{Group: g.Name, At: g.LastEvaluation, S: g.EvaluationTime})
			}
		}
		return evs
	}
	warmStart := time.Now()
	warmEvs := poll(warmup)
	r.WarmupRounds = rounds(warmEvs, interval, warmStart, time.Now())
	r.WarmupSlowest = slowest(warmEvs, 5)
	if restart {
		// What a restart meets (the usual case: the series are in the
		// WAL, not created by the first scrapes as on an empty TSDB):
		// the warm-up's misses are kept, Prometheus stops and starts on
		// the same data, and the measured window starts after one
		// more minute.
		if m, err := p.missedByGroup(); err == nil {
			r.MissedFirstStart = m
		}
		ps.stop()
		t0 := time.Now()
		if err := ps.start(); err != nil {
			return r, err
		}
		r.RestartS = time.Since(t0).Seconds()
		log("restarted in %.0f s", r.RestartS)
		r.RestartSlowest = slowest(poll(time.Minute), 5)
	}

	m0, err := p.selfMetrics()
	if err != nil {
		return r, err
	}
	missed0, err := p.missedByGroup()
	if err != nil {
		return r, err
	}
	start := time.Now()
	type acc struct {
		rules      int
		every      float64 // the group's interval, seconds
		sum, max   float64
		min        float64
		n          int
		lastEvalAt time.Time
	}
	groups := map[string]*acc{}
	ruleSum, ruleN := map[[2]string]float64{}, map[[2]string]int{}
	var order []string
	var evs []evaluation
	last := map[string]evaluation{}
	every := map[string]float64{}
	rss := m0["process_resident_memory_bytes"]
	lastSelf := time.Now()
	for measure > 0 && time.Since(start) < measure {
		time.Sleep(pollEvery)
		gs, err := p.Rules(context.Background())
		if err != nil {
			return r, err
		}
		for _, g := range gs {
			a := groups[g.Name]
			if a == nil {
				a = &acc{rules: len(g.Rules), every: g.Interval}
				groups[g.Name] = a
				order = append(order, g.Name)
			}
			if g.LastEvaluation.Equal(a.lastEvalAt) || g.LastEvaluation.Before(start) {
				continue // not evaluated since the last poll, or before the window
			}
			a.lastEvalAt = g.LastEvaluation
			e := evaluation{Group: g.Name, At: g.LastEvaluation, S: g.EvaluationTime}
			evs = append(evs, e)
			last[g.Name], every[g.Name] = e, g.Interval
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
		if time.Since(lastSelf) >= interval {
			lastSelf = time.Now()
			if m, err := p.selfMetrics(); err == nil {
				rss = math.Max(rss, m["process_resident_memory_bytes"])
			}
		}
	}
	end := time.Now()
	m1, err := p.selfMetrics()
	if err != nil {
		return r, err
	}
	if missed1, err := p.missedByGroup(); err == nil {
		r.MissedWarmup, r.MissedWindow = map[string]float64{}, map[string]float64{}
		for g, v := range missed1 {
			if missed0[g] > 0 {
				r.MissedWarmup[g] = missed0[g]
			}
			if v > missed0[g] {
				r.MissedWindow[g] = v - missed0[g]
			}
		}
	}
	r.Rounds = rounds(evs, interval, start, end)
	r.OffsetS = offsets(last, every)
	if wall := time.Since(start).Seconds(); wall > 1 {
		r.CPUCores = (m1["process_cpu_seconds_total"] - m0["process_cpu_seconds_total"]) / wall
	}
	r.RSSBytes = math.Max(rss, m1["process_resident_memory_bytes"])
	r.HeadSeries = m1["prometheus_tsdb_head_series"]
	r.Missed = m1["prometheus_rule_group_iterations_missed_total"]
	r.Failures = m1["prometheus_rule_evaluation_failures_total"]
	for _, name := range order {
		a := groups[name]
		g := groupStat{Name: name, Rules: a.rules, MinS: a.min, MaxS: a.max, Samples: a.n, EveryS: a.every}
		if a.n > 0 {
			g.MeanS = a.sum / float64(a.n)
		}
		r.Groups = append(r.Groups, g)
		// A group with a longer interval than the rounds counts its share.
		share := 1.0
		if a.every > interval.Seconds() {
			share = interval.Seconds() / a.every
		}
		r.TotalMeanS += g.MeanS * share
		r.TotalMinS += g.MinS * share
	}
	r.PlacementMeanS, r.PlacementP99S, r.PlacementWorstS = placementPeak(r.Groups, interval, 10000, 1)
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
		r.Costs, r.QueryCosts, err = measureCost(p, ps.cmd.Process.Pid, filepath.Join(dir, "prometheus.yml"), n, interval, log)
		return r, err
	}
	if !costQueries {
		return r, nil
	}

	// Dashboard queries: 5-minute range, 15 s step, one at a time; for
	// every instance ("All") and for one (the dashboards' default).
	end = time.Now()
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
		path, v := panelQuery(qs.Expr, instant[i], end)
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
