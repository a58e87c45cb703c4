package collector

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/proc"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// The process collector watches the serving processes: where their memory
// sits (NUMA), their CPU, the NCCL settings of their environment and
// whether the RDMA devices of the rails are visible inside their mount
// namespace. It reads --path.procfs; reading another user's numa_maps,
// environ and root needs root (or CAP_SYS_PTRACE), and a container needs
// the host PID namespace.
//
// The /proc files are parsed by internal/proc. The collector is split by
// concern: this file holds the options, the per-process state and Update;
// process_select.go the selection (command line, GPU PIDs, the cap);
// process_numa.go NUMA memory and allowed nodes; process_devices.go the
// visibility of the rails' RDMA devices, process_fds.go the fds open on
// them; process_rdma.go the kernel's evidence of RDMA use (verbs fds of
// any device, queue pairs over RDMA netlink, the PID namespace); process_container.go the container labels (docker.go the Docker
// names); process_env.go the NCCL variables; process_ras.go their RAS addresses
// for the nccl-ras collector (Env.Processes); process_required.go which
// rail devices a process needs (from them and the launcher's sizes);
// process_cause.go why it would fall back to sockets (fallback_cause.go).

// DefaultProcessCmdline matches SGLang servers: `python -m
// sglang.launch_server`, `sglang serve`, and the processes SGLang renames
// with setproctitle (sglang::scheduler_TP0, sglang::detokenizer, …).
const DefaultProcessCmdline = `sglang\.launch_server|(^|[/ ])sglang serve( |$)|^sglang::`

// ProcessOptions configures the process collector.
type ProcessOptions struct {
	// Cmdline selects processes whose command line (arguments joined by
	// spaces) matches; "" selects by GPU PIDs only.
	Cmdline string
	// Max bounds the number of processes reported.
	Max int
	// NumaMapsInterval is the minimum time between two reads of a
	// process's numa_maps (and of its /dev/infiniband); 0 reads them on
	// every scrape.
	NumaMapsInterval time.Duration
	// DockerHost is the Docker Engine API address for container names
	// ("" = off).
	DockerHost string
}

func processFlags(app *kingpin.Application, o *Options) {
	app.Flag("collector.process.cmdline", "Regexp (unanchored) matched against each process's command line, arguments joined by spaces, to select serving processes; processes the gpu collector sees on a GPU are selected too. Empty: GPU processes only. The exporter's own process is never selected. The default matches SGLang servers.").
		Default(DefaultProcessCmdline).StringVar(&o.Process.Cmdline)
	app.Flag("collector.process.max", "Most processes the process collector reports (GPU processes first, then by PID).").Default("64").IntVar(&o.Process.Max)
	app.Flag("collector.process.numa-maps-interval", "Minimum time between two reads of a process's /proc/PID/numa_maps (the kernel walks the page tables of the whole process under its mmap lock to write it) and of its /dev/infiniband and open verbs fds (/proc/PID/fd), and between two RDMA netlink queue-pair listings; the last values are reported in between. 0: every scrape.").
		Default("60s").DurationVar(&o.Process.NumaMapsInterval)
	app.Flag("collector.process.docker-host", "Docker Engine API address (e.g. unix:///var/run/docker.sock) to add each Docker (or Podman) container's name to fabric_process_container_info as container_name; looked up in the background and cached per container ID, never during a scrape. Empty: off.").
		Default("").StringVar(&o.Process.DockerHost)
}

// procFiles are the /proc/PID files whose failed reads are counted (an
// array: never written).
var procFiles = [...]string{"cgroup", "cmdline", "environ", procFileFD, "numa_maps", procFileRoot, "stat", "status"}

type processCollector struct {
	selection // which processes (process_select.go)
	hostNodes // the host's NUMA nodes (process_numa.go)
	railVerbs // the rails' uverbs nodes, root lookups (process_devices.go)
	rdmaQPs   // RDMA netlink queue pairs (process_rdma.go)

	env      Env
	procfs   string
	sysfs    string
	interval time.Duration
	rails    *Rails
	now      func() time.Time
	docker   *dockerNames // nil without --collector.process.docker-host

	// I/O, replaceable in tests.
	reader   *sysfs.Reader // stat and status, kept open
	open     func(path string) (proc.File, error)
	openRoot func(path string) (int, error)
	scanDir  func(dir string, fn func(name []byte)) error // /proc/PID/fd
	readlink func(path string, buf []byte) (int, error)   // /proc/PID/fd/N
	maxFDs   int                                          // fd links read per process and interval

	procs map[int]*procState
	nm    proc.NumaMaps

	devs      []railDev // the rail devices of this scrape (process_devices.go)
	visDevs   []string  // those with a verbs node
	railCause railCause // what the fallback causes need of the rails (process_cause.go)

	statBuf   [sysfs.MaxAttrSize]byte
	statusBuf [16 << 10]byte
	chunk     []byte // numa_maps chunks
	cmdBuf    []byte
	cgBuf     []byte
	envBuf    []byte
	fdNums    []int
	fdCounts  []int
	linkBuf   [64]byte // a verbs node's path is short: longer targets are not one

	rasAddrs atomic.Pointer[[]string] // the last scrape's RAS addresses (process_ras.go)

	errCount  map[string]*exposition.Counter
	errSeries map[string]*exposition.Series

	selected, candidates                                                                                               *exposition.Series
	info, cpu, rss, ctxSw, majflt, numaMem, allowed, memAllowed, nccl, visible, reqFam, verbsOpen, container, causeFam *exposition.Family
}

