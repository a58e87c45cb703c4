package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/nccl"
)

// NCCL's IB port failover and async fatal events, with logs on
// (internal/nccl/failover.go): a rank whose library routed around a port
// says so only in its log.

type ncclFailoverFamilies struct {
	events, fatal *exposition.Family
}

func newNCCLFailoverFamilies(f *exposition.Registry) ncclFailoverFamilies {
	return ncclFailoverFamilies{
		events: f.NewFamily("fabric_nccl_ib_port_failover_events_total",
			"NCCL's IB port failover events in the process's log (NCCL 2.29.7+ with NCCL_IB_RESILIENCY_PORT_FAILOVER=1; recovery 2.30.3+ with NCCL_IB_RESILIENCY_PORT_RECOVERY=1): event=\"failed\" for WARN \"NET/IB: Device N marked as failed\" (one per communicator side: its traffic moved to the other ports of the same NCCL device), \"recovered\" for \"Device N has been recovered\", \"given_up\" for \"will not be attempted to be recovered any more\" and \"Marking device N as permanently failed\". index is N, the position among the physical devices of the merged NCCL device; device is that physical device when the process's device list has exactly one merged device, else \"\". At most 16 indices per process.",
			prometheus.CounterValue, "host", "pid", "index", "device", "event"),
		fatal: f.NewFamily("fabric_nccl_ib_async_fatal_events_total",
			"NCCL's WARN \"NET/IB : <device>:<port> async fatal event…\" lines in the process's log (the verbs async event of a port, CQ, QP or SRQ that NCCL treats as fatal). At most 16 device ports per process.",
			prometheus.CounterValue, "host", "pid", "device", "port"),
	}
}

var failoverEvents = [3]string{"failed", "recovered", "given_up"}

// ncclFailoverSeries are a process's failover series, bound with its Gen.
type ncclFailoverSeries struct {
	events [][3]*exposition.Series
	fatal  []*exposition.Series
}

func (f ncclFailoverFamilies) bind(p *nccl.Process, s *ncclFailoverSeries) {
	s.events, s.fatal = s.events[:0], s.fatal[:0]
	for _, e := range p.Failovers {
		dev := p.FailoverDevice(e)
		var r [3]*exposition.Series
		for i, ev := range failoverEvents {
			r[i] = f.events.With(p.Host, p.PID, e.Index, dev, ev)
		}
		s.events = append(s.events, r)
	}
	for _, a := range p.AsyncFatal {
		s.fatal = append(s.fatal, f.fatal.With(p.Host, p.PID, a.Device, a.Port))
	}
}

func (s *ncclFailoverSeries) add(b *exposition.Batch, p *nccl.Process) {
	for i, e := range p.Failovers {
		if i < len(s.events) {
			b.Add(s.events[i][0], float64(e.Failed))
			b.Add(s.events[i][1], float64(e.Recovered))
			b.Add(s.events[i][2], float64(e.Permanent))
		}
	}
	for i, a := range p.AsyncFatal {
		if i < len(s.fatal) {
			b.Add(s.fatal[i], float64(a.N))
		}
	}
}
