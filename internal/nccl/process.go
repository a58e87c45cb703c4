package nccl

import (
	"bytes"
	"unicode/utf8"
)

// Process is what the lines of one NCCL process (host, pid) said. Its
// exported fields belong to the Tracker: read them only inside View, and
// never write them. Every string is at most 128 bytes.
type Process struct {
	Host, PID string
	// Key is Host, a NUL and PID: View's order.
	Key string
	// Gen changes whenever a field other than a count changes (the
	// network, version, a list, a new connection kind, the init failure),
	// so that a reader can cache what it derives from them. Warnings,
	// Conns[i].N, LastSeen, Ranks and Nodes change without it.
	Gen uint64
	// LastSeen is the modification time of the file of its latest line,
	// Unix nanoseconds (NCCL lines carry no time of their own).
	LastSeen int64
	Warnings uint64 // WARN lines
	// Ranks is the largest communicator size (nranks) the process logged
	// ("comm 0x… rank 10 nranks 16 … - Init START"), Nodes the largest
	// node count ("comm 0x… rank 0 nRanks 16 nNodes 2 …", NCCL 2.20+); 0
	// until such a line was read.
	Ranks, Nodes uint32

	// Net is the network NCCL chose as NCCL names it (IB, Socket,
	// IBext_v8, …), "" when unknown; NetEvidence says from which line.
	Net         string
	NetEvidence Evidence
	// Version and CUDA are from "NCCL version 2.19.3+cuda12.3", when
	// HasVersion.
	Version, CUDA string
	HasVersion    bool
	Conns         []Conn   // channel connections by kind, at most 32 kinds
	Devices       []Device // the latest "NET/X : Using" list naming a device, at most 64
	// DevicesMerged: that list has merged devices ("[0]={[0] mlx5_0:1/RoCE,
	// [1] mlx5_1:1/RoCE}"), so a NET index is not a position in Devices.
	DevicesMerged bool
	// MergedGroups is how many merged devices that list has ("={" each).
	MergedGroups int
	Interfaces   []string      // the latest "NET/Socket : Using" list, at most 64
	Env          []KV          // "NCCL_X set by environment to V", at most 64
	GDRDisabled  []GDRDisabled // "GPU Direct RDMA Disabled for HCA", at most 64
	// GDREnabled: "NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'"
	// (2.13+; Reason empty), at most 64; P2PDisabled: "P2P is disabled
	// between [NVLINK] connected GPUs X and Y", at most 64 (p2p.go).
	GDREnabled  []GDRDisabled
	P2PDisabled []P2PDisabled
	// GDRPaths: "GPU Direct RDMA Enabled|Disabled for GPU … / HCA …", at
	// most 64; DMABuf: the CUDA devices of "DMA-BUF is available on GPU
	// device %d", at most 16 (gdr.go).
	GDRPaths []GDRPath
	DMABuf   []string
	// Peers are the intra-node connections by local and peer GPU and
	// transport, NetUses the NET connections by local GPU, NET device
	// index and GDR (peer.go); at most 64 each.
	Peers   []Peer
	NetUses []NetUse
	// InitFailure is the WARN that said NCCL's init found no network, ""
	// when none or when a later communicator completed its init. While it
	// is set, the process's network, devices and interfaces mean nothing.
	InitFailure string
	// IBNoDevice: the log said "NET/IB : No device found."; VerbsLibMissing:
	// NCCL could not load libibverbs ("Failed to open libibverbs.so[.1]",
	// 2.30's "Count not open libibverbs.so.1"). Reasons of a socket
	// fallback, kept for its cause (the collector's fallback cause).
	IBNoDevice, VerbsLibMissing bool
	// Failovers are NCCL's IB port failover events by device index
	// (failover.go), AsyncFatal its "async fatal event" warnings by
	// device and port; at most maxFailoverItems each.
	Failovers  []Failover
	AsyncFatal []AsyncFatal

	pidNum  uint64
	rankDev []rankDev // local ranks and their devices, from connection lines (peer.go)
	local   bool      // host is this machine and pid is numeric
	gone    bool      // expired or evicted: caches must not use it
	via     [64]byte  // the text after " via " of the latest connection line…
	viaLen  int       //
	viaConn int       // …and its entry in Conns (-1: none)
	devKey  string    // the device list as logged, to skip repeats
	ifKey   string
	netLogs uint8 // evidence debug lines logged

	// The PID check (exited.go); times in Unix nanoseconds of
	// TrackerOptions.Now.
	firstSeen  int64  // when the Tracker read the process's first line
	readAt     int64  // when it read its latest line
	exitedAt   int64  // when a check first found the PID gone (0: not)
	startTicks uint64 // starttime of /proc/PID/stat while it was alive…
	startKnown bool   // …when known

	// What the init lines said, for the socket fallback (see
	// EvidenceSocketFallback): a socket interface list was logged, IB
	// found no device, NCCL_IB_DISABLE is set, no external plugin is used.
	sockList, ibDisabled, pluginNone bool
	// listsVoid: a socket list followed a device list, so device lists
	// name no network for this process.
	listsVoid bool
}

