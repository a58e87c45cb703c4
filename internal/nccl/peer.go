package nccl

import (
	"bytes"
	"strconv"
)

// NCCL's choice per GPU pair and per NET device, from the channel lines.
//
// Every connection line names both ends as "rank[dev]" (cited as
// file:line@tag of github.com/NVIDIA/nccl):
//
//	2.4       "Ring %02d : %d[%d] -> %d[%d] via P2P/IPC" (cudaDev)
//	2.5-2.6   "Ring %02d : %d[%lx] -> %d[%lx] via P2P/IPC" (busId)
//	2.7-2.18.1 "Channel %02d : %d[%lx] -> %d[%lx] via P2P/IPC%s" (busId, hex:
//	          "0[1a000]"; transport/p2p.cc), "… [send] via NET/%s/%d%s%s"
//	2.18.3+   "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/%s%s%s" and
//	          "Channel %02d : %d[%d] -> %d[%d] via SHM/%s/%s" (nvmlDev: the
//	          NVML index, the exporter's gpu label, whatever
//	          CUDA_VISIBLE_DEVICES says; transport/p2p.cc, transport/shm.cc)
//
// The P2P and SHM lines are printed by the sending side (p2pSendSetup,
// shmSendSetup): the left device is this process's. The NET lines say
// "[send]" (left is this process's) or "[receive]" (right is). A device
// printed as a bus id is given as the PCI address "0000:1a:00.0": where the
// process logged its version, the version says which form it prints
// (p2p.go); where it did not, five or more hex digits or any of a-f (an
// NVML index never has them) make a bus id.

// Peer counts the intra-node connections (P2P/…, SHM) of one local device
// to one peer device by transport.
type Peer struct {
	GPU, PeerGPU, Transport string
	N                       uint64

	gpuRaw, peerRaw string // the devices as logged
}

// NetUse counts the NET connections of one local device through one NET
// device (the index of "via NET/IB/0", the position in "NET/IB : Using
// [0]mlx5_0:1/RoCE …") with or without GPUDirect RDMA (/GDRDMA).
type NetUse struct {
	GPU   string
	Net   string // IB, IBext_v8, Socket, …
	Index int
	GDR   bool
	N     uint64

	gpuRaw string
}

const (
	maxPeers   = 64 // (gpu, peer, transport) per process
	maxNetUses = 64 // (gpu, net, index, gdr) per process
)

var (
	msgArrow   = []byte(" -> ")
	msgSend    = []byte("[send]")
	msgReceive = []byte("[receive]")
)

// connectionEnds returns the devices of "a[x] -> b[y] [send|receive]" in a
// connection line and which one is this process's: local is x unless the
// line says [receive]. ok is false when the line names no device (2.4's
// "Ring 00 : 7 -> 8 [send] via NET/…").
func connectionEnds(msg []byte) (local, peer []byte, ok bool) {
	a := bytes.Index(msg, msgArrow)
	if a < 0 {
		return nil, nil, false
	}
	left := msg[:a]
	if s := bytes.LastIndexByte(left, ' '); s >= 0 {
		left = left[s+1:]
	}
	right := msg[a+len(msgArrow):]
	if s := bytes.IndexByte(right, ' '); s >= 0 {
		right = right[:s]
	}
	x, okx := bracketDev(left)
	y, oky := bracketDev(right)
	if !okx || !oky {
		return nil, nil, false
	}
	tail := msg[a+len(msgArrow):]
	if v := bytes.Index(tail, msgVia); v >= 0 {
		tail = tail[:v]
	}
	if bytes.Contains(tail, msgReceive) {
		return y, x, true
	}
	return x, y, true
}

// bracketDev returns the x of "rank[x]".
func bracketDev(tok []byte) ([]byte, bool) {
	o := bytes.IndexByte(tok, '[')
	if o <= 0 || tok[len(tok)-1] != ']' || !isDigits(tok[:o]) {
		return nil, false
	}
	d := tok[o+1 : len(tok)-1]
	if len(d) == 0 || len(d) > 16 {
		return nil, false
	}
	for _, c := range d {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return nil, false
		}
	}
	return d, true
}

// deviceLabel is dev as the exporter's gpu label (an NVML index) or, for
// a bus id of NCCL 2.7-2.18 ("1a000": domain<<20 | bus<<12 | device<<4 |
// function), its PCI address.
func deviceLabel(dev []byte) string {
	hex := len(dev) >= 4
	for _, c := range dev {
		if c >= 'a' {
			hex = true
		}
	}
	if !hex {
		return string(dev)
	}
	return busIDString(dev)
}

// busIDString is the PCI address of a bus id in hex, "" when dev is none.
func busIDString(dev []byte) string {
	v, err := strconv.ParseUint(string(dev), 16, 64)
	if err != nil || len(dev) == 0 || len(dev) > 16 {
		return ""
	}
	return busIDLabel(v)
}

