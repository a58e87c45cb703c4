package collector

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/proc"
	"github.com/fabric-exporter/fabric_exporter/internal/procwatch"
)

// The process collector's families, and a process's series bound once and
// kept while the labels stay the same (PID, start time, comm, selection).

type processFamilies struct {
	selected, candidates, qpAvail                                                                        *exposition.Series
	qpListed                                                                                             *exposition.Family
	info, cpu, rss, ctxSw, majflt, state, numaMem, allowed, memAllowed, nccl, visible, reqFam, verbsOpen *exposition.Family
	container, causeFam, errors, verbsFDs, qps, hostNS, namespace, qpOwners                              *exposition.Family
}

func newProcessFamilies(r *exposition.Registry) processFamilies {
	g, ctr := prometheus.GaugeValue, prometheus.CounterValue
	return processFamilies{
		selected:   r.NewFamily("fabric_process_selected", "Serving processes reported by the process collector in this scrape (at most --collector.process.max).", g).With(),
		candidates: r.NewFamily("fabric_process_candidates", "Processes that matched --collector.process.cmdline or run on a GPU, before the --collector.process.max cap.", g).With(),
		info: r.NewFamily("fabric_process_info", "A reported process and why it was selected (cmdline, gpu or both); comm is its name (/proc/PID/comm).",
			g, "pid", "comm", "selected_by"),
		cpu:    r.NewFamily("fabric_process_cpu_seconds_total", "CPU time of the process by mode (user, system), from /proc/PID/stat.", ctr, "pid", "comm", "mode"),
		rss:    r.NewFamily("fabric_process_resident_memory_bytes", "Resident memory of the process (VmRSS).", g, "pid", "comm"),
		ctxSw:  r.NewFamily("fabric_process_context_switches_total", "Context switches of the process's main thread by kind (voluntary, nonvoluntary).", ctr, "pid", "comm", "kind"),
		state:  r.NewFamily("fabric_process_state_info", "The scheduler state of the process's main thread at the last read of /proc/PID/stat: running (R), sleeping (S), disk_sleep (D: uninterruptible, in the kernel), stopped (T: SIGSTOP, a stopped job), tracing_stop (t: a debugger), zombie (Z), dead (X), idle (I), other. A stopped rank launches nothing and answers nothing, RAS included.", g, "pid", "comm", "state"),
		majflt: r.NewFamily("fabric_process_major_page_faults_total", "Major page faults of the process (page reads from disk).", ctr, "pid", "comm"),
		numaMem: r.NewFamily("fabric_process_numa_memory_bytes",
			"Memory of the process on each NUMA node: /proc/PID/numa_maps pages times each mapping's kernelpagesize_kB, summed like numastat -p (refreshed at most every --collector.process.numa-maps-interval).",
			g, "pid", "comm", "numa_node"),
		allowed: r.NewFamily("fabric_process_allowed_numa_nodes_info",
			"NUMA nodes whose CPUs the process may run on (Cpus_allowed_list against node*/cpulist), comma-separated.", g, "pid", "comm", "nodes"),
		memAllowed: r.NewFamily("fabric_process_allowed_memory_numa_nodes_info",
			"NUMA nodes the process may allocate memory from (Mems_allowed_list, its cpuset).", g, "pid", "comm", "nodes"),
		nccl: r.NewFamily("fabric_process_nccl_env_info",
			"An NCCL variable of the process's environment as it was at exec (/proc/PID/environ). Only an allow-list of NCCL variables is read; nothing else of the environment is exported or logged.",
			g, "pid", "comm", "name", "value"),
		container: r.NewFamily("fabric_process_container_info",
			"The container of the process, from /proc/PID/cgroup (re-read every --collector.process.numa-maps-interval): runtime (docker, containerd, cri-o, podman; empty when the cgroup path does not say), the full 64-hex container_id and the Kubernetes pod_uid (empty outside Kubernetes); container_name is the Docker Engine API's name of a docker or podman container with --collector.process.docker-host, empty without it or until known (an empty label is no label in Prometheus). Absent for a process outside any recognised container.",
			g, "pid", "comm", "runtime", "container_id", "pod_uid", "container_name"),
		visible: r.NewFamily("fabric_process_rdma_device_visible",
			"1 if the verbs node of a rail's RDMA device (node=uverbsN) or rdma_cm exists under /dev/infiniband in the process's root (mount namespace), else 0. Only for rail devices the host has now, with a verbs node: absent for a device gone from the host.",
			g, "pid", "comm", "device", "node"),
		reqFam: r.NewFamily("fabric_process_rdma_device_required",
			"A rail RDMA device (present on the host) that the process needs, judged from its environment at exec, reason the first that applies: nccl_ib_hca (NCCL_IB_HCA selects the device; when set, no other device is needed), nccl_net_ib (NCCL_NET=IB), multi_node (WORLD_SIZE > LOCAL_WORLD_SIZE or OMPI_COMM_WORLD_SIZE > OMPI_COMM_WORLD_LOCAL_SIZE: the job spans nodes). Absent with NCCL_IB_DISABLE non-zero or NCCL_NET=Socket (no RDMA asked for), when nothing applies, or while the environment cannot be read.",
			g, "pid", "comm", "device", "reason"),
		verbsOpen: r.NewFamily("fabric_process_rdma_verbs_open",
			"Open file descriptors of the process on the verbs node (/dev/infiniband/uverbsN, one per ibv_open_device) of a rail's RDMA device the host has now: evidence that it uses the device. Read from /proc/PID/fd with the visibility check (every --collector.process.numa-maps-interval), at most 4096 fds per process: a lower bound beyond. Absent when /proc/PID/fd cannot be read (counted in fabric_process_read_errors_total{file=\"fd\"}).",
			g, "pid", "comm", "device"),
		causeFam: r.NewFamily("fabric_process_rdma_fallback_cause_info",
			"Why the process would fall back to socket transport, as far as /proc and sysfs say, for pages without an NCCL log: cause lists those that apply, comma-separated in this order (the causes and order of fabric_nccl_fallback_cause_info): no_verbs_devices_in_container (no verbs node of a rail device the host has in its root), nccl_ib_disable (NCCL_IB_DISABLE non-zero), nccl_net_socket (NCCL_NET=Socket), nccl_ib_hca_matches_no_rail (NCCL_IB_HCA selects no rail device), socket_ifname_not_a_rail (NCCL_SOCKET_IFNAME selects no rail netdev), rail_down (every rail down or its device gone). Computed from the last reads of the process's root and environment and of the rails' ports. Absent when no cause applies.",
			g, "pid", "comm", "cause"),
		errors: r.NewFamily("fabric_process_read_errors_total",
			"Reads of /proc/PID files that failed for a reason other than the process having exited: permission denied without root or CAP_SYS_PTRACE, or garbage. Also counted in fabric_scrape_read_errors_total.",
			ctr, "file"),
		verbsFDs: r.NewFamily("fabric_process_rdma_verbs_fds",
			"Open file descriptors of the process on any verbs node /dev/infiniband/uverbsN (every RDMA device, rail or not; 0 when none): a process that uses an HCA through verbs holds one per device context. Read from /proc/PID/fd with fabric_process_rdma_verbs_open (every --collector.process.numa-maps-interval, and at once when NCCL's RAS service newly reports the process as a rank; at most 4096 fds per process); absent when /proc/PID/fd cannot be read.",
			g, "pid", "comm"),
		qps: r.NewFamily("fabric_process_rdma_queue_pairs",
			"Queue pairs the process owns on each RDMA device, from the kernel's RDMA resource tracker over RDMA netlink (what `rdma resource show qp` lists; the kernel names the creating thread, counted here for its process; refreshed every --collector.process.numa-maps-interval and when NCCL's RAS service newly reports the process as a rank), 0 on a device where it owns none. A multi-node rank with none sends its inter-node traffic over sockets. Absent when fabric_process_rdma_netlink_available is 0.",
			g, "pid", "comm", "device"),
		hostNS: r.NewFamily("fabric_process_host_pid_namespace",
			"1 if the process lives in the PID namespace of --path.procfs (the NSpid line of /proc/PID/status has one PID), 0 if in a nested one (a container with its own PID namespace: the PID the process knows itself by, e.g. the one NCCL's RAS service reports, is not the pid label; see fabric_process_namespace_info). Absent on kernels without NSpid (before 4.1).",
			g, "pid", "comm"),
		namespace: r.NewFamily("fabric_process_namespace_info",
			"The process's namespaces as NCCL's RAS service sees them: own_pid is the PID it knows itself by (the innermost PID of NSpid: getpid() inside its PID namespace, the pid RAS reports), net_ns its network namespace (the inode of /proc/PID/ns/net; processes with the same value share a network). Absent while unread.",
			g, "pid", "comm", "own_pid", "net_ns"),
		qpOwners: r.NewFamily("fabric_rdma_owner_queue_pairs",
			"User queue pairs by owning process, RDMA device and state (enum ib_qp_state: reset, init, rtr, rts, sqd, sqe, err; only states it has), for every process that owns any — serving process or not (KV-cache transfer engines, NVSHMEM …) — with its container and pod (container_id, pod_uid from /proc/PID/cgroup; empty outside one). From the RDMA netlink listing (every --collector.process.numa-maps-interval; the kernel names the creating thread, counted for its process); at most 256 processes, the lowest PIDs. Queue pairs in err stay there until their owner destroys them: a rank whose QPs are in err sends nothing on them while its counters stand still. Absent when fabric_process_rdma_netlink_available is 0.",
			g, "pid", "comm", "device", "state", "container_id", "pod_uid"),
		qpListed: r.NewFamily("fabric_process_rdma_queue_pairs_listed",
			"1 for an RDMA device whose queue pairs the last RDMA netlink listing read, 0 for one whose dump failed (mlx5 fails QUERY_QP of a device in internal error; a wedged device's dump times out): its queue-pair series are left out, unknown rather than none, while the other devices keep theirs. Absent when fabric_process_rdma_netlink_available is 0.",
			g, "device"),
		qpAvail: r.NewFamily("fabric_process_rdma_netlink_available",
			"1 if the last RDMA netlink queue-pair listing succeeded and its PIDs are those of --path.procfs, else 0 (no RDMA netlink or device, refused, or the exporter not in the PID namespace of --path.procfs; the reason is logged once): fabric_process_rdma_queue_pairs is absent then. Absent before the process collector selected a process.",
			g).With(),
	}
}

