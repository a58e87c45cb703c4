// One two-node trial as the child drill runs it inside node 0, and what
// the report makes of the trials: the pages around a kill, the healthy
// window, the exporter's and RAS's cost.

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/ncclras"
	"github.com/fabric-exporter/fabric_exporter/internal/promapi"
)

func signalNotify(c chan os.Signal) { signal.Notify(c, os.Interrupt, syscall.SIGTERM) }

// runNodeTrial runs trial t; res gets its checks, lines and time.
func runNodeTrial(t nodeTrial, res *Result) error {
	cfg := t.Cfg
	sh, err := loadShipped(cfg.Repo)
	if err != nil {
		return err
	}
	dir := filepath.Join(cfg.WorkDir, t.Name)
	if err := os.MkdirAll(filepath.Join(dir, "nccl"), 0o755); err != nil {
		return err
	}
	if err := portsFree(cfg.ExporterPort, cfg.PrometheusPort, cfg.AlertmanagerPort, cfg.WebhookPort, cfg.TorchPort); err != nil {
		return err
	}
	rasAddr := net.JoinHostPort(nodeAddr[0], rasPort)
	st, err := startStack(cfg, sh, dir, "", "", "--collector.nccl-ras.address="+rasAddr)
	defer st.stop()
	if err != nil {
		return err
	}
	defer func() {
		writeNotifications(st.hook, filepath.Join(dir, "webhook.jsonl"))
		saveScrape(cfg, filepath.Join(dir, "metrics.prom"))
	}()
	script := filepath.Join(dir, "allreduce.py")
	if err := os.WriteFile(script, allreduceScript, 0o644); err != nil {
		return err
	}
	args := []string{script, "--stop-file", filepath.Join(dir, "stop"), "--seconds", strconv.Itoa(int((t.Healthy + 10*time.Minute).Seconds()))}
	r0, err := startProc("rank0", filepath.Join(dir, "rank0.out"), nodeEnv(cfg, 0), cfg.Python, args...)
	if err != nil {
		return err
	}
	defer r0.stop(5 * time.Second)
	cmd, err := nsCommand(os.NewFile(uintptr(t.PeerFD), "node1"), nodeEnv(cfg, 1), cfg.Python, args...)
	if err != nil {
		return err
	}
	r1, err := startCmd("rank1", filepath.Join(dir, "rank1.out"), cmd)
	if err != nil {
		return err
	}
	defer r1.stop(5 * time.Second)
	pids := [2]int{r0.cmd.Process.Pid, r1.cmd.Process.Pid}
	start := time.Now()
	comm, ready, err := waitRAS(rasAddr, pids, []*proc{r0, r1}, 150*time.Second)
	res.check(t.Name+": RAS reports both ranks on two nodes", err == nil, "%s", orErr(err, func() string {
		return fmt.Sprintf("%s, %.1f s after the ranks started", describeComm(comm), ready.Sub(start).Seconds())
	}))
	if err != nil {
		return nil
	}
	seen := waitQuery(cfg, fmt.Sprintf(`fabric_nccl_ras_communicator_nodes{comm=%q} == 2`, comm.Hash), 1, 4*parseDur(cfg.ScrapeInterval)+20*time.Second)
	tSeen := time.Now()
	res.check(t.Name+": the exporter reports the communicator on 2 nodes", len(seen) == 1,
		"fabric_nccl_ras_communicator_nodes{comm=%q}: %d series, %.1f s after RAS", comm.Hash, len(seen), tSeen.Sub(ready).Seconds())
	cpu0, _, _, _ := procStat(st.exporter.cmd.Process.Pid)
	switch t.Kind {
	case "kill":
		killTrial(cfg, t, res, st, comm, pids, rasAddr, ready, tSeen, cpu0)
	case "nodebug":
		nodebugTrial(cfg, t, res, st, comm, pids, ready, tSeen, cpu0)
	default:
		return fmt.Errorf("unknown two-node trial %q", t.Kind)
	}
	return nil
}

func orErr(err error, ok func() string) string {
	if err != nil {
		return err.Error()
	}
	return ok()
}

// rankLoss are the alerts a killed rank must raise.
var rankLoss = []string{"NCCLRankMissing", "NCCLAsyncError"}

