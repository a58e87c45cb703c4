package collector

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
)

// Parsers of the NCCL Inspector profiler plugin's two output formats
// (plugins/profiler/inspector of NVIDIA/nccl; formats read from its
// inspector_json.cc and inspector_prom.cc at v2.30.7-1, output format
// "v4.0" in JSON and "v5.1" in the textfile, both also written by the
// plugin PyTorch's NCCL 2.28.9 loaded on the lent H200:
// fixtures/nccl-inspector/).
//
// JSON mode (the default) appends one object per completed operation to
// <hostname>-pid<pid>.log in NCCL_INSPECTOR_DUMP_DIR:
//
//	{"header":{"id":"0xa6ce86ab2388df","comm_name":"unknown","rank":0,"n_ranks":2,"nnodes":2},
//	 "metadata":{"inspector_output_format_version":"v4.0",…,"hostname":"vm","pid":692},
//	 "coll_perf":{"coll":"AllReduce","coll_sn":0,"coll_msg_size_bytes":67108864,
//	              "coll_exec_time_us":43423,"coll_timing_source":"kernel_gpu",
//	              "coll_algobw_gbs":1.545468,"coll_busbw_gbs":1.545468}}
//
// or, for point-to-point operations, "p2p_perf" with "p2p", "p2p_peer",
// "p2p_msg_size_bytes", "p2p_exec_time_us", "p2p_busbw_gbs". header.id is
// the communicator's hash (NCCL's commId); GB/s are 1e9 bytes/s.
//
// Prometheus mode (NCCL_INSPECTOR_PROM_DUMP=1) rewrites, every dump
// interval (30 s at least), nccl_inspector_metrics_<GPU UUID>.prom with one
// pair of lines per (communicator name, collective, message-size range,
// algorithm_protocol) that had operations in the interval:
//
//	nccl_bus_bandwidth_gbs{version="v5.1",slurm_job_id="unknown",node="vm",gpu="GPU0",comm_name="unknown",
//	  n_nodes="2",nranks="2",collective="AllReduce",message_size="64-65MB",algo_proto="RING_SIMPLE"} 1.85572
//	nccl_collective_exec_time_microseconds{…same labels…} 36164.6
//
// (and nccl_p2p_bus_bandwidth_gbs / nccl_p2p_exec_time_microseconds with
// p2p_operation instead of collective and no algo_proto). The bandwidth is
// the geometric mean and the time the arithmetic mean over the interval;
// there is no count and no pid. Every process on that GPU truncates and
// rewrites the same file, and the plugin deletes it at teardown.

// inspectorOp is one completed operation of a JSON line.
type inspectorOp struct {
	host, pid, comm, commName string
	rank, ranks, nodes        int64
	op                        string // bounded: a known NCCL function or "other"
	bytes                     float64
	seconds                   float64
	busBytesPerSecond         float64
}

type inspectorJSONLine struct {
	Header struct {
		ID       string `json:"id"`
		CommName string `json:"comm_name"`
		Rank     int64  `json:"rank"`
		NRanks   int64  `json:"n_ranks"`
		NNodes   int64  `json:"nnodes"`
	} `json:"header"`
	Metadata struct {
		Hostname string          `json:"hostname"`
		PID      json.RawMessage `json:"pid"`
	} `json:"metadata"`
	Coll *inspectorPerf `json:"coll_perf"`
	P2P  *inspectorPerf `json:"p2p_perf"`
}

// inspectorPerf holds coll_perf or p2p_perf (same fields, other prefix).
type inspectorPerf struct {
	Coll      string   `json:"coll"`
	CollSize  *float64 `json:"coll_msg_size_bytes"`
	CollTime  *float64 `json:"coll_exec_time_us"`
	CollBusBW *float64 `json:"coll_busbw_gbs"`
	P2P       string   `json:"p2p"`
	P2PSize   *float64 `json:"p2p_msg_size_bytes"`
	P2PTime   *float64 `json:"p2p_exec_time_us"`
	P2PBusBW  *float64 `json:"p2p_busbw_gbs"`
}

var errInspectorLine = errors.New("not an NCCL Inspector JSON operation")

// inspectorOps are NCCL's function names as the plugin's ncclFuncToString
// prints them; anything else is "other" (labels stay bounded).
var inspectorOps = map[string]string{}

