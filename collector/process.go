package collector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// The process collector watches the serving processes: where their memory
// sits (NUMA), their CPU, the NCCL settings of their environment and
// whether the RDMA devices of the rails are visible inside their mount
// namespace. It reads --path.procfs; reading another user's numa_maps,
// environ and root needs root (or CAP_SYS_PTRACE), and a container needs
// the host PID namespace.

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
	app.Flag("collector.process.cmdline", "Regexp (unanchored) matched against each process's command line, arguments joined by spaces, to select serving processes; processes the gpu collector sees on a GPU are selected too. Empty: GPU processes only. The default matches SGLang servers.").
		Default(DefaultProcessCmdline).StringVar(&o.Process.Cmdline)
	app.Flag("collector.process.max", "Most processes the process collector reports (GPU processes first, then by PID).").Default("64").IntVar(&o.Process.Max)
	app.Flag("collector.process.numa-maps-interval", "Minimum time between two reads of a process's /proc/PID/numa_maps (the kernel walks the page tables of the whole process under its mmap lock to write it) and of its /dev/infiniband; the last values are reported in between. 0: every scrape.").
		Default("60s").DurationVar(&o.Process.NumaMapsInterval)
	app.Flag("collector.process.docker-host", "Docker Engine API address (e.g. unix:///var/run/docker.sock) to add each Docker (or Podman) container's name to fabric_process_container_info as container_name; looked up in the background and cached per container ID, never during a scrape. Empty: off.").
		Default("").StringVar(&o.Process.DockerHost)
}

const (
	userHZ         = 100                       // USER_HZ: the unit of utime/stime in /proc/PID/stat
	cmdlineRecheck = 10 * time.Second          // a process's command line is read again after this (setproctitle, exec),
	cmdlineMax     = 5 * time.Minute           // then after twice as long each time, up to this
	nodeRefresh    = time.Minute               // NUMA node CPU lists are re-read after this
	maxCmdline     = 64 << 10                  // bytes of a command line matched
	maxEnviron     = 1 << 20                   // bytes of an environment read
	maxNumaMaps    = 64 << 20                  // bytes of a numa_maps read
	procChunk      = 64 << 10                  // read size for numa_maps
	envKeep        = 256 << 10                 // environment buffer kept between scrapes
	maxSymlinks    = 40                        // symlinks followed resolving a path in a process root
	rdmaCMNode     = "rdma_cm"                 // /dev/infiniband/rdma_cm
	procFileRoot   = "root"                    // read-error label for /proc/PID/root lookups
	selCmdline     = "cmdline"                 //
	selGPU         = "gpu"                     //
	selBoth        = selCmdline + "," + selGPU //
)

// procFiles are the /proc/PID files whose failed reads are counted.
var procFiles = []string{"cgroup", "cmdline", "environ", "numa_maps", procFileRoot, "stat", "status"}

// procFile is an open /proc file.
type procFile interface {
	Read(b []byte) (int, error)
	Close() error
}

// openProcFile opens a /proc file for sequential reads (fdFile, sysfs.go).
func openProcFile(path string) (procFile, error) {
	f, err := sysfs.Open(path)
	if err != nil {
		return nil, err
	}
	return f.(sysfs.FD), nil
}

