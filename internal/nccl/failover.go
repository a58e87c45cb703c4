package nccl

import (
	"bytes"
)

// NCCL's IB resiliency (src/transport/net_ib/p2p_resiliency.cc, 2.29.7+
// with NCCL_IB_RESILIENCY_PORT_FAILOVER=1, recovery 2.30.3+ with
// NCCL_IB_RESILIENCY_PORT_RECOVERY=1) moves a communicator's traffic off a
// failed port onto the other ports of the same NCCL network device: the
// physical devices of a merged device ("[0]={[0] mlx5_0:1/RoCE, [1]
// mlx5_3:1/RoCE}", NCCL_IB_MERGE_NICS). A communicator on one physical
// device has nothing to fail over to (NCCL says so at INFO). Its lines, as
// the source writes them (%d: the index among the merged device's
// physical devices, not the NET index):
//
//	WARN NET/IB: Device %d marked as failed. Initiating recovery? Yes|No (send|recv comm=%p, outstandingRecovery=%d)
//	INFO NET/IB: <func>: Device %d has been recovered for resiliency context (…)
//	INFO NET/IB: <func>: Device %d will not be attempted to be recovered any more (…).
//	INFO NET/IB: <func>: Marking device %d as permanently failed (…)
//
// and, from any NCCL with logs on (src/transport/net_ib/common.cc):
//
//	WARN NET/IB : %s:%d async fatal event: %s          (and "… async fatal event on CQ|QP|SRQ …")

// Failover counts one device index's failover events in a process.
type Failover struct {
	Index                        string // the index as NCCL wrote it (digits)
	Failed, Recovered, Permanent uint64
}

// AsyncFatal counts a device port's async fatal events in a process.
type AsyncFatal struct {
	Device, Port string
	N            uint64
}

// maxFailoverItems bounds the indices and devices kept per process.
const maxFailoverItems = 16

var (
	msgIBResiliency  = []byte("NET/IB: ")
	msgIBSpaced      = []byte("NET/IB : ")
	msgDevice        = []byte("Device ")
	msgMarkedFailed  = []byte(" marked as failed.")
	msgRecovered     = []byte(" has been recovered")
	msgNoMoreRecover = []byte(" will not be attempted to be recovered any more")
	msgMarkingDevice = []byte("Marking device ")
	msgAsPermanent   = []byte(" as permanently failed")
	msgAsyncFatal    = []byte(" async fatal event")
)

// failoverWarn reads a WARN message's failover or async fatal event.
func (p *Process) failoverWarn(msg []byte) {
	if m, ok := bytes.CutPrefix(msg, msgIBResiliency); ok {
		if idx, ok := deviceIndex(m, msgDevice, msgMarkedFailed); ok {
			if f := p.failover(idx); f != nil {
				f.Failed++
			}
		}
		return
	}
	m, ok := bytes.CutPrefix(msg, msgIBSpaced)
	if !ok {
		return
	}
	i := bytes.Index(m, msgAsyncFatal)
	if i <= 0 {
		return
	}
	dev, port, ok := bytes.Cut(m[:i], []byte(":"))
	if !ok || len(dev) == 0 || bytes.ContainsAny(dev, " /") || !isDigits(port) {
		return
	}
	for k := range p.AsyncFatal {
		if a := &p.AsyncFatal[k]; a.Device == string(dev) && a.Port == string(port) {
			a.N++
			return
		}
	}
	if len(p.AsyncFatal) < maxFailoverItems {
		p.AsyncFatal = append(p.AsyncFatal, AsyncFatal{Device: boundLabel(dev), Port: boundLabel(port), N: 1})
		p.Gen++
	}
}

// failoverInfo reads an INFO message's recovery outcome.
func (p *Process) failoverInfo(msg []byte) {
	m, ok := bytes.CutPrefix(msg, msgIBResiliency)
	if !ok {
		return
	}
	// "<func>: Device %d …" or "<func>: Marking device %d …"
	if c := bytes.Index(m, []byte(": ")); c >= 0 && c < 96 {
		m = m[c+2:]
	}
	if idx, ok := deviceIndex(m, msgDevice, msgRecovered); ok {
		if f := p.failover(idx); f != nil {
			f.Recovered++
		}
		return
	}
	if idx, ok := deviceIndex(m, msgDevice, msgNoMoreRecover); ok {
		if f := p.failover(idx); f != nil {
			f.Permanent++
		}
		return
	}
	if idx, ok := deviceIndex(m, msgMarkingDevice, msgAsPermanent); ok {
		if f := p.failover(idx); f != nil {
			f.Permanent++
		}
	}
}

// deviceIndex reads "<prefix><digits><suffix>…" at the start of m.
func deviceIndex(m, prefix, suffix []byte) ([]byte, bool) {
	r, ok := bytes.CutPrefix(m, prefix)
	if !ok {
		return nil, false
	}
	i := 0
	for i < len(r) && i < 4 && r[i] >= '0' && r[i] <= '9' {
		i++
	}
	if i == 0 || !bytes.HasPrefix(r[i:], suffix) {
		return nil, false
	}
	return r[:i], true
}

// failover returns idx's entry, added if new (nil when full).
func (p *Process) failover(idx []byte) *Failover {
	for k := range p.Failovers {
		if p.Failovers[k].Index == string(idx) {
			return &p.Failovers[k]
		}
	}
	if len(p.Failovers) == maxFailoverItems {
		return nil
	}
	p.Failovers = append(p.Failovers, Failover{Index: string(idx)})
	p.Gen++
	return &p.Failovers[len(p.Failovers)-1]
}

// FailoverDevice is the physical device a failover index names: the
// index-th device of the process's device list when that list has exactly
// one merged device (its physical devices in order); "" otherwise (no
// list, several merged devices: which one the communicator uses is not in
// the line).
func (p *Process) FailoverDevice(f Failover) string {
	if p.MergedGroups != 1 {
		return ""
	}
	n := 0
	for _, c := range []byte(f.Index) {
		n = n*10 + int(c-'0')
	}
	if n < len(p.Devices) {
		return p.Devices[n].Name
	}
	return ""
}