// Conn counts the channel connections of one transport as logged (NET/IB,
// NET/Socket, P2P/IPC, P2P/CUMEM, SHM, …; "direct shared memory" of
// NCCL < 2.7 is SHM), GDR for NET connections with /GDRDMA.
type Conn struct {
	Transport string
	GDR       bool
	N         uint64
}

// Device is an RDMA device port of "NET/IB : Using [0]mlx5_0:1/RoCE":
// mlx5_0, 1, RoCE.
type Device struct{ Name, Port, Link string }

// KV is an NCCL variable the process reported as set.
type KV struct{ Name, Value string }

// GDRDisabled is "NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1'
// (no module)": IB, mlx5_1, no module.
type GDRDisabled struct{ Net, Device, Reason string }

// Bounds on what one process or one string may hold (hostile or corrupt
// logs).
const (
	maxLabel       = 128 // bytes of a string
	maxConnKinds   = 32  // (transport, gdr) pairs per process
	maxListItems   = 64  // devices, interfaces per process
	maxEnv         = 64  // environment variables per process
	maxGDRDisabled = 64  // GDR-disabled lines per process
)

// apply records what one INFO message says about p.
func (t *Tracker) apply(p *Process, ev *event) {
	switch ev.kind {
	case evNet:
		t.setNet(p, ev.name, ev.level)
	case evConnection:
		if ev.net != nil {
			t.setNet(p, ev.net, EvidenceConnection)
		}
		p.addConn(ev.name, ev.gdr)
	case evNetDevices:
		if p.setDevices(ev.list) && !p.listsVoid {
			t.setNet(p, ev.name, EvidenceDeviceList)
		}
	case evSocketIfs:
		if p.setInterfaces(ev.list) {
			p.sockList = true
			if p.NetEvidence == EvidenceDeviceList {
				// NCCL initialises sockets after a net listed its devices
				// only when it did not take that net (2.13-2.27 init
				// every net up to the one NCCL_NET names): the device
				// lists of this process decide nothing.
				p.listsVoid = true
				t.clearNet(p)
			}
			t.socketFallback(p)
		}
	case evNetNoDevice:
		if string(ev.name) == "IB" {
			if !p.IBNoDevice {
				p.IBNoDevice = true
				p.Gen++
			}
			t.socketFallback(p)
		}
	case evVerbsLibMissing:
		p.setVerbsLibMissing()
	case evPluginNone:
		p.pluginNone = true
		t.socketFallback(p)
	case evVersion:
		p.setVersion(ev.name)
	case evEnv:
		p.setEnv(ev.name, ev.value)
		if string(ev.name) == "NCCL_IB_DISABLE" {
			p.ibDisabled = string(ev.value) != "0"
			t.socketFallback(p)
		}
	case evGDRDisabled:
		if ev.gdr {
			p.setGDREnabled(ev.net, ev.name)
		} else {
			p.setGDRDisabled(ev.net, ev.name, ev.value)
		}
	case evP2PDisabled:
		p.setP2PDisabled(ev.name, ev.value, false)
	case evGDRPath:
		p.setGDRPath(ev)
	case evDMABuf:
		p.setDMABuf(ev.name)
	case evComm:
		p.Ranks = max(p.Ranks, ev.ranks)
		p.Nodes = max(p.Nodes, ev.nodes)
	}
}

