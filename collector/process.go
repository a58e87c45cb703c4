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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/procwatch"
	"github.com/fabric-exporter/fabric_exporter/internal/rdmanl"
)

// The process collector watches the serving processes: where their memory
// sits (NUMA), their CPU, the NCCL settings of their environment, their
// container, whether the rail RDMA devices are visible inside their mount
// namespace and whether they use them. Reading another user's numa_maps,
// environ, fds and root needs root (or CAP_SYS_PTRACE), and a container
// needs the host PID namespace.
//
// The reads are internal/procwatch's, on the shared poller: the process
// table is refreshed every --collector.process.interval (the slow reads
// every --collector.process.numa-maps-interval) and at once when the
// nccl-ras collector nudges it (a rank's evidence older than its
// communicator); a scrape turns the last table into samples. The
// collector is split by concern: this file holds the options, the
// families and Update; process_series.go binds and adds a process's
// series; process_required.go judges which rail devices a process needs,
// process_cause.go why it would fall back to sockets (fallback_cause.go);
// process_container.go the container labels (docker.go the Docker names);
// process_ras.go the inventory other collectors read (Env.Processes: RAS
// targets, the table for the rank joins).

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
	// Interval is how often the process table is refreshed in the
	// background (0: 5 s).
	Interval time.Duration
	// NumaMapsInterval is the minimum time between two slow reads of a
	// process (numa_maps, cgroup, its root's /dev/infiniband, its fds,
	// its network namespace) and between two queue-pair listings; 0: every
	// refresh.
	NumaMapsInterval time.Duration
	// RDMAQPInterval is the minimum time between two RDMA netlink
	// queue-pair listings (0: as NumaMapsInterval).
	RDMAQPInterval time.Duration
	// DockerHost is the Docker Engine API address for container names
	// ("" = off).
	DockerHost string
	// RDMAQPFixture is a file holding what `rdma -j resource show qp`
	// prints, read instead of RDMA netlink; its PIDs are those of the
	// procfs ("" = netlink).
	RDMAQPFixture string
}

// defaultProcessInterval is the refresh of the process table.
const defaultProcessInterval = 5 * time.Second

func processFlags(app *kingpin.Application, o *Options) {
	app.Flag("collector.process.cmdline", "Regexp (unanchored) matched against each process's command line, arguments joined by spaces, to select serving processes; processes the gpu collector sees on a GPU are selected too. Empty: GPU processes only. The exporter's own process is never selected. The default matches SGLang servers.").
		Default(DefaultProcessCmdline).StringVar(&o.Process.Cmdline)
	app.Flag("collector.process.max", "Most processes the process collector reports (GPU processes first, then by PID).").Default("64").IntVar(&o.Process.Max)
	app.Flag("collector.process.interval", "How often the process table is refreshed in the background (the /proc listing, each selected process's stat and status); a scrape reports the last refresh.").
		Default("5s").Action(atLeastDuration("collector.process.interval", &o.Process.Interval, 100*time.Millisecond)).DurationVar(&o.Process.Interval)
	app.Flag("collector.process.numa-maps-interval", "Minimum time between two reads of a process's /proc/PID/numa_maps (the kernel walks the page tables of the whole process under its mmap lock to write it), cgroup, network namespace, /dev/infiniband and open verbs fds (/proc/PID/fd); the last values are reported in between. A process that NCCL's RAS service newly reports as a rank has its fds and queue pairs re-read at once. 0: every refresh.").
		Default("60s").DurationVar(&o.Process.NumaMapsInterval)
	app.Flag("collector.process.rdma-qp-interval", "Minimum time between two RDMA netlink queue-pair listings (one dump for every process: fabric_rdma_owner_queue_pairs, the rails each rank sends on). A rail a rank stops using is seen within it (NCCLRankLostRail pages within 2 minutes of the fault at 15s). 0: as --collector.process.numa-maps-interval.").
		Default("15s").DurationVar(&o.Process.RDMAQPInterval)
	app.Flag("collector.process.docker-host", "Docker Engine API address (e.g. unix:///var/run/docker.sock) to add each Docker (or Podman) container's name to fabric_process_container_info as container_name; looked up in the background and cached per container ID, never during a scrape. Empty: off.").
		Default("").StringVar(&o.Process.DockerHost)
	app.Flag("collector.process.rdma-qp-fixture", "Read the queue-pair listing from FILE (what `rdma -j resource show qp` prints) instead of RDMA netlink; its PIDs are those of --path.procfs (demos and tests).").
		PlaceHolder("FILE").Hidden().StringVar(&o.Process.RDMAQPFixture)
}

