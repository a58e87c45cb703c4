package procwatch

import (
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/proc"
)

// Snapshot is the process table at one Refresh. It is never changed once
// published: readers may keep it.
type Snapshot struct {
	At     time.Time
	Procfs string
	Err    error // the listing failed (the procfs is missing) or was empty
	// Candidates counts the processes that matched before the cap.
	Candidates int
	Procs      []Process // sorted by PID
	// Self is the exporter's PID in the namespace of the procfs (0: not in it).
	Self int
	// RailDevices are the rail devices of this Refresh; VisibleDevices
	// those with a verbs node on the host.
	RailDevices    []RailDevice
	VisibleDevices []string
	QP             QPState
	// QPOwners are the processes that own user queue pairs in the last
	// listing (selected or not), by PID, at most 256.
	QPOwners []QPOwner
	// SelfNetNS is the exporter's own network namespace (0: unknown).
	SelfNetNS uint64
}

// Process is what the table holds of one process.
type Process struct {
	PID   int
	Start uint64 // starttime (clock ticks since boot): PID reuse changes it
	Comm  string
	// ByCmd, ByGPU: why it was selected.
	ByCmd, ByGPU bool

	// stat, read at every Refresh.
	UTime, STime, MajFlt uint64 // ticks, ticks, count
	State                byte   // /proc/PID/stat field 3 at the last read

	// status, read at every Refresh (HasStatus false when unreadable).
	HasStatus         bool
	HasRSS            bool
	RSS               uint64
	HasCtx            bool
	VolCtx, NonvolCtx uint64
	// AllowedNodes: the host's NUMA nodes whose CPUs the process may run
	// on, comma-separated; MemNodes its Mems_allowed_list expanded.
	HasAllowed, HasMemNodes bool
	AllowedNodes, MemNodes  string
	// NSLevels is the length of the NSpid line (1: the namespace of the
	// procfs; more: a nested one; 0: no NSpid line); OwnPID the PID the
	// process knows itself by (getpid() inside its namespace).
	NSLevels int
	OwnPID   int

	// Numa is its memory per NUMA node (nil until read or when unreadable).
	Numa []NodeMem

	// EnvRead: the environment was read (once per process); Env holds the
	// allow-listed NCCL variables, MultiNode the launcher's verdict.
	EnvRead   bool
	Env       []EnvVar
	MultiNode bool
	// ConfFrom names the variables of Env that NCCL's configuration files
	// set (NCCL_CONF_FILE or ~/.nccl.conf, /etc/nccl.conf in the process's
	// root) and the environment did not; ConfUnread says why a file could
	// not be read (its variables unknown), empty when all were.
	ConfFrom   []string
	ConfUnread string

	// Container is its container, when InContainer.
	InContainer bool
	Container   proc.Container

	// Vis are the rail devices' nodes looked up in its root; FDsRead says
	// whether its fd directory was read; VerbsFDs counts its fds on any
	// verbs node, RailFDs those on each visible rail device's.
	// EvidenceAt is when they were read.
	Vis     []Vis
	FDsRead bool
	// Sockets are the inodes of its socket fds (at most 4096), read with
	// its fds: what it listens on is its own.
	Sockets    []uint64
	VerbsFDs   int
	RailFDs    []DevCount
	EvidenceAt time.Time

	// NetNS is its network namespace (0: unknown), NetAddrs the local
	// addresses of that namespace (nil when unread).
	NetNS    uint64
	NetAddrs []netip.Addr

	// QPs are its queue pairs on each device of the last listing (every
	// thread's, counted for the process), when QP.OK.
	QPs []DevCount
}

// SelectedBy is the selected_by label: cmdline, gpu or both.
func (p *Process) SelectedBy() string {
	switch {
	case p.ByGPU && p.ByCmd:
		return "cmdline,gpu"
	case p.ByGPU:
		return "gpu"
	}
	return "cmdline"
}

