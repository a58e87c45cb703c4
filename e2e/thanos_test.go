//go:build scaleout

// The distributed deployment (deploy/thanos/README.md): a simulated fleet
// (tools/fleetbench -serve: its node template, the exporter's real output,
// and its planted faults) scraped by two shards of two Prometheus replicas
// each (deploy/thanos/prometheus.yml: hashmod on the address), every
// replica evaluating alerts/fabric-rules.yml unchanged on its own nodes and
// sending to a two-member Alertmanager cluster; Thanos sidecars and
// `thanos query` with the replica label deduplicated on top; and one
// reference Prometheus scraping every node with the same rules. One
// replica of the shard with the most planted nodes is killed (SIGKILL)
// before any page is due. Checks: every planted page reaches the webhook
// exactly once and nothing else does; every dashboard query answers
// through thanos query with the same series and values as through the
// reference. `make test-scaleout` builds Thanos and runs it.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fabric-exporter/fabric_exporter/dashboards"
	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

const (
	thanosNodes  = 12 // planted faults on node0001…node0005 (fleetbench), the rest healthy
	thanosShards = 2
	interval     = 5 * time.Second // scrape and evaluation
)

// The pages fleetbench plants (node index → alert); RailImbalance on
// node0001 only pends (for: 10m).
var plantedPages = map[string]string{
	"node0002": "PFCStorm", "node0003": "RoCERetransmissions", "node0004": "NCCLSocketFallback", "node0005": "RailLinkDown",
}

