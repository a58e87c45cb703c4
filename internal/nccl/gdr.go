package nccl

import (
	"bytes"
	"strconv"
)

// NCCL's own statement on GPUDirect RDMA per GPU and NET device, and on
// DMA-BUF per GPU. The INFO lines, per release (file:line@tag of
// github.com/NVIDIA/nccl):
//
//	2.4       "NET/%s : GPU Direct RDMA Disabled for GPU %d[%d] / HCA %d (distance %d >= %d)"
//	          "NET/%s : GPU Direct RDMA Enabled for GPU %d[%d] / HCA %d (distance %d < %d), read %d"
//	          (transport/net.cc:271,280@v2.4.8-1; cudaDev[nvmlDev])
//	2.5       the same with "GPU %lx" (the bus id; transport/net.cc@v2.5.6-1)
//	2.6-2.20  "GPU Direct RDMA Disabled for GPU %lx / HCA %d (distance %d > %d)"
//	          "GPU Direct RDMA Enabled for GPU %lx / HCA %d (distance %d <= %d), read %d"
//	          (graph/paths.cc:331,336@v2.7.8-1, :395,400@v2.19.3-1)
//	2.21-2.23 "… for GPU %lx / HCA %lx …" (the NET node's id: NCCL_TOPO_ID(systemId,
//	          dev), graph/paths.cc:414,419@v2.21.5-1, graph/topo.cc:347)
//	2.24-2.25 "… for GPU %d / HCA %lx …" (the rank; graph/paths.cc@v2.24.3-1)
//	2.26-2.28 Enabled adds " mode %s" (Disabled, Default, PCI:
//	          ncclTopoGdrModeStr; graph/paths.cc:443,453@v2.27.3-1)
//	2.29      "GPU Direct RDMA Disabled for GPU/%ld-%ld (rank %d) - NET/%ld-%ld (distance %d > %d)"
//	          "GPU Direct RDMA Enabled for GPU/%ld-%ld (rank %d) - NET/%ld-%ld (distance %d <= %d, read %d, mode %s)"
//	          (system id and local id in decimal: the GPU's bus id, the NET
//	          device; " using PXN via GPU/%ld-%ld, " may precede distance;
//	          graph/paths.cc:428,472,483@v2.29.2-1)
//	2.30+     TRACE only (graph/paths.cc:500,513@v2.30.3-1): a release build
//	          prints neither.
//
// Distance is NCCL's path type (its numbers moved between releases: 2.4-2.5
// compare "distance >= level" for disabled); max is NCCL_NET_GDR_LEVEL as
// that job resolved it. NCCL prints these only for a NET device that can
// do GDR at all (the net plugin's ptrSupport has NCCL_PTR_CUDA, through
// nvidia-peermem or DMA-BUF): "Enabled" with no peer-memory module loaded
// is DMA-BUF.
//
//	2.13+     "DMA-BUF is available on GPU device %d" (comm->cudaDev, CUDA's index;
//	          init.cc:267@v2.18.1-1, :304@v2.27.3-1, in 2.30.7): nothing is
//	          printed when it is not.

// GDRPath is one "GPU Direct RDMA Enabled|Disabled for GPU … / HCA …" line.
type GDRPath struct {
	// GPU is the exporter's label for the GPU when the line names it: the
	// NVML index (2.4's bracket) or the PCI address of a bus id
	// ("0000:1a:00.0"); "" when the line names a rank only (2.24-2.28).
	GPU  string
	Rank int // -1 when not printed
	// Index is the NET device's index (the position in "NET/IB : Using
	// [0]mlx5_0:1/RoCE …").
	Index                 int
	Enabled               bool
	Distance, MaxDistance int
	// Read is 1 when a line of this path said "read 1" (NCCL_NET_GDR_READ:
	// sends read GPU memory directly; NCCL prints read 0 for receives),
	// -1 when none printed it (Disabled).
	Read int
	Mode string // "Default", "PCI", … (2.26+), "" when not printed

	gpuRaw, hcaRaw string // as logged: a repeated line costs no allocation
}

const (
	maxGDRPaths = 64 // (GPU or rank, NET index) per process
	maxDMABuf   = 16 // CUDA devices per process
)

var (
	msgGDRPrefix = []byte("GPU Direct RDMA ")
	msgEnabled   = []byte("Enabled for GPU")
	msgDisabled  = []byte("Disabled for GPU")
	msgHCA       = []byte(" / HCA ")
	msgNETSlash  = []byte(" - NET/")
	msgRankOpen  = []byte("(rank ")
	msgDistance  = []byte("distance ")
	msgRead      = []byte("read ")
	msgMode      = []byte("mode ")
	msgDMABuf    = []byte("DMA-BUF is available on GPU device ")
)