// procState is what the collector keeps of a selected process.
type procState struct {
	pid                  int
	pidS, dir            string
	statPath, statusPath string
	gen                  uint64
	start                uint64 // starttime: a changed value means the PID was reused
	comm, selectedBy     string

	info, cpuUser, cpuSys, rss, ctxVol, ctxInv, majflt *exposition.Series
	cpusRaw, memsRaw                                   string
	allowed, memAllowed                                *exposition.Series

	numaAt time.Time
	numa   []procNuma

	envDone bool
	envVars []envVar
	rasAddr string    // its RAS service's address, "" if none or off (process_ras.go)
	need    rdmaNeed  // what the environment says of the rails (process_required.go)
	req     []procReq // the rail devices it needs in this scrape

	visAt   time.Time
	vis     []procVis
	visDevs []string  // the devices vis was checked for
	fds     []procFDs // open fds on the verbs nodes, read with vis (process_fds.go)
	rdma    procRDMA  // verbs fds of any device, queue pairs, PID namespace (process_rdma.go)
	cause   procCause // the socket fallback's causes (process_cause.go)

	cgAt     time.Time
	cont     proc.Container
	contName string
	inCont   bool
	contInfo *exposition.Series
}

func newProcessCollector(env Env, o *Options) (Collector, error) {
	p := o.Process
	if p.Max < 1 {
		return nil, fmt.Errorf("--collector.process.max must be at least 1, not %d", p.Max)
	}
	if p.NumaMapsInterval < 0 {
		return nil, fmt.Errorf("--collector.process.numa-maps-interval must not be negative")
	}
	var re *regexp.Regexp
	if p.Cmdline != "" {
		var err error
		if re, err = regexp.Compile(p.Cmdline); err != nil {
			return nil, fmt.Errorf("--collector.process.cmdline: %w", err)
		}
	}
	procfs := o.ProcfsPath
	if procfs == "" {
		procfs = "/proc"
	}
	g, ctr := prometheus.GaugeValue, prometheus.CounterValue
	c := &processCollector{
		env: env, procfs: procfs, sysfs: o.SysfsPath, interval: p.NumaMapsInterval,
		rails: o.Rails, now: time.Now,
		reader: sysfs.NewReader(), open: proc.Open, openRoot: proc.OpenRoot,
		scanDir: sysfs.ScanDir, readlink: unix.Readlink, maxFDs: maxVerbsFDs,
		procs: map[int]*procState{},
		chunk: make([]byte, procChunk), cmdBuf: make([]byte, maxCmdline),
		errCount: map[string]*exposition.Counter{}, errSeries: map[string]*exposition.Series{},
		selected:   env.Families.NewFamily("fabric_process_selected", "Serving processes reported by the process collector in this scrape (at most --collector.process.max).", g).With(),
		candidates: env.Families.NewFamily("fabric_process_candidates", "Processes that matched --collector.process.cmdline or run on a GPU, before the --collector.process.max cap.", g).With(),
		info: env.Families.NewFamily("fabric_process_info", "A reported process and why it was selected (cmdline, gpu or both); comm is its name (/proc/PID/comm).",
			g, "pid", "comm", "selected_by"),
		cpu:    env.Families.NewFamily("fabric_process_cpu_seconds_total", "CPU time of the process by mode (user, system), from /proc/PID/stat.", ctr, "pid", "comm", "mode"),
		rss:    env.Families.NewFamily("fabric_process_resident_memory_bytes", "Resident memory of the process (VmRSS).", g, "pid", "comm"),
		ctxSw:  env.Families.NewFamily("fabric_process_context_switches_total", "Context switches of the process's main thread by kind (voluntary, nonvoluntary).", ctr, "pid", "comm", "kind"),
		majflt: env.Families.NewFamily("fabric_process_major_page_faults_total", "Major page faults of the process (page reads from disk).", ctr, "pid", "comm"),
		numaMem: env.Families.NewFamily("fabric_process_numa_memory_bytes",
			"Memory of the process on each NUMA node: /proc/PID/numa_maps pages times each mapping's kernelpagesize_kB, summed like numastat -p (refreshed at most every --collector.process.numa-maps-interval).",
			g, "pid", "comm", "numa_node"),
		allowed: env.Families.NewFamily("fabric_process_allowed_numa_nodes_info",
			"NUMA nodes whose CPUs the process may run on (Cpus_allowed_list against node*/cpulist), comma-separated.", g, "pid", "comm", "nodes"),
		memAllowed: env.Families.NewFamily("fabric_process_allowed_memory_numa_nodes_info",
			"NUMA nodes the process may allocate memory from (Mems_allowed_list, its cpuset).", g, "pid", "comm", "nodes"),
		nccl: env.Families.NewFamily("fabric_process_nccl_env_info",
			"An NCCL variable of the process's environment as it was at exec (/proc/PID/environ). Only an allow-list of NCCL variables is read; nothing else of the environment is exported or logged.",
			g, "pid", "comm", "name", "value"),
		container: env.Families.NewFamily("fabric_process_container_info",
			"The container of the process, from /proc/PID/cgroup (re-read every --collector.process.numa-maps-interval): runtime (docker, containerd, cri-o, podman; empty when the cgroup path does not say), the full 64-hex container_id and the Kubernetes pod_uid (empty outside Kubernetes); container_name is the Docker Engine API's name of a docker or podman container with --collector.process.docker-host, empty without it or until known (an empty label is no label in Prometheus). Absent for a process outside any recognised container.",
			g, "pid", "comm", "runtime", "container_id", "pod_uid", "container_name"),
		visible: env.Families.NewFamily("fabric_process_rdma_device_visible",
			"1 if the verbs node of a rail's RDMA device (node=uverbsN) or rdma_cm exists under /dev/infiniband in the process's root (mount namespace), else 0. Only for rail devices the host has now, with a verbs node: absent for a device gone from the host.",
			g, "pid", "comm", "device", "node"),
		reqFam: env.Families.NewFamily("fabric_process_rdma_device_required",
			"A rail RDMA device (present on the host) that the process needs, judged from its environment at exec, reason the first that applies: nccl_ib_hca (NCCL_IB_HCA selects the device; when set, no other device is needed), nccl_net_ib (NCCL_NET=IB), multi_node (WORLD_SIZE > LOCAL_WORLD_SIZE or OMPI_COMM_WORLD_SIZE > OMPI_COMM_WORLD_LOCAL_SIZE: the job spans nodes). Absent with NCCL_IB_DISABLE non-zero or NCCL_NET=Socket (no RDMA asked for), when nothing applies, or while the environment cannot be read.",
			g, "pid", "comm", "device", "reason"),
		verbsOpen: env.Families.NewFamily("fabric_process_rdma_verbs_open",
			"Open file descriptors of the process on the verbs node (/dev/infiniband/uverbsN, one per ibv_open_device) of a rail's RDMA device the host has now: evidence that it uses the device. Read from /proc/PID/fd with the visibility check (every --collector.process.numa-maps-interval), at most 4096 fds per process: a lower bound beyond. Absent when /proc/PID/fd cannot be read (counted in fabric_process_read_errors_total{file=\"fd\"}).",
			g, "pid", "comm", "device"),
		causeFam: env.Families.NewFamily("fabric_process_rdma_fallback_cause_info",
			"Why the process would fall back to socket transport, as far as /proc and sysfs say, for pages without an NCCL log: cause lists those that apply, comma-separated in this order (the causes and order of fabric_nccl_fallback_cause_info): no_verbs_devices_in_container (no verbs node of a rail device the host has in its root), nccl_ib_disable (NCCL_IB_DISABLE non-zero), nccl_net_socket (NCCL_NET=Socket), nccl_ib_hca_matches_no_rail (NCCL_IB_HCA selects no rail device), socket_ifname_not_a_rail (NCCL_SOCKET_IFNAME selects no rail netdev), rail_down (every rail down or its device gone). Computed with the visibility check (every --collector.process.numa-maps-interval). Absent when no cause applies.",
			g, "pid", "comm", "cause"),
	}
	c.rdmaQPs = newRDMAQPs(env)
	// The selection matches command lines with a method of c: bound once
	// here, not on every scrape.
	c.selection = newSelection(re, c.matchCmdline, p.Max, gpuPIDs(env.GPUs))
	if p.DockerHost != "" {
		d, err := newDockerNames(env, p.DockerHost)
		if err != nil {
			return nil, fmt.Errorf("--collector.process.docker-host: %w", err)
		}
		c.docker = d
	}
	errFam := env.Families.NewFamily("fabric_process_read_errors_total",
		"Reads of /proc/PID files that failed for a reason other than the process having exited: permission denied without root or CAP_SYS_PTRACE, or garbage. Also counted in fabric_scrape_read_errors_total.",
		ctr, "file")
	for _, f := range procFiles {
		c.errCount[f] = &exposition.Counter{}
		c.errSeries[f] = errFam.With(f)
	}
	return c, nil
}