// procSeries are the series of one process, bound while its labels stay.
type procSeries struct {
	gen                                                uint64
	start                                              uint64
	pidS, comm, selectedBy                             string
	info, cpuUser, cpuSys, rss, ctxVol, ctxInv, majflt *exposition.Series
	hostNS, verbsFDs                                   *exposition.Series
	keyed                                              map[seriesKey]*exposition.Series // series whose labels vary

	// Judgements kept until their inputs change: the need from the
	// environment (read once per process), the causes until the next
	// evidence read or rail reading.
	needDone  bool
	need      rdmaNeed
	causeAt   time.Time
	causeRC   *railCause
	causeMask causeMask
	causeEnv  bool
}

// seriesKey names a series of a process by its family and the label values
// after pid and comm (at most four); a lookup does not allocate.
type seriesKey struct {
	f          *exposition.Family
	v0, v1, v2 string
	v3         string
}

// maxKeyed bounds a process's kept series: labels that keep changing (a
// container renamed again and again) cannot grow it without bound.
const maxKeyed = 256

// with returns a series of f for the process's pid and comm and the other
// label values, bound once.
func (s *procSeries) with(f *exposition.Family, values ...string) *exposition.Series {
	key := seriesKey{f: f}
	switch len(values) {
	case 4:
		key.v3 = values[3]
		fallthrough
	case 3:
		key.v2 = values[2]
		fallthrough
	case 2:
		key.v1 = values[1]
		fallthrough
	case 1:
		key.v0 = values[0]
	}
	if x := s.keyed[key]; x != nil {
		return x
	}
	if len(s.keyed) >= maxKeyed {
		clear(s.keyed)
	}
	x := f.With(append([]string{s.pidS, s.comm}, values...)...)
	s.keyed[key] = x
	return x
}