// procFiles are the /proc/PID files whose failed reads are counted (an
// array: never written).
var procFiles = [...]string{procwatch.FileCgroup, procwatch.FileCmdline, procwatch.FileEnviron, procwatch.FileFD,
	procwatch.FileNet, procwatch.FileNumaMaps, procwatch.FileRoot, procwatch.FileStat, procwatch.FileStatus}

type processCollector struct {
	env    Env
	w      *procwatch.Watcher
	poller // refreshes w; not started in tests (Update refreshes inline)
	// listenAsked: when RASTargets last asked for a process's fds to be
	// re-read because its RAS listener was not seen (process_ras.go).
	listenMu    sync.Mutex
	listenAsked map[int]time.Time
	rails       *Rails
	sysfs       string
	slow        time.Duration
	docker      *dockerNames // nil without --collector.process.docker-host

	// causeRails is what the fallback causes need of the rails, read
	// after each refresh (process_cause.go).
	causeRails atomic.Pointer[railCause]

	series map[int]*procSeries // bound series per PID (process_series.go)
	gen    uint64

	errCount  map[string]*exposition.Counter
	errSeries map[string]*exposition.Series
	families  processFamilies
}

func newProcessCollector(env Env, o *Options) (Collector, error) {
	c, err := newProcessState(env, o)
	if err != nil {
		return nil, err
	}
	c.poller.start(c.interval(o), c.refresh)
	return c, nil
}

func (c *processCollector) interval(o *Options) time.Duration {
	if o.Process.Interval > 0 {
		return o.Process.Interval
	}
	return defaultProcessInterval
}