func TestScaleOutThanos(tt *testing.T) {
	t := testenv.RepeatFailures(tt)
	thanos := os.Getenv("THANOS_BIN")
	if thanos == "" {
		t.Skip("THANOS_BIN not set: `make test-scaleout` builds Thanos and sets it")
	}
	promBin := testenv.Tool(t, "prometheus")
	amBin := testenv.Tool(t, "prometheus-alertmanager", "alertmanager")
	tmp := t.TempDir()
	absRepo, _ := filepath.Abs(repo)
	rules := filepath.Join(absRepo, "alerts/fabric-rules.yml")

	// The fleet: fleetbench's template (the exporter's output on the 8-HCA
	// fixtures) served for every node, steady (counters grow at exactly
	// their rate, gauges constant) so that servers scraping a node at
	// different moments store the same curve.
	exporter, fb := filepath.Join(tmp, "fabric_exporter"), filepath.Join(tmp, "fleetbench")
	for bin, pkg := range map[string]string{exporter: "./cmd/fabric_exporter", fb: "./tools/fleetbench"} {
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Dir = absRepo
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
	}
	fleetAddr := testenv.FreeAddr(t)
	fleet := exec.Command(fb, "-serve", fleetAddr, "-steady", "-nodes", fmt.Sprint(thanosNodes), "-exporter", exporter)
	fleet.Dir = absRepo
	fleetLog, _ := os.Create(filepath.Join(tmp, "fleetbench.log"))
	fleet.Stdout, fleet.Stderr = fleetLog, fleetLog
	if err := fleet.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Process.Kill(); fleet.Wait() })
	waitFor(t, 60*time.Second, "the simulated fleet", func() bool {
		r, err := http.Get("http://" + fleetAddr + "/metrics?node=node0000")
		if err == nil {
			r.Body.Close()
		}
		return err == nil && r.StatusCode == 200
	})
	var nodes []string
	for i := range thanosNodes {
		nodes = append(nodes, fmt.Sprintf("node%04d", i))
	}

	// Alertmanager: two members gossiping on loopback, the shipped routing.
	hook := &webhook{}
	hookSrv := httptest.NewServer(hook)
	defer hookSrv.Close()
	amCfg := filepath.Join(tmp, "alertmanager.yml")
	if err := writeAlertmanagerConfig(filepath.Join(repo, "deploy/alertmanager/alertmanager.yml"), amCfg, hookSrv.URL); err != nil {
		t.Fatal(err)
	}
	amAddrs := []string{testenv.FreeAddr(t), testenv.FreeAddr(t)}
	gossip := []string{testenv.FreeAddr(t), testenv.FreeAddr(t)}
	for i := range 2 {
		start(t, amBin, "--config.file="+amCfg, "--storage.path="+filepath.Join(tmp, fmt.Sprintf("am%d", i)),
			"--web.listen-address="+amAddrs[i], "--cluster.listen-address="+gossip[i],
			"--cluster.advertise-address="+gossip[i], "--cluster.peer="+gossip[1-i])
	}
	for _, a := range amAddrs {
		testenv.WaitHTTP(t, "http://"+a+"/-/ready")
	}

	// The shards' Prometheus replicas, from deploy/thanos/prometheus.yml,
	// each with its sidecar; the reference Prometheus with every node.
	type replica struct {
		name, addr, grpc string
		cmd              *exec.Cmd
	}
	var replicas []*replica
	for s := range thanosShards {
		for _, r := range []string{"a", "b"} {
			rep := &replica{name: fmt.Sprintf("shard %d replica %s", s, r), addr: testenv.FreeAddr(t), grpc: testenv.FreeAddr(t)}
			dir := filepath.Join(tmp, fmt.Sprintf("prom-%d%s", s, r))
			cfg := shardConfig(t, rules, s, r, nodes, fleetAddr, amAddrs)
			testenv.WriteFile(t, filepath.Join(dir, "prometheus.yml"), cfg)
			rep.cmd = start(t, promBin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
				"--web.listen-address="+rep.addr, "--storage.tsdb.min-block-duration=2h", "--storage.tsdb.max-block-duration=2h")
			start(t, thanos, "sidecar", "--prometheus.url=http://"+rep.addr, "--tsdb.path="+filepath.Join(dir, "data"),
				"--grpc-address="+rep.grpc, "--http-address="+testenv.FreeAddr(t), "--log.level=warn")
			replicas = append(replicas, rep)
		}
	}
	refAddr := testenv.FreeAddr(t)
	refDir := filepath.Join(tmp, "prom-ref")
	testenv.WriteFile(t, filepath.Join(refDir, "prometheus.yml"), referenceConfig(rules, nodes, fleetAddr))
	start(t, promBin, "--config.file="+filepath.Join(refDir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(refDir, "data"),
		"--web.listen-address="+refAddr)
	queryAddr := testenv.FreeAddr(t)
	qArgs := []string{"query", "--http-address=" + queryAddr, "--grpc-address=" + testenv.FreeAddr(t),
		"--query.replica-label=replica", "--log.level=warn"}
	for _, r := range replicas {
		qArgs = append(qArgs, "--endpoint="+r.grpc)
	}
	start(t, thanos, qArgs...)
	for _, a := range append([]string{refAddr, queryAddr}, func() (l []string) {
		for _, r := range replicas {
			l = append(l, r.addr)
		}
		return
	}()...) {
		testenv.WaitHTTP(t, "http://"+a+"/-/ready")
	}
	began := time.Now()

	// Every node on exactly one shard, on both of its replicas, every shard
	// with nodes; through thanos query, every node once.
	shardOf := map[string]int{}
	waitFor(t, 60*time.Second, "every replica scraping its nodes", func() bool {
		seen := map[string]int{}
		for i, r := range replicas {
			l, err := newPromClient("http://" + r.addr).list(`up == 1`)
			if err != nil || len(l) == 0 {
				return false
			}
			for _, m := range l {
				seen[m["instance"]]++
				shardOf[m["instance"]] = i / 2
			}
		}
		return len(seen) == thanosNodes
	})
	perShard := make([]int, thanosShards)
	for _, n := range nodes {
		perShard[shardOf[n]]++
	}
	t.Logf("nodes per shard: %v; planted pages by shard: %v", perShard, func() map[string]int {
		m := map[string]int{}
		for n := range plantedPages {
			m[n] = shardOf[n]
		}
		return m
	}())
	for s, n := range perShard {
		if n == 0 {
			t.Fatalf("shard %d has no nodes", s)
		}
	}
	q := newPromClient("http://" + queryAddr)
	waitFor(t, 60*time.Second, "every node once through thanos query", func() bool {
		n, err := q.count(`up{job="fabric"} == 1`)
		return err == nil && n == thanosNodes
	})

	// Kill replica a of the shard with the most planted pages, before the
	// first page is due (RailLinkDown has for: 1m; NCCLSocketFallback fires at once, before and
	// after: it must still be sent once).
	victimShard := 0
	count := make([]int, thanosShards)
	for n := range plantedPages {
		count[shardOf[n]]++
	}
	for s := range count {
		if count[s] > count[victimShard] {
			victimShard = s
		}
	}
	time.Sleep(time.Until(began.Add(40 * time.Second)))
	victim := replicas[2*victimShard]
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s (%d of %d planted pages on its shard) %.0f s into the run", victim.name, count[victimShard], len(plantedPages), time.Since(began).Seconds())

	// Every planted page at the webhook; then long enough for a second copy
	// (the other Alertmanager waits --cluster.peer-timeout, 15 s, before it
	// sends what its peer has not) to show.
	missing := func() (l []string) {
		for n, a := range plantedPages {
			if _, ok := hook.find("firing", map[string]string{"alertname": a, "instance": n}); !ok {
				l = append(l, a+" on "+n)
			}
		}
		return l
	}
	for deadline := time.Now().Add(270 * time.Second); len(missing()) > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Second)
	}
	if m := missing(); len(m) > 0 {
		active, _ := q.list(`ALERTS`)
		t.Fatalf("%.0f s into the run, not at the webhook: %v; delivered: %v; ALERTS through thanos query: %v", time.Since(began).Seconds(), m, hook.all(), active)
	}
	t.Logf("every planted page delivered %.0f s into the run", time.Since(began).Seconds())
	// The figures of docs/performance.md over the wait: samples appended
	// per second and the rule groups' evaluation time per round, per
	// live replica and for the reference.
	servers := map[string]string{"reference (all nodes)": refAddr}
	for _, r := range replicas {
		if r != victim {
			servers[r.name] = r.addr
		}
	}
	before := map[string]float64{}
	for name, a := range servers {
		before[name] = selfMetric(t, a, "prometheus_tsdb_head_samples_appended_total")
	}
	const settle = 25 * time.Second
	time.Sleep(settle)
	for name, a := range servers {
		groups, err := newPromClient("http://" + a).Rules(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var eval float64
		for _, g := range groups {
			eval += g.EvaluationTime
		}
		t.Logf("%s: %.0f samples/s appended, rule groups %.1f ms per round (sum of the last evaluation of each)", name,
			(selfMetric(t, a, "prometheus_tsdb_head_samples_appended_total")-before[name])/settle.Seconds(), eval*1000)
	}
	// Once: every alert in one firing notification, whichever replica
	// evaluated it (the replicas' external labels, were they sent, are left
	// out of the count: a copy from each replica is a page sent twice).
	sent := map[string]int{}
	for _, e := range hook.all() {
		if e.status != "firing" {
			continue
		}
		l := map[string]string{}
		for k, v := range e.labels {
			if k != "replica" && k != "shard" {
				l[k] = v
			}
		}
		sent[labelKey(l)]++
		if plantedPages[e.labels["instance"]] != e.labels["alertname"] {
			t.Errorf("an alert that was not planted: %v", e.labels)
		}
	}
	for k, c := range sent {
		if c != 1 {
			t.Errorf("%s sent %d times, want once", k, c)
		}
	}
	t.Logf("%d alerts sent (times each): %v", len(sent), sent)

	// Every dashboard query through thanos query and through the reference,
	// at the same instants: the range queries over the last minute at the
	// evaluation interval, both ends on a multiple of the step, the instant
	// ones at the end. $__range is 1m (the default 15m reaches back before
	// the first scrape, where each server extrapolates from its own).
	//
	// And only once every recorded sample the range reads comes from full
	// windows on every server: the records the dashboards read take rate()
	// over [1m] in groups evaluated once a minute, so the sample in force at
	// the range's start was evaluated up to a minute before it, over the
	// minute before that. A record evaluated sooner after a server's first
	// scrape extrapolates from its own first sample (each server scrapes
	// first at its own moment) and differs by percents (seen: 6 %, when
	// the pages were all in early and the comparison began 3 minutes in).
	values := dashboards.DefaultValues()
	values["__range"] = "1m"
	var lastFirst int64
	for _, a := range servers {
		lastFirst = max(lastFirst, firstScrape(t, a))
	}
	warm := time.UnixMilli(lastFirst).Add(recordWindow + recordGroupInterval + time.Minute + interval)
	if d := time.Until(warm.Add(interval)); d > 0 {
		t.Logf("waiting %.0f s for the records of the compared minute to read full windows everywhere", d.Seconds())
		time.Sleep(d)
	}
	end := time.Now().Add(-interval).Truncate(interval)
	ref := "http://" + refAddr
	var warned []string
	withData := 0
	var slowest struct {
		panel, expr string
		thanos, ref time.Duration
	}
	var total struct{ thanos, ref time.Duration }
	for _, dq := range dashboards.Queries() {
		expr, err := dashboards.Expand(dq.Template, values)
		if err != nil {
			t.Fatal(err)
		}
		panel := dq.Dashboard + " / " + dq.Panel
		want, _, refTime, err := timedQuery(ref, expr, dq.Instant, end)
		if err != nil {
			t.Errorf("%s: reference: %v", panel, err)
			continue
		}
		got, warnings, d, err := timedQuery("http://"+queryAddr, expr, dq.Instant, end)
		total.thanos += d
		total.ref += refTime
		if d > slowest.thanos {
			slowest.panel, slowest.expr, slowest.thanos, slowest.ref = panel, expr, d, refTime
		}
		if err != nil {
			t.Errorf("%s: thanos query: %v", panel, err)
			continue
		}
		if len(warnings) > 0 {
			warned = append(warned, panel+": "+warnings[0])
		}
		if len(want) > 0 {
			withData++
		}
		if d, key, ts := diffResults(want, got); d != "" {
			t.Errorf("%s (%s): thanos query differs from one Prometheus: %s\n%s", panel, expr, d, samplesAround(ref, "http://"+queryAddr, key, ts))
		}
	}
	t.Logf("%d dashboard queries compared (%d with data), largest relative difference %.2g; %d answered with a partial-response warning after the kill %v",
		len(dashboards.Queries()), withData, maxRel, len(warned), first(warned))
	t.Logf("slowest panel through thanos query: %s (%s): %.1f ms; the same query on one Prometheus: %.1f ms",
		slowest.panel, slowest.expr, ms(slowest.thanos), ms(slowest.ref))
	t.Logf("all dashboard queries, one after the other: %.0f ms through thanos query, %.0f ms on one Prometheus", ms(total.thanos), ms(total.ref))
}