func init() {
	for _, s := range []string{"AllGather", "AllReduce", "Broadcast", "Recv", "Reduce", "ReduceScatter",
		"SendRecv", "Send", "All2All", "AllGatherV", "Gather", "Scatter", "AlltoAll"} {
		inspectorOps[s] = s
	}
}

func inspectorOpName(s string) string {
	if n, ok := inspectorOps[s]; ok {
		return n
	}
	return "other"
}

// parseInspectorJSON parses one JSON line. Label values are bounded to
// maxNCCLLabel bytes of valid UTF-8; numbers must be finite and not
// negative.
func parseInspectorJSON(line []byte) (inspectorOp, error) {
	var op inspectorOp
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return op, errInspectorLine
	}
	var l inspectorJSONLine
	if err := json.Unmarshal(line, &l); err != nil {
		return op, err
	}
	var name string
	var size, us, bw *float64
	switch {
	case l.Coll != nil && l.P2P == nil:
		name, size, us, bw = l.Coll.Coll, l.Coll.CollSize, l.Coll.CollTime, l.Coll.CollBusBW
	case l.P2P != nil && l.Coll == nil:
		name, size, us, bw = l.P2P.P2P, l.P2P.P2PSize, l.P2P.P2PTime, l.P2P.P2PBusBW
	default:
		return op, errInspectorLine
	}
	if name == "" || size == nil || us == nil || bw == nil || l.Header.ID == "" || l.Metadata.Hostname == "" {
		return op, errInspectorLine
	}
	for _, v := range []float64{*size, *us, *bw} {
		if v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return op, errInspectorLine
		}
	}
	pid := strings.TrimSpace(string(l.Metadata.PID))
	if n, err := strconv.ParseUint(pid, 10, 32); err != nil {
		return op, errInspectorLine
	} else {
		pid = strconv.FormatUint(n, 10)
	}
	op.host = inspLabel(l.Metadata.Hostname)
	op.pid = pid
	op.comm = inspLabel(l.Header.ID)
	op.commName = inspLabel(l.Header.CommName)
	op.rank, op.ranks, op.nodes = l.Header.Rank, l.Header.NRanks, l.Header.NNodes
	op.op = inspectorOpName(name)
	op.bytes = *size
	op.seconds = *us / 1e6
	op.busBytesPerSecond = *bw * 1e9
	return op, nil
}

// inspLabel cuts s to maxNCCLLabel bytes and replaces invalid UTF-8.
func inspLabel(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > maxNCCLLabel {
		s = strings.ToValidUTF8(s[:maxNCCLLabel], "")
	}
	return s
}

// Message-size buckets: powers of 16 from 64 KiB, so that small
// (latency-bound) and large (bandwidth-bound) operations are told apart
// with six label values whatever the sizes.
var inspectorSizeBuckets = []struct {
	min  float64
	name string
}{
	{0, "0-64KiB"},
	{64 << 10, "64KiB-1MiB"},
	{1 << 20, "1-16MiB"},
	{16 << 20, "16-256MiB"},
	{256 << 20, "256MiB-4GiB"},
	{4 << 30, "4GiB+"},
}

// inspectorSizeBucket names the bucket of a message size in bytes.
func inspectorSizeBucket(b float64) string {
	name := inspectorSizeBuckets[0].name
	for _, sb := range inspectorSizeBuckets {
		if b >= sb.min {
			name = sb.name
		}
	}
	return name
}

// inspectorSizeRangeMin returns the lower bound in bytes of the plugin's
// message_size label ("64-65MB", "1-2KB", "0B"; units of 1024).
func inspectorSizeRangeMin(s string) (float64, bool) {
	if s == "0B" {
		return 0, true
	}
	dash := strings.IndexByte(s, '-')
	if dash <= 0 {
		return 0, false
	}
	lo, err := strconv.ParseUint(s[:dash], 10, 32)
	if err != nil {
		return 0, false
	}
	rest := s[dash+1:]
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, false
	}
	mult := 0.0
	switch rest[i:] {
	case "B":
		mult = 1
	case "KB":
		mult = 1 << 10
	case "MB":
		mult = 1 << 20
	case "GB":
		mult = 1 << 30
	case "TB":
		mult = 1 << 40
	default:
		return 0, false
	}
	return float64(lo) * mult, true
}