func killTrial(cfg Config, t nodeTrial, res *Result, st *stack, comm ncclras.Communicator, pids [2]int, rasAddr string, ready, tSeen time.Time, cpu0 float64) {
	saveRAS(rasAddr, filepath.Join(cfg.WorkDir, t.Name), "healthy")
	if t.Healthy > 0 {
		if wall, cpu, n, err := rasClientCost(rasAddr, 20); err == nil {
			res.printf("%s: RAS query by the exporter's client (internal/ncclras, JSON STATUS of the 2-rank job), %d queries: wall median %.2f ms, CPU %.2f ms per query", t.Name, n, ms(wall), ms(cpu))
		}
		// Healthy for t.Healthy from RAS reporting the whole job, and at
		// least until Prometheus had it.
		time.Sleep(time.Until(ready.Add(t.Healthy)))
	}
	time.Sleep(t.Delay)
	exporterCost(cfg, res, t.Name, st, cpu0, tSeen)
	killAt := time.Now()
	unexpected, expected := pagesBefore(st.hook.all(), killAt)
	res.check(t.Name+": nothing pages on the healthy job", len(unexpected) == 0, "%.0f s from RAS reporting both ranks to the kill: %d pages%s%s",
		killAt.Sub(ready).Seconds(), len(unexpected), listNotes(unexpected), expectedNote(expected))
	if err := syscall.Kill(pids[1], syscall.SIGKILL); err != nil {
		res.check(t.Name+": SIGKILL rank 1", false, "pid %d: %v", pids[1], err)
		return
	}
	ofComm := func(l map[string]string) bool { return l["comm"] == comm.Hash }
	got := waitPages(st.hook, rankLoss, ofComm, killAt, cfg.PageTimeout, time.Minute)
	first, ok := earliest(got)
	var parts []string
	for _, a := range rankLoss {
		if n, ok := got[a]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f s after the kill (receiver %s, severity %s, rank %s, pid %s)", a, n.at.Sub(killAt).Seconds(), n.receiver, n.labels["severity"], n.labels["rank"], n.labels["pid"]))
		} else {
			parts = append(parts, a+" not within the wait")
		}
	}
	res.check(t.Name+": the killed rank paged", ok && first.receiver == "pager" && first.labels["severity"] == "page",
		"SIGKILL of rank 1 (pid %d) at %s; %s", pids[1], killAt.UTC().Format("15:04:05.0"), strings.Join(parts, "; "))
	if ok {
		res.KillToPage = append(res.KillToPage, first.at.Sub(killAt))
	}
	m, okM := got["NCCLRankMissing"]
	res.check(t.Name+": NCCLRankMissing names the killed rank", okM && m.labels["pid"] == strconv.Itoa(pids[1]),
		"pid %q, want %d", m.labels["pid"], pids[1])
	a, okA := got["NCCLAsyncError"]
	res.check(t.Name+": NCCLAsyncError names the survivor", okA && a.labels["pid"] == strconv.Itoa(pids[0]),
		"pid %q, want %d", a.labels["pid"], pids[0])
	saveRAS(rasAddr, filepath.Join(cfg.WorkDir, t.Name), "killed")
	if s, err := ncclras.Query(context.Background(), rasAddr, ncclras.Options{Timeout: 5 * time.Second}); err == nil {
		for _, c := range s.Communicators {
			if c.Hash == comm.Hash {
				res.printf("%s: RAS %.0f s after the kill: %d of %d ranks missing, INCOMPLETE %v, ERROR %v", t.Name, time.Since(killAt).Seconds(), c.MissingCount, c.Size, c.Incomplete, c.Error)
			}
		}
	}
}

func nodebugTrial(cfg Config, t nodeTrial, res *Result, st *stack, comm ncclras.Communicator, pids [2]int, ready, tSeen time.Time, cpu0 float64) {
	isRank := func(l map[string]string) bool {
		return l["pid"] == strconv.Itoa(pids[0]) || l["pid"] == strconv.Itoa(pids[1])
	}
	got := waitPages(st.hook, []string{"NCCLSocketFallback"}, isRank, ready, cfg.PageTimeout, 0)
	n, paged := got["NCCLSocketFallback"]
	detail := "no NCCLSocketFallback notification for pids " + fmt.Sprint(pids[:]) + " within " + cfg.PageTimeout.String()
	if paged {
		res.NodebugPage = n.at.Sub(ready)
		detail = fmt.Sprintf("receiver %s, severity %s, evidence %q, cause %q, pid %s; %.1f s after RAS reported the two-node communicator; summary %q",
			n.receiver, n.labels["severity"], n.labels["evidence"], n.labels["cause"], n.labels["pid"], res.NodebugPage.Seconds(), n.annotations["summary"])
	}
	res.check(t.Name+": NCCLSocketFallback paged without NCCL logs", paged && n.receiver == "pager" && n.labels["severity"] == "page" && n.labels["evidence"] == "kernel" && n.labels["pid"] == strconv.Itoa(pids[0]), "%s", detail)
	unexpected, _ := pagesBefore(st.hook.all(), time.Now())
	res.check(t.Name+": nothing else pages", len(unexpected) == 0, "%d other pages%s", len(unexpected), listNotes(unexpected))
	logs := nclLines(filepath.Join(cfg.WorkDir, t.Name))
	res.check(t.Name+": no NCCL log", logs == 0, "%d NCCL lines in the trial's directory (NCCL_DEBUG unset, no NCCL_DEBUG_FILE)", logs)
	pr := fmt.Sprintf(`{pid=~"%d|%d"}`, pids[0], pids[1])
	fds, _ := query(cfg.PrometheusPort, "fabric_process_rdma_verbs_fds"+pr)
	hostNS, _ := query(cfg.PrometheusPort, "fabric_process_host_pid_namespace"+pr)
	res.printf("%s: fabric_process_rdma_verbs_fds %s; fabric_process_host_pid_namespace %s", t.Name, valuesByPid(fds), valuesByPid(hostNS))
	exporterCost(cfg, res, t.Name, st, cpu0, tSeen)
}