func (c *processCollector) Update(ctx context.Context, b *exposition.Batch) error {
	now := c.now()
	c.gen++
	if err := c.listPIDs(c.procfs); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return checkProcfs(c.procfs)
		}
		return fmt.Errorf("listing processes: %w", err)
	}
	if len(c.pids) == 0 {
		if err := checkProcfs(c.procfs); err != nil {
			return err
		}
		return sourceMissing(c.procfs, procfsFix, "--path.procfs %s lists no process", c.procfs)
	}
	c.self, _ = selfPID(c.procfs) // 0 when procfs has no self: the exporter is not listed
	candidates := c.choose(ctx, now)
	if candidates > c.max {
		c.env.Once.Warn("process-max", "msg", "more serving processes than --collector.process.max; the rest are not reported", "candidates", candidates, "max", c.max)
	} else {
		c.env.Once.Clear("process-max")
	}

	devs := c.railDevices(ctx)
	var devices []string // rail devices with a verbs node on the host now
	if len(c.sel) > 0 {
		c.refreshNodes(c.sysfs, now)
		c.refreshQPs(ctx, now)
		if len(devs) > 0 {
			c.refreshVerbs(devs, now)
			devices = c.visibleDevices(devs)
		}
		c.refreshRailCause(ctx, now)
	}
	reported := 0
	for _, s := range c.sel {
		if err := ctx.Err(); err != nil {
			// The scrape's deadline passed (--web.scrape-timeout): stop;
			// the next scrape goes on from the cached state.
			return err
		}
		if c.collectProcess(s, now, devs, devices, b) {
			reported++
		}
	}
	for pid, st := range c.procs {
		if st.gen != c.gen {
			c.dropProc(pid)
		}
	}
	c.publishRAS()
	b.Add(c.selected, float64(reported))
	b.Add(c.candidates, float64(candidates))
	for _, f := range procFiles {
		b.Add(c.errSeries[f], c.errCount[f].Value())
	}
	if c.qpTried {
		b.Add(c.qpAvail, b2f(c.qpOK))
	}
	return nil
}