// Algorithms and protocols NCCL names (ncclAlgoStr/ncclProtoStr: Tree,
// Ring, CollNetDirect, …; LL, LL128, Simple); the plugin has printed them
// as "RING_SIMPLE" (2.28, the fixture) and "Ring_ll" (its README).
var (
	inspectorAlgos  = []string{"TREE", "RING", "COLLNETDIRECT", "COLLNETCHAIN", "NVLS", "NVLSTREE", "PAT", "UNKNOWN"}
	inspectorProtos = []string{"LL", "LL128", "SIMPLE", "UNKNOWN"}
)

// inspectorAlgoProto bounds the algo_proto label: the upper-cased value
// when it is ALGO_PROTO of names NCCL has, else "other".
func inspectorAlgoProto(s string) string {
	u := strings.ToUpper(s)
	i := strings.LastIndexByte(u, '_')
	if i <= 0 {
		return "other"
	}
	algo, proto := strings.ReplaceAll(u[:i], "_", ""), u[i+1:]
	okA, okP := false, false
	for _, a := range inspectorAlgos {
		okA = okA || a == algo
	}
	for _, p := range inspectorProtos {
		okP = okP || p == proto
	}
	if okA && okP {
		return u
	}
	return "other"
}

// inspectorPromSample is one line of a Prometheus-mode file.
type inspectorPromSample struct {
	metric string // bus_bandwidth or exec_time
	p2p    bool
	node   string
	comm   string // comm_name
	nodes  string
	ranks  string
	op     string
	size   string // our bucket
	algo   string // algo_proto ("" for P2P)
	value  float64
}

// parseInspectorPromLine parses one line of a Prometheus-mode file. Lines
// of other metrics, comments and anything malformed are rejected.
func parseInspectorPromLine(line []byte) (inspectorPromSample, error) {
	var s inspectorPromSample
	brace := bytes.IndexByte(line, '{')
	end := bytes.LastIndexByte(line, '}')
	if brace <= 0 || end < brace {
		return s, errInspectorLine
	}
	switch string(line[:brace]) {
	case "nccl_bus_bandwidth_gbs":
		s.metric = "bus_bandwidth"
	case "nccl_collective_exec_time_microseconds":
		s.metric = "exec_time"
	case "nccl_p2p_bus_bandwidth_gbs":
		s.metric, s.p2p = "bus_bandwidth", true
	case "nccl_p2p_exec_time_microseconds":
		s.metric, s.p2p = "exec_time", true
	default:
		return s, errInspectorLine
	}
	vs := bytes.TrimSpace(line[end+1:])
	if sp := bytes.IndexByte(vs, ' '); sp >= 0 { // an optional timestamp
		vs = vs[:sp]
	}
	v, err := strconv.ParseFloat(string(vs), 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return s, errInspectorLine
	}
	s.value = v
	labels := line[brace+1 : end]
	var sizeLabel string
	for len(labels) > 0 {
		eq := bytes.IndexByte(labels, '=')
		if eq <= 0 || eq+1 >= len(labels) || labels[eq+1] != '"' {
			return s, errInspectorLine
		}
		name := string(labels[:eq])
		rest := labels[eq+2:]
		q := bytes.IndexByte(rest, '"') // the plugin does not escape values
		if q < 0 {
			return s, errInspectorLine
		}
		val := string(rest[:q])
		labels = rest[q+1:]
		if len(labels) > 0 {
			if labels[0] != ',' {
				return s, errInspectorLine
			}
			labels = labels[1:]
		}
		switch name {
		case "node":
			s.node = inspLabel(val)
		case "comm_name":
			s.comm = inspLabel(val)
		case "n_nodes":
			s.nodes = boundCount(val)
		case "nranks":
			s.ranks = boundCount(val)
		case "collective", "p2p_operation":
			s.op = inspectorOpName(val)
		case "message_size":
			sizeLabel = val
		case "algo_proto":
			s.algo = inspectorAlgoProto(val)
		}
	}
	lo, ok := inspectorSizeRangeMin(sizeLabel)
	if !ok || s.op == "" || s.node == "" {
		return s, errInspectorLine
	}
	s.size = inspectorSizeBucket(lo)
	if s.p2p {
		s.algo = ""
	} else if s.algo == "" {
		return s, errInspectorLine
	}
	return s, nil
}

// boundCount keeps a decimal count label, else "other".
func boundCount(s string) string {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return "other"
	}
	return strconv.FormatUint(n, 10)
}
