package collector

import (
	"context"
	"errors"
	"os"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/proc"
	"github.com/fabric-exporter/fabric_exporter/internal/rdmanl"
)

// Kernel evidence of RDMA use per process, which holds whatever a log
// says or does not say (NCCL without NCCL_DEBUG=INFO logs nothing):
//
//   - open verbs fds: the process's fds on any /dev/infiniband/uverbsN,
//     rail device or not, counted in the fd walk of process_fds.go;
//   - queue pairs per RDMA device from the kernel's resource tracker over
//     RDMA netlink (internal/rdmanl, what `rdma resource show qp` prints),
//     one listing for all processes every --collector.process.numa-maps-
//     interval;
//   - whether the process lives in the PID namespace of --path.procfs
//     (the NSpid line of its status), so that rules join a PID a process
//     reports of itself (NCCL's RAS service: its getpid()) only where that
//     PID is the one the exporter reports.
//
// PIDs: the kernel writes the PID of a queue pair's owner as the dumping
// task sees it (nldev.c fill_res_name_pid: task_pid_vnr), and lists only
// the resources of processes with a PID in the dumping task's PID namespace
// (on the first resource-tracker kernels, 4.17, only those of that very
// namespace; kernel QPs only to the initial one). The exporter is that task, so netlink PIDs
// are PIDs of the exporter's own PID namespace. They are compared with the
// PIDs of --path.procfs only when both are one namespace: when the link
// --path.procfs/self (the exporter's PID in that procfs's namespace,
// selfPID) is os.Getpid(). Otherwise (a container with its own PID
// namespace reading the host's /proc) the listing is not made and the
// queue-pair series are absent, with fabric_process_rdma_netlink_available 0
// and the reason logged once.

// procRDMA is what a process's state keeps of the RDMA evidence.
type procRDMA struct {
	fdOK     bool // /proc/PID/fd was read in the last walk
	verbsFDs int  // fds on any uverbsN
	fdS      *exposition.Series
	hostNS   *exposition.Series
	qps      []procQPs
}

// procQPs is the number of queue pairs of one process on one RDMA device.
type procQPs struct {
	device string
	s      *exposition.Series
}

type qpKey struct {
	pid    int
	device string
}

// rdmaQPs is the collector's RDMA netlink listing.
type rdmaQPs struct {
	qpSrc   rdmanl.Source
	getpid  func() int
	qpTried bool // a listing was attempted (the available series exists)
	qpAt    time.Time
	qpOK    bool              // the last listing is usable
	qpDevs  []string          // its devices, sorted
	qpCount map[qpKey]float64 // its user QPs by owner and device

	verbsFDsFam, qpFam, hostNSFam *exposition.Family
	qpAvail                       *exposition.Series
}

func newRDMAQPs(env Env) rdmaQPs {
	g := prometheus.GaugeValue
	return rdmaQPs{
		qpSrc: rdmanl.NewClient(), getpid: os.Getpid, qpCount: map[qpKey]float64{},
		verbsFDsFam: env.Families.NewFamily("fabric_process_rdma_verbs_fds",
			"Open file descriptors of the process on any verbs node /dev/infiniband/uverbsN (every RDMA device, rail or not; 0 when none): a process that uses an HCA through verbs holds one per device context. Read from /proc/PID/fd with fabric_process_rdma_verbs_open (every --collector.process.numa-maps-interval, at most 4096 fds per process); absent when /proc/PID/fd cannot be read.",
			g, "pid", "comm"),
		qpFam: env.Families.NewFamily("fabric_process_rdma_queue_pairs",
			"Queue pairs the process owns on each RDMA device, from the kernel's RDMA resource tracker over RDMA netlink (what `rdma resource show qp` lists; refreshed every --collector.process.numa-maps-interval), 0 on a device where it owns none. A multi-node rank with none sends its inter-node traffic over sockets. Absent when fabric_process_rdma_netlink_available is 0.",
			g, "pid", "comm", "device"),
		hostNSFam: env.Families.NewFamily("fabric_process_host_pid_namespace",
			"1 if the process lives in the PID namespace of --path.procfs (the NSpid line of /proc/PID/status has one PID), 0 if in a nested one (a container with its own PID namespace: the PID the process knows itself by, e.g. the one NCCL's RAS service reports, is not the pid label). Absent on kernels without NSpid (before 4.1).",
			g, "pid", "comm"),
		qpAvail: env.Families.NewFamily("fabric_process_rdma_netlink_available",
			"1 if the last RDMA netlink queue-pair listing succeeded and its PIDs are those of --path.procfs, else 0 (no RDMA netlink or device, refused, or the exporter not in the PID namespace of --path.procfs; the reason is logged once): fabric_process_rdma_queue_pairs is absent then. Absent before the process collector selected a process.",
			g).With(),
	}
}

