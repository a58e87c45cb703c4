// The hung-group trials (issue 39): the two-node job made to look like a
// decode step (matrix work between the all-reduces, allreduce.py --step
// decode, a second communicator per process), logs off, and
//
//   - hang-eager: rank 1 stops launching (alive, sleeping in Python) while
//     rank 0 waits inside the next all-reduce;
//   - hang-graph: the same step replayed from a CUDA graph (RAS counts no
//     graph-launched collective), rank 1 stops replaying;
//   - hang-sigstop: rank 1 gets SIGSTOP (its RAS thread stops too);
//
// each timed from the fault to the first NCCLCommunicatorHung or
// NCCLRankUnresponsive notification, which must name rank 1's host pid on
// node 1; and the quiet trials, which must page nothing but the
// kernel-evidence socket fallback for --quiet-for:
//
//   - quiet-graph: the graph job serving all along;
//   - quiet-idle: the eager job serving until both ranks ran the model,
//     then launching nothing (a server without requests for a night).
//
// Hang trials run one after another (two ranks on one GPU: a second job's
// matrix work would hide the spinning GPU); the quiet trials together.

package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// hangKinds are the hung-group trials, in the order they run.
var hangKinds = []string{"hang-eager", "hang-graph", "hang-sigstop"}

// hangPages are the alerts a hung group must raise (either).
var hangPages = []string{"NCCLCommunicatorHung", "NCCLRankUnresponsive"}

// isHang reports whether kind is a hung-group or quiet trial.
func isHang(kind string) bool {
	return strings.HasPrefix(kind, "hang-") || strings.HasPrefix(kind, "quiet-")
}

// hangArgs are allreduce.py's arguments for a hang or quiet trial.
func (n *nodeRun) hangArgs() []string {
	args := []string{"--step", "decode", "--second-group", "--pg-timeout", "900",
		"--hang-file", filepath.Join(n.dir, "hang"), "--idle-file", filepath.Join(n.dir, "idle")}
	if n.t.Kind == "hang-graph" || n.t.Kind == "quiet-graph" {
		args = append(args, "--graph")
	}
	return args
}

// served waits until Prometheus has both ranks' processes as having run
// the model (pid:fabric_gpu_served:max == 1 on their node): before, a
// hang is a job still starting, by design not paged.
func (n *nodeRun) served(timeout time.Duration) bool {
	var sel []string
	for r := 0; r < 2; r++ {
		sel = append(sel, fmt.Sprintf(`pid:fabric_gpu_served:max{instance=%q,pid="%d"} == 1`, nodeName(r), n.job.info[r].Host))
	}
	q := strings.Join(sel, " or ")
	got := waitQuery(n.cfg, q, 2, timeout)
	procs, _ := query(n.cfg.PrometheusPort, "fabric_gpu_process_info")
	n.check("both ranks ran the model (pid:fabric_gpu_served:max)", len(got) == 2,
		"%s, %.1f s after RAS reported the job; fabric_gpu_process_info %s (rank 0 host pid %d on %s, rank 1 host pid %d on %s)",
		labelsOf(got, "instance", "pid"), time.Since(n.ready).Seconds(), labelsOf(procs, "instance", "gpu", "pid"),
		n.job.info[0].Host, nodeName(0), n.job.info[1].Host, nodeName(1))
	return len(got) == 2
}

