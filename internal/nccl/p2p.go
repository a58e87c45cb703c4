package nccl

import "bytes"

// NCCL's own statements that P2P or GPUDirect RDMA is off, and how a
// version names its GPUs (cited as file:line@tag of github.com/NVIDIA/nccl).
//
// P2P between two GPUs whose path is within NCCL's P2P level
// (ncclTopoCheckP2p, src/graph/paths.cc) but whose NVML P2P read or write
// status (nvmlDeviceGetP2PStatus, NVML_P2P_CAPS_INDEX_READ/WRITE) is not OK:
//
//	2.12+  INFO "P2P is disabled between connected GPUs %d and %d. You can repress
//	       this message with NCCL_IGNORE_DISABLED_P2P=1." (only for a path below SYS;
//	       graph/paths.cc:324@v2.12.7-1, :326@v2.19.3-1, :359@v2.28.9-1, :403@v2.30.7-1)
//	2.12+  WARN "P2P is disabled between NVLINK connected GPUs %d and %d. This should
//	       not be the case given their connectivity, and is probably due to a hardware
//	       issue. If you still want to proceed, you can set NCCL_IGNORE_DISABLED_P2P=1."
//	       (path NVL or NVB; NCCL returns ncclUnhandledCudaError: the init fails;
//	       graph/paths.cc:321@v2.12.7-1, :323@v2.19.3-1, :356@v2.28.9-1, :396@v2.30.7-1)
//
// The numbers are NCCL's gpu.dev, the NVML index (ncclNvmlDeviceGetIndex,
// graph/xml.cc:605@v2.12.7-1): the exporter's gpu label. The pair may be a
// GPU and the intermediate GPU of a path through one (indexes[] of
// ncclTopoCheckP2p). 2.12-2.18 still went on to try P2P after the INFO line
// (the CUDA peer check then decided); from 2.19 NCCL turns P2P off for the
// pair (`*p2p = 0`, graph/paths.cc:329@v2.19.3-1). With
// NCCL_IGNORE_DISABLED_P2P=1 nothing is printed.
//
// GPUDirect RDMA per NET device (the HCA's name in quotes; message.go reads
// them):
//
//	2.4        "NET/IB : GPU Direct RDMA Disabled for GPU %d[%d] / HCA %d '%s' (no module
//	           or not supported by GPU)" (transport/net_ib.cc:226@v2.4.8-1)
//	2.5-2.12   "NET/IB : GPU Direct RDMA Disabled for HCA %d '%s' (no module)"
//	           (transport/net_ib.cc:211@v2.5.6-1, :289@v2.12.7-1)
//	2.13+      "NET/%s : GPU Direct RDMA %s for HCA %d '%s'" with Enabled or Disabled:
//	           gdrSupport = ptrSupport has NCCL_PTR_CUDA (a peer-memory module), or
//	           DMA-BUF is supported by CUDA and the net (NCCL_PTR_DMABUF)
//	           (graph/topo.cc:698@v2.19.3-1, :1357@v2.28.9-1, :1653@v2.30.7-1)
//
// "Disabled" is NCCL's verdict for every GPU through that device, whatever
// peer-memory module the node has loaded; "Enabled" with no module loaded
// is DMA-BUF.
//
// How the connection lines name a GPU (transport/p2p.cc, shm.cc, net.cc):
//
//	2.4         "Ring %02d : %d[%d] -> %d[%d] via P2P/IPC" and "… via direct shared
//	            memory": cudaDev, CUDA's index (transport/p2p.cc:504, shm.cc:152@v2.4.8-1)
//	2.5-2.18.1  "%d[%lx]": the bus id, domain<<20|bus<<12|device<<4|function in hex
//	            (transport/shm.cc:78@v2.5.6-1, p2p.cc:140@v2.6.4-1, net.cc:100@v2.7.8-1,
//	            shm.cc@v2.18.1-1)
//	2.18.3+     "%d[%d]": nvmlDev, the NVML index (transport/shm.cc:95@v2.18.3-1)
//
// A bus id on bus 0 ("60" for 0000:00:06.0) looks like an index: where the
// process logged its version, the version decides; where it did not (only
// rank 0 prints "NCCL version"), five or more hex digits or a letter a-f
// make a bus id.