func appendHex(b []byte, v uint64, width int) []byte {
	s := strconv.FormatUint(v, 16)
	for i := len(s); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

// netIndex returns the device index of "NET/IB/0(1)/GDRDMA" after the
// net's name ("/0(1)/GDRDMA"), -1 when there is none.
func netIndex(rest []byte) int {
	if len(rest) < 2 || rest[0] != '/' {
		return -1
	}
	e := 1
	for e < len(rest) && rest[e] >= '0' && rest[e] <= '9' {
		e++
	}
	if e == 1 || e > 4 {
		return -1
	}
	n, _ := strconv.Atoi(string(rest[1:e]))
	return n
}

// addPeer counts an intra-node connection of local to peer.
func (p *Process) addPeer(local, peer, transport []byte) {
	form := p.deviceForm()
	if string(transport) == "P2P/common device" {
		form = devIndex // 2.5-2.6 print cudaDev there (transport/p2p.cc:114@v2.6.4-1)
	}
	for i := range p.Peers {
		e := &p.Peers[i]
		if e.gpuRaw == string(local) && e.peerRaw == string(peer) && e.Transport == string(transport) {
			e.N++
			return
		}
	}
	if len(p.Peers) >= maxPeers {
		return
	}
	g, pg := form.label(local), form.label(peer)
	if g == "" || pg == "" {
		return
	}
	p.Peers = append(p.Peers, Peer{GPU: g, PeerGPU: pg, Transport: boundLabel(transport), N: 1,
		gpuRaw: string(local), peerRaw: string(peer)})
	p.Gen++
}

// addNetUse counts a NET connection of local through NET device index.
func (p *Process) addNetUse(local, net []byte, index int, gdr bool) {
	for i := range p.NetUses {
		e := &p.NetUses[i]
		if e.gpuRaw == string(local) && e.Index == index && e.GDR == gdr && e.Net == string(net) {
			e.N++
			return
		}
	}
	if len(p.NetUses) >= maxNetUses {
		return
	}
	g := p.deviceForm().label(local)
	if g == "" {
		return
	}
	p.NetUses = append(p.NetUses, NetUse{GPU: g, Net: boundLabel(net), Index: index, GDR: gdr, N: 1,
		gpuRaw: string(local)})
	p.Gen++
}

// connectionPeer records the devices of a connection line whose transport
// ev holds (parseTransport).
func (p *Process) connectionPeer(msg, via []byte, ev *event) {
	local, peer, ok := connectionEnds(msg)
	if !ok {
		return
	}
	p.noteLocalRanks(msg, ev.net == nil)
	if ev.net != nil {
		if i := netIndex(via[len(ev.name):]); i >= 0 {
			p.addNetUse(local, ev.net, i, ev.gdr)
		}
		return
	}
	p.addPeer(local, peer, ev.name)
}

// noteLocalRanks records the rank and device of this process's end of a
// connection line ("2[2] -> 11[3] [send]": rank 2 is GPU 2), and of both
// ends of an intra-node one (P2P, SHM): a rank-only "GPU Direct RDMA …
// for GPU %d" line (2.24-2.28) is resolved through them.
func (p *Process) noteLocalRanks(msg []byte, both bool) {
	a := bytes.Index(msg, msgArrow)
	if a < 0 {
		return
	}
	left := msg[:a]
	if s := bytes.LastIndexByte(left, ' '); s >= 0 {
		left = left[s+1:]
	}
	right := msg[a+len(msgArrow):]
	if s := bytes.IndexByte(right, ' '); s >= 0 {
		right = right[:s]
	}
	tail := msg[a+len(msgArrow):]
	if v := bytes.Index(tail, msgVia); v >= 0 {
		tail = tail[:v]
	}
	recv := bytes.Contains(tail, msgReceive)
	if both || !recv {
		p.noteRank(left)
	}
	if both || recv {
		p.noteRank(right)
	}
}

// noteRank records "rank[dev]".
func (p *Process) noteRank(tok []byte) {
	dev, ok := bracketDev(tok)
	if !ok {
		return
	}
	r := tok[:bytes.IndexByte(tok, '[')]
	if len(r) > 7 {
		return
	}
	rank := int(atoi32(r))
	for _, e := range p.rankDev {
		if e.rank == rank {
			return
		}
	}
	if len(p.rankDev) < maxRankDevs {
		if g := p.deviceForm().label(dev); g != "" {
			p.rankDev = append(p.rankDev, rankDev{rank, g})
			p.Gen++
		}
	}
}

type rankDev struct {
	rank int
	gpu  string
}

const maxRankDevs = 64
