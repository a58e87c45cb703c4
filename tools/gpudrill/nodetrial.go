// The two-node trials: two ranks as two nodes (nodes.go, nodeset.go),
// each node a machine of its own (network, PID and mount namespaces, its
// own /proc), the ranks container-shaped by default (container.go),
// NCCL_DEBUG unset, an exporter on each node reading its node's RAS.
// runNodeTrials (in the drill's namespaces) starts, per trial, the drill
// re-executed as PID 1 of node 0 (--node-trial: exporter, Prometheus,
// Alertmanager and webhook on node 0, rank 0) and as PID 1 of node 1
// (--node-agent: node 1's exporter, rank 1 on request; agent.go). Kinds:
//
//   - kill: the job runs healthy (nothing may page but the kernel-evidence
//     socket fallback) until RAS reports both ranks, Prometheus has them
//     and the socket fallback paged (the first trial until --ras-healthy
//     after RAS reported them), then rank 1 gets SIGKILL; time from the
//     kill to the first NCCLRankMissing or NCCLAsyncError notification.
//   - nodebug: no NCCL log at all; the socket fallback pages from RAS and
//     /proc alone, and nothing else does.
//   - destroy, nonblocking: rastrials.go; selftest: selftest.go.
//
// In every trial but the selftest, NCCLSocketFallback (evidence kernel)
// must page for rank 0 by its host pid; the time from RAS reporting the
// two-node communicator to that page is each trial's, their median the
// report's.

package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// rasPort is NCCL's default RAS client port; each rank listens on its
// node's address (NCCL_RAS_ADDR), as a rank of a real node would be asked
// from elsewhere.
const rasPort = "28028"

// nodeTrial is what the nodes' drills run (written to trial.json).
type nodeTrial struct {
	Name    string
	Kind    string        // kill, nodebug, destroy, nonblocking, selftest
	Shape   string        // the ranks' shape
	Healthy time.Duration // kill: how long the job runs healthy after RAS reported it; quiet-*: how long it stays quiet
	Delay   time.Duration // kill: more wait before the kill (--ras-stagger); hang-*: before the fault
	// StartDelay: the wait before the ranks start (kill trial i:
	// (i-1)×--ras-stagger, so that RAS reports the parallel trials' jobs,
	// and the socket fallback pages, at different phases of the cycles).
	StartDelay time.Duration
	// Batch: trials of one batch run at once (the kill trials with
	// --ras-parallel, the quiet trials), batches one after another.
	Batch    int
	Parallel bool
	// Barrier: hang trials of one batch fault together, once each has
	// written its name into this directory and BarrierN names are there
	// (their jobs share the GPU: the GPU spins only when every job waits).
	Barrier  string
	BarrierN int
	Cfg      Config
}

// nodeCheck and nodeResult carry node 0's result back (JSON).
type nodeCheck struct {
	Name, Detail string
	OK           bool
}

type nodeResult struct {
	Checks []nodeCheck
	Lines  []string
	Row    trialRow
	// PidNS are the containers' PID namespaces, for the leftover check.
	PidNS []string
}

// trialRow is a two-node trial in the summary table.
type trialRow struct {
	Name, Kind, Shape string
	Ranks             [2]rankInfo
	FallbackPage      time.Duration // RAS → NCCLSocketFallback (kernel) for rank 0; 0: none
	KillPage          time.Duration // kill → first rank-loss page; 0: none
	HangPage          time.Duration // hang-*: fault → first hung-group page; 0: none
	Pass, Fail        int
}