// timedQuery is rawQuery three times: the last answer and the fastest
// wall time (this machine is shared; the fastest is the query's own cost).
func timedQuery(base, expr string, instant bool, end time.Time) (a answer, warnings []string, best time.Duration, err error) {
	for i := range 3 {
		t0 := time.Now()
		a, warnings, err = rawQuery(base, expr, instant, end)
		if d := time.Since(t0); i == 0 || d < best {
			best = d
		}
		if err != nil {
			return
		}
	}
	return
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// The records the dashboards read: rate over this window, in groups
// evaluated at this interval (alerts/fabric-rules.yml).
const recordWindow, recordGroupInterval = time.Minute, time.Minute

// firstScrape is when a Prometheus first scraped the fleet (ms): its
// earliest sample of up.
func firstScrape(t testing.TB, addr string) int64 {
	a, _, err := rawQuery("http://"+addr, "up[10m]", true, time.Now())
	if err != nil || len(a) == 0 {
		t.Fatalf("%s: no up samples: %v", addr, err)
	}
	first := int64(math.MaxInt64)
	for _, points := range a {
		for ts := range points {
			first = min(first, ts)
		}
	}
	return first
}

// selfMetric sums a Prometheus's own metric over its labels.
func selfMetric(t testing.TB, addr, name string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name+" ") || strings.HasPrefix(l, name+"{") {
			var v float64
			fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v)
			sum += v
		}
	}
	return sum
}

