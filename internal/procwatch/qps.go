package procwatch

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/proc"
	"github.com/fabric-exporter/fabric_exporter/internal/rdmanl"
)

// Queue pairs per process from the kernel's RDMA resource tracker over
// RDMA netlink (internal/rdmanl, what `rdma resource show qp` prints), one
// listing for all processes every Options.Slow, or at once after a Nudge.
//
// Owners: the kernel records a queue pair's owner as the task that
// created it (rdma_restrack_attach_task(res, current) in
// drivers/infiniband/core/restrack.c) and reports task_pid_vnr of that task
// (nldev.c fill_res_name_pid): a thread ID. NCCL creates its QPs in its
// proxy thread, so the owner is rarely the process's PID. Each owner is
// mapped to its thread group through /proc/TID/status (Tgid; a thread's
// directory is not listed but can be opened), once per listing, and the
// queue pairs are counted per process.
//
// PIDs: the kernel lists only the resources of processes with a PID in the
// caller's PID namespace and reports the PIDs of that namespace. They are
// compared with the PIDs of the procfs only when both are one namespace
// (the procfs's self is os.Getpid()); otherwise no listing is made and
// QPState says why. A source that declares its PIDs to be the procfs's
// (procfsPIDs: rdmanl.Fixture, written for a fixture /proc) is listed
// whatever the exporter's namespace.

// maxOwners bounds the distinct owners of one listing that are mapped to
// their process; maxOwnerProcs the processes reported as QP owners
// (Snapshot.QPOwners), the lowest PIDs first.
const (
	maxOwners     = 4096
	maxOwnerProcs = 256
)

// QPOwner is a process that owns user queue pairs, selected or not (an
// NCCL rank, a KV-cache transfer engine, NVSHMEM …): its queue pairs by
// device and state, and what names it.
type QPOwner struct {
	PID         int
	Comm        string
	InContainer bool
	Container   proc.Container
	Counts      []QPCount // by device, then state
}

// QPCount is the number of a process's queue pairs on one device in one
// state (enum ib_qp_state, lower case: reset, init, rtr, rts, sqd, sqe,
// err).
type QPCount struct {
	Device, State string
	N             int
}

type qpStateKey struct {
	pid    int
	device string
	state  uint8
}

// ownerInfo is what names an owner that is not a selected process, read
// once per listing.
type ownerInfo struct {
	comm       string
	cont       proc.Container
	inCont     bool
	unreadable bool
}

// QPState is the state of the last listing.
type QPState struct {
	Tried   bool      // a listing was attempted
	OK      bool      // the last listing is usable
	At      time.Time // when it was made
	Devices []string  // its devices whose queue pairs were listed, sorted
	Failed  []string  // its devices whose queue pairs could not be listed
	Dropped int       // queue pairs the listing could not keep
	// Reason says why it is not usable ("" when OK).
	Reason string
}

type qpKey struct {
	pid    int
	device string
}

type qps struct {
	src    rdmanl.Source
	state  QPState
	count  map[qpKey]int
	tgid   map[uint32]int // the owners of the last listing -> their process
	states map[qpStateKey]int
	owners []QPOwner // the last listing's, sorted by PID
	// pending: the source's listing runs on (AsyncQPs); the next refresh
	// asks again, the last listing's figures stand meanwhile.
	pending bool
}

// procfsPIDs is implemented by a source whose PIDs are those of
// --path.procfs whatever PID namespace the exporter runs in
// (rdmanl.Fixture).
type procfsPIDs interface{ PIDsOfProcfs() bool }

// pidsOfProcfs says whether src declares its PIDs to be the procfs's.
func pidsOfProcfs(src rdmanl.Source) bool {
	p, ok := src.(procfsPIDs)
	return ok && p.PIDsOfProcfs()
}

func newQPs(src rdmanl.Source) qps {
	return qps{src: src, count: map[qpKey]int{}, tgid: map[uint32]int{}, states: map[qpStateKey]int{}}
}

