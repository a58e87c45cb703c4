// Package procwatch keeps the table of the serving processes that the
// process collector reports and the nccl-ras collector joins NCCL ranks
// to: which processes (a command-line pattern, the GPUs' compute
// processes, a cap), and what /proc, sysfs and RDMA netlink say of each
// (CPU, memory, NUMA placement, the allow-listed NCCL environment, the
// container, whether the rails' RDMA devices are visible in its root, its
// open verbs devices and queue pairs, its PID and network namespaces).
//
// The reads run off the scrape path: the collector's poller calls Refresh
// every interval (and at once after Nudge), Refresh publishes an immutable
// Snapshot, and a scrape, or a join of an NCCL rank, reads the last one.
// The parsers are internal/proc's; this package knows nothing of metrics.
//
// Cost bounds (one Refresh): the /proc listing; for each new PID its
// command line (then after 10 s, 20 s … up to every 5 minutes); for each
// selected process (at most Options.Max) stat and status with one pread
// each on kept-open descriptors; every Options.Slow per process, and at
// once for a nudged one: numa_maps (the kernel walks the page tables under
// the mmap lock), cgroup, its root's /dev/infiniband, its fd links (at most
// MaxVerbsFDs), its network namespace; once per process its environment;
// one RDMA netlink queue-pair listing per Options.Slow (or nudge).
package procwatch