// readError records a failed read of a /proc/PID file. A process that
// exited between the listing and the read is skipped silently.
func (c *processCollector) readError(file, path string, err error) {
	if proc.Gone(err) {
		return
	}
	c.errCount[file].Inc()
	c.env.ReadErrors.Inc()
	if errors.Is(err, fs.ErrPermission) {
		c.env.Once.Warn("perm:"+file, "msg", "permission denied reading a process file: the process collector needs root (or CAP_SYS_PTRACE) and the host PID namespace", "path", path, "err", err)
		return
	}
	c.env.Once.Debug("err:"+file, "msg", "skipping a process file", "path", path, "err", err)
}

func (c *processCollector) dropProc(pid int) {
	if st, ok := c.procs[pid]; ok {
		c.reader.ForgetPrefix(st.dir)
		delete(c.procs, pid)
	}
}

// collectProcess adds one process's samples; false when it could not be
// read (exited, reused PID, unreadable stat).
func (c *processCollector) collectProcess(sel procSel, now time.Time, devs []railDev, devices []string, b *exposition.Batch) bool {
	st := c.procs[sel.pid]
	if st == nil {
		pidS := strconv.Itoa(sel.pid)
		dir := c.procfs + "/" + pidS
		st = &procState{pid: sel.pid, pidS: pidS, dir: dir, statPath: dir + "/stat", statusPath: dir + "/status"}
		c.procs[sel.pid] = st
	}
	st.gen = c.gen
	raw, err := c.reader.Read(st.statPath, c.statBuf[:])
	if err != nil {
		c.readError("stat", st.statPath, err)
		c.dropProc(sel.pid)
		return false
	}
	ps, err := proc.ParseStat(raw)
	if err != nil {
		c.readError("stat", st.statPath, err)
		c.dropProc(sel.pid)
		return false
	}
	if st.start != 0 && ps.StartTime != st.start {
		// Another process has this PID now: start over, and check its
		// command line on the next scrape.
		c.dropProc(sel.pid)
		c.recheck(sel.pid)
		return false
	}
	st.start = ps.StartTime
	if selectedBy := sel.selectedBy(); st.info == nil || string(ps.Comm) != st.comm || selectedBy != st.selectedBy {
		st.comm, st.selectedBy = string(ps.Comm), selectedBy
		c.bind(st)
	}
	b.Add(st.info, 1)
	b.Add(st.cpuUser, float64(ps.UTime)/proc.UserHZ)
	b.Add(st.cpuSys, float64(ps.STime)/proc.UserHZ)
	b.Add(st.majflt, float64(ps.MajFlt))

	if raw, err := c.reader.Read(st.statusPath, c.statusBuf[:]); err != nil {
		c.readError("status", st.statusPath, err)
	} else if s, err := proc.ParseStatus(raw); err != nil {
		c.readError("status", st.statusPath, err)
	} else {
		if s.HasRSS {
			b.Add(st.rss, float64(s.VmRSS))
		}
		if s.HasCtx {
			b.Add(st.ctxVol, float64(s.VolCtx))
			b.Add(st.ctxInv, float64(s.NonvolCtx))
		}
		c.addAllowed(st, s, b)
		c.addHostNS(st, s, b)
	}

	if st.numaAt.IsZero() || now.Sub(st.numaAt) >= c.interval {
		c.readNumaMaps(st)
		st.numaAt = now
	}
	for _, n := range st.numa {
		b.Add(n.s, n.v)
	}

	if !st.envDone {
		c.readEnviron(st)
	}
	for _, e := range st.envVars {
		b.Add(e.s, 1)
	}
	c.required(st, devs)
	for _, r := range st.req {
		b.Add(r.s, 1)
	}

	if st.cgAt.IsZero() || now.Sub(st.cgAt) >= c.interval {
		c.readCgroup(st)
		st.cgAt = now
	}
	if st.inCont {
		c.containerName(st)
		b.Add(st.contInfo, 1)
	}

	visChecked := st.visAt.IsZero() || now.Sub(st.visAt) >= c.interval || !slices.Equal(devices, st.visDevs)
	if visChecked {
		if len(devices) > 0 {
			c.checkVisibility(st, devices)
		} else {
			st.vis, st.visDevs = st.vis[:0], st.visDevs[:0]
		}
		c.countVerbsFDs(st, devices) // also every device's (process_rdma.go)
		st.visAt = now
	}
	for _, v := range st.vis {
		b.Add(v.s, b2f(v.ok))
	}
	for _, f := range st.fds {
		b.Add(f.s, float64(f.n))
	}
	c.addRDMA(st, b)
	c.fallbackCause(st, now, visChecked)
	if st.cause.s != nil {
		b.Add(st.cause.s, 1)
	}
	return true
}

