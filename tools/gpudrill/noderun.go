// One two-node trial as node 0's drill runs it: node 0's stack (its
// Prometheus scrapes node 1's exporter too), the two ranks (rank 1
// through node 1's agent), the checks of the nodes' shape, the wait for
// RAS and the exporters, the socket-fallback page every trial must see,
// and the kill and nodebug trials.

package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/ncclras"
)

func signalNotify(c chan os.Signal) { signal.Notify(c, os.Interrupt, syscall.SIGTERM) }

// nodeRun is a two-node trial under way on node 0.
type nodeRun struct {
	t     nodeTrial
	cfg   Config
	sh    shipped
	res   *Result
	row   *trialRow
	dir   string
	st    *stack // nil: no stack (a selftest without the binaries)
	job   *nodeJob
	ras   string // node 0's RAS address
	comms []ncclras.Communicator
	// start: the ranks started; ready: RAS reported the job; seen: both
	// exporters had it.
	start, ready, seen time.Time
	cpu0               float64
}

func (n *nodeRun) check(name string, ok bool, format string, a ...any) {
	n.res.check(n.t.Name+": "+name, ok, format, a...)
}

// runNodeTrial runs trial t on node 0; row gets the ranks and times. It
// returns the containers' PID namespaces.
func runNodeTrial(t nodeTrial, agent *agentClient, res *Result, row *trialRow) ([]string, error) {
	cfg := t.Cfg
	n := &nodeRun{t: t, cfg: cfg, res: res, row: row, dir: filepath.Join(cfg.WorkDir, t.Name), ras: net.JoinHostPort(nodeAddr[0], rasPort)}
	var err error
	if n.sh, err = loadShipped(cfg.Repo); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(n.dir, "nccl"), 0o755); err != nil {
		return nil, err
	}
	if err := portsFree(cfg.ExporterPort, cfg.PrometheusPort, cfg.AlertmanagerPort, cfg.WebhookPort, cfg.TorchPort); err != nil {
		return nil, err
	}
	if err := agent.ready(90 * time.Second); err != nil {
		return nil, err
	}
	node1 := net.JoinHostPort(nodeAddr[1], strconv.Itoa(cfg.ExporterPort))
	if cfg.Exporter != "" && cfg.Prometheus != "" && cfg.Alertmanager != "" {
		n.st, err = startStack(cfg, n.sh, n.dir, stackOpts{instance: nodeName(0), more: []promTarget{{node1, nodeName(1)}},
			exporterArgs: []string{"--collector.nccl-ras.address=" + n.ras}})
		defer n.st.stop()
		if err != nil {
			return nil, err
		}
		defer func() {
			writeNotifications(n.st.hook, filepath.Join(n.dir, "webhook.jsonl"))
			saveScrape(exporterURL(cfg), filepath.Join(n.dir, "metrics.prom"))
			saveScrape("http://"+node1+"/metrics", filepath.Join(n.dir, "node1", "metrics.prom"))
		}()
	}
	argv, env, err := n.rankCommands()
	if err != nil {
		return nil, err
	}
	var poll *fastPoll
	if t.Kind == "nonblocking" {
		// From the start: NCCL's nonblocking init shows ncclInProgress.
		poll = startFastPoll(n.ras, n.dir, 50*time.Millisecond)
		defer poll.stop()
	}
	time.Sleep(t.StartDelay)
	n.start = time.Now()
	n.job, err = startNodeJob(t, n.dir, agent, argv, env)
	defer n.job.stop()
	row.Ranks = n.job.info
	if err != nil {
		return n.job.pidNS(), err
	}
	res.printf("%s: %s-shaped ranks: rank 0 %s; rank 1 %s", t.Name, t.Shape, n.job.info[0], n.job.info[1])
	n.shapeChecks(agent)
	if t.Kind == "selftest" {
		n.selftest(agent)
		return n.job.pidNS(), nil
	}
	if !n.up() {
		return n.job.pidNS(), nil
	}
	switch t.Kind {
	case "kill":
		n.kill()
	case "nodebug":
		n.nodebug()
	case "destroy":
		n.destroy()
	case "nonblocking":
		n.nonblocking(poll)
	case "hang-eager", "hang-graph", "hang-sigstop":
		n.hang()
	case "quiet-graph", "quiet-idle":
		n.quiet()
	default:
		return n.job.pidNS(), fmt.Errorf("unknown two-node trial %q", t.Kind)
	}
	return n.job.pidNS(), nil
}