// waitPages waits until every alert of names has a firing notification
// matching match at or after from, or timeout passes; once the first has
// come the others get at most grace more.
func waitPages(w *webhook, names []string, match func(map[string]string) bool, from time.Time, timeout, grace time.Duration) map[string]notification {
	deadline := from.Add(timeout)
	for {
		got := firstPages(w.all(), names, match, from)
		if len(got) == len(names) || time.Now().After(deadline) {
			return got
		}
		if f, ok := earliest(got); ok && f.at.Add(grace).Before(deadline) {
			deadline = f.at.Add(grace)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// firstPages returns, per alert of names, its first firing notification
// matching match at or after from.
func firstPages(notes []notification, names []string, match func(map[string]string) bool, from time.Time) map[string]notification {
	out := map[string]notification{}
	for _, n := range notes {
		a := n.labels["alertname"]
		if n.status != "firing" || n.at.Before(from) || !match(n.labels) {
			continue
		}
		for _, want := range names {
			if a == want {
				if o, ok := out[a]; !ok || n.at.Before(o.at) {
					out[a] = n
				}
			}
		}
	}
	return out
}

func earliest(m map[string]notification) (notification, bool) {
	var first notification
	ok := false
	for _, n := range m {
		if !ok || n.at.Before(first.at) {
			first, ok = n, true
		}
	}
	return first, ok
}

// pagesBefore splits the pages (severity page, firing) before t into
// unexpected ones and NCCLSocketFallback from kernel evidence, which is
// right on a host where the job has no RDMA resource (every two-node
// job of the lent machine).
func pagesBefore(notes []notification, t time.Time) (unexpected, expected []notification) {
	for _, n := range notes {
		if n.status != "firing" || n.labels["severity"] != "page" || !n.at.Before(t) {
			continue
		}
		if n.labels["alertname"] == "NCCLSocketFallback" && n.labels["evidence"] == "kernel" {
			expected = append(expected, n)
		} else {
			unexpected = append(unexpected, n)
		}
	}
	return unexpected, expected
}

func listNotes(ns []notification) string {
	if len(ns) == 0 {
		return ""
	}
	var s []string
	for _, n := range ns {
		s = append(s, n.labels["alertname"]+"{pid="+n.labels["pid"]+"}")
	}
	return " (" + strings.Join(s, ", ") + ")"
}

func expectedNote(ns []notification) string {
	if len(ns) == 0 {
		return ""
	}
	return fmt.Sprintf("; and %d NCCLSocketFallback with evidence kernel, expected (the job is on sockets)", len(ns))
}

// exporterCost reports the exporter's CPU per scrape from since to now and
// what the nccl-ras collector's queries took.
func exporterCost(cfg Config, res *Result, name string, st *stack, cpu0 float64, since time.Time) {
	cpu1, rss, _, err := procStat(st.exporter.cmd.Process.Pid)
	win := time.Since(since)
	w := int(win.Seconds())
	if err != nil || w < 1 {
		return
	}
	sc, _ := query(cfg.PrometheusPort, fmt.Sprintf(`count_over_time(up{job="fabric"}[%ds])`, w))
	scrapes := 0.0
	if len(sc) == 1 {
		scrapes = sc[0].Value
	}
	line := fmt.Sprintf("%s: exporter over %.0f s (%.0f scrapes): CPU %.2f%% of one core", name, win.Seconds(), scrapes, 100*(cpu1-cpu0)/win.Seconds())
	if scrapes > 0 {
		line += fmt.Sprintf(", %.1f ms CPU per scrape (its background work, RAS polls and GPU sampling, included)", 1e3*(cpu1-cpu0)/scrapes)
	}
	res.printf("%s, RSS %.1f MiB", line, float64(rss)/(1<<20))
	var parts []string
	for _, q := range []struct{ label, expr string }{
		{"fabric_nccl_ras_query_duration_seconds", "fabric_nccl_ras_query_duration_seconds"},
		{`fabric_scrape_collector_duration_seconds{collector="nccl-ras"}`, `fabric_scrape_collector_duration_seconds{collector="nccl-ras"}`},
	} {
		var mm []string
		for _, f := range []string{"min", "avg", "max"} {
			if v, err := query(cfg.PrometheusPort, fmt.Sprintf("%s_over_time(%s[%ds])", f, q.expr, w)); err == nil && len(v) == 1 {
				mm = append(mm, fmt.Sprintf("%.3f", v[0].Value*1e3))
			}
		}
		if len(mm) == 0 {
			mm = []string{"(none in the window)"}
		}
		parts = append(parts, fmt.Sprintf("%s min/avg/max %s ms", q.label, strings.Join(mm, "/")))
	}
	res.printf("%s: over the same scrapes: %s", name, strings.Join(parts, "; "))
}

// rasClientCost times n queries with the exporter's RAS client: median
// wall time and CPU per query (this process's rusage, which the client
// dominates).
func rasClientCost(addr string, n int) (wall, cpu time.Duration, done int, err error) {
	var walls []float64
	var r0, r1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	for i := 0; i < n; i++ {
		t := time.Now()
		if _, err := ncclras.Query(context.Background(), addr, ncclras.Options{Timeout: 5 * time.Second}); err != nil {
			return 0, 0, 0, err
		}
		walls = append(walls, float64(time.Since(t)))
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	used := time.Duration(r1.Utime.Nano()-r0.Utime.Nano()+r1.Stime.Nano()-r0.Stime.Nano()) / time.Duration(n)
	return time.Duration(median(walls)), used, n, nil
}

// saveRAS keeps RAS's answers as it wrote them (JSON and text STATUS) in
// dir/ras-<what>.json and .txt, with the exchange before the answer.
func saveRAS(addr, dir, what string) {
	for _, f := range []struct{ ext, set string }{{"json", "SET FORMAT json"}, {"txt", ""}} {
		cmds := []string{"CLIENT PROTOCOL " + strconv.Itoa(ncclras.ClientProtocol), "TIMEOUT 5"}
		if f.set != "" {
			cmds = append(cmds, f.set)
		}
		if b, err := rawRAS(addr, cmds, 10*time.Second); err == nil {
			os.WriteFile(filepath.Join(dir, "ras-"+what+"."+f.ext), b, 0o644)
		}
	}
}

// rawRAS sends each command of cmds, reading its one-line answer, then
// STATUS, and returns the answer until EOF (at most 4 MiB).
func rawRAS(addr string, cmds []string, timeout time.Duration) ([]byte, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	br := bufio.NewReader(c)
	for _, cmd := range cmds {
		if _, err := c.Write([]byte(cmd + "\n")); err != nil {
			return nil, err
		}
		if _, err := br.ReadString('\n'); err != nil {
			return nil, fmt.Errorf("%s: %w", cmd, err)
		}
	}
	if _, err := c.Write([]byte("STATUS\n")); err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(br, ncclras.DefaultMaxAnswer))
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// nclLines counts NCCL log lines in the files under dir (a rank's output
// included: without NCCL_DEBUG, NCCL prints none).
func nclLines(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(p, ".log") && strings.Contains(p, "/nccl/") || strings.HasSuffix(p, ".out")) {
			return nil
		}
		b, _ := os.ReadFile(p)
		n += strings.Count(string(b), " NCCL INFO ") + strings.Count(string(b), " NCCL WARN ")
		return nil
	})
	return n
}

func valuesByPid(ss []promapi.Sample) string {
	if len(ss) == 0 {
		return "(none)"
	}
	var out []string
	for _, s := range ss {
		out = append(out, fmt.Sprintf("pid %s: %g", s.Metric["pid"], s.Value))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// nodeSummary is the report's summary of the two-node trials.
func nodeSummary(cfg Config, res *Result) []string {
	var out []string
	if cfg.RASTrials > 0 {
		var v []float64
		for _, d := range res.KillToPage {
			v = append(v, d.Seconds())
		}
		if len(v) > 0 {
			out = append(out, fmt.Sprintf("kill → page (median of %d): %.1f s  [%s]", len(v), median(v), joinFloats(v, " s, ")+" s"))
		} else {
			out = append(out, fmt.Sprintf("kill → page: no page in %d trials", cfg.RASTrials))
		}
	}
	if cfg.NoDebug {
		if res.NodebugPage > 0 {
			out = append(out, fmt.Sprintf("socket fallback without NCCL logs (nodebug): paged, %.1f s after RAS reported the two-node communicator", res.NodebugPage.Seconds()))
		} else {
			out = append(out, "socket fallback without NCCL logs (nodebug): not paged")
		}
	}
	return out
}