// socketFallback names Socket the network of p when its init lines prove
// it: NCCL logged its socket interfaces, and the networks NCCL tries
// before sockets were not taken. IB tried and found no device (NCCL tries
// IB only when no external plugin was taken), or IB was disabled by
// NCCL_IB_DISABLE and no external plugin was found. A socket interface
// list alone proves nothing: NCCL 2.4.2-2.4.7 logs it for every process,
// before it picks IB.
func (t *Tracker) socketFallback(p *Process) {
	if p.sockList && (p.IBNoDevice || p.ibDisabled && p.pluginNone) {
		t.setNet(p, socketNet, EvidenceSocketFallback)
	}
}

var socketNet = []byte("Socket")

// setNet records the network; a more certain source replaces a less
// certain one, and the latest "Using network" wins. A change is logged at
// debug level with the line that decided it.
func (t *Tracker) setNet(p *Process, name []byte, lvl Evidence) {
	if lvl < p.NetEvidence || lvl == p.NetEvidence && (lvl != EvidenceDecision || string(name) == p.Net) {
		return
	}
	if lvl == p.NetEvidence && len(name) > maxLabel && string(boundBytes(name)) == p.Net {
		return
	}
	p.Net, p.NetEvidence = boundLabel(name), lvl
	p.Gen++
	t.logEvidence(p)
}

// clearNet forgets a network named by a device list (logged like a
// classification, evidence "none").
func (t *Tracker) clearNet(p *Process) {
	p.Net, p.NetEvidence = "", EvidenceNone
	p.Gen++
	t.logEvidence(p)
}

// setVerbsLibMissing records that NCCL could not load libibverbs.
func (p *Process) setVerbsLibMissing() {
	if !p.VerbsLibMissing {
		p.VerbsLibMissing = true
		p.Gen++
	}
}

// OnThisHost reports whether the process runs on this machine as far as
// the Tracker's PID check knows: its host name is TrackerOptions.Hostname,
// its PID is numeric, and no check found the PID gone (exited.go). Read it
// inside View, like the fields.
func (p *Process) OnThisHost() bool { return p.local && p.exitedAt == 0 }

// setInitFailure records that the process's NCCL init found no network.
func (p *Process) setInitFailure(msg []byte) {
	if p.InitFailure != "" && string(msg) == p.InitFailure {
		return
	}
	p.InitFailure = boundLabel(msg)
	p.Gen++
}

// connection counts a "Channel …"/"Ring …" line: by transport, and by
// GPU pair or NET device (peer.go). Runs of lines with the same text after
// " via " (every channel of one peer) skip the search of Conns.
func (t *Tracker) connection(p *Process, msg []byte) {
	via := connectionVia(msg)
	if via == nil {
		return
	}
	ev := &t.ev
	parseTransport(via, ev)
	if ev.kind != evConnection {
		return
	}
	p.connectionPeer(msg, via, ev)
	if p.viaConn >= 0 && p.viaLen > 0 && string(via) == string(p.via[:p.viaLen]) {
		p.Conns[p.viaConn].N++
		return
	}
	if ev.net != nil {
		t.setNet(p, ev.net, EvidenceConnection)
	}
	p.viaConn, p.viaLen = p.addConn(ev.name, ev.gdr), 0
	if p.viaConn >= 0 && len(via) <= len(p.via) {
		p.viaLen = copy(p.via[:], via)
	}
}

// addConn counts a connection and returns the index of its entry (-1 when
// the process has maxConnKinds already).
func (p *Process) addConn(transport []byte, gdr bool) int {
	for i := range p.Conns {
		if e := &p.Conns[i]; e.GDR == gdr && string(transport) == e.Transport {
			e.N++
			return i
		}
	}
	tr := boundLabel(transport)
	for i := range p.Conns {
		if e := &p.Conns[i]; e.GDR == gdr && tr == e.Transport {
			e.N++
			return i
		}
	}
	if len(p.Conns) >= maxConnKinds {
		return -1
	}
	p.Conns = append(p.Conns, Conn{Transport: tr, GDR: gdr, N: 1})
	p.Gen++
	return len(p.Conns) - 1
}