// newProcessState builds the collector without starting its poller.
func newProcessState(env Env, o *Options) (*processCollector, error) {
	p := o.Process
	if p.Max < 1 {
		return nil, fmt.Errorf("--collector.process.max must be at least 1, not %d", p.Max)
	}
	if p.NumaMapsInterval < 0 {
		return nil, fmt.Errorf("--collector.process.numa-maps-interval must not be negative")
	}
	if p.RDMAQPInterval < 0 {
		return nil, fmt.Errorf("--collector.process.rdma-qp-interval=%s must not be negative", p.RDMAQPInterval)
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
	c := &processCollector{
		env: env, rails: o.Rails, sysfs: o.SysfsPath, slow: p.NumaMapsInterval,
		series: map[int]*procSeries{}, families: newProcessFamilies(env.Families),
		errCount: map[string]*exposition.Counter{}, errSeries: map[string]*exposition.Series{},
	}
	// RDMA netlink off the table's refresh: a wedged HCA's firmware
	// delays the queue pairs, not the processes (procwatch.AsyncQPs).
	var qps rdmanl.Source = &procwatch.AsyncQPs{Src: rdmanl.NewClient(), Wait: 500 * time.Millisecond, Done: func() { c.Wake() }}
	if p.RDMAQPFixture != "" {
		qps = rdmanl.NewFixture(p.RDMAQPFixture)
	}
	src := procwatch.Sources{QPs: qps, ReadError: c.readError, Notes: processNotes{c}}
	if env.GPUs != nil {
		src.GPUPIDs = env.GPUs.PIDs
	}
	if o.Rails != nil {
		src.RailDevices = c.railDevices
	}
	c.w = procwatch.New(procwatch.Options{Procfs: procfs, Sysfs: o.SysfsPath, Cmdline: re, Max: p.Max, Slow: p.NumaMapsInterval, QPInterval: p.RDMAQPInterval}, src)
	if p.DockerHost != "" {
		d, err := newDockerNames(env, p.DockerHost)
		if err != nil {
			return nil, fmt.Errorf("--collector.process.docker-host: %w", err)
		}
		c.docker = d
	}
	for _, f := range procFiles {
		c.errCount[f] = &exposition.Counter{}
		c.errSeries[f] = c.families.errors.With(f)
	}
	return c, nil
}

// refresh is the poller's work: the process table, then what the causes
// need of the rails.
func (c *processCollector) refresh(ctx context.Context) {
	c.w.Refresh(ctx)
	c.refreshRailCause(ctx)
}

func (c *processCollector) Update(ctx context.Context, b *exposition.Batch) error {
	if err := ctx.Err(); err != nil {
		return err // the scrape's deadline passed already
	}
	if !c.started() {
		c.refresh(ctx) // tests: no poller
	}
	select {
	case <-c.w.Ready():
	case <-ctx.Done():
		return ctx.Err()
	}
	return c.export(b)
}

// export adds the last process table's samples (no I/O).
func (c *processCollector) export(b *exposition.Batch) error {
	snap := c.w.Snapshot()
	if snap.Err != nil {
		if errors.Is(snap.Err, procwatch.ErrNoProcesses) {
			if err := checkProcfs(c.w.Procfs()); err != nil {
				return err
			}
			return sourceMissing(c.w.Procfs(), procfsFix, "--path.procfs %s lists no process", c.w.Procfs())
		}
		if errors.Is(snap.Err, os.ErrNotExist) {
			return checkProcfs(c.w.Procfs())
		}
		return fmt.Errorf("listing processes: %w", snap.Err)
	}
	if snap.Candidates > len(snap.Procs) && snap.Candidates > c.w.Max() {
		c.env.Once.Warn("process-max", "msg", "more serving processes than --collector.process.max; the rest are not reported", "candidates", snap.Candidates, "max", c.w.Max())
	} else {
		c.env.Once.Clear("process-max")
	}
	c.gen++
	rc := c.causeRails.Load()
	for i := range snap.Procs {
		c.addProcess(&snap.Procs[i], snap, rc, b)
	}
	for pid, s := range c.series {
		if s.gen != c.gen {
			delete(c.series, pid)
		}
	}
	f := &c.families
	b.Add(f.selected, float64(len(snap.Procs)))
	b.Add(f.candidates, float64(snap.Candidates))
	for _, name := range procFiles {
		b.Add(c.errSeries[name], c.errCount[name].Value())
	}
	if snap.QP.Tried {
		b.Add(f.qpAvail, b2f(snap.QP.OK))
	}
	if snap.QP.OK {
		for _, d := range snap.QP.Devices {
			b.AddWith(f.qpListed, 1, d)
		}
		for _, d := range snap.QP.Failed {
			b.AddWith(f.qpListed, 0, d)
		}
	}
	for i := range snap.QPOwners {
		o := &snap.QPOwners[i]
		pid := strconv.Itoa(o.PID)
		for _, n := range o.Counts {
			b.AddWith(f.qpOwners, float64(n.N), pid, o.Comm, n.Device, n.State, o.Container.ID, o.Container.PodUID)
		}
	}
	return nil
}

// readError counts a failed read of a /proc/PID file (procwatch tells of
// those of processes that did not exit).
func (c *processCollector) readError(file, path string, err error) {
	if n := c.errCount[file]; n != nil {
		n.Inc()
	}
	c.env.ReadErrors.Inc()
	if errors.Is(err, fs.ErrPermission) {
		c.env.Once.Warn("perm:"+file, "msg", "permission denied reading a process file: the process collector needs root (or CAP_SYS_PTRACE) and the host PID namespace", "path", path, "err", err)
		return
	}
	c.env.Once.Debug("err:"+file, "msg", "skipping a process file", "path", path, "err", err)
}

// processNotes logs the watcher's notes through the collector's current
// once-logger.
type processNotes struct{ c *processCollector }

func (n processNotes) Warn(key string, kv ...any)  { n.c.env.Once.Warn(key, kv...) }
func (n processNotes) Debug(key string, kv ...any) { n.c.env.Once.Debug(key, kv...) }
func (n processNotes) Clear(key string) bool       { return n.c.env.Once.Clear(key) }

// railDevices returns the RDMA devices that carry rails present on the
// host now, sorted, each with its rails' ports; a rail whose device is gone
// is left out.
func (c *processCollector) railDevices(ctx context.Context) []procwatch.RailDevice {
	var out []procwatch.RailDevice
	for _, r := range c.rails.Current(ctx) {
		if !r.Present {
			continue
		}
		port, _ := strconv.Atoi(r.Port)
		i := slices.IndexFunc(out, func(d procwatch.RailDevice) bool { return d.Name == r.Device })
		if i < 0 {
			i = len(out)
			out = append(out, procwatch.RailDevice{Name: r.Device})
		}
		if !slices.Contains(out[i].Ports, port) {
			out[i].Ports = append(out[i].Ports, port)
		}
	}
	slices.SortFunc(out, func(a, b procwatch.RailDevice) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Close stops the refresh and the Docker name lookups.
func (c *processCollector) Close() {
	c.poller.Close()
	if c.docker != nil {
		c.docker.Close()
	}
	c.w.Close()
}