// gdrPathForm says how the GPU and HCA of a GDR path line are written.
const (
	gdrFormBus     = iota + 1 // "GPU %lx" (bus id) or "GPU %d" (rank, 2.24+), "HCA %d|%lx"
	gdrFormBracket            // 2.4: "GPU %d[%d]"
	gdrFormTopoID             // 2.29: "GPU/%ld-%ld (rank %d) - NET/%ld-%ld"
)

// parseGDRPath reads body, "GPU Direct RDMA Enabled for GPU …" (after 2.4's
// and 2.5's "NET/IB : "), into ev: name the GPU as written, value the HCA,
// rank, dist, maxDist, read, mode.
func parseGDRPath(body []byte, ev *event) {
	b, ok := bytes.CutPrefix(body, msgGDRPrefix)
	if !ok {
		return
	}
	enabled := false
	switch {
	case bytes.HasPrefix(b, msgEnabled):
		enabled, b = true, b[len(msgEnabled):]
	case bytes.HasPrefix(b, msgDisabled):
		b = b[len(msgDisabled):]
	default:
		return
	}
	out := event{kind: evGDRPath, gdr: enabled, rank: -1, read: -1}
	switch {
	case len(b) > 1 && b[0] == ' ':
		h := bytes.Index(b, msgHCA)
		if h < 2 {
			return
		}
		gpu := b[1:h]
		out.form = gdrFormBus
		if o := bytes.IndexByte(gpu, '['); o > 0 {
			d, ok := bracketDev(gpu)
			if !ok {
				return
			}
			gpu, out.form = d, gdrFormBracket
		}
		if !isHexDigits(gpu) {
			return
		}
		b = b[h+len(msgHCA):]
		e := bytes.IndexByte(b, ' ')
		if e <= 0 || !isHexDigits(b[:e]) {
			return
		}
		out.name, out.value, b = gpu, b[:e], b[e:]
	case len(b) > 1 && b[0] == '/':
		// "/0-110592 (rank 0) - NET/0-3 (…"
		e := bytes.IndexByte(b, ' ')
		if e < 0 {
			return
		}
		gpu := topoLocalID(b[1:e])
		r := bytes.Index(b, msgRankOpen)
		n := bytes.Index(b, msgNETSlash)
		if gpu == nil || r < 0 || n < r {
			return
		}
		rank := b[r+len(msgRankOpen):]
		if c := bytes.IndexByte(rank, ')'); c > 0 && isDigits(rank[:c]) && c < 8 {
			out.rank = atoi32(rank[:c])
		} else {
			return
		}
		b = b[n+len(msgNETSlash):]
		e = bytes.IndexByte(b, ' ')
		if e < 0 {
			return
		}
		hca := topoLocalID(b[:e])
		if hca == nil {
			return
		}
		out.name, out.value, out.form, b = gpu, hca, gdrFormTopoID, b[e:]
	default:
		return
	}
	d := bytes.Index(b, msgDistance)
	if d < 0 {
		return
	}
	b = b[d+len(msgDistance):]
	var ok1, ok2 bool
	out.dist, b, ok1 = leadingInt(b)
	b = trimLeftSpace(b)
	for len(b) > 0 && (b[0] == '<' || b[0] == '>' || b[0] == '=') {
		b = b[1:]
	}
	out.maxDist, b, ok2 = leadingInt(trimLeftSpace(b))
	if !ok1 || !ok2 {
		return
	}
	if r := bytes.Index(b, msgRead); r >= 0 {
		if v, _, ok := leadingInt(b[r+len(msgRead):]); ok {
			out.read = v
		}
	}
	if m := bytes.Index(b, msgMode); m >= 0 {
		mode := b[m+len(msgMode):]
		e := 0
		for e < len(mode) && mode[e] != ')' && mode[e] != ' ' && mode[e] != ',' {
			e++
		}
		out.mode = mode[:e]
	}
	*ev = out
}

// topoLocalID returns the local id of 2.29's "%ld-%ld" (system id, local
// id, decimal) when both are numbers.
func topoLocalID(b []byte) []byte {
	s, l, ok := bytes.Cut(b, []byte("-"))
	if !ok || !isDigits(s) || !isDigits(l) || len(l) == 0 || len(l) > 18 {
		return nil
	}
	return l
}