// nodeTrialList is the two-node trials cfg asks for.
func nodeTrialList(cfg Config) []nodeTrial {
	if cfg.SelftestShape {
		return []nodeTrial{{Name: "selftest-container", Kind: "selftest", Shape: shapeContainer}, {Name: "selftest-host", Kind: "selftest", Shape: shapeHost}}
	}
	var out []nodeTrial
	for i := 1; i <= cfg.RASTrials; i++ {
		t := nodeTrial{Name: fmt.Sprintf("kill%d", i), Kind: "kill", Delay: time.Duration(i-1) * cfg.RASStagger,
			StartDelay: time.Duration(i-1) * cfg.RASStagger, Parallel: cfg.RASParallel}
		if i == 1 {
			t.Healthy = cfg.RASHealthy
		}
		out = append(out, t)
	}
	for _, k := range []struct {
		on   bool
		kind string
	}{{cfg.NoDebug, "nodebug"}, {cfg.DestroyTrial, "destroy"}, {cfg.NonblockingTrial, "nonblocking"}} {
		if k.on {
			out = append(out, nodeTrial{Name: k.kind, Kind: k.kind, Parallel: cfg.RASParallel})
		}
	}
	// Hung-group trials one after another, interleaved by kind, each
	// fault i×(scrape interval)/(trials+1) after the job served.
	scrape := parseDur(cfg.ScrapeInterval)
	if scrape <= 0 {
		scrape = 15 * time.Second
	}
	// The quiet trials beside the kill trials when those run at once
	// (they end within the kill batch's time), else after the hangs.
	var quiet []nodeTrial
	if cfg.QuietFor > 0 {
		for _, k := range []string{"quiet-graph", "quiet-idle"} {
			quiet = append(quiet, nodeTrial{Name: k, Kind: k, Healthy: cfg.QuietFor, Parallel: true})
		}
		if cfg.RASParallel && len(out) > 0 {
			out, quiet = append(out, quiet...), nil
		}
	}
	batch := 1
	for i := 1; i <= cfg.HangTrials; i++ {
		for _, k := range hangKinds {
			t := nodeTrial{Name: fmt.Sprintf("%s%d", k, i), Kind: k, Batch: batch,
				Delay: time.Duration(i) * scrape / time.Duration(cfg.HangTrials+1)}
			if cfg.HangTogether {
				t.Parallel, t.Barrier, t.BarrierN = true, filepath.Join(cfg.WorkDir, fmt.Sprintf("barrier%d", i)), len(hangKinds)
			} else {
				batch++
			}
			out = append(out, t)
		}
		if cfg.HangTogether {
			batch++
		}
	}
	for _, t := range quiet {
		t.Batch = batch
		out = append(out, t)
	}
	for i := range out {
		out[i].Shape = cfg.Shape
	}
	return out
}

// runNodeTrials runs the two-node trials, each on a new pair of nodes, at
// once with --ras-parallel, and adds their checks, lines and times to res.
func runNodeTrials(cfg Config, res *Result) error {
	if cfg.Shape == "" {
		cfg.Shape = shapeContainer
	}
	if cfg.SelftestShape && cfg.RankCmdline == "" {
		cfg.RankCmdline = selftestCmdline
	}
	trials := nodeTrialList(cfg)
	out := make([]*nodeResult, len(trials))
	errs := make([]error, len(trials))
	// Batch by batch (they are in batch order); within one, the parallel
	// trials at once.
	for b := 0; b < len(trials); {
		var wg sync.WaitGroup
		e := b
		for ; e < len(trials) && trials[e].Batch == trials[b].Batch; e++ {
			t := trials[e]
			t.Cfg = cfg
			i := e
			run := func() { out[i], errs[i] = runNodesOf(t) }
			if t.Parallel {
				wg.Add(1)
				go func() { defer wg.Done(); run() }()
			} else {
				run()
			}
		}
		wg.Wait()
		b = e
	}
	for i, r := range out {
		if errs[i] != nil {
			res.check(trials[i].Name+": two-node trial ran", false, "%v", errs[i])
			res.Rows = append(res.Rows, trialRow{Name: trials[i].Name, Kind: trials[i].Kind, Shape: trials[i].Shape, Fail: 1})
			continue
		}
		for _, c := range r.Checks {
			res.check(c.Name, c.OK, "%s", c.Detail)
		}
		res.Lines = append(res.Lines, r.Lines...)
		if r.Row.KillPage > 0 {
			res.KillToPage = append(res.KillToPage, r.Row.KillPage)
		}
		if r.Row.FallbackPage > 0 {
			res.FallbackPage = append(res.FallbackPage, r.Row.FallbackPage)
		}
		if r.Row.HangPage > 0 {
			if res.HangToPage == nil {
				res.HangToPage = map[string][]time.Duration{}
			}
			res.HangToPage[r.Row.Kind] = append(res.HangToPage[r.Row.Kind], r.Row.HangPage)
		}
		res.Rows = append(res.Rows, r.Row)
	}
	return nil
}