// refreshQPs lists the queue pairs if the last listing is older than the
// interval.
func (c *processCollector) refreshQPs(ctx context.Context, now time.Time) {
	if c.qpTried && now.Sub(c.qpAt) < c.interval {
		return
	}
	c.qpTried, c.qpAt, c.qpOK = true, now, false
	if self := c.getpid(); c.self == 0 || c.self != self {
		c.qpUnavailable("the exporter is not in the PID namespace of --path.procfs (its PID there is not os.Getpid()): RDMA netlink would list only its own namespace's queue pairs with PIDs of that namespace; run it in the host PID namespace (hostPID: true, docker run --pid host)", nil)
		return
	}
	l, err := c.qpSrc.QueuePairs(ctx)
	switch {
	case errors.Is(err, rdmanl.ErrNoPrivilege):
		c.qpUnavailable("RDMA netlink refused the queue-pair listing", err)
		return
	case errors.Is(err, rdmanl.ErrNotAvailable):
		c.qpUnavailable("RDMA netlink is not available (no ib_core, or no RDMA device)", err)
		return
	case err != nil:
		c.qpUnavailable("RDMA netlink queue-pair listing failed", err)
		return
	}
	c.env.Once.Clear("process-rdma-netlink")
	if l.Dropped > 0 {
		c.env.Once.Warn("process-rdma-qps", "msg", "more RDMA queue pairs than one listing keeps; counts are lower bounds", "kept", len(l.QPs), "dropped", l.Dropped)
	}
	c.qpOK = true
	c.qpDevs = c.qpDevs[:0]
	for _, d := range l.Devices {
		c.qpDevs = append(c.qpDevs, d.Name)
	}
	slices.Sort(c.qpDevs)
	c.qpDevs = slices.Compact(c.qpDevs)
	clear(c.qpCount)
	for _, q := range l.QPs {
		if q.HasPID {
			c.qpCount[qpKey{int(q.PID), q.Device}]++
		}
	}
}

func (c *processCollector) qpUnavailable(reason string, err error) {
	kv := []any{"msg", "no fabric_process_rdma_queue_pairs: " + reason}
	if err != nil {
		kv = append(kv, "err", err)
	}
	c.env.Once.Warn("process-rdma-netlink", kv...)
}

// addRDMA adds a process's verbs fds and queue pairs.
func (c *processCollector) addRDMA(st *procState, b *exposition.Batch) {
	r := &st.rdma
	if r.fdOK {
		if r.fdS == nil {
			r.fdS = c.verbsFDsFam.With(st.pidS, st.comm)
		}
		b.Add(r.fdS, float64(r.verbsFDs))
	}
	if !c.qpOK {
		return
	}
	for i, dev := range c.qpDevs {
		if i == len(r.qps) {
			r.qps = append(r.qps, procQPs{})
		}
		if r.qps[i].s == nil || r.qps[i].device != dev {
			r.qps[i] = procQPs{device: dev, s: c.qpFam.With(st.pidS, st.comm, dev)}
		}
		b.Add(r.qps[i].s, c.qpCount[qpKey{st.pid, dev}])
	}
	r.qps = r.qps[:len(c.qpDevs)]
}

// addHostNS adds whether the process lives in the PID namespace of
// --path.procfs.
func (c *processCollector) addHostNS(st *procState, s proc.Status, b *exposition.Batch) {
	if s.NSpidLevels == 0 {
		return
	}
	if st.rdma.hostNS == nil {
		st.rdma.hostNS = c.hostNSFam.With(st.pidS, st.comm)
	}
	b.Add(st.rdma.hostNS, b2f(s.NSpidLevels == 1))
}

// bindRDMA drops the series bound to an old comm; they are bound again
// when added.
func (st *procState) bindRDMA() {
	st.rdma.fdS, st.rdma.hostNS = nil, nil
	for i := range st.rdma.qps {
		st.rdma.qps[i].s = nil
	}
}