// seriesOf returns the bound series of a process, rebinding them when its
// PID was reused or its comm or selection changed.
func (c *processCollector) seriesOf(p *procwatch.Process) *procSeries {
	s := c.series[p.PID]
	if s == nil || s.start != p.Start || s.comm != p.Comm || s.selectedBy != p.SelectedBy() {
		f := &c.families
		pid := strconv.Itoa(p.PID)
		s = &procSeries{start: p.Start, pidS: pid, comm: p.Comm, selectedBy: p.SelectedBy(), keyed: map[seriesKey]*exposition.Series{},
			info:    f.info.With(pid, p.Comm, p.SelectedBy()),
			cpuUser: f.cpu.With(pid, p.Comm, "user"), cpuSys: f.cpu.With(pid, p.Comm, "system"),
			rss:    f.rss.With(pid, p.Comm),
			ctxVol: f.ctxSw.With(pid, p.Comm, "voluntary"), ctxInv: f.ctxSw.With(pid, p.Comm, "nonvoluntary"),
			majflt: f.majflt.With(pid, p.Comm), hostNS: f.hostNS.With(pid, p.Comm), verbsFDs: f.verbsFDs.With(pid, p.Comm),
		}
		c.series[p.PID] = s
	}
	s.gen = c.gen
	return s
}