// Getenv returns an allow-listed variable of the process's environment.
func (p *Process) Getenv(name string) (string, bool) {
	for _, e := range p.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// NodeMem is memory on one NUMA node.
type NodeMem struct {
	Node  string
	Bytes uint64
}

// EnvVar is an allow-listed variable.
type EnvVar struct{ Name, Value string }

// Vis is one node of a rail device looked up in a root: OK when it exists,
// Failed when the lookup failed (no verdict).
type Vis struct {
	Device, Node string
	OK, Failed   bool
}

// DevCount is a count on one device.
type DevCount struct {
	Device string
	N      int
}

// procState is what the watcher keeps of a selected process between
// Refreshes.
type procState struct {
	Process
	dir, statPath, statusPath string
	gen                       uint64
	cpusRaw, memsRaw          string

	numaAt, cgAt, netAt time.Time
	visDevs             []string // the devices Vis was checked for
}

// readProcess reads what is due of one selected process; nil when it could
// not be read (exited, PID reused, stat unreadable).
func (w *Watcher) readProcess(sel procSel, now time.Time, visible []string, nudged bool) *procState {
	st := w.procs[sel.pid]
	if st == nil {
		dir := w.o.Procfs + "/" + strconv.Itoa(sel.pid)
		st = &procState{dir: dir, statPath: dir + "/stat", statusPath: dir + "/status"}
		st.PID = sel.pid
		w.procs[sel.pid] = st
	}
	st.gen = w.gen
	raw, err := w.IO.Reader.Read(st.statPath, w.statBuf[:])
	if err != nil {
		w.readError(FileStat, st.statPath, err)
		w.drop(sel.pid)
		return nil
	}
	ps, err := proc.ParseStat(raw)
	if err != nil {
		w.readError(FileStat, st.statPath, err)
		w.drop(sel.pid)
		return nil
	}
	if st.Start != 0 && ps.StartTime != st.Start {
		// Another process has this PID now: start over, and check its
		// command line at the next Refresh.
		w.drop(sel.pid)
		w.recheck(sel.pid)
		return nil
	}
	if string(ps.Comm) != st.Comm { // no allocation for the comparison
		st.Comm = string(ps.Comm)
	}
	st.Start, st.ByCmd, st.ByGPU = ps.StartTime, sel.byCmd, sel.byGPU
	st.UTime, st.STime, st.MajFlt, st.State = ps.UTime, ps.STime, ps.MajFlt, ps.State
	w.readStatus(st)
	if st.numaAt.IsZero() || now.Sub(st.numaAt) >= w.o.Slow {
		w.readNumaMaps(st)
		st.numaAt = now
	}
	if !st.EnvRead {
		w.readEnviron(st)
	}
	if st.cgAt.IsZero() || now.Sub(st.cgAt) >= w.o.Slow {
		w.readCgroup(st)
		st.cgAt = now
	}
	if st.netAt.IsZero() || now.Sub(st.netAt) >= w.o.Slow || nudged {
		w.readNetns(st)
		st.netAt = now
	}
	if nudged || st.EvidenceAt.IsZero() || now.Sub(st.EvidenceAt) >= w.o.Slow || !sameStrings(visible, st.visDevs) {
		if len(visible) > 0 {
			w.checkVisibility(st, visible)
		} else {
			st.Vis, st.visDevs = nil, nil
		}
		w.countVerbsFDs(st, visible)
		st.EvidenceAt = now
	}
	return st
}

// readStatus reads status: memory, context switches, allowed nodes, NSpid.
func (w *Watcher) readStatus(st *procState) {
	st.HasStatus = false
	raw, err := w.IO.Reader.Read(st.statusPath, w.statusBuf[:])
	if err != nil {
		w.readError(FileStatus, st.statusPath, err)
		return
	}
	s, err := proc.ParseStatus(raw)
	if err != nil {
		w.readError(FileStatus, st.statusPath, err)
		return
	}
	st.HasStatus = true
	st.HasRSS, st.RSS = s.HasRSS, s.VmRSS
	st.HasCtx, st.VolCtx, st.NonvolCtx = s.HasCtx, s.VolCtx, s.NonvolCtx
	st.NSLevels, st.OwnPID = s.NSpidLevels, s.NSpidInner
	if s.NSpidLevels == 0 {
		st.OwnPID = 0
	}
	w.allowedNodes(st, s)
}

// publish copies a process's state into an immutable Process: the slices
// a later Refresh replaces are never written in place, so they are shared.
func (w *Watcher) publish(st *procState) Process {
	p := st.Process
	p.QPs = w.qpsOf(st.PID)
	return p
}

func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// joinInts writes ints comma-separated.
func joinInts(v []int) string {
	var b strings.Builder
	for i, n := range v {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}