// runNodesOf makes the nodes of one trial, waits for node 0's drill to
// end, stops both and checks that nothing is left in their namespaces,
// whatever happens.
func runNodesOf(t nodeTrial) (*nodeResult, error) {
	dir := filepath.Join(t.Cfg.WorkDir, t.Name)
	if err := os.MkdirAll(filepath.Join(dir, "node1"), 0o755); err != nil {
		return nil, err
	}
	spec := filepath.Join(dir, "trial.json")
	b, _ := json.MarshalIndent(t, "", " ")
	if err := os.WriteFile(spec, b, 0o644); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	nodes, err := startNodes(dir, [2]string{"drill.log", "agent.log"}, [2][]string{{self, "--node-trial=" + spec}, {self, "--node-agent=" + spec}})
	if err != nil {
		return nil, err
	}
	unregister := atInterrupt(func() { nodes.stop(20 * time.Second) })
	defer unregister()
	<-nodes.procs[0].done
	nodes.stop(20 * time.Second)
	var r nodeResult
	b, err = os.ReadFile(filepath.Join(dir, "result.json"))
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil {
		return nil, fmt.Errorf("the trial's drill in node 0 ended (%v) without a result (see %s): %v", nodes.procs[0].err, filepath.Join(dir, "drill.log"), err)
	}
	nss := nodes.namespaces(r.PidNS...)
	left := leftovers(nss, 5*time.Second)
	c := nodeCheck{Name: t.Name + ": nothing left in the nodes' namespaces", OK: len(left) == 0 && len(nss) >= 2,
		Detail: fmt.Sprintf("%d PID namespaces (%s): %d processes left %v", len(nss), strings.Join(nss, " "), len(left), left)}
	r.Checks = append(r.Checks, c)
	if c.OK {
		r.Row.Pass++
	} else {
		r.Row.Fail++
	}
	return &r, nil
}

func readTrial(spec string) (nodeTrial, error) {
	var t nodeTrial
	b, err := os.ReadFile(spec)
	if err == nil {
		err = json.Unmarshal(b, &t)
	}
	return t, err
}

// nodeMain runs the drill's internal modes, the drill re-executed as a
// node's PID 1; ok is false when args name none.
func nodeMain(args []string) (code int, ok bool) {
	for _, a := range args {
		if spec, ok := strings.CutPrefix(a, "--node-trial="); ok {
			return runNodeChild(spec), true
		}
		if spec, ok := strings.CutPrefix(a, "--node-agent="); ok {
			return runNodeAgent(spec), true
		}
	}
	return 0, false
}

// runNodeChild is node 0's PID 1: it runs the trial and writes
// result.json next to the spec.
func runNodeChild(spec string) int {
	t, err := readTrial(spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpudrill:", err)
		return 2
	}
	agent, err := dialAgent(ctlFD)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpudrill:", err)
		return 2
	}
	defer agent.close()
	sig := make(chan os.Signal, 1)
	signalNotify(sig)
	go func() {
		<-sig
		killAll()
		os.Exit(2)
	}()
	res := &Result{}
	row := trialRow{Name: t.Name, Kind: t.Kind, Shape: t.Shape}
	var pidNS []string
	if !nodeHasAddr(nodeAddr[0]) {
		err = fmt.Errorf("--node-trial runs inside node 0 (%s), not here", nodeAddr[0])
	} else {
		pidNS, err = runNodeTrial(t, agent, res, &row)
	}
	if err != nil {
		res.check(t.Name+": two-node trial ran", false, "%v", err)
	}
	agent.call(agentReq{Op: "stop"}, 20*time.Second)
	r := nodeResult{Lines: res.Lines, Row: row, PidNS: pidNS}
	if len(res.KillToPage) > 0 {
		r.Row.KillPage = res.KillToPage[0]
	}
	for _, c := range res.Checks {
		r.Checks = append(r.Checks, nodeCheck{Name: c.name, OK: c.ok, Detail: c.detail})
		if c.ok {
			r.Row.Pass++
		} else {
			r.Row.Fail++
		}
	}
	b, _ := json.MarshalIndent(r, "", " ")
	if err := os.WriteFile(filepath.Join(filepath.Dir(spec), "result.json"), b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gpudrill:", err)
		return 2
	}
	return 0
}

