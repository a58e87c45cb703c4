// What makes a node a machine and a rank container-shaped, checked in
// every two-node trial (shapeChecks), and --selftest-shape: the same nodes
// and containers with `sleep` for ranks, no GPU, Python or NCCL, so that
// the plumbing can be tried on any Linux host where the drill may make
// namespaces (root). With the exporter, Prometheus and Alertmanager it
// also starts both nodes' exporters and checks that node 0's Prometheus
// scrapes node 1's over the veth pair.

package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// selftestCmdline selects the selftest's ranks (sleep 3600.0, sleep
// 3600.1) for the exporters' process collector.
const selftestCmdline = `^sleep 3600\.[01]$`

// shapeChecks checks the ranks' shape and the nodes' isolation.
func (n *nodeRun) shapeChecks(agent *agentClient) {
	info := n.job.info
	ok := true
	for _, r := range info {
		switch n.t.Shape {
		case shapeContainer:
			ok = ok && len(r.NSpid) == 2 && r.Own == 1
		default:
			ok = ok && len(r.NSpid) == 1 && r.Own == r.Host
		}
	}
	n.check("the ranks are "+n.t.Shape+"-shaped", ok, "rank 0: %s; rank 1: %s (NSpid as the rank's node's /proc gives it)", info[0], info[1])

	// Each node's /proc: its own processes, its drill as PID 1, nothing
	// in the other node's PID namespaces (the node's or its container's).
	resp, err := agent.call(agentReq{Op: "procs"}, 10*time.Second)
	mine, self := listProcs("/proc"), nsLink("self", "pid")
	foreign0 := inNS(mine, resp.Self, info[1].PidNS)
	foreign1 := inNS(resp.Procs, self, info[0].PidNS)
	pid1 := [2]string{procCmd(mine, "1"), procCmd(resp.Procs, "1")}
	n.check("each node's /proc shows its own processes only", err == nil && self != resp.Self && len(foreign0) == 0 && len(foreign1) == 0 &&
		strings.Contains(pid1[0], "--node-trial=") && strings.Contains(pid1[1], "--node-agent="),
		"node 0 (%s): %d processes, PID 1 %q, %d of node 1's; node 1 (%s): %d processes, PID 1 %q, %d of node 0's%s",
		self, len(mine), pid1[0], len(foreign0), resp.Self, len(resp.Procs), pid1[1], len(foreign1), errSuffix(err))

	// hostNetwork: the rank is in its node's network namespace.
	net0 := nsLink(strconv.Itoa(info[0].Host), "net")
	n.check("rank 0 is on its node's network", net0 != "" && net0 == threadNS("net"), "rank 0's %s, node 0's %s", net0, threadNS("net"))

	if n.t.Shape == shapeContainer && !n.cfg.ContainerRDMA {
		ok, detail := hidden(info[0].Host, rdmaDevDir)
		n.check("RDMA devices hidden in the containers", ok, "%s", detail)
	}
}

// hidden checks that dir, where it exists, is empty in the mount
// namespace of pid (seen through /proc/PID/root).
func hidden(pid int, dir string) (bool, string) {
	outside, err := os.ReadDir(dir)
	if err != nil {
		return true, fmt.Sprintf("%s absent on this machine: nothing to hide", dir)
	}
	inside, err := os.ReadDir(fmt.Sprintf("/proc/%d/root%s", pid, dir))
	return err == nil && len(inside) == 0, fmt.Sprintf("%s: %d entries on the node, %d in the container of pid %d (%v)", dir, len(outside), len(inside), pid, err)
}

// selftest checks what only the selftest's sleep ranks allow: the
// container's own /proc, the exporters of both nodes scraped from node
// 0, and rank 1 killed through the agent.
func (n *nodeRun) selftest(agent *agentClient) {
	info := n.job.info
	if n.t.Shape == shapeContainer {
		ps := listProcs(fmt.Sprintf("/proc/%d/root/proc", info[0].Host))
		n.check("rank 0's container /proc shows the rank alone, as PID 1", len(ps) == 1 && ps[0].PID == "1" && ps[0].Cmd == "sleep 3600.0", "%v", ps)
	}
	if n.st != nil {
		up := waitQuery(n.cfg, `up{job="fabric"} == 1`, 2, 4*parseDur(n.cfg.ScrapeInterval)+20*time.Second)
		n.check("node 0's Prometheus scrapes both nodes' exporters", len(up) == 2, "up == 1: %s", labelsOf(up, "instance"))
		// What each exporter says of its node's rank.
		waitQuery(n.cfg, `fabric_process_info`, 2, 4*parseDur(n.cfg.ScrapeInterval))
		pi, _ := query(n.cfg.PrometheusPort, `fabric_process_info`)
		hn, _ := query(n.cfg.PrometheusPort, `fabric_process_host_pid_namespace`)
		n.res.printf("%s: fabric_process_info %s; fabric_process_host_pid_namespace %s", n.t.Name, labelsOf(pi, "instance", "pid", "comm", "selected_by"), valuesByPid(hn))
	} else {
		n.res.printf("%s: no exporter, Prometheus or Alertmanager: the namespaces alone", n.t.Name)
	}
	resp, err := agent.call(agentReq{Op: "kill"}, 10*time.Second)
	exited := false
	for deadline := time.Now().Add(10 * time.Second); err == nil && !exited && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var st agentResp
		st, err = agent.call(agentReq{Op: "status"}, 10*time.Second)
		exited = st.Exited
	}
	n.check("node 1's agent kills rank 1", err == nil && exited, "SIGKILL at %s to host pid %d; exited %v%s",
		resp.At.UTC().Format("15:04:05.000"), info[1].Host, exited, errSuffix(err))
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return "; " + err.Error()
}