// rankCommands are rank r's command and environment for this trial.
func (n *nodeRun) rankCommands() (argv, env func(r int) []string, err error) {
	if n.t.Kind == "selftest" {
		// A sleep each; distinct arguments tell the ranks apart.
		return func(r int) []string { return []string{"sleep", fmt.Sprintf("3600.%d", r)} },
			func(int) []string { return withoutEnv(os.Environ(), nsEnv) }, nil
	}
	script := filepath.Join(n.dir, "allreduce.py")
	if err := os.WriteFile(script, allreduceScript, 0o644); err != nil {
		return nil, nil, err
	}
	// 16 MiB and pauses between batches: parallel trials share the
	// machine's cores (12 ranks for six trials), and what RAS says does
	// not depend on the size.
	args := []string{n.cfg.Python, script, "--stop-file", filepath.Join(n.dir, "stop"),
		"--seconds", strconv.Itoa(int((n.t.Healthy + 10*time.Minute).Seconds())), "--mib", "16"}
	switch {
	case isHang(n.t.Kind):
		// The decode step, no pause (one job on the GPU at a time, two
		// in the quiet trials).
		args = append(args, n.hangArgs()...)
	case n.t.Kind == "nonblocking":
		// No pause: as many operations in flight as the job makes.
	case n.t.Kind == "destroy":
		args = append(args, "--pause", "0.1", "--destroy-file", filepath.Join(n.dir, "destroy"))
	default:
		args = append(args, "--pause", "0.1")
	}
	return func(int) []string { return args }, func(r int) []string {
		e := nodeEnv(n.cfg, r)
		if n.t.Kind == "nonblocking" {
			e = append(e, "TORCH_NCCL_USE_COMM_NONBLOCKING=1")
		}
		return e
	}, nil
}

// nodeJob is the two ranks of a two-node trial.
type nodeJob struct {
	r0    *rankProc
	agent *agentClient
	info  [2]rankInfo
}

// startNodeJob starts rank 0 here and rank 1 through node 1's agent.
func startNodeJob(t nodeTrial, dir string, agent *agentClient, argv, env func(int) []string) (*nodeJob, error) {
	j := &nodeJob{agent: agent}
	spec := func(r int) rankSpec {
		return rankSpec{Name: fmt.Sprintf("rank%d", r), Out: filepath.Join(dir, fmt.Sprintf("rank%d.out", r)),
			Shape: t.Shape, Hide: rankHide(t.Cfg), Env: env(r), Argv: argv(r)}
	}
	var err error
	if j.r0, err = startRank(spec(0)); err != nil {
		return j, err
	}
	j.info[0] = j.r0.info
	s1 := spec(1)
	resp, err := agent.call(agentReq{Op: "start", Rank: &s1}, 30*time.Second)
	j.info[1] = resp.Rank
	return j, err
}

// stop stops rank 0 (node 1's agent stops rank 1 with node 1).
func (j *nodeJob) stop() { j.r0.stop(5 * time.Second) }

func (j *nodeJob) pidNS() []string {
	return []string{j.info[0].PidNS, j.info[1].PidNS}
}

// alive says which rank has exited, if one has.
func (j *nodeJob) alive() error {
	if j.r0.exited() {
		return fmt.Errorf("rank0 exited (see rank0.out)")
	}
	r, err := j.agent.call(agentReq{Op: "status"}, 10*time.Second)
	if err != nil {
		return err
	}
	if r.Exited {
		return fmt.Errorf("rank1 exited (see rank1.out)")
	}
	return nil
}