func openRootDir(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

type processCollector struct {
	env      Env
	procfs   string
	sysfs    string
	re       *regexp.Regexp
	max      int
	interval time.Duration
	gpuPIDs  func(context.Context) []int
	rails    *Rails
	now      func() time.Time
	docker   *dockerNames // nil without --collector.process.docker-host

	// I/O, replaceable in tests.
	reader    *sysfs.Reader // stat and status, kept open
	open      func(path string) (procFile, error)
	openRoot  func(path string) (int, error)
	noOpenat2 bool // openat2(2) is missing (ENOSYS) or filtered: resolve by hand

	gen     uint64
	cands   map[int]*procCand
	procs   map[int]*procState
	pids    []int
	sel     []procSel
	gpuSet  map[int]bool
	nodes   []sysNode
	nodesAt time.Time
	verbs   map[string]string // RDMA device -> uverbsN
	verbsAt time.Time
	nm      numaMaps

	statBuf   [sysfs.MaxAttrSize]byte
	statusBuf [16 << 10]byte
	chunk     []byte // numa_maps chunks
	cmdBuf    []byte
	cgBuf     []byte
	envBuf    []byte

	errCount  map[string]*exposition.Counter
	errSeries map[string]*exposition.Series

	selected, candidates                                                                  *exposition.Series
	info, cpu, rss, ctxSw, majflt, numaMem, allowed, memAllowed, nccl, visible, container *exposition.Family
}

// procCand is the selection cache of one PID of the last listing.
type procCand struct {
	gen     uint64
	match   bool
	checked time.Time     // zero: check on the next scrape
	wait    time.Duration // until the next check
}

type procSel struct {
	pid          int
	byGPU, byCmd bool
}

type sysNode struct {
	id   int
	name string
	cpus cpuSet
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

	visAt time.Time
	vis   []procVis

	cgAt     time.Time
	cont     containerRef
	contName string
	inCont   bool
	contInfo *exposition.Series
}

type procNuma struct {
	node string
	v    float64
	s    *exposition.Series
}

type envVar struct {
	name, value string
	s           *exposition.Series
}

type procVis struct {
	device, node string
	ok           bool
	s            *exposition.Series
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
		env: env, procfs: procfs, sysfs: o.SysfsPath, re: re, max: p.Max, interval: p.NumaMapsInterval,
		gpuPIDs: gpuPIDs(env.GPUs), rails: o.Rails, now: time.Now,
		reader: sysfs.NewReader(), open: openProcFile, openRoot: openRootDir,
		cands: map[int]*procCand{}, procs: map[int]*procState{}, gpuSet: map[int]bool{},
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
			"1 if the verbs node of a rail's RDMA device (uverbsN, node=\"\" when the host has none) or rdma_cm exists under /dev/infiniband in the process's root (mount namespace), else 0.",
			g, "pid", "comm", "device", "node"),
	}
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
	c.pids = c.pids[:0]
	err := sysfs.ScanDir(c.procfs, func(name []byte) {
		if pid, ok := parsePID(name); ok {
			c.pids = append(c.pids, pid)
		}
	})
	if err != nil {
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
	sort.Ints(c.pids)
	clear(c.gpuSet)
	if c.gpuPIDs != nil {
		for _, pid := range c.gpuPIDs(ctx) {
			c.gpuSet[pid] = true
		}
	}

	// Select.
	c.sel = c.sel[:0]
	for _, pid := range c.pids {
		cand := c.cands[pid]
		if cand == nil {
			cand = &procCand{}
			c.cands[pid] = cand
		}
		cand.gen = c.gen
		if c.re != nil && (cand.checked.IsZero() || now.Sub(cand.checked) >= cand.wait) {
			// A new process is checked at once, then again after 10 s, 20 s,
			// 40 s … up to every 5 minutes: titles set by setproctitle
			// shortly after start are seen, and the command lines of the
			// host's long-lived processes are not re-read on every scrape.
			match := c.matchCmdline(pid)
			switch {
			case cand.checked.IsZero() || match != cand.match:
				cand.wait = cmdlineRecheck
			case cand.wait < cmdlineMax:
				cand.wait = min(2*cand.wait, cmdlineMax)
			}
			cand.match, cand.checked = match, now
		}
		if gpu := c.gpuSet[pid]; cand.match || gpu {
			c.sel = append(c.sel, procSel{pid: pid, byGPU: gpu, byCmd: cand.match})
		}
	}
	for pid, cand := range c.cands {
		if cand.gen != c.gen {
			delete(c.cands, pid)
		}
	}
	candidates := len(c.sel)
	if candidates > c.max {
		sort.SliceStable(c.sel, func(i, j int) bool { return c.sel[i].byGPU && !c.sel[j].byGPU })
		c.sel = c.sel[:c.max]
		sort.Slice(c.sel, func(i, j int) bool { return c.sel[i].pid < c.sel[j].pid })
		c.env.Once.Warn("process-max", "msg", "more serving processes than --collector.process.max; the rest are not reported", "candidates", candidates, "max", c.max)
	} else {
		c.env.Once.Clear("process-max")
	}

	devices := c.railDevices(ctx)
	if len(c.sel) > 0 {
		c.refreshNodes(now)
		if len(devices) > 0 && (c.verbs == nil || now.Sub(c.verbsAt) >= c.interval) {
			c.verbs, c.verbsAt = c.readVerbs(), now
		}
	}
	reported := 0
	for _, s := range c.sel {
		if err := ctx.Err(); err != nil {
			// The scrape's deadline passed (--web.scrape-timeout): stop;
			// the next scrape goes on from the cached state.
			return err
		}
		if c.collectProcess(s, now, devices, b) {
			reported++
		}
	}
	for pid, st := range c.procs {
		if st.gen != c.gen {
			c.dropProc(pid)
		}
	}
	b.Add(c.selected, float64(reported))
	b.Add(c.candidates, float64(candidates))
	for _, f := range procFiles {
		b.Add(c.errSeries[f], c.errCount[f].Value())
	}
	return nil
}

