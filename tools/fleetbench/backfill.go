// The long view (-backfill): hours of the fleet's history written as
// OpenMetrics and imported with `promtool tsdb create-blocks-from
// openmetrics`, the recording rules backfilled over the same hours with
// `promtool tsdb create-blocks-from rules` (one pass per level of records
// that read records), then every dashboard query for one node over the
// whole span, as Grafana asks it, timed for CPU and wall.

package main

import (
	"fmt"
	"maps"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/fabric-exporter/fabric_exporter/dashboards"
	"github.com/fabric-exporter/fabric_exporter/internal/promapi"
)

// longView is what a -backfill run reports.
type longView struct {
	Nodes       int          `json:"nodes"`       // with the whole span
	IndexNodes  int          `json:"index_nodes"` // in the index (the others: one sample per series)
	Span        string       `json:"span"`
	Step        string       `json:"step"`
	Prometheus  string       `json:"prometheus"`
	Samples     int64        `json:"raw_samples"`
	RulePasses  int          `json:"rule_passes"`
	Records     int          `json:"records"`
	ImportS     float64      `json:"import_s"`     // promtool, raw samples
	RulesS      float64      `json:"rules_s"`      // promtool, every pass
	BlocksBytes int64        `json:"blocks_bytes"` // the TSDB after both
	Queries     []longQuery  `json:"queries"`      // slowest first (CPU)
	Dashboards  []longBoard  `json:"dashboards"`   // one node, the whole span
	Empty       []string     `json:"empty_panels"` // no series over the span
	Date        string       `json:"date"`
	Short       []longQuery  `json:"short_queries"` // the same panels over 5 minutes, for comparison
	ShortBoards []longBoard  `json:"short_dashboards"`
	Window      [2]time.Time `json:"window"`
	Errors      []string     `json:"errors,omitempty"`
}

type longQuery struct {
	Dashboard string  `json:"dashboard"`
	Panel     string  `json:"panel"`
	CPUS      float64 `json:"cpu_s"`
	WallS     float64 `json:"wall_s"`
	Series    int     `json:"series"`
}

// longBoard: a dashboard opened on one node: the CPU of all its queries,
// and their wall time one after the other (Grafana sends them at once, so
// the page waits for about the slowest on an idle server).
type longBoard struct {
	Dashboard string  `json:"dashboard"`
	Queries   int     `json:"queries"`
	CPUS      float64 `json:"cpu_s"`
	WallS     float64 `json:"wall_s"`
	SlowestS  float64 `json:"slowest_wall_s"`
}