// nodeEnv is a rank's environment: two nodes, NET/Socket over the pair,
// no NCCL log at all, RAS on the node's address, and the survivor kept
// alive after a peer dies (it stands for the other nodes of a real job,
// whose RAS keeps answering; with two ranks PyTorch's watchdog would
// otherwise end the last process that can).
func nodeEnv(cfg Config, r int) []string {
	var env []string
	for _, e := range os.Environ() {
		if k, _, _ := strings.Cut(e, "="); !strings.HasPrefix(k, "NCCL_") && !strings.HasPrefix(k, "TORCH_NCCL_") && k != nsEnv {
			env = append(env, e)
		}
	}
	return append(env,
		"RANK="+strconv.Itoa(r), "WORLD_SIZE=2", "MASTER_ADDR="+nodeAddr[0], "MASTER_PORT="+strconv.Itoa(cfg.TorchPort),
		"DRILL_GPU="+strconv.Itoa(cfg.GPU), "PYTHONUNBUFFERED=1", "CUDA_CACHE_DISABLE=1",
		"NCCL_HOSTID=drill-node-"+strconv.Itoa(r), "NCCL_SOCKET_IFNAME=veth", "NCCL_IB_DISABLE=1",
		"NCCL_RAS_ADDR="+net.JoinHostPort(nodeAddr[r], rasPort),
		"NCCL_NVLS_ENABLE=0", "TORCH_SYMM_MEM_DISABLE_MULTICAST=1", "NVSHMEM_DISABLE_NVLS=1",
		"TORCH_NCCL_ASYNC_ERROR_HANDLING=0", "TORCH_NCCL_ENABLE_MONITORING=0")
}

// nodeSummary is the report's summary of the two-node trials: the medians
// and a table.
func nodeSummary(cfg Config, res *Result) []string {
	if len(res.Rows) == 0 {
		return nil
	}
	out := []string{"summary of the two-node trials:"}
	secs := func(ds []time.Duration) []float64 {
		var v []float64
		for _, d := range ds {
			v = append(v, d.Seconds())
		}
		return v
	}
	// within says whether p95 of ds meets target (issue 39: kill and
	// fallback 30 s over at least 6 phase-spread trials, a hung group
	// 60 s over 3).
	within := func(ds []time.Duration, target float64) string {
		if percentile(secs(ds), 95) <= target {
			return fmt.Sprintf("within the %.0f s p95 target", target)
		}
		return fmt.Sprintf("OVER the %.0f s p95 target", target)
	}
	if cfg.RASTrials > 0 {
		if ds := res.KillToPage; len(ds) > 0 {
			out = append(out, fmt.Sprintf("  kill → page: %s, %s", spread(ds), within(ds, 30)))
		} else {
			out = append(out, fmt.Sprintf("  kill → page: no page in %d trials", cfg.RASTrials))
		}
	}
	if !cfg.SelftestShape {
		n := 0
		for _, r := range res.Rows {
			n += btoi(r.Kind != "selftest" && !isHang(r.Kind)) // the hang and quiet trials do not time the fallback
		}
		for _, k := range hangKinds {
			if cfg.HangTrials == 0 {
				break
			}
			if ds := res.HangToPage[k]; len(ds) > 0 {
				out = append(out, fmt.Sprintf("  %s: fault → hung-group page naming rank 1: %s, %s", k, spread(ds), within(ds, 60)))
			} else {
				out = append(out, fmt.Sprintf("  %s: fault → hung-group page: no page in %d trials", k, cfg.HangTrials))
			}
		}
		if ds := res.FallbackPage; n == 0 {
		} else if len(ds) > 0 {
			out = append(out, fmt.Sprintf("  socket fallback without NCCL logs, RAS → NCCLSocketFallback (kernel) for rank 0's host pid (%d of %d trials paged): %s, %s",
				len(ds), n, spread(ds), within(ds, 30)))
		} else {
			out = append(out, fmt.Sprintf("  socket fallback without NCCL logs: not paged in %d trials", n))
		}
	}
	out = append(out, fmt.Sprintf("  %-20s %-9s %-18s %-18s %-14s %-10s %-10s %s", "trial", "shape", "rank 0 host/own", "rank 1 host/own", "RAS→fallback", "kill→page", "fault→page", "checks"))
	for _, r := range res.Rows {
		st := "PASS"
		if r.Fail > 0 {
			st = "FAIL"
		}
		out = append(out, fmt.Sprintf("  %-20s %-9s %-18s %-18s %-14s %-10s %-10s %d/%d %s", r.Name, r.Shape, pidPair(r.Ranks[0]), pidPair(r.Ranks[1]),
			orDash(r.FallbackPage), orDash(r.KillPage), orDash(r.HangPage), r.Pass, r.Pass+r.Fail, st))
	}
	return out
}

func pidPair(r rankInfo) string {
	if r.Host == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d", r.Host, r.Own)
}

func orDash(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
