// The two-node trials: two ranks as two nodes (nodes.go), NCCL_DEBUG
// unset, the exporter reading NCCL's RAS service. runNodeTrials (in the
// drill's namespace) makes a pair of namespaces per trial and re-executes
// the drill inside node 0 (--node-trial); that child runs the whole trial
// there: exporter, Prometheus, Alertmanager and webhook on node 0's
// loopback, rank 0 on node 0, rank 1 started inside node 1. Trials:
//
//   - kill: the job runs healthy (nothing may page) until RAS reports both
//     ranks and Prometheus has them (the first trial until --ras-healthy
//     after RAS reported them), then rank 1 gets SIGKILL; time from the kill to the first
//     NCCLRankMissing or NCCLAsyncError notification.
//   - nodebug: the same job is on sockets (no RDMA resource) and writes no
//     NCCL log: NCCLSocketFallback must page from RAS and /proc alone
//     (evidence "kernel"); time from RAS reporting the two-node
//     communicator to the page.

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/ncclras"
)

// rasPort is NCCL's default RAS client port; each rank listens on its
// node's address (NCCL_RAS_ADDR), as a rank of a real node would be asked
// from elsewhere.
const rasPort = "28028"

// nodeTrial is what the child drill runs.
type nodeTrial struct {
	Name    string
	Kind    string        // "kill" or "nodebug"
	Healthy time.Duration // kill: how long the job runs healthy after RAS reported it
	Delay   time.Duration // kill: more wait before the kill (--ras-stagger)
	PeerFD  int           // node 1's namespace, inherited
	Cfg     Config
}

// nodeCheck and nodeResult carry a child's result back (JSON).
type nodeCheck struct {
	Name, Detail string
	OK           bool
}

type nodeResult struct {
	Checks      []nodeCheck
	Lines       []string
	KillToPage  time.Duration
	NodebugPage time.Duration
}

// runNodeTrials runs the kill and nodebug trials, each in a new pair of
// namespaces, and adds their checks, lines and times to res.
func runNodeTrials(cfg Config, res *Result) error {
	var trials []nodeTrial
	for i := 1; i <= cfg.RASTrials; i++ {
		t := nodeTrial{Name: fmt.Sprintf("kill%d", i), Kind: "kill", Delay: time.Duration(i-1) * cfg.RASStagger}
		if i == 1 {
			t.Healthy = cfg.RASHealthy
		}
		trials = append(trials, t)
	}
	if cfg.NoDebug {
		trials = append(trials, nodeTrial{Name: "nodebug", Kind: "nodebug"})
	}
	out := make([]*nodeResult, len(trials))
	errs := make([]error, len(trials))
	var wg sync.WaitGroup
	for i := range trials {
		t := trials[i]
		t.Cfg = cfg
		run := func() { out[i], errs[i] = runNodeChildOf(t) }
		if cfg.RASParallel {
			wg.Add(1)
			go func() { defer wg.Done(); run() }()
		} else {
			run()
		}
	}
	wg.Wait()
	for i, r := range out {
		if errs[i] != nil {
			res.check(trials[i].Name+": two-node trial ran", false, "%v", errs[i])
			continue
		}
		for _, c := range r.Checks {
			res.check(c.Name, c.OK, "%s", c.Detail)
		}
		res.Lines = append(res.Lines, r.Lines...)
		if trials[i].Kind == "kill" && r.KillToPage > 0 {
			res.KillToPage = append(res.KillToPage, r.KillToPage)
		}
		if trials[i].Kind == "nodebug" {
			res.NodebugPage = r.NodebugPage
		}
	}
	return nil
}