func isHexDigits(b []byte) bool {
	if len(b) == 0 || len(b) > 16 {
		return false
	}
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// leadingInt parses the decimal number at the start of b (at most 6
// digits), returning the rest.
func leadingInt(b []byte) (int32, []byte, bool) {
	e := 0
	for e < len(b) && b[e] >= '0' && b[e] <= '9' {
		e++
	}
	if e == 0 || e > 6 {
		return 0, b, false
	}
	return atoi32(b[:e]), b[e:], true
}

// atoi32 is the value of decimal digits b (at most 9 of them are read).
func atoi32(b []byte) int32 {
	var n int32
	for i, c := range b {
		if i == 9 || c < '0' || c > '9' {
			break
		}
		n = n*10 + int32(c-'0')
	}
	return n
}

// parseDMABuf reads "DMA-BUF is available on GPU device %d".
func parseDMABuf(msg []byte, ev *event) {
	d, ok := bytes.CutPrefix(msg, msgDMABuf)
	if !ok || !isDigits(d) || len(d) == 0 || len(d) > 4 {
		return
	}
	*ev = event{kind: evDMABuf, name: d}
}

// setGDRPath records a GDR path line; the latest line of a (GPU, HCA)
// wins. version decides how a bare number is read: "GPU %d" is a rank from
// 2.24 and a bus id before (a bus id has at least four hex digits), "HCA
// %lx" is hex from 2.21.
func (p *Process) setGDRPath(ev *event) {
	for i := range p.GDRPaths {
		e := &p.GDRPaths[i]
		if e.gpuRaw == string(ev.name) && e.hcaRaw == string(ev.value) && (ev.rank < 0 || e.Rank == int(ev.rank)) &&
			e.Enabled == ev.gdr && e.Distance == int(ev.dist) && e.MaxDistance == int(ev.maxDist) &&
			e.Read >= int(ev.read) && e.Mode == string(ev.mode) {
			return
		}
	}
	g := GDRPath{Rank: int(ev.rank), Enabled: ev.gdr, Distance: int(ev.dist), MaxDistance: int(ev.maxDist),
		Read: int(ev.read), Mode: boundLabel(ev.mode)}
	minor, known := p.minorVersion()
	hexHCA := ev.form == gdrFormBus && (known && minor >= 21 || bytes.ContainsAny(ev.value, "abcdef"))
	switch ev.form {
	case gdrFormBracket:
		g.GPU = string(ev.name)
	case gdrFormTopoID:
		v, err := strconv.ParseUint(string(ev.name), 10, 64)
		if err != nil {
			return
		}
		g.GPU = busIDLabel(v)
	case gdrFormBus:
		rank := known && minor >= 24 || !known && len(ev.name) < 4 && isDigits(ev.name)
		if rank {
			if !isDigits(ev.name) || len(ev.name) > 7 {
				return
			}
			g.Rank = int(atoi32(ev.name))
		} else {
			v, err := strconv.ParseUint(string(ev.name), 16, 64)
			if err != nil {
				return
			}
			g.GPU = busIDLabel(v)
		}
	}
	base := 10
	if hexHCA {
		base = 16
	}
	idx, err := strconv.ParseUint(string(ev.value), base, 64)
	if err != nil {
		return
	}
	idx &= 0x00ffffffffffffff // NCCL_TOPO_ID_LOCAL_ID
	if idx > 9999 {
		return
	}
	g.Index = int(idx)
	g.gpuRaw, g.hcaRaw = string(ev.name), string(ev.value)
	for i := range p.GDRPaths {
		if e := &p.GDRPaths[i]; e.GPU == g.GPU && e.Rank == g.Rank && e.Index == g.Index {
			if g.Enabled == e.Enabled {
				g.Read = max(g.Read, e.Read)
			}
			if *e != g {
				*e = g
				p.Gen++
			}
			return
		}
	}
	if len(p.GDRPaths) < maxGDRPaths {
		p.GDRPaths = append(p.GDRPaths, g)
		p.Gen++
	}
}

// busIDLabel is the PCI address of NCCL's int64 bus id
// (domain<<20 | bus<<12 | device<<4 | function).
func busIDLabel(v uint64) string {
	b := make([]byte, 0, 16)
	b = appendHex(b, v>>20, 4)
	b = append(b, ':')
	b = appendHex(b, (v>>12)&0xff, 2)
	b = append(b, ':')
	b = appendHex(b, (v>>4)&0xff, 2)
	b = append(b, '.')
	b = appendHex(b, v&0xf, 1)
	return string(b)
}

// setDMABuf records a CUDA device with DMA-BUF available.
func (p *Process) setDMABuf(dev []byte) {
	for _, d := range p.DMABuf {
		if d == string(dev) {
			return
		}
	}
	if len(p.DMABuf) < maxDMABuf {
		p.DMABuf = append(p.DMABuf, string(dev))
		p.Gen++
	}
}

// minorVersion is the minor of p's "NCCL version 2.M.…", when logged.
func (p *Process) minorVersion() (int, bool) {
	if !p.HasVersion {
		return 0, false
	}
	v, ok := bytes.CutPrefix([]byte(p.Version), []byte("2."))
	if !ok {
		return 0, false
	}
	m, _, ok := leadingInt(v)
	return int(m), ok
}

// GDRPathGPU is the GPU of g: its own when the line named one, else, for
// a rank-only line (2.24-2.28), the device of that rank in this process's
// connection lines ("2[2] -> 11[3] [send]"), "" when none named it. A
// process prints these lines for other local ranks' GPUs too.
func (p *Process) GDRPathGPU(g GDRPath) string {
	if g.GPU != "" {
		return g.GPU
	}
	for _, e := range p.rankDev {
		if e.rank == g.Rank {
			return e.gpu
		}
	}
	return ""
}