// P2PDisabled is one "P2P is disabled between [NVLINK] connected GPUs X
// and Y" line: GPU is X, PeerGPU Y (NVML indices), NVLink for the WARN.
type P2PDisabled struct {
	GPU, PeerGPU string
	NVLink       bool
}

const maxP2PDisabled = 64 // pairs per process

var (
	msgP2PDisabled       = []byte("P2P is disabled between connected GPUs ")
	msgP2PDisabledNVLink = []byte("P2P is disabled between NVLINK connected GPUs ")
	msgAnd               = []byte(" and ")
)

// parseP2PDisabled reads "X and Y." after the prefix of either line.
func parseP2PDisabled(b []byte) (x, y []byte, ok bool) {
	a := bytes.Index(b, msgAnd)
	if a <= 0 || a > 4 || !isDigits(b[:a]) {
		return nil, nil, false
	}
	x, b = b[:a], b[a+len(msgAnd):]
	e := 0
	for e < len(b) && b[e] >= '0' && b[e] <= '9' {
		e++
	}
	if e == 0 || e > 4 || e < len(b) && b[e] != '.' {
		return nil, nil, false
	}
	return x, b[:e], true
}

// setP2PDisabled records a pair NCCL said P2P is disabled for.
func (p *Process) setP2PDisabled(x, y []byte, nvlink bool) {
	for i := range p.P2PDisabled {
		if e := &p.P2PDisabled[i]; e.GPU == string(x) && e.PeerGPU == string(y) {
			if nvlink && !e.NVLink {
				e.NVLink = true
				p.Gen++
			}
			return
		}
	}
	if len(p.P2PDisabled) < maxP2PDisabled {
		p.P2PDisabled = append(p.P2PDisabled, P2PDisabled{string(x), string(y), nvlink})
		p.Gen++
	}
}

// warnP2PDisabled records the NVLink WARN of a WARN message.
func (p *Process) warnP2PDisabled(msg []byte) {
	if b, ok := bytes.CutPrefix(msg, msgP2PDisabledNVLink); ok {
		if x, y, ok := parseP2PDisabled(b); ok {
			p.setP2PDisabled(x, y, true)
		}
	}
}

// deviceForm says how a connection line's brackets name GPUs.
type deviceForm uint8

const (
	devGuess deviceForm = iota // version unknown: by the look of it
	devIndex                   // 2.4 (cudaDev), 2.18.3+ (nvmlDev)
	devBusID                   // 2.5-2.18.1
)

// deviceForm is how p's version writes the devices of connection lines.
func (p *Process) deviceForm() deviceForm {
	minor, patch, ok := p.minorPatch()
	switch {
	case !ok:
		return devGuess
	case minor >= 5 && (minor < 18 || minor == 18 && patch < 3):
		return devBusID
	}
	return devIndex
}

// label is dev as the exporter's gpu label: an index, or the PCI address
// of a bus id ("1a000" → 0000:1a:00.0); "" when dev cannot be either.
func (f deviceForm) label(dev []byte) string {
	switch f {
	case devBusID:
		return busIDString(dev)
	case devIndex:
		if isDigits(dev) && len(dev) <= 3 {
			return string(dev)
		}
	}
	return deviceLabel(dev)
}

// minorPatch is the minor and patch of p's "NCCL version 2.M.P…", when
// logged (patch 0 when not printed).
func (p *Process) minorPatch() (minor, patch int, ok bool) {
	if !p.HasVersion {
		return 0, 0, false
	}
	v, ok := bytes.CutPrefix([]byte(p.Version), []byte("2."))
	if !ok {
		return 0, 0, false
	}
	m, rest, ok := leadingInt(v)
	if !ok {
		return 0, 0, false
	}
	if r, cut := bytes.CutPrefix(rest, []byte(".")); cut {
		if n, _, ok := leadingInt(r); ok {
			patch = int(n)
		}
	}
	return int(m), patch, true
}