// runNodeChildOf makes the namespaces of one trial, runs the child drill
// in node 0 and removes the namespaces, whatever happens.
func runNodeChildOf(t nodeTrial) (*nodeResult, error) {
	dir := filepath.Join(t.Cfg.WorkDir, t.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	pair, err := newNodePair()
	if err != nil {
		return nil, err
	}
	var child *proc
	var mu sync.Mutex
	unregister := atInterrupt(func() {
		mu.Lock()
		defer mu.Unlock()
		child.stop(20 * time.Second) // the child stops what it started
		pair.teardown()
	})
	defer func() {
		unregister()
		mu.Lock()
		defer mu.Unlock()
		child.stop(20 * time.Second)
		pair.teardown()
	}()
	f0, err := pair.file(0)
	if err != nil {
		return nil, err
	}
	defer f0.Close()
	f1, err := pair.file(1)
	if err != nil {
		return nil, err
	}
	defer f1.Close()
	t.PeerFD = 4 // ExtraFiles: node 0 is 3 (entered), node 1 is 4
	spec := filepath.Join(dir, "trial.json")
	b, _ := json.MarshalIndent(t, "", " ")
	if err := os.WriteFile(spec, b, 0o644); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd, err := nsCommand(f0, os.Environ(), self, "--node-trial="+spec)
	if err != nil {
		return nil, err
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, f1)
	mu.Lock()
	child, err = startCmd(t.Name, filepath.Join(dir, "drill.log"), cmd)
	mu.Unlock()
	if err != nil {
		return nil, err
	}
	<-child.done
	var r nodeResult
	b, err = os.ReadFile(filepath.Join(dir, "result.json"))
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil {
		return nil, fmt.Errorf("the trial's drill in node 0 ended (%v) without a result (see %s): %v", child.err, filepath.Join(dir, "drill.log"), err)
	}
	return &r, nil
}

// runNodeChild is the drill re-executed inside node 0.
func runNodeChild(spec string) int {
	var t nodeTrial
	b, err := os.ReadFile(spec)
	if err == nil {
		err = json.Unmarshal(b, &t)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpudrill:", err)
		return 2
	}
	syscall.CloseOnExec(t.PeerFD) // only rank 1's launcher gets it
	if !nodeHasAddr(nodeAddr[0]) {
		fmt.Fprintf(os.Stderr, "gpudrill: --node-trial runs inside node 0 (%s), not here\n", nodeAddr[0])
		return 2
	}
	sig := make(chan os.Signal, 1)
	signalNotify(sig)
	go func() {
		<-sig
		killAll()
		os.Exit(2)
	}()
	res := &Result{}
	err = runNodeTrial(t, res)
	if err != nil {
		res.check(t.Name+": two-node trial ran", false, "%v", err)
	}
	r := nodeResult{Lines: res.Lines, KillToPage: res.firstKill(), NodebugPage: res.NodebugPage}
	for _, c := range res.Checks {
		r.Checks = append(r.Checks, nodeCheck{Name: c.name, OK: c.ok, Detail: c.detail})
	}
	b, _ = json.MarshalIndent(r, "", " ")
	if err := os.WriteFile(filepath.Join(filepath.Dir(spec), "result.json"), b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gpudrill:", err)
		return 2
	}
	return 0
}

func (r *Result) firstKill() time.Duration {
	if len(r.KillToPage) > 0 {
		return r.KillToPage[0]
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
		if k, _, _ := strings.Cut(e, "="); !strings.HasPrefix(k, "NCCL_") && !strings.HasPrefix(k, "TORCH_NCCL_") {
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

// rasReady reports whether st holds the job's communicator complete on two
// nodes: two ranks, both answering with the drill's pids, initialized.
func rasReady(st *ncclras.Status, pids [2]int) (ncclras.Communicator, bool) {
	if st == nil {
		return ncclras.Communicator{}, false
	}
	for _, c := range st.Communicators {
		if c.Size != 2 || c.Nodes != 2 || c.MissingCount != 0 || len(c.Ranks) != 2 {
			continue
		}
		ok := true
		for _, r := range c.Ranks {
			ok = ok && (r.PID == pids[0] || r.PID == pids[1]) && r.InitState == 0 && r.AsyncError == 0
		}
		if ok && c.Ranks[0].PID != c.Ranks[1].PID {
			return c, true
		}
	}
	return ncclras.Communicator{}, false
}

// waitRAS polls RAS until rasReady or timeout; it gives up early when a
// rank exits.
func waitRAS(addr string, pids [2]int, job []*proc, timeout time.Duration) (ncclras.Communicator, time.Time, error) {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		st, err := ncclras.Query(context.Background(), addr, ncclras.Options{Timeout: 5 * time.Second})
		if c, ok := rasReady(st, pids); ok {
			return c, time.Now(), nil
		}
		if err != nil {
			last = err
		} else {
			last = fmt.Errorf("%d communicators, none with both ranks on two nodes", len(st.Communicators))
		}
		for _, p := range job {
			if p.exited() {
				return ncclras.Communicator{}, time.Time{}, fmt.Errorf("%s exited before RAS reported the job (see %s.out)", p.name, p.name)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	return ncclras.Communicator{}, time.Time{}, fmt.Errorf("RAS at %s did not report both ranks on two nodes within %s: %v", addr, timeout, last)
}

func describeComm(c ncclras.Communicator) string {
	var rs []string
	for _, r := range c.Ranks {
		rs = append(rs, fmt.Sprintf("rank %d pid %d on %s", r.Rank, r.PID, r.Host))
	}
	return fmt.Sprintf("communicator %s, %d ranks on %d nodes (%s)", c.Hash, c.Size, c.Nodes, strings.Join(rs, ", "))
}