// addProcess adds one process's samples.
func (c *processCollector) addProcess(p *procwatch.Process, snap *procwatch.Snapshot, rc *railCause, b *exposition.Batch) {
	s := c.seriesOf(p)
	f := &c.families
	b.Add(s.info, 1)
	b.Add(s.cpuUser, float64(p.UTime)/proc.UserHZ)
	b.Add(s.cpuSys, float64(p.STime)/proc.UserHZ)
	b.Add(s.majflt, float64(p.MajFlt))
	if p.State != 0 {
		b.Add(s.with(f.state, procStateName(p.State)), 1)
	}
	if p.HasStatus {
		if p.HasRSS {
			b.Add(s.rss, float64(p.RSS))
		}
		if p.HasCtx {
			b.Add(s.ctxVol, float64(p.VolCtx))
			b.Add(s.ctxInv, float64(p.NonvolCtx))
		}
		if p.HasAllowed {
			b.Add(s.with(f.allowed, p.AllowedNodes), 1)
		}
		if p.HasMemNodes {
			b.Add(s.with(f.memAllowed, p.MemNodes), 1)
		}
		if p.NSLevels > 0 {
			b.Add(s.hostNS, b2f(p.NSLevels == 1))
		}
	}
	if p.OwnPID > 0 && p.NetNS != 0 {
		b.Add(s.with(f.namespace, strconv.Itoa(p.OwnPID), strconv.FormatUint(p.NetNS, 10)), 1)
	}
	for _, n := range p.Numa {
		b.Add(s.with(f.numaMem, n.Node), float64(n.Bytes))
	}
	for _, e := range p.Env {
		b.Add(s.with(f.nccl, e.Name, e.Value), 1)
	}
	if p.EnvRead {
		if !s.needDone {
			s.need, s.needDone = needFromEnv(p.Env, p.MultiNode), true
		}
		for _, d := range snap.RailDevices {
			if r := s.need.reason(d); r != "" {
				b.Add(s.with(f.reqFam, d.Name, r), 1)
			}
		}
	}
	if p.InContainer {
		b.Add(s.with(f.container, p.Container.Runtime, p.Container.ID, p.Container.PodUID, c.containerName(p)), 1)
	}
	for _, v := range p.Vis {
		b.Add(s.with(f.visible, v.Device, v.Node), b2f(v.OK))
	}
	if p.FDsRead {
		for _, d := range p.RailFDs {
			b.Add(s.with(f.verbsOpen, d.Device), float64(d.N))
		}
		b.Add(s.verbsFDs, float64(p.VerbsFDs))
	}
	for _, q := range p.QPs {
		b.Add(s.with(f.qps, q.Device), float64(q.N))
	}
	if !s.causeAt.Equal(p.EvidenceAt) || s.causeRC != rc || s.causeEnv != p.EnvRead {
		s.causeMask, s.causeAt, s.causeRC, s.causeEnv = causesOf(p, rc), p.EvidenceAt, rc, p.EnvRead
	}
	if m := s.causeMask; m != 0 {
		b.Add(s.with(f.causeFam, joinCauses(m)), 1)
	}
}

// procStateName names a /proc/PID/stat state letter (fabric_process_state_info).
func procStateName(c byte) string {
	switch c {
	case 'R':
		return "running"
	case 'S':
		return "sleeping"
	case 'D':
		return "disk_sleep"
	case 'T':
		return "stopped"
	case 't':
		return "tracing_stop"
	case 'Z':
		return "zombie"
	case 'X', 'x':
		return "dead"
	case 'I':
		return "idle"
	}
	return "other"
}