// backfill runs the long view for n nodes over span, in the index of a
// fleet of index nodes (the others with one sample per series; index ≤ n:
// n nodes).
func backfill(work, promBin, promtool, rulesFile string, t *template, n, index int, interval, span, step time.Duration, log func(string, ...any)) (longView, error) {
	index = max(index, n)
	lv := longView{Nodes: n, IndexNodes: index, Span: span.String(), Step: step.String(), Date: time.Now().UTC().Format("2006-01-02 15:04 UTC")}
	if out, err := exec.Command(promBin, "--version").CombinedOutput(); err == nil {
		lv.Prometheus = versionOf(string(out), promBin)
	}
	dir := filepath.Join(work, fmt.Sprintf("backfill-%d", n))
	tsdb := filepath.Join(dir, "tsdb")
	os.MkdirAll(tsdb, 0o755)
	defer os.RemoveAll(dir)
	f := newFleet(t, index)
	// The span ends at the last whole interval before now, so that "now"
	// in the queries sees the newest samples.
	end := time.Now().Truncate(interval)
	start := end.Add(-span)
	lv.Window = [2]time.Time{start.UTC(), end.UTC()}
	om := filepath.Join(dir, "fleet.om")
	t0 := time.Now()
	samples, err := writeOpenMetrics(om, f, n, end, span, interval)
	if err != nil {
		return lv, err
	}
	lv.Samples = samples
	fi, _ := os.Stat(om)
	log("wrote %d samples (%.1f GB of OpenMetrics) in %s", samples, float64(fi.Size())/1e9, time.Since(t0).Round(time.Second))
	t0 = time.Now()
	if out, err := exec.Command(promtool, "tsdb", "create-blocks-from", "openmetrics", om, tsdb).CombinedOutput(); err != nil {
		return lv, fmt.Errorf("promtool create-blocks-from openmetrics: %v\n%s", err, tail(out))
	}
	lv.ImportS = time.Since(t0).Seconds()
	os.Remove(om)
	log("imported in %.0f s", lv.ImportS)

	promAddr, err := freeAddr()
	if err != nil {
		return lv, err
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	os.WriteFile(cfg, fmt.Appendf(nil, "global:\n  scrape_interval: %s\n  evaluation_interval: %s\n", interval, interval), 0o644)
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		return lv, err
	}
	defer logf.Close()
	p := &prom{promapi.New("http://"+promAddr, 5*time.Minute)}
	srv := &server{bin: promBin, log: logf, api: p, args: []string{"--config.file=" + cfg, "--storage.tsdb.path=" + tsdb,
		"--storage.tsdb.retention.time=30d", "--web.listen-address=" + promAddr}}
	defer srv.stop()
	if err := srv.start(); err != nil {
		return lv, err
	}

	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		return lv, err
	}
	passes, records, err := recordPasses(rules)
	if err != nil {
		return lv, fmt.Errorf("%s: %w", rulesFile, err)
	}
	lv.RulePasses, lv.Records = len(passes), records
	t0 = time.Now()
	for i, pass := range passes {
		pf := filepath.Join(dir, fmt.Sprintf("pass%d.yml", i))
		outDir := filepath.Join(dir, fmt.Sprintf("pass%d", i))
		os.WriteFile(pf, pass, 0o644)
		// --start and --end are inclusive seconds; the records then exist
		// from the first raw sample's rate on, like a live server's.
		out, err := exec.Command(promtool, "tsdb", "create-blocks-from", "rules",
			"--url=http://"+promAddr, "--start="+strconv.FormatInt(start.Unix(), 10), "--end="+strconv.FormatInt(end.Unix(), 10),
			"--eval-interval="+interval.String(), "--output-dir="+outDir, pf).CombinedOutput()
		if err != nil {
			return lv, fmt.Errorf("promtool create-blocks-from rules, pass %d: %v\n%s", i, err, tail(out))
		}
		blocks, _ := os.ReadDir(outDir)
		srv.stop()
		for _, b := range blocks {
			if err := os.Rename(filepath.Join(outDir, b.Name()), filepath.Join(tsdb, b.Name())); err != nil {
				return lv, err
			}
		}
		if err := srv.start(); err != nil {
			return lv, fmt.Errorf("after pass %d: %w", i, err)
		}
		log("rules pass %d of %d: %d blocks", i+1, len(passes), len(blocks))
	}
	lv.RulesS = time.Since(t0).Seconds()
	filepath.Walk(tsdb, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			lv.BlocksBytes += fi.Size()
		}
		return nil
	})

	// Idle rate, then every query of one node, over the span and over 5
	// minutes, `repeats` times each.
	pid := srv.cmd.Process.Pid
	time.Sleep(5 * time.Second)
	c0, _ := cpuTicks(pid)
	ti := time.Now()
	time.Sleep(10 * time.Second)
	c1, _ := cpuTicks(pid)
	idle := (c1 - c0) / 100 / time.Since(ti).Seconds()
	one := dashboards.DefaultValues()
	one["instance"] = f.names[n-1]
	// Grafana's variables for the span: $__interval is the span over the
	// panel's data points (about 1,000 on a wide screen: 6 h gives 20 s,
	// rounded to 30 s here), $__rate_interval max(4 × scrape, $__interval +
	// scrape).
	long := maps.Clone(one)
	maps.Copy(long, map[string]string{"__range": model.Duration(span).String(), "__interval": step.String(),
		"__rate_interval": (max(4*interval, step+interval)).String()})
	measure := func(expr string, instant bool, from, to time.Time, st time.Duration) (longQuery, error) {
		v := url.Values{"query": {expr}}
		path := "/api/v1/query"
		if instant {
			v.Set("time", strconv.FormatInt(to.Unix(), 10))
		} else {
			path = "/api/v1/query_range"
			v.Set("start", strconv.FormatInt(from.Unix(), 10))
			v.Set("end", strconv.FormatInt(to.Unix(), 10))
			v.Set("step", strconv.FormatFloat(st.Seconds(), 'f', -1, 64))
		}
		var q longQuery
		c0, _ := cpuTicks(pid)
		t0 := time.Now()
		for range repeats {
			n, err := p.count(path, v)
			if err != nil {
				return q, err
			}
			q.Series = n
		}
		wall := time.Since(t0).Seconds()
		c1, _ := cpuTicks(pid)
		q.WallS = wall / float64(repeats)
		q.CPUS = math.Max(0, ((c1-c0)/100-idle*wall)/float64(repeats))
		return q, nil
	}
	boards := func(qs []longQuery) []longBoard {
		by := map[string]*longBoard{}
		var order []string
		for _, q := range qs {
			b := by[q.Dashboard]
			if b == nil {
				b = &longBoard{Dashboard: q.Dashboard}
				by[q.Dashboard] = b
				order = append(order, q.Dashboard)
			}
			b.Queries++
			b.CPUS += q.CPUS
			b.WallS += q.WallS
			b.SlowestS = math.Max(b.SlowestS, q.WallS)
		}
		var out []longBoard
		for _, d := range order {
			out = append(out, *by[d])
		}
		return out
	}
	for _, q := range dashboards.Queries() {
		el, err := dashboards.Expand(q.Template, long)
		if err != nil {
			return lv, err
		}
		lq, err := measure(el, q.Instant, end.Add(-span), end, step)
		if err != nil {
			lv.Errors = append(lv.Errors, fmt.Sprintf("%s / %s: %v", q.Dashboard, q.Panel, err))
			continue
		}
		lq.Dashboard, lq.Panel = q.Dashboard, q.Panel
		lv.Queries = append(lv.Queries, lq)
		if lq.Series == 0 {
			lv.Empty = append(lv.Empty, q.Dashboard+" / "+q.Panel)
		}
		es, err := dashboards.Expand(q.Template, one)
		if err != nil {
			return lv, err
		}
		sq, err := measure(es, q.Instant, end.Add(-5*time.Minute), end, interval)
		if err != nil {
			lv.Errors = append(lv.Errors, fmt.Sprintf("5m: %s / %s: %v", q.Dashboard, q.Panel, err))
			continue
		}
		sq.Dashboard, sq.Panel = q.Dashboard, q.Panel
		lv.Short = append(lv.Short, sq)
	}
	lv.Dashboards, lv.ShortBoards = boards(lv.Queries), boards(lv.Short)
	sort.SliceStable(lv.Queries, func(i, j int) bool { return lv.Queries[i].CPUS > lv.Queries[j].CPUS })
	sort.SliceStable(lv.Short, func(i, j int) bool { return lv.Short[i].CPUS > lv.Short[j].CPUS })
	return lv, nil
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// versionOf reads "prometheus, version X (branch: …)"; a build by `go
// install` has no version and is named by its path.
func versionOf(out, bin string) string {
	f := strings.Fields(out)
	if len(f) > 2 && f[1] == "version" && !strings.HasPrefix(f[2], "(") {
		return f[2]
	}
	return bin
}