// bind (re)binds every series of a process to its pid and comm.
func (c *processCollector) bind(st *procState) {
	p, comm := st.pidS, st.comm
	st.info = c.info.With(p, comm, st.selectedBy)
	st.cpuUser, st.cpuSys = c.cpu.With(p, comm, "user"), c.cpu.With(p, comm, "system")
	st.rss = c.rss.With(p, comm)
	st.ctxVol, st.ctxInv = c.ctxSw.With(p, comm, "voluntary"), c.ctxSw.With(p, comm, "nonvoluntary")
	st.majflt = c.majflt.With(p, comm)
	st.cpusRaw, st.memsRaw, st.allowed, st.memAllowed = "", "", nil, nil
	for i := range st.numa {
		st.numa[i].s = c.numaMem.With(p, comm, st.numa[i].node)
	}
	for i := range st.envVars {
		st.envVars[i].s = c.nccl.With(p, comm, st.envVars[i].name, st.envVars[i].value)
	}
	for i := range st.vis {
		st.vis[i].s = c.visible.With(p, comm, st.vis[i].device, st.vis[i].node)
	}
	for i := range st.fds {
		st.fds[i].s = c.verbsOpen.With(p, comm, st.fds[i].device)
	}
	for i := range st.req {
		st.req[i].s = c.reqFam.With(p, comm, st.req[i].device, st.req[i].reason)
	}
	if st.inCont {
		st.contInfo = c.containerSeries(st)
	}
	st.bindRDMA()
	c.bindCause(st)
}

// Close stops the Docker name lookups.
func (c *processCollector) Close() {
	if c.docker != nil {
		c.docker.Close()
	}
	if cl, ok := c.qpSrc.(interface{ Close() error }); ok {
		cl.Close()
	}
}