import (
	"context"
	"errors"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabric-exporter/fabric_exporter/internal/proc"
	"github.com/fabric-exporter/fabric_exporter/internal/rdmanl"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// Options configures a Watcher.
type Options struct {
	Procfs, Sysfs string
	// Cmdline selects processes whose command line (arguments joined by
	// spaces) matches; nil selects the GPUs' processes only.
	Cmdline *regexp.Regexp
	// Max bounds the processes kept (GPU processes first, then by PID).
	Max int
	// Slow is the minimum time between two slow reads of one process
	// (numa_maps, cgroup, the rail devices in its root, its fds, its
	// network namespace) and, unless QPInterval is set, between two
	// queue-pair listings; 0: every Refresh.
	Slow time.Duration
	// QPInterval, when above 0, is the minimum time between two
	// queue-pair listings instead of Slow: one RDMA netlink dump for all
	// processes, cheap beside numa_maps, and the source of the rails a rank
	// uses (a rail lost mid-run is seen within it).
	QPInterval time.Duration
}

// Sources is what the watcher asks of the rest of the exporter; any may be
// nil.
type Sources struct {
	// GPUPIDs returns the compute processes on the host's GPUs, PIDs of
	// the namespace of Options.Procfs.
	GPUPIDs func(ctx context.Context) []int
	// RailDevices returns the RDMA devices that carry rails present on
	// the host now, sorted by name.
	RailDevices func(ctx context.Context) []RailDevice
	// QPs lists queue pairs over RDMA netlink (rdmanl.NewClient()), or
	// from a file written for a fixture /proc (rdmanl.NewFixture).
	QPs rdmanl.Source
	// ReadError is told of every failed read of a /proc file other than
	// a process that exited (file: "stat", "status", "numa_maps", …).
	ReadError func(file, path string, err error)
	// Notes logs once per key (collector.OnceLogger).
	Notes Notes
}

// Notes logs a message once per key until the key is cleared.
type Notes interface {
	Warn(key string, keyvals ...any)
	Debug(key string, keyvals ...any)
	Clear(key string) bool
}

type nopNotes struct{}

func (nopNotes) Warn(string, ...any)  {}
func (nopNotes) Debug(string, ...any) {}
func (nopNotes) Clear(string) bool    { return false }

// RailDevice is an RDMA device that carries rails, with the rails' ports.
type RailDevice struct {
	Name  string
	Ports []int
}

// Files whose failed reads are told to Sources.ReadError.
const (
	FileCmdline  = "cmdline"
	FileStat     = "stat"
	FileStatus   = "status"
	FileNumaMaps = "numa_maps"
	FileEnviron  = "environ"
	FileCgroup   = "cgroup"
	FileFD       = "fd"
	FileRoot     = "root"
	FileNet      = "net"
)

// IO is how a watcher reads.
type IO struct {
	Reader   *sysfs.Reader // stat and status, kept open
	Open     func(path string) (proc.File, error)
	OpenRoot func(path string) (int, error)
	ScanDir  func(dir string, fn func(name []byte)) error
	Readlink func(path string, buf []byte) (int, error)
	Roots    proc.RootResolver // lookups in a process's root
	MaxFDs   int               // fd links read per process and read
	Getpid   func() int        // os.Getpid: the exporter's PID in its own namespace
}

// Watcher keeps the process table. Refresh is called by one goroutine at a
// time; Snapshot, Nudge and the joins may be called from any goroutine.
type Watcher struct {
	o   Options
	src Sources
	now func() time.Time

	selection
	hostNodes
	railVerbs
	qps
	netns

	// IO is how the watcher reads; tests replace parts of it before the
	// first Refresh.
	IO IO

	procs map[int]*procState
	nm    proc.NumaMaps

	statBuf   [sysfs.MaxAttrSize]byte
	statusBuf [16 << 10]byte
	chunk     []byte
	cmdBuf    []byte
	cgBuf     []byte
	envBuf    []byte
	netBuf    []byte
	fdNums    []int
	linkBuf   [64]byte

	snap atomic.Pointer[Snapshot]
	// first is closed after the first Refresh.
	first     chan struct{}
	firstOnce sync.Once

	mu      sync.Mutex
	nudged  map[int]bool // PIDs whose evidence is re-read at the next Refresh
	nudgeQP bool
}

// New makes a watcher; nothing is read before the first Refresh.
func New(o Options, src Sources) *Watcher {
	if o.Procfs == "" {
		o.Procfs = "/proc"
	}
	if o.Max < 1 {
		o.Max = 1
	}
	if src.Notes == nil {
		src.Notes = nopNotes{}
	}
	if src.ReadError == nil {
		src.ReadError = func(string, string, error) {}
	}
	w := &Watcher{
		o: o, src: src, now: time.Now,
		IO: IO{Reader: sysfs.NewReader(), Open: proc.Open, OpenRoot: proc.OpenRoot,
			ScanDir: sysfs.ScanDir, Readlink: unix.Readlink, MaxFDs: MaxVerbsFDs, Getpid: os.Getpid},
		procs: map[int]*procState{},
		chunk: make([]byte, procChunk), cmdBuf: make([]byte, maxCmdline),
		first: make(chan struct{}), nudged: map[int]bool{},
	}
	w.selection = newSelection(o.Cmdline, w.matchCmdline, o.Max, src.GPUPIDs)
	w.qps = newQPs(src.QPs)
	w.netns = newNetns()
	return w
}

// SetClock replaces the watcher's clock (tests).
func (w *Watcher) SetClock(now func() time.Time) { w.now = now }

// Snapshot returns the last published table; nil before the first Refresh.
func (w *Watcher) Snapshot() *Snapshot { return w.snap.Load() }

// Ready is closed after the first Refresh.
func (w *Watcher) Ready() <-chan struct{} { return w.first }

// Nudge asks the next Refresh to re-read the evidence of RDMA use (fds,
// the rail devices in the root, queue pairs) of these processes whatever
// Options.Slow says: NCCL opened its devices after the last read.
func (w *Watcher) Nudge(pids ...int) {
	w.mu.Lock()
	for _, p := range pids {
		w.nudged[p] = true
	}
	w.nudgeQP = w.nudgeQP || len(pids) > 0
	w.mu.Unlock()
}

// takeNudged returns and clears the nudged PIDs.
func (w *Watcher) takeNudged() (map[int]bool, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.nudged) == 0 && !w.nudgeQP {
		return nil, false
	}
	n, qp := w.nudged, w.nudgeQP
	w.nudged, w.nudgeQP = map[int]bool{}, false
	return n, qp
}

// ErrNoProcesses is the Snapshot's error when the procfs lists no process.
var ErrNoProcesses = errors.New("procfs lists no process")