func printLongView(w *os.File, lv longView) {
	fmt.Fprintf(w, "\n## The long view: %d nodes (in the index of %d), %s backfilled at %s (%s to %s), one node's dashboards at a %s step, Prometheus %s (%s)\n\n",
		lv.Nodes, lv.IndexNodes, lv.Span, "15s", lv.Window[0].Format("15:04"), lv.Window[1].Format("15:04 UTC"), lv.Step, lv.Prometheus, lv.Date)
	fmt.Fprintf(w, "raw samples %d, imported in %.0f s; %d records in %d passes of create-blocks-from rules, %.0f s; TSDB %.0f MiB\n\n",
		lv.Samples, lv.ImportS, lv.Records, lv.RulePasses, lv.RulesS, float64(lv.BlocksBytes)/(1<<20))
	fmt.Fprintln(w, "| dashboard | queries | span: CPU s, all queries | span: wall s, one after another | span: slowest query, wall s | 5 m: CPU s | 5 m: wall s |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	short := map[string]longBoard{}
	for _, b := range lv.ShortBoards {
		short[b.Dashboard] = b
	}
	for _, b := range lv.Dashboards {
		s := short[b.Dashboard]
		fmt.Fprintf(w, "| %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f |\n", b.Dashboard, b.Queries, b.CPUS, b.WallS, b.SlowestS, s.CPUS, s.WallS)
	}
	fmt.Fprintf(w, "\nslowest queries over the span (CPU s, wall s, series):\n\n| CPU s | wall s | series | dashboard / panel |\n|---:|---:|---:|---|\n")
	for i, q := range lv.Queries {
		if i == 10 {
			break
		}
		fmt.Fprintf(w, "| %.3f | %.3f | %d | %s / %s |\n", q.CPUS, q.WallS, q.Series, q.Dashboard, q.Panel)
	}
	fmt.Fprintf(w, "\npanels without data over the span (%d of %d): %s\n", len(lv.Empty), len(lv.Queries), strings.Join(lv.Empty, "; "))
	for _, e := range lv.Errors {
		fmt.Fprintln(w, "ERROR", e)
	}
}