// up waits until RAS reports the job (two communicators in the destroy
// trial) and both nodes' exporters report it on two nodes.
func (n *nodeRun) up() bool {
	want := [2]rasRank{{nodeAddr[0], n.job.info[0].Own}, {nodeAddr[1], n.job.info[1].Own}}
	comms := 1
	if n.t.Kind == "destroy" {
		comms = 2
	}
	cs, ready, err := waitRAS(n.ras, want, comms, n.t.Kind == "nonblocking", n.job.alive, 150*time.Second)
	n.check("RAS reports both ranks on two nodes", err == nil, "%s", orErr(err, func() string {
		var d []string
		for _, c := range cs {
			d = append(d, describeComm(c))
		}
		return fmt.Sprintf("%s, %.1f s after the ranks started", strings.Join(d, "; "), ready.Sub(n.start).Seconds())
	}))
	if err != nil {
		return false
	}
	n.comms, n.ready = cs, ready
	seen := waitQuery(n.cfg, fmt.Sprintf(`fabric_nccl_ras_communicator_nodes{comm=%q} == 2`, cs[0].Hash), 2, 4*parseDur(n.cfg.ScrapeInterval)+20*time.Second)
	n.seen = time.Now()
	n.check("each node's exporter reports the communicator on 2 nodes", len(seen) == 2 && seen[0].Metric["instance"] != seen[1].Metric["instance"],
		"fabric_nccl_ras_communicator_nodes{comm=%q} == 2: %s, %.1f s after RAS", cs[0].Hash, labelsOf(seen, "instance"), n.seen.Sub(ready).Seconds())
	n.cpu0, _, _, _ = procStat(n.st.exporter.cmd.Process.Pid)
	return true
}

// fallback waits, until --page-timeout after RAS reported the job, for
// node 0's exporter to page NCCLSocketFallback, and checks that it names
// rank 0 by its host pid, from the kernel's evidence, with a cause.
func (n *nodeRun) fallback() {
	onNode := func(i int) func(map[string]string) bool {
		return func(l map[string]string) bool { return l["instance"] == nodeName(i) }
	}
	names := []string{"NCCLSocketFallback"}
	got := waitPages(n.st.hook, names, onNode(0), n.start, n.ready.Add(n.cfg.PageTimeout).Sub(n.start), 0)
	p, paged := got[names[0]]
	h0 := n.job.info[0].Host
	detail := fmt.Sprintf("no NCCLSocketFallback from %s within %s of RAS reporting the job", nodeName(0), n.cfg.PageTimeout)
	if paged {
		detail = fmt.Sprintf("%.1f s after RAS reported the two-node communicator: receiver %s, severity %s, evidence %q, cause %q, pid %s (rank 0: host pid %d, RAS's pid %d); summary %q",
			p.at.Sub(n.ready).Seconds(), p.receiver, p.labels["severity"], p.labels["evidence"], p.labels["cause"], p.labels["pid"], h0, n.job.info[0].Own, p.annotations["summary"])
	}
	if o, ok := firstPages(n.st.hook.all(), names, onNode(1), n.start)[names[0]]; ok {
		detail += fmt.Sprintf("; node 1's exporter paged it for pid %s (rank 1: host pid %d)", o.labels["pid"], n.job.info[1].Host)
	}
	ok := paged && p.receiver == "pager" && p.labels["severity"] == "page" && p.labels["evidence"] == "kernel" &&
		p.labels["pid"] == strconv.Itoa(h0) && p.labels["cause"] != ""
	n.check("NCCLSocketFallback (kernel evidence) pages for rank 0's host pid", ok, "%s", detail)
	if ok {
		n.row.FallbackPage = max(p.at.Sub(n.ready), time.Millisecond)
	}
}

func orErr(err error, ok func() string) string {
	if err != nil {
		return err.Error()
	}
	return ok()
}

// rankLoss are the alerts a killed rank must raise.
var rankLoss = []string{"NCCLRankMissing", "NCCLAsyncError"}