func first(l []string) []string {
	if len(l) > 1 {
		return l[:1]
	}
	return l
}

// shardConfig is deploy/thanos/prometheus.yml for shard s, replica r: its
// external labels, hashmod regex, the rules file, the test's Alertmanagers,
// and the fleet's nodes (a static target per node name, relabelled onto
// fleetbench's address after the hashmod).
func shardConfig(t testing.TB, rules string, s int, r string, nodes []string, fleet string, am []string) string {
	b, err := os.ReadFile(filepath.Join(repo, "deploy/thanos/prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	g := cfg["global"].(map[string]any)
	g["scrape_interval"], g["evaluation_interval"] = interval.String(), interval.String()
	g["external_labels"] = map[string]any{"shard": fmt.Sprint(s), "replica": r}
	cfg["rule_files"] = []any{rules}
	cfg["alerting"].(map[string]any)["alertmanagers"] = []any{map[string]any{"static_configs": []any{map[string]any{"targets": am}}}}
	job := cfg["scrape_configs"].([]any)[0].(map[string]any)
	job["static_configs"] = []any{map[string]any{"targets": nodes, "labels": map[string]any{"cluster": "fleet"}}}
	var relabel []any
	for _, rc := range job["relabel_configs"].([]any) {
		m := rc.(map[string]any)
		if m["action"] == "hashmod" {
			m["modulus"] = thanosShards
		}
		if m["action"] == "keep" {
			m["regex"] = fmt.Sprint(s)
		}
		relabel = append(relabel, m)
	}
	job["relabel_configs"] = append(relabel, fleetRelabel(fleet)...)
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// fleetRelabel points a node-name target at fleetbench (as fleetbench does).
func fleetRelabel(fleet string) []any {
	return []any{
		map[string]any{"source_labels": []any{"__address__"}, "target_label": "__param_node"},
		map[string]any{"source_labels": []any{"__address__"}, "target_label": "instance"},
		map[string]any{"target_label": "__address__", "replacement": fleet},
	}
}

func referenceConfig(rules string, nodes []string, fleet string) string {
	cfg := map[string]any{
		"global":     map[string]any{"scrape_interval": interval.String(), "evaluation_interval": interval.String()},
		"rule_files": []any{rules},
		"scrape_configs": []any{map[string]any{"job_name": "fabric",
			"static_configs":  []any{map[string]any{"targets": nodes, "labels": map[string]any{"cluster": "fleet"}}},
			"relabel_configs": fleetRelabel(fleet)}},
	}
	out, _ := yaml.Marshal(cfg)
	return string(out)
}

// answer is one query's result, series keyed by their labels without the
// `shard` external label (which the sidecars add and one Prometheus does
// not have): the values at each timestamp (one for an instant query).
type answer map[string]map[int64]float64

// rawQuery runs an instant query at end or a range query over the minute
// before it, and returns the answer with the API's warnings (thanos query's
// partial responses).
func rawQuery(base, expr string, instant bool, end time.Time) (answer, []string, error) {
	v := url.Values{"query": {expr}}
	path := "/api/v1/query_range"
	if instant {
		path = "/api/v1/query"
		v.Set("time", fmt.Sprint(end.Unix()))
	} else {
		v.Set("start", fmt.Sprint(end.Add(-time.Minute).Unix()))
		v.Set("end", fmt.Sprint(end.Unix()))
		v.Set("step", fmt.Sprint(interval.Seconds()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path+"?"+v.Encode(), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status   string   `json:"status"`
		Error    string   `json:"error"`
		Warnings []string `json:"warnings"`
		Data     struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  []any             `json:"value"`
				Values [][]any           `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, nil, err
	}
	if body.Status != "success" {
		return nil, body.Warnings, fmt.Errorf("%s: %s", resp.Status, body.Error)
	}
	a := answer{}
	for _, r := range body.Data.Result {
		delete(r.Metric, "shard")
		k := labelKey(r.Metric)
		if a[k] == nil {
			a[k] = map[int64]float64{}
		}
		points := r.Values
		if r.Value != nil {
			points = [][]any{r.Value}
		}
		for _, p := range points {
			var f float64
			fmt.Sscan(p[1].(string), &f)
			a[k][int64(p[0].(float64)*1000)] = f
		}
	}
	return a, body.Warnings, nil
}

// tolerance is how far apart (relative) two servers' values may be: the
// fleet serves every sample with its timestamp (-steady), so they store the
// same points of the same curves and differ by floating-point rounding
// (the largest difference seen is logged). A double-counted or missing
// node, a replica not deduplicated, a recorded series from the wrong shard
// are 100 % off.
const tolerance = 1e-9

// maxRel is the largest relative difference diffResults has seen.
var maxRel float64

// diffResults says how got differs from want: a series in one only, a
// timestamp in one only, or a value off by more than tolerance; and the
// series and timestamp (ms) of the earliest value off, if one is.
func diffResults(want, got answer) (diff, key string, at int64) {
	var d []string
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			d = append(d, "missing "+k)
			continue
		}
		for ts, wv := range w {
			gv, ok := g[ts]
			switch {
			case !ok:
				d = append(d, fmt.Sprintf("%s: no point at %d", k, ts))
			case math.IsNaN(gv) && math.IsNaN(wv) || gv == wv:
			default:
				rel := math.Abs(gv-wv) / math.Max(math.Abs(wv), math.Abs(gv))
				maxRel = math.Max(maxRel, rel)
				if !(rel <= tolerance) {
					d = append(d, fmt.Sprintf("%s at %d: %g, want %g", k, ts, gv, wv))
					if key == "" || ts < at || ts == at && k < key {
						key, at = k, ts
					}
				}
			}
		}
		if len(g) != len(w) {
			d = append(d, fmt.Sprintf("%s: %d points, want %d", k, len(g), len(w)))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			d = append(d, "extra "+k)
		}
	}
	sort.Strings(d)
	if len(d) > 3 {
		d = append(d[:3], fmt.Sprintf("and %d more", len(d)-3))
	}
	return strings.Join(d, "; "), key, at
}

// samplesAround is what each side stored of series key (a labelKey) in
// the 40 s before the step at ms: the reference's samples, thanos query's
// deduplicated ones and each replica's (dedup=false), so that a failure
// says whether the curves or the evaluation moments differ.
func samplesAround(ref, thanos, key string, ms int64) string {
	if key == "" {
		return ""
	}
	var sel []string
	for _, kv := range strings.Split(strings.Trim(key, "{}"), ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			sel = append(sel, fmt.Sprintf("%s=%q", k, v))
		}
	}
	expr := "{" + strings.Join(sel, ",") + "}[40s]"
	var out []string
	for _, side := range []struct{ name, base, extra string }{{"reference", ref, ""}, {"thanos", thanos, ""}, {"thanos, each replica", thanos, "&dedup=false"}} {
		v := url.Values{"query": {expr}, "time": {fmt.Sprintf("%.3f", float64(ms)/1000)}}
		resp, err := http.Get(side.base + "/api/v1/query?" + v.Encode() + side.extra)
		if err != nil {
			out = append(out, side.name+": "+err.Error())
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out = append(out, fmt.Sprintf("%s, %s at %d: %s", side.name, expr, ms, b))
	}
	return strings.Join(out, "\n")
}