// setDevices replaces the device list when it changed; false when the list
// names no device ("NET/IB : Using [RO]; OOB …" after "No device found").
// The previous list stays when the new one has no device.
func (p *Process) setDevices(list []byte) bool {
	if string(list) == p.devKey {
		return len(p.Devices) > 0
	}
	var out []Device
	forEachListItem(list, func(item []byte) {
		if len(out) < maxListItems {
			if dev, port, link, ok := splitDevice(item); ok {
				out = append(out, Device{boundLabel(dev), boundLabel(port), boundLabel(link)})
			}
		}
	})
	if len(out) == 0 {
		return false
	}
	p.Devices, p.devKey = out, boundKey(list)
	p.DevicesMerged = bytes.IndexByte(list, '{') >= 0
	p.MergedGroups = bytes.Count(list, []byte("={"))
	p.Gen++
	return true
}

// setInterfaces is setDevices for the socket transport's interface list.
func (p *Process) setInterfaces(list []byte) bool {
	if string(list) == p.ifKey {
		return len(p.Interfaces) > 0
	}
	var out []string
	forEachListItem(list, func(item []byte) {
		if len(out) < maxListItems {
			if ifc, ok := splitInterface(item); ok {
				out = append(out, boundLabel(ifc))
			}
		}
	})
	if len(out) == 0 {
		return false
	}
	p.Interfaces, p.ifKey = out, boundKey(list)
	p.Gen++
	return true
}

// boundKey keeps a list as logged for comparison, unless it is too long to
// be worth keeping (then every repeat rebuilds the list; still bounded).
func boundKey(list []byte) string {
	if len(list) > 4*maxLabel*maxListItems {
		return ""
	}
	return string(list)
}

func (p *Process) setVersion(v []byte) {
	version, cuda := splitVersion(v)
	if p.HasVersion && string(version) == p.Version && string(cuda) == p.CUDA {
		return
	}
	p.Version, p.CUDA, p.HasVersion = boundLabel(version), boundLabel(cuda), true
	p.Gen++
}

// setEnv records a variable; its latest value wins.
func (p *Process) setEnv(name, value []byte) {
	for i := range p.Env {
		if e := &p.Env[i]; e.Name == string(name) || e.Name == string(boundBytes(name)) {
			if e.Value != string(boundBytes(value)) {
				e.Value = boundLabel(value)
				p.Gen++
			}
			return
		}
	}
	if len(p.Env) < maxEnv {
		p.Env = append(p.Env, KV{boundLabel(name), boundLabel(value)})
		p.Gen++
	}
}

// setGDRDisabled records a device without GPU Direct RDMA; the latest
// reason wins.
func (p *Process) setGDRDisabled(net, dev, reason []byte) {
	for i := range p.GDRDisabled {
		if e := &p.GDRDisabled[i]; e.Net == string(boundBytes(net)) && e.Device == string(boundBytes(dev)) {
			if e.Reason != string(boundBytes(reason)) {
				e.Reason = boundLabel(reason)
				p.Gen++
			}
			return
		}
	}
	if len(p.GDRDisabled) < maxGDRDisabled {
		p.GDRDisabled = append(p.GDRDisabled, GDRDisabled{boundLabel(net), boundLabel(dev), boundLabel(reason)})
		p.Gen++
	}
}

// setGDREnabled records a device NCCL can do GPU Direct RDMA with.
func (p *Process) setGDREnabled(net, dev []byte) {
	for _, e := range p.GDREnabled {
		if e.Net == string(boundBytes(net)) && e.Device == string(boundBytes(dev)) {
			return
		}
	}
	if len(p.GDREnabled) < maxGDRDisabled {
		p.GDREnabled = append(p.GDREnabled, GDRDisabled{Net: boundLabel(net), Device: boundLabel(dev)})
		p.Gen++
	}
}

// boundLabel copies b into a string of at most maxLabel bytes, cut at a
// UTF-8 character boundary.
func boundLabel(b []byte) string {
	return string(boundBytes(b))
}

func boundBytes(b []byte) []byte {
	if len(b) <= maxLabel {
		return b
	}
	cut := maxLabel
	for cut > maxLabel-utf8.UTFMax && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return b[:cut]
}