func (n *nodeRun) kill() {
	saveRAS(n.ras, n.dir, "healthy")
	if n.t.Healthy > 0 {
		if wall, cpu, k, err := rasClientCost(n.ras, 20); err == nil {
			n.res.printf("%s: RAS query by the exporter's client (internal/ncclras, JSON STATUS of the 2-rank job), %d queries: wall median %.2f ms, CPU %.2f ms per query", n.t.Name, k, ms(wall), ms(cpu))
		}
		// Healthy for t.Healthy from RAS reporting the whole job, and at
		// least until Prometheus had it and the socket fallback paged.
		time.Sleep(time.Until(n.ready.Add(n.t.Healthy)))
	}
	n.fallback()
	time.Sleep(n.t.Delay)
	exporterCost(n.cfg, n.res, n.t.Name, n.st, n.cpu0, n.seen)
	unexpected, expected := pagesBefore(n.st.hook.all(), time.Now())
	resp, err := n.job.agent.call(agentReq{Op: "kill"}, 10*time.Second)
	killAt := resp.At
	n.check("nothing pages on the healthy job", len(unexpected) == 0, "%.0f s from RAS reporting both ranks to the kill: %d pages%s%s",
		time.Since(n.ready).Seconds(), len(unexpected), listNotes(unexpected), expectedNote(expected))
	if err != nil {
		n.check("SIGKILL rank 1", false, "host pid %d: %v", n.job.info[1].Host, err)
		return
	}
	comm := n.comms[0]
	ofComm := func(l map[string]string) bool { return l["comm"] == comm.Hash }
	got := waitPages(n.st.hook, rankLoss, ofComm, killAt, n.cfg.PageTimeout, time.Minute)
	first, ok := earliest(got)
	var parts []string
	for _, a := range rankLoss {
		if p, ok := got[a]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f s after the kill (receiver %s, severity %s, instance %s, rank %s, pid %s)", a, p.at.Sub(killAt).Seconds(), p.receiver, p.labels["severity"], p.labels["instance"], p.labels["rank"], p.labels["pid"]))
		} else {
			parts = append(parts, a+" not within the wait")
		}
	}
	n.check("the killed rank paged", ok && first.receiver == "pager" && first.labels["severity"] == "page",
		"SIGKILL of rank 1 (%s) at %s; %s", n.job.info[1], killAt.UTC().Format("15:04:05.0"), strings.Join(parts, "; "))
	if ok {
		n.res.KillToPage = append(n.res.KillToPage, first.at.Sub(killAt))
	}
	for _, w := range []struct {
		alert, who string
		rank       int
	}{{"NCCLRankMissing", "the killed rank", 1}, {"NCCLAsyncError", "the survivor", 0}} {
		p, ok := got[w.alert]
		info := n.job.info[w.rank]
		n.check(w.alert+" names "+w.who, ok && p.labels["pid"] == strconv.Itoa(info.Own) && p.labels["rank"] == strconv.Itoa(w.rank),
			"rank %q pid %q, want rank %d and RAS's pid %d", p.labels["rank"], p.labels["pid"], w.rank, info.Own)
		n.check(w.alert+" gives "+w.who+"'s host pid", ok && hasHostPid(p.annotations["description"], info.Host),
			"want %q in the description", fmt.Sprintf("host pid %d", info.Host))
		if ok {
			n.res.printf("%s: %s said: summary %q; description %q", n.t.Name, w.alert, p.annotations["summary"], p.annotations["description"])
		}
	}
	saveRAS(n.ras, n.dir, "killed")
	if s, err := ncclras.Query(context.Background(), n.ras, ncclras.Options{Timeout: 5 * time.Second}); err == nil {
		for _, c := range s.Communicators {
			if c.Hash == comm.Hash {
				n.res.printf("%s: RAS %.0f s after the kill: %d of %d ranks missing, INCOMPLETE %v, ERROR %v", n.t.Name, time.Since(killAt).Seconds(), c.MissingCount, c.Size, c.Incomplete, c.Error)
			}
		}
	}
}

// hasHostPid reports whether an annotation gives pid as "host pid N" (or "Host pid N", a description's first words).
func hasHostPid(text string, pid int) bool {
	return regexp.MustCompile(`(?i)\bhost pid ` + strconv.Itoa(pid) + `\b`).MatchString(text)
}

func (n *nodeRun) nodebug() {
	n.fallback()
	unexpected, _ := pagesBefore(n.st.hook.all(), time.Now())
	n.check("nothing else pages", len(unexpected) == 0, "%d other pages%s", len(unexpected), listNotes(unexpected))
	logs := nclLines(n.dir)
	n.check("no NCCL log", logs == 0, "%d NCCL lines in the trial's directory (NCCL_DEBUG unset, no NCCL_DEBUG_FILE)", logs)
	fds, _ := query(n.cfg.PrometheusPort, "fabric_process_rdma_verbs_fds")
	hostNS, _ := query(n.cfg.PrometheusPort, "fabric_process_host_pid_namespace")
	n.res.printf("%s: fabric_process_rdma_verbs_fds %s; fabric_process_host_pid_namespace %s", n.t.Name, valuesByPid(fds), valuesByPid(hostNS))
	exporterCost(n.cfg, n.res, n.t.Name, n.st, n.cpu0, n.seen)
}
