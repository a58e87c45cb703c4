// Node 1's agent: the drill re-executed as PID 1 of node 1
// (--node-agent). It starts node 1's exporter (on node 1's address, asking
// node 1's RAS) and says when it answers; then, on request from node 0's
// trial over the socket pair (one JSON object a line each way, every
// request with a deadline), starts rank 1, says whether it still runs,
// kills it with SIGKILL, lists node 1's processes and stops. It stops
// everything it started when asked, on SIGINT/SIGTERM and when node 0's
// end of the socket closes (node 0 gone); as PID 1 of node 1 its exit
// takes whatever is left in node 1 with it.

package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// ctlFD is the descriptor of a node's end of the socket pair.
const ctlFD = 4

type agentReq struct {
	Op   string    `json:"op"`             // start, status, kill, sigstop, sigcont, procs, stop
	Rank *rankSpec `json:"rank,omitempty"` // start
}

type agentResp struct {
	Ready  bool        `json:"ready,omitempty"` // the first message: node 1 is up (its exporter answers)
	Err    string      `json:"err,omitempty"`
	Rank   rankInfo    `json:"rank"`             // start
	Exited bool        `json:"exited,omitempty"` // status: rank 1 has exited
	At     time.Time   `json:"at"`               // kill: when SIGKILL went
	Procs  []procEntry `json:"procs,omitempty"`  // procs: node 1's /proc
	Self   string      `json:"self,omitempty"`   // procs: node 1's PID namespace
}

// ctlConn is the inherited socket of fd as a connection (with deadlines);
// fd itself is closed, so that no child inherits it.
func ctlConn(fd int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "ctl")
	defer f.Close()
	return net.FileConn(f)
}

// runNodeAgent is node 1's PID 1.
func runNodeAgent(spec string) int {
	t, err := readTrial(spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpudrill agent:", err)
		return 2
	}
	conn, err := ctlConn(ctlFD)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpudrill agent:", err)
		return 2
	}
	defer conn.Close()
	a := &agent{t: t, dir: filepath.Join(t.Cfg.WorkDir, t.Name, "node1")}
	sig := make(chan os.Signal, 1)
	signalNotify(sig)
	go func() {
		<-sig
		a.stopAll()
		os.Exit(2)
	}()
	defer a.stopAll()
	enc, dec := json.NewEncoder(conn), json.NewDecoder(conn)
	up := a.startExporter()
	if err := enc.Encode(agentResp{Ready: up == nil, Err: errText(up)}); err != nil || up != nil {
		fmt.Fprintln(os.Stderr, "gpudrill agent: node 1 not up:", up, err)
		return 2
	}
	for {
		var req agentReq
		if err := dec.Decode(&req); err != nil {
			return 0 // node 0 is gone (EOF) or broke the protocol
		}
		resp := a.handle(req)
		if err := enc.Encode(resp); err != nil || req.Op == "stop" {
			return 0
		}
	}
}

type agent struct {
	t        nodeTrial
	dir      string
	mu       sync.Mutex
	exporter *proc
	rank     *rankProc
}

func (a *agent) startExporter() error {
	if !nodeHasAddr(nodeAddr[1]) {
		return fmt.Errorf("the agent runs inside node 1 (%s), not here", nodeAddr[1])
	}
	if err := os.MkdirAll(filepath.Join(a.dir, "nccl"), 0o755); err != nil {
		return err
	}
	cfg := a.t.Cfg
	if cfg.Exporter == "" {
		return nil
	}
	listen := net.JoinHostPort(nodeAddr[1], strconv.Itoa(cfg.ExporterPort))
	a.mu.Lock()
	p, err := startProc("fabric_exporter", filepath.Join(a.dir, "exporter.log"), os.Environ(), cfg.Exporter,
		exporterArgs(cfg, listen, a.dir, "--collector.nccl-ras.address="+net.JoinHostPort(nodeAddr[1], rasPort))...)
	a.exporter = p
	a.mu.Unlock()
	if err != nil {
		return err
	}
	return waitReady("http://"+listen+"/metrics", 60*time.Second, p)
}

func (a *agent) handle(req agentReq) agentResp {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch req.Op {
	case "start":
		if a.rank != nil || req.Rank == nil {
			return agentResp{Err: "start: rank 1 runs already, or no rank given"}
		}
		r, err := startRank(*req.Rank)
		if err != nil {
			return agentResp{Err: err.Error()}
		}
		a.rank = r
		return agentResp{Rank: r.info}
	case "status":
		return agentResp{Exited: a.rank.exited()}
	case "kill":
		if a.rank == nil {
			return agentResp{Err: "kill: no rank started"}
		}
		at := time.Now()
		if err := syscall.Kill(a.rank.info.Host, syscall.SIGKILL); err != nil {
			return agentResp{Err: fmt.Sprintf("kill: pid %d: %v", a.rank.info.Host, err)}
		}
		return agentResp{At: at}
	case "sigstop", "sigcont":
		if a.rank == nil {
			return agentResp{Err: req.Op + ": no rank started"}
		}
		at := time.Now()
		sig := map[string]syscall.Signal{"sigstop": syscall.SIGSTOP, "sigcont": syscall.SIGCONT}[req.Op]
		if err := syscall.Kill(a.rank.info.Host, sig); err != nil {
			return agentResp{Err: fmt.Sprintf("%s: pid %d: %v", req.Op, a.rank.info.Host, err)}
		}
		return agentResp{At: at}
	case "procs":
		return agentResp{Procs: listProcs("/proc"), Self: nsLink("self", "pid")}
	case "stop":
		a.stopLocked()
		return agentResp{}
	}
	return agentResp{Err: fmt.Sprintf("unknown request %q", req.Op)}
}

func (a *agent) stopAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopLocked()
}

func (a *agent) stopLocked() {
	a.rank.stop(5 * time.Second)
	a.exporter.stop(5 * time.Second)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// agentClient is node 0's side of the socket pair.
type agentClient struct {
	mu   sync.Mutex
	conn net.Conn
	enc  *json.Encoder
	dec  *json.Decoder
}

func dialAgent(fd int) (*agentClient, error) {
	c, err := ctlConn(fd)
	if err != nil {
		return nil, err
	}
	return &agentClient{conn: c, enc: json.NewEncoder(c), dec: json.NewDecoder(c)}, nil
}

// ready waits for the agent's first message.
func (a *agentClient) ready(timeout time.Duration) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.conn.SetDeadline(time.Now().Add(timeout))
	var r agentResp
	if err := a.dec.Decode(&r); err != nil {
		return fmt.Errorf("node 1's agent did not say it was up within %s: %w", timeout, err)
	}
	if !r.Ready {
		return fmt.Errorf("node 1's agent: %s", r.Err)
	}
	return nil
}

// call sends req and waits at most timeout for the answer. A timed-out
// exchange leaves the stream unusable: every later call fails.
func (a *agentClient) call(req agentReq, timeout time.Duration) (agentResp, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var r agentResp
	a.conn.SetDeadline(time.Now().Add(timeout))
	if err := a.enc.Encode(req); err != nil {
		return r, fmt.Errorf("node 1's agent, %s: %w", req.Op, err)
	}
	if err := a.dec.Decode(&r); err != nil {
		return r, fmt.Errorf("node 1's agent, %s: %w", req.Op, err)
	}
	if r.Err != "" {
		return r, fmt.Errorf("node 1's agent: %s", r.Err)
	}
	return r, nil
}

func (a *agentClient) close() {
	if a != nil {
		a.conn.Close()
	}
}