// refreshQPs lists the queue pairs if the last listing is older than every
// or a nudge asks for one.
func (q *qps) refreshQPs(ctx context.Context, now time.Time, every time.Duration, force bool, w *Watcher) {
	if q.src == nil || (q.state.Tried && now.Sub(q.state.At) < every && !force && !q.pending) {
		return
	}
	prev := q.state
	q.state = QPState{Tried: true, At: now}
	if self := w.IO.Getpid(); !pidsOfProcfs(q.src) && (w.self == 0 || w.self != self) {
		q.unavailable(w, "the exporter is not in the PID namespace of --path.procfs (its PID there is not os.Getpid()): RDMA netlink would list only its own namespace's queue pairs with PIDs of that namespace; run it in the host PID namespace (hostPID: true, docker run --pid host)", nil)
		return
	}
	l, err := q.src.QueuePairs(ctx)
	if q.pending = errors.Is(err, ErrQPPending); q.pending {
		q.state = prev
		return
	}
	switch {
	case errors.Is(err, rdmanl.ErrNoPrivilege):
		q.unavailable(w, "RDMA netlink refused the queue-pair listing", err)
		return
	case errors.Is(err, rdmanl.ErrNotAvailable):
		q.unavailable(w, "RDMA netlink is not available (no ib_core, or no RDMA device)", err)
		return
	case err != nil:
		q.unavailable(w, "RDMA netlink queue-pair listing failed", err)
		return
	}
	w.src.Notes.Clear("process-rdma-netlink")
	if l.Dropped > 0 {
		w.src.Notes.Warn("process-rdma-qps", "msg", "more RDMA queue pairs than one listing keeps; counts are lower bounds", "kept", len(l.QPs), "dropped", l.Dropped)
	}
	q.state.OK, q.state.Dropped = true, l.Dropped
	failed := map[string]bool{}
	for _, f := range l.Failed {
		failed[f.Device] = true
		q.state.Failed = append(q.state.Failed, f.Device)
		w.src.Notes.Warn("process-rdma-qps:"+f.Device, "msg", "the queue pairs of an RDMA device could not be listed (its driver failed the query: a device in internal error, or one that does not answer); its queue-pair series are left out, the other devices' kept", "device", f.Device, "err", f.Err)
	}
	for _, d := range l.Devices {
		if !failed[d.Name] {
			q.state.Devices = append(q.state.Devices, d.Name)
			w.src.Notes.Clear("process-rdma-qps:" + d.Name)
		}
	}
	slices.Sort(q.state.Devices)
	q.state.Devices = slices.Compact(q.state.Devices)
	clear(q.count)
	clear(q.tgid)
	clear(q.states)
	for _, qp := range l.QPs {
		if !qp.HasPID {
			continue // a kernel QP
		}
		if failed[qp.Device] {
			continue
		}
		if pid := q.process(qp.PID, w); pid > 0 {
			q.count[qpKey{pid, qp.Device}]++
			q.states[qpStateKey{pid, qp.Device, qp.State}]++
		}
	}
	q.owners = q.ownersOf(w)
}