// parsePID parses a /proc entry name that is a PID.
func parsePID(name []byte) (int, bool) {
	if len(name) == 0 || len(name) > 9 {
		return 0, false
	}
	n := 0
	for _, ch := range name {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		n = n*10 + int(ch-'0')
	}
	return n, n > 0
}

// railDevices returns the RDMA devices that carry rails, sorted.
func (c *processCollector) railDevices(ctx context.Context) []string {
	if c.rails == nil {
		return nil
	}
	var out []string
	for _, r := range c.rails.Current(ctx) {
		if !contains(out, r.Device) {
			out = append(out, r.Device)
		}
	}
	sort.Strings(out)
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// matchCmdline reads /proc/PID/cmdline and matches it against the regexp.
// The command line may hold secrets (--api-key): it is matched in place and
// wiped, never kept, exported or logged.
func (c *processCollector) matchCmdline(pid int) bool {
	path := c.procfs + "/" + strconv.Itoa(pid) + "/cmdline"
	n, err := c.readInto(path, c.cmdBuf)
	line := c.cmdBuf[:n]
	defer clear(line)
	if err != nil {
		c.readError("cmdline", path, err)
		return false
	}
	for i, ch := range line {
		if ch == 0 {
			line[i] = ' '
		}
	}
	return c.re.Match(bytes.TrimRight(line, " "))
}

// readInto reads path into buf until EOF or buf is full.
func (c *processCollector) readInto(path string, buf []byte) (int, error) {
	f, err := c.open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	for n < len(buf) {
		m, err := f.Read(buf[n:])
		if err != nil {
			return n, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}

// procGone reports errors that mean the process exited.
func procGone(err error) bool {
	return sysfs.IsGone(err) || errors.Is(err, syscall.ESRCH)
}

// readError records a failed read of a /proc/PID file. A process that
// exited between the listing and the read is skipped silently.
func (c *processCollector) readError(file, path string, err error) {
	if procGone(err) {
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
func (c *processCollector) collectProcess(sel procSel, now time.Time, devices []string, b *exposition.Batch) bool {
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
	ps, err := parseProcStat(raw)
	if err != nil {
		c.readError("stat", st.statPath, err)
		c.dropProc(sel.pid)
		return false
	}
	if st.start != 0 && ps.starttime != st.start {
		// Another process has this PID now: start over, and check its
		// command line on the next scrape.
		c.dropProc(sel.pid)
		if cand := c.cands[sel.pid]; cand != nil {
			cand.checked = time.Time{}
		}
		return false
	}
	st.start = ps.starttime
	selectedBy := selCmdline
	switch {
	case sel.byGPU && sel.byCmd:
		selectedBy = selBoth
	case sel.byGPU:
		selectedBy = selGPU
	}
	if st.info == nil || string(ps.comm) != st.comm || selectedBy != st.selectedBy {
		st.comm, st.selectedBy = string(ps.comm), selectedBy
		c.bind(st)
	}
	b.Add(st.info, 1)
	b.Add(st.cpuUser, float64(ps.utime)/userHZ)
	b.Add(st.cpuSys, float64(ps.stime)/userHZ)
	b.Add(st.majflt, float64(ps.majflt))

	if raw, err := c.reader.Read(st.statusPath, c.statusBuf[:]); err != nil {
		c.readError("status", st.statusPath, err)
	} else if s, err := parseProcStatus(raw); err != nil {
		c.readError("status", st.statusPath, err)
	} else {
		if s.hasRSS {
			b.Add(st.rss, float64(s.vmRSS))
		}
		if s.hasCtx {
			b.Add(st.ctxVol, float64(s.volCtx))
			b.Add(st.ctxInv, float64(s.nonvolCtx))
		}
		c.addAllowed(st, s, b)
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

	if st.cgAt.IsZero() || now.Sub(st.cgAt) >= c.interval {
		c.readCgroup(st)
		st.cgAt = now
	}
	if st.inCont {
		c.containerName(st)
		b.Add(st.contInfo, 1)
	}

	if len(devices) > 0 && (st.visAt.IsZero() || now.Sub(st.visAt) >= c.interval) {
		c.checkVisibility(st, devices)
		st.visAt = now
	} else if len(devices) == 0 {
		st.vis = st.vis[:0]
	}
	for _, v := range st.vis {
		b.Add(v.s, b2f(v.ok))
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
	if st.inCont {
		st.contInfo = c.containerSeries(st)
	}
}

// readCgroup reads the container of a process from /proc/PID/cgroup
// (cgroup.go). A file that cannot be read or parsed leaves the process
// without a container: no label rather than a wrong one.
func (c *processCollector) readCgroup(st *procState) {
	path := st.dir + "/cgroup"
	if c.cgBuf == nil {
		c.cgBuf = make([]byte, maxCgroupFile+1)
	}
	n, err := c.readInto(path, c.cgBuf)
	if err == nil && n > maxCgroupFile {
		err = fmt.Errorf("%w: %s is larger than %d bytes", sysfs.ErrGarbage, path, maxCgroupFile)
	}
	if err != nil {
		c.readError("cgroup", path, err)
		st.inCont, st.contInfo = false, nil
		return
	}
	ref, ok := parseCgroupFile(c.cgBuf[:n])
	if !ok {
		st.inCont, st.contInfo = false, nil
		return
	}
	if !st.inCont || ref != st.cont {
		st.cont, st.inCont, st.contName = ref, true, ""
		st.contInfo = c.containerSeries(st)
	}
}

// containerSeries binds a process's container series. container_name is
// always a label of the family (one family per name in this process), empty
// without --collector.process.docker-host.
func (c *processCollector) containerSeries(st *procState) *exposition.Series {
	return c.container.With(st.pidS, st.comm, st.cont.runtime, st.cont.id, st.cont.podUID, st.contName)
}

// containerName refreshes the Docker name of a process's container from
// the cache (never waiting for the daemon) and rebinds its series when it
// changed.
func (c *processCollector) containerName(st *procState) {
	if c.docker == nil || !st.inCont || (st.cont.runtime != runtimeDocker && st.cont.runtime != runtimePodman) {
		return
	}
	if name := kubeLabel(c.docker.Name(st.cont.id)); name != st.contName {
		st.contName = name
		st.contInfo = c.containerSeries(st)
	}
}

// Close stops the Docker name lookups.
func (c *processCollector) Close() {
	if c.docker != nil {
		c.docker.Close()
	}
}

// addAllowed adds the NUMA nodes a process may run on and allocate from.
func (c *processCollector) addAllowed(st *procState, s procStatus, b *exposition.Batch) {
	if s.cpusAllowed != nil && len(c.nodes) > 0 {
		if st.allowed == nil || string(s.cpusAllowed) != st.cpusRaw {
			st.cpusRaw, st.allowed = string(s.cpusAllowed), nil
			if cpus, err := parseCPUList(s.cpusAllowed); err == nil {
				var names []string
				for _, n := range c.nodes {
					if cpus.intersects(n.cpus) {
						names = append(names, n.name)
					}
				}
				st.allowed = c.allowed.With(st.pidS, st.comm, strings.Join(names, ","))
			} else {
				c.readError("status", st.statusPath, err)
			}
		}
		b.Add(st.allowed, 1)
	}
	if s.memsAllow != nil {
		if st.memAllowed == nil || string(s.memsAllow) != st.memsRaw {
			st.memsRaw, st.memAllowed = string(s.memsAllow), nil
			if nodes, err := parseCPUList(s.memsAllow); err == nil { // same list format
				st.memAllowed = c.memAllowed.With(st.pidS, st.comm, expandList(nodes))
			} else {
				c.readError("status", st.statusPath, err)
			}
		}
		b.Add(st.memAllowed, 1)
	}
}

// expandList formats a set as "0,1,2".
func expandList(s cpuSet) string {
	var b strings.Builder
	for i := 0; i < len(s)*64; i++ {
		if s.has(i) {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(i))
		}
	}
	return b.String()
}

// readNumaMaps sums /proc/PID/numa_maps per node. Nodes of the host with
// none of the process's memory report 0.
func (c *processCollector) readNumaMaps(st *procState) {
	path := st.dir + "/numa_maps"
	c.nm.reset()
	f, err := c.open(path)
	if err == nil {
		total := 0
		for {
			n, rerr := f.Read(c.chunk)
			if rerr != nil {
				err = &os.PathError{Op: "read", Path: path, Err: rerr}
				break
			}
			if n == 0 {
				break
			}
			c.nm.write(c.chunk[:n])
			if total += n; total > maxNumaMaps {
				err = fmt.Errorf("%w: %s is larger than %d bytes", sysfs.ErrGarbage, path, maxNumaMaps)
				break
			}
		}
		f.Close()
		c.nm.finish()
	}
	if err != nil {
		c.readError("numa_maps", path, err)
		st.numa = st.numa[:0]
		return
	}
	// Every node of the host, and any other node numa_maps names.
	var want []int
	for _, n := range c.nodes {
		want = append(want, n.id)
	}
	for node, v := range c.nm.bytes {
		if v > 0 && !containsInt(want, node) {
			want = append(want, node)
		}
	}
	sort.Ints(want)
	same := len(want) == len(st.numa)
	for i := 0; same && i < len(want); i++ {
		same = st.numa[i].node == strconv.Itoa(want[i])
	}
	if !same {
		st.numa = st.numa[:0]
		for _, node := range want {
			id := strconv.Itoa(node)
			st.numa = append(st.numa, procNuma{node: id, s: c.numaMem.With(st.pidS, st.comm, id)})
		}
	}
	for i, node := range want {
		st.numa[i].v = 0
		if node < len(c.nm.bytes) {
			st.numa[i].v = float64(c.nm.bytes[node])
		}
	}
}

func containsInt(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// readEnviron reads the allow-listed NCCL variables of a process, once per
// process (environ is the environment at exec and does not change). The
// buffer is wiped after use: the rest of the environment is never kept.
func (c *processCollector) readEnviron(st *procState) {
	path := st.dir + "/environ"
	f, err := c.open(path)
	if err != nil {
		c.readError("environ", path, err)
		return
	}
	defer f.Close()
	if c.envBuf == nil {
		c.envBuf = make([]byte, 0, 16<<10)
	}
	buf := c.envBuf[:0]
	defer func() {
		clear(buf[:cap(buf)])
		if cap(buf) > envKeep {
			buf = nil
		}
		c.envBuf = buf[:0]
	}()
	for len(buf) < maxEnviron {
		if len(buf) == cap(buf) { // grow, wiping the old array
			nb := make([]byte, len(buf), 2*cap(buf))
			copy(nb, buf)
			clear(buf)
			buf = nb
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		if err != nil {
			c.readError("environ", path, &os.PathError{Op: "read", Path: path, Err: err})
			return
		}
		if n == 0 {
			break
		}
		buf = buf[:len(buf)+n]
	}
	st.envVars = st.envVars[:0]
	ncclEnv(buf, func(name string, value []byte) {
		v := strings.ToValidUTF8(string(value), "\uFFFD")
		st.envVars = append(st.envVars, envVar{name: name, value: v, s: c.nccl.With(st.pidS, st.comm, name, v)})
	})
	st.envDone = true
}

// readVerbs maps RDMA devices to their uverbs character devices
// (class/infiniband_verbs/uverbsN/ibdev).
func (c *processCollector) readVerbs() map[string]string {
	m := map[string]string{}
	dir := filepath.Join(c.sysfs, "class", "infiniband_verbs")
	names, _ := sysfs.ListDir(dir, false)
	for _, n := range names {
		if !strings.HasPrefix(n, "uverbs") {
			continue
		}
		if dev := sysfs.ReadSmall(c.sysfs, filepath.Join(dir, n, "ibdev")); dev != "" {
			m[dev] = n
		}
	}
	return m
}

// refreshNodes re-reads the CPU lists of the host's NUMA nodes.
func (c *processCollector) refreshNodes(now time.Time) {
	if !c.nodesAt.IsZero() && now.Sub(c.nodesAt) < nodeRefresh {
		return
	}
	c.nodesAt = now
	c.nodes = c.nodes[:0]
	dir := filepath.Join(c.sysfs, "devices", "system", "node")
	names, _ := sysfs.ListDir(dir, false)
	for _, n := range names {
		id, ok := nodeID(n)
		if !ok {
			continue
		}
		num, _ := strconv.Atoi(id)
		cpus, _ := parseCPUList([]byte(sysfs.ReadSmall(c.sysfs, filepath.Join(dir, n, "cpulist"))))
		c.nodes = append(c.nodes, sysNode{id: num, name: id, cpus: cpus})
	}
	sort.Slice(c.nodes, func(i, j int) bool { return c.nodes[i].id < c.nodes[j].id })
}

// checkVisibility looks up each rail device's verbs node and rdma_cm under
// /dev/infiniband in the process's root.
func (c *processCollector) checkVisibility(st *procState, devices []string) {
	old := st.vis
	st.vis = nil
	root := st.dir + "/root"
	rootFD, err := c.openRoot(root)
	if err != nil {
		c.readError(procFileRoot, root, err)
		return
	}
	defer unix.Close(rootFD)
	for _, dev := range devices {
		for _, node := range [2]string{c.verbs[dev], rdmaCMNode} {
			ok := false
			if node != "" {
				var err error
				if ok, err = c.existsInRoot(rootFD, root, "dev/infiniband/"+node); err != nil {
					c.readError(procFileRoot, root, err)
				}
			}
			v := procVis{device: dev, node: node, ok: ok}
			if i := len(st.vis); i < len(old) && old[i].device == dev && old[i].node == node {
				v.s = old[i].s
			} else {
				v.s = c.visible.With(st.pidS, st.comm, dev, node)
			}
			st.vis = append(st.vis, v)
		}
	}
}

// existsInRoot reports whether rel exists, and is not a directory, inside
// the root directory rootFD (path root), resolving symlinks as the process
// sees them: absolute targets from its root, ".." never above it. Nothing
// outside the root is ever looked up. openat2(RESOLVE_IN_ROOT) does this in
// the kernel; without it (kernel < 5.6, seccomp) the path is walked with
// lstat.
func (c *processCollector) existsInRoot(rootFD int, root, rel string) (bool, error) {
	if !c.noOpenat2 {
		how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
		fd, err := unix.Openat2(rootFD, rel, &how)
		switch {
		case err == nil:
			var st unix.Stat_t
			err = unix.Fstat(fd, &st)
			unix.Close(fd)
			if err != nil {
				return false, &os.PathError{Op: "fstat", Path: root + "/" + rel, Err: err}
			}
			return st.Mode&unix.S_IFMT != unix.S_IFDIR, nil
		case err == unix.ENOSYS || err == unix.EPERM:
			c.noOpenat2 = true
		case err == unix.ENOENT || err == unix.ENOTDIR || err == unix.ELOOP || err == unix.EXDEV:
			return false, nil
		default:
			return false, &os.PathError{Op: "openat2", Path: root + "/" + rel, Err: err}
		}
	}
	return lookupInRoot(root, rel)
}

// lookupInRoot is existsInRoot by hand: every component is checked with
// lstat and symlinks are resolved against root, never followed by the
// kernel.
func lookupInRoot(root, rel string) (bool, error) {
	var cur []string
	todo := strings.Split(rel, "/")
	links := 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			if len(cur) > 0 {
				cur = cur[:len(cur)-1]
			}
			continue
		}
		p := root + "/" + strings.Join(append(cur, name), "/")
		fi, err := os.Lstat(p)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				return false, nil
			}
			return false, err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			if links++; links > maxSymlinks {
				return false, nil
			}
			target, err := os.Readlink(p)
			if err != nil {
				return false, err
			}
			if strings.HasPrefix(target, "/") {
				cur = cur[:0]
			}
			todo = append(strings.Split(target, "/"), todo...)
			continue
		}
		if len(todo) == 0 {
			return !fi.IsDir(), nil
		}
		if !fi.IsDir() {
			return false, nil
		}
		cur = append(cur, name)
	}
	return false, nil
}

// gpuPIDs returns the inventory's PID lister, nil without an inventory.
func gpuPIDs(g GPUInventory) func(context.Context) []int {
	if g == nil {
		return nil
	}
	return g.PIDs
}
