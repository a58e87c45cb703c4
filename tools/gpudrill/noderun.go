// One two-node trial as the child drill runs it inside node 0 (the kill
// and nodebug trials), and the report's summary of them; the pages they
// read are pages.go's, what they measure and keep rasio.go's.

package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/ncclras"
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