// ownersOf groups the listing's queue pairs by owning process, naming each
// (comm and container: the table's for a selected process, else read from
// its stat and cgroup).
func (q *qps) ownersOf(w *Watcher) []QPOwner {
	byPID := map[int][]QPCount{}
	for k, n := range q.states {
		byPID[k.pid] = append(byPID[k.pid], QPCount{Device: k.device, State: qpStateName(k.state), N: n})
	}
	pids := make([]int, 0, len(byPID))
	for pid := range byPID {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	if len(pids) > maxOwnerProcs {
		w.src.Notes.Warn("process-qp-owners", "msg", "more processes own RDMA queue pairs than the exporter reports; the highest PIDs are left out", "owners", len(pids), "max", maxOwnerProcs)
		pids = pids[:maxOwnerProcs]
	}
	out := make([]QPOwner, 0, len(pids))
	for _, pid := range pids {
		counts := byPID[pid]
		slices.SortFunc(counts, func(a, b QPCount) int {
			if a.Device != b.Device {
				return strings.Compare(a.Device, b.Device)
			}
			return strings.Compare(a.State, b.State)
		})
		o := QPOwner{PID: pid, Counts: counts}
		if st := w.procs[pid]; st != nil {
			o.Comm, o.InContainer, o.Container = st.Comm, st.InContainer, st.Container
		} else {
			info := w.ownerInfo(pid)
			if info.unreadable {
				continue // exited since the listing
			}
			o.Comm, o.InContainer, o.Container = info.comm, info.inCont, info.cont
		}
		out = append(out, o)
	}
	return out
}

// ownerInfo reads the comm and container of a process that is not selected.
func (w *Watcher) ownerInfo(pid int) ownerInfo {
	dir := w.o.Procfs + "/" + strconv.Itoa(pid)
	n, err := proc.ReadInto(w.IO.Open, dir+"/stat", w.statusBuf[:])
	if err != nil {
		w.readError(FileStat, dir+"/stat", err)
		return ownerInfo{unreadable: true}
	}
	ps, err := proc.ParseStat(w.statusBuf[:n])
	if err != nil {
		w.readError(FileStat, dir+"/stat", err)
		return ownerInfo{unreadable: true}
	}
	info := ownerInfo{comm: string(ps.Comm)}
	if w.cgBuf == nil {
		w.cgBuf = make([]byte, proc.MaxCgroupFile+1)
	}
	if n, err := proc.ReadInto(w.IO.Open, dir+"/cgroup", w.cgBuf); err == nil && n <= proc.MaxCgroupFile {
		info.cont, info.inCont = proc.ParseCgroupFile(w.cgBuf[:n])
	} else if err != nil {
		w.readError(FileCgroup, dir+"/cgroup", err)
	}
	return info
}

// qpStateName is enum ib_qp_state in lower case (rdmanl.QP.StateName).
func qpStateName(s uint8) string {
	return strings.ToLower(rdmanl.QP{State: s}.StateName())
}

// process returns the thread group of a queue pair's owner: the owner
// itself when it is a selected process, else the Tgid of /proc/TID/status;
// 0 when unknown (the thread exited, too many owners).
func (q *qps) process(tid uint32, w *Watcher) int {
	if pid, ok := q.tgid[tid]; ok {
		return pid
	}
	if len(q.tgid) >= maxOwners {
		return 0
	}
	pid := 0
	if _, sel := w.procs[int(tid)]; sel {
		pid = int(tid)
	} else {
		path := w.o.Procfs + "/" + strconv.FormatUint(uint64(tid), 10) + "/status"
		n, err := proc.ReadInto(w.IO.Open, path, w.statusBuf[:])
		if err == nil {
			if s, perr := proc.ParseStatus(w.statusBuf[:n]); perr == nil {
				pid = s.Tgid
			}
		} else {
			w.readError(FileStatus, path, err)
		}
	}
	q.tgid[tid] = pid
	return pid
}

func (q *qps) unavailable(w *Watcher, reason string, err error) {
	q.state.Reason = reason
	kv := []any{"msg", "no fabric_process_rdma_queue_pairs: " + reason}
	if err != nil {
		kv = append(kv, "err", err)
	}
	w.src.Notes.Warn("process-rdma-netlink", kv...)
}

// qpOwners returns the last listing's owners, the selected ones named as
// this Refresh read them; nil when the listing is not usable.
func (w *Watcher) qpOwners() []QPOwner {
	if !w.qps.state.OK || len(w.qps.owners) == 0 {
		return nil
	}
	out := slices.Clone(w.qps.owners)
	for i := range out {
		if st := w.procs[out[i].PID]; st != nil && st.gen == w.gen {
			out[i].Comm, out[i].InContainer, out[i].Container = st.Comm, st.InContainer, st.Container
		}
	}
	return out
}

// qpState returns the listing's state.
func (q *qps) qpState() QPState {
	s := q.state
	s.Devices = slices.Clone(s.Devices)
	return s
}

// qpsOf returns a process's queue pairs on each device of the listing;
// nil when the listing is not usable.
func (q *qps) qpsOf(pid int) []DevCount {
	if !q.state.OK {
		return nil
	}
	out := make([]DevCount, len(q.state.Devices))
	for i, d := range q.state.Devices {
		out[i] = DevCount{Device: d, N: q.count[qpKey{pid, d}]}
	}
	return out
}