// hang runs a hung-group trial: serving, the fault, the page.
func (n *nodeRun) hang() {
	saveRAS(n.ras, n.dir, "healthy")
	if !n.served(75 * time.Second) {
		return
	}
	unexpected, expected := pagesBefore(n.st.hook.all(), time.Now())
	n.check("nothing pages while the job serves", len(unexpected) == 0, "%.0f s from RAS reporting both ranks: %d pages%s%s",
		time.Since(n.ready).Seconds(), len(unexpected), listNotes(unexpected), expectedNote(expected))
	// A fault lands anywhere in the scrape, evaluation and RAS cycles:
	// trial i waits i×(scrape interval)/(trials+1) more (the serial trials
	// start at arbitrary phases anyway).
	if n.t.Barrier != "" {
		n.barrier()
	}
	time.Sleep(n.t.Delay)
	var fault time.Time
	var err error
	switch n.t.Kind {
	case "hang-sigstop":
		var resp agentResp
		resp, err = n.job.agent.call(agentReq{Op: "sigstop"}, 10*time.Second)
		fault = resp.At
	default:
		fault = time.Now()
		err = os.WriteFile(filepath.Join(n.dir, "hang"), nil, 0o644)
	}
	if err != nil {
		n.check("fault rank 1", false, "%v", err)
		return
	}
	holder := func(l map[string]string) bool {
		if l["alertname"] == "NCCLCommunicatorHung" {
			return l["instance"] == nodeName(1) && l["pid"] == strconv.Itoa(n.job.info[1].Host)
		}
		return l["rank"] == "1" // NCCLRankUnresponsive: by rank, RAS's pid
	}
	got := waitPages(n.st.hook, hangPages, func(map[string]string) bool { return true }, fault, n.cfg.PageTimeout, 0)
	first, ok := earliest(got)
	var parts []string
	for _, a := range hangPages {
		if p, ok := got[a]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f s after the fault (receiver %s, severity %s, instance %s, pid %s, rank %q)", a, p.at.Sub(fault).Seconds(), p.receiver, p.labels["severity"], p.labels["instance"], p.labels["pid"], p.labels["rank"]))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, fmt.Sprintf("no %s within %s", strings.Join(hangPages, " or "), n.cfg.PageTimeout))
	}
	what := map[string]string{"hang-eager": "rank 1 stops launching", "hang-graph": "rank 1 stops replaying its CUDA graph", "hang-sigstop": "SIGSTOP of rank 1"}[n.t.Kind]
	n.check("the hung group paged, naming the rank that holds it up", ok && first.receiver == "pager" && first.labels["severity"] == "page" && holder(first.labels) &&
		hasHostPid(first.annotations["description"], n.job.info[1].Host),
		"%s (%s) at %s; %s", what, n.job.info[1], fault.UTC().Format("15:04:05.0"), strings.Join(parts, "; "))
	if ok {
		n.row.HangPage = max(first.at.Sub(fault), time.Millisecond)
		n.res.printf("%s: %s said: summary %q; description %q", n.t.Name, first.labels["alertname"], first.annotations["summary"], first.annotations["description"])
	}
	saveRAS(n.ras, n.dir, "hung")
	saveScrape(exporterURL(n.cfg), filepath.Join(n.dir, "hung.prom"))
	saveScrape("http://"+nodeAddr[1]+":"+strconv.Itoa(n.cfg.ExporterPort)+"/metrics", filepath.Join(n.dir, "node1", "hung.prom"))
	// Release rank 1 so that the job ends as a job does.
	if n.t.Kind == "hang-sigstop" {
		n.job.agent.call(agentReq{Op: "sigcont"}, 10*time.Second)
	} else {
		os.Remove(filepath.Join(n.dir, "hang"))
	}
	unexpected, _ = pagesBefore(n.st.hook.all(), time.Now())
	var other []notification
	for _, p := range unexpected {
		if !contains(hangPages, p.labels["alertname"]) {
			other = append(other, p)
		}
	}
	n.check("nothing else pages", len(other) == 0, "%d other pages%s", len(other), listNotes(other))
	exporterCost(n.cfg, n.res, n.t.Name, n.st, n.cpu0, n.seen)
}

// quiet runs a quiet trial: --quiet-for of serving (quiet-graph) or of
// idling after serving (quiet-idle), and no page but the socket fallback.
func (n *nodeRun) quiet() {
	saveRAS(n.ras, n.dir, "healthy")
	if !n.served(2 * time.Minute) {
		return
	}
	from := time.Now()
	what := "serving from a CUDA graph"
	if n.t.Kind == "quiet-idle" {
		what = "idle (both ranks launch nothing)"
		if err := os.WriteFile(filepath.Join(n.dir, "idle"), nil, 0o644); err != nil {
			n.check("the job goes idle", false, "%v", err)
			return
		}
	}
	time.Sleep(n.t.Healthy)
	saveRAS(n.ras, n.dir, "end")
	saveScrape(exporterURL(n.cfg), filepath.Join(n.dir, "end.prom"))
	unexpected, expected := pagesBefore(n.st.hook.all(), time.Now())
	var late []notification
	for _, p := range unexpected {
		if !p.at.Before(n.start) {
			late = append(late, p)
		}
	}
	n.check("nothing pages for "+n.t.Healthy.String()+" "+what, len(late) == 0, "%.0f s %s (%.0f s from RAS reporting both ranks): %d pages%s%s",
		time.Since(from).Seconds(), what, time.Since(n.ready).Seconds(), len(late), listNotes(late), expectedNote(expected))
	if n.t.Kind == "quiet-idle" {
		os.Remove(filepath.Join(n.dir, "idle"))
	}
	exporterCost(n.cfg, n.res, n.t.Name, n.st, n.cpu0, n.seen)
}

// percentile is the nearest-rank percentile (p in (0, 100]) of v: with 3
// or 6 trials, p95 is the largest.
func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(k, len(s)-1))]
}

// spread is "p50 X s, p95 Y s over N [a, b, …]" of durations.
func spread(ds []time.Duration) string {
	var v []float64
	for _, d := range ds {
		v = append(v, d.Seconds())
	}
	return fmt.Sprintf("p50 %.1f s, p95 %.1f s over %d  [%s s]", median(v), percentile(v, 95), len(v), joinFloats(v, " s, "))
}

// barrier waits until every hang trial of the batch served (its name in
// the barrier directory), at most 2 minutes.
func (n *nodeRun) barrier() {
	os.MkdirAll(n.t.Barrier, 0o755)
	os.WriteFile(filepath.Join(n.t.Barrier, n.t.Name), nil, 0o644)
	t0 := time.Now()
	for time.Since(t0) < 2*time.Minute {
		if es, _ := os.ReadDir(n.t.Barrier); len(es) >= n.t.BarrierN {
			n.res.printf("%s: the batch's %d trials served; waited %.1f s for the others", n.t.Name, len(es), time.Since(t0).Seconds())
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	n.check("the batch's trials served together", false, "waited 2 minutes for %d trials in %s", n.t.BarrierN, n.t.Barrier)
}