// Refresh reads what is due and publishes a new Snapshot.
func (w *Watcher) Refresh(ctx context.Context) {
	now := w.now()
	defer w.firstOnce.Do(func() { close(w.first) })
	w.gen++
	snap := &Snapshot{At: now, Procfs: w.o.Procfs}
	if err := w.listPIDs(w.o.Procfs); err != nil {
		snap.Err = err
		w.snap.Store(snap)
		return
	}
	if len(w.pids) == 0 {
		snap.Err = ErrNoProcesses
		w.snap.Store(snap)
		return
	}
	w.self, _ = SelfPID(w.o.Procfs)
	snap.Candidates = w.choose(ctx, now)
	nudged, nudgeQP := w.takeNudged()
	var devs []RailDevice
	if w.src.RailDevices != nil {
		devs = w.src.RailDevices(ctx)
	}
	var visible []string // rail devices with a verbs node on the host
	if len(w.sel) > 0 {
		w.refreshNodes(w.o.Sysfs, now)
		qpEvery := w.o.Slow
		if w.o.QPInterval > 0 {
			qpEvery = w.o.QPInterval
		}
		w.refreshQPs(ctx, now, qpEvery, nudgeQP, w)
		if len(devs) > 0 {
			w.refreshVerbs(w.o.Sysfs, devs, now, w.o.Slow)
			visible = w.visibleDevices(devs)
		}
		if w.selfAt.IsZero() || now.Sub(w.selfAt) >= w.o.Slow {
			w.refreshSelfNetns()
			w.selfAt = now
		}
	}
	snap.RailDevices, snap.VisibleDevices = devs, visible
	snap.Procs = make([]Process, 0, len(w.sel))
	for _, s := range w.sel {
		if ctx.Err() != nil {
			break // stopping: publish what was read
		}
		if st := w.readProcess(s, now, visible, nudged[s.pid]); st != nil {
			snap.Procs = append(snap.Procs, w.publish(st))
		}
	}
	for pid, st := range w.procs {
		if st.gen != w.gen {
			w.drop(pid)
		}
	}
	w.netnsGC()
	snap.Self = w.self
	snap.QP = w.qpState()
	snap.QPOwners = w.qpOwners()
	snap.SelfNetNS = w.selfNS
	w.snap.Store(snap)
}

// drop forgets a process.
func (w *Watcher) drop(pid int) {
	if st, ok := w.procs[pid]; ok {
		w.IO.Reader.ForgetPrefix(st.dir)
		delete(w.procs, pid)
	}
}

// readError tells of a failed read of a /proc file; a process that exited
// between the listing and the read is skipped silently.
func (w *Watcher) readError(file, path string, err error) {
	if proc.Gone(err) {
		return
	}
	w.src.ReadError(file, path, err)
}

// Procfs returns the procfs the watcher reads.
func (w *Watcher) Procfs() string { return w.o.Procfs }

// Max returns the cap on the processes kept.
func (w *Watcher) Max() int { return w.o.Max }

// Close releases the queue-pair source.
func (w *Watcher) Close() {
	if cl, ok := w.src.QPs.(interface{ Close() error }); ok {
		cl.Close()
	}
}

// Now reads the watcher's clock.
func (w *Watcher) Now() time.Time { return w.now() }

// Forget drops what the watcher keeps of every process: each is read anew
// at the next Refresh (tests).
func (w *Watcher) Forget() {
	for pid := range w.procs {
		w.drop(pid)
	}
}

// Recheck makes the command lines of pids (every PID without any) be read
// at the next Refresh (tests).
func (w *Watcher) Recheck(pids ...int) {
	if len(pids) == 0 {
		for pid := range w.cands {
			w.recheck(pid)
		}
	}
	for _, pid := range pids {
		w.recheck(pid)
	}
}

// CmdlineWait returns how long the watcher waits before it reads pid's
// command line again (tests).
func (w *Watcher) CmdlineWait(pid int) time.Duration {
	if c := w.cands[pid]; c != nil {
		return c.wait
	}
	return 0
}

// SetQPSource replaces the queue-pair source (tests).
func (w *Watcher) SetQPSource(src rdmanl.Source) { w.qps.src = src }

// Buffers returns the buffers that held environments and command lines,
// to their capacity: tests check that no secret is left in them.
func (w *Watcher) Buffers() [][]byte {
	return [][]byte{w.envBuf[:cap(w.envBuf)], w.cmdBuf[:cap(w.cmdBuf)]}
}
