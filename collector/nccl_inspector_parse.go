package collector

import (
	"bytes"
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

// parseInspectorJSON parses one JSON line with a single-pass scanner (no
// reflection: encoding/json read 35k lines/s, see BenchmarkInspectorJSONFollow;
// the fuzz target checks this against it). Unknown keys and the verbose
// event traces are skipped; header and metadata must be objects, numbers
// finite and not negative, pid a decimal integer. Label values are bounded
// to maxNCCLLabel bytes of valid UTF-8.
func parseInspectorJSON(line []byte) (inspectorOp, error) {
	var op inspectorOp
	s := jscan{b: line}
	var name string
	var size, us, bw float64
	var haveID, haveHost, havePID bool
	perfs := 0
	ok := s.object(func(key []byte) bool {
		switch string(key) {
		case "header":
			return s.object(func(k []byte) bool {
				switch string(k) {
				case "id":
					op.comm, haveID = s.label()
					return haveID
				case "comm_name":
					var ok bool
					op.commName, ok = s.label()
					return ok
				case "rank":
					return s.int(&op.rank)
				case "n_ranks":
					return s.int(&op.ranks)
				case "nnodes":
					return s.int(&op.nodes)
				}
				return s.skip()
			})
		case "metadata":
			return s.object(func(k []byte) bool {
				switch string(k) {
				case "hostname":
					op.host, haveHost = s.label()
					return haveHost
				case "pid":
					var n int64
					havePID = s.int(&n) && n >= 0 && n <= math.MaxUint32
					op.pid = strconv.FormatInt(n, 10)
					return havePID
				}
				return s.skip()
			})
		case "coll_perf", "p2p_perf":
			perfs++
			p := "coll"
			if key[0] == 'p' {
				p = "p2p"
			}
			var have [4]bool
			ok := s.object(func(k []byte) bool {
				rest, found := bytes.CutPrefix(k, []byte(p))
				if !found {
					return s.skip()
				}
				switch string(rest) {
				case "":
					var ok bool
					name, ok = s.label()
					have[0] = ok && name != ""
					return ok
				case "_msg_size_bytes":
					have[1] = s.float(&size)
					return have[1]
				case "_exec_time_us":
					have[2] = s.float(&us)
					return have[2]
				case "_busbw_gbs":
					have[3] = s.float(&bw)
					return have[3]
				}
				return s.skip()
			})
			return ok && have[0] && have[1] && have[2] && have[3]
		}
		return s.skip()
	})
	s.ws()
	if !ok || s.i != len(s.b) || perfs != 1 || !haveID || op.comm == "" || !haveHost || op.host == "" || !havePID {
		return inspectorOp{}, errInspectorLine
	}
	op.op = inspectorOpName(name)
	op.bytes = size
	op.seconds = us / 1e6
	op.busBytesPerSecond = bw * 1e9
	return op, nil
}

// jscan is a minimal JSON scanner over one line.
type jscan struct {
	b []byte
	i int
}

func (s *jscan) ws() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

func (s *jscan) expect(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// object reads an object, calling member with each raw key, positioned at
// its value.
func (s *jscan) object(member func(key []byte) bool) bool {
	if !s.expect('{') {
		return false
	}
	if s.expect('}') {
		return true
	}
	for {
		key, esc, ok := s.rawString()
		if !ok || esc || !s.expect(':') {
			return false // escaped keys are none of ours: the plugin writes plain names
		}
		s.ws()
		if !member(key) {
			return false
		}
		if s.expect(',') {
			continue
		}
		return s.expect('}')
	}
}

// rawString reads a string and returns its raw bytes and whether it has
// escapes.
func (s *jscan) rawString() (raw []byte, esc, ok bool) {
	if !s.expect('"') {
		return nil, false, false
	}
	start := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			raw = s.b[start:s.i]
			s.i++
			return raw, esc, true
		case c == '\\':
			esc = true
			s.i += 2
		case c < 0x20:
			return nil, false, false
		default:
			s.i++
		}
	}
	return nil, false, false
}

// label reads a string value as a bounded label.
func (s *jscan) label() (string, bool) {
	raw, esc, ok := s.rawString()
	if !ok {
		return "", false
	}
	if !esc {
		return inspLabel(string(raw)), true
	}
	u, ok := jsonUnescape(raw)
	if !ok {
		return "", false
	}
	return inspLabel(u), true
}

// jsonUnescape decodes the escapes of a JSON string's contents (the plugin
// escapes '"', '\\', '/', tab and newline).
func jsonUnescape(raw []byte) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(raw) {
			return "", false
		}
		switch raw[i] {
		case '"', '\\', '/':
			b.WriteByte(raw[i])
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			if i+4 >= len(raw) {
				return "", false
			}
			n, err := strconv.ParseUint(string(raw[i+1:i+5]), 16, 32)
			if err != nil {
				return "", false
			}
			b.WriteRune(rune(n)) // lone surrogates become U+FFFD
			i += 4
		default:
			return "", false
		}
	}
	return b.String(), true
}

// number returns the bytes of a JSON number.
func (s *jscan) number() ([]byte, bool) {
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		if (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
			s.i++
			continue
		}
		break
	}
	return s.b[start:s.i], s.i > start
}

func (s *jscan) float(v *float64) bool {
	n, ok := s.number()
	if !ok {
		return false
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) || !jsonNumber(n) {
		return false
	}
	*v = f
	return true
}

func (s *jscan) int(v *int64) bool {
	n, ok := s.number()
	if !ok || !jsonNumber(n) {
		return false
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		return false
	}
	*v = i
	return true
}

// jsonNumber checks JSON's number grammar (ParseFloat also takes "+1",
// ".5", "0x1p3", "1_0").
func jsonNumber(n []byte) bool {
	i := 0
	if i < len(n) && n[i] == '-' {
		i++
	}
	digits := func() int {
		j := i
		for i < len(n) && n[i] >= '0' && n[i] <= '9' {
			i++
		}
		return i - j
	}
	if i < len(n) && n[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(n) && n[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(n) && (n[i] == 'e' || n[i] == 'E') {
		i++
		if i < len(n) && (n[i] == '+' || n[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(n)
}

// skip skips any value.
func (s *jscan) skip() bool {
	s.ws()
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		_, _, ok := s.rawString()
		return ok
	case c == '{':
		return s.object(func([]byte) bool { return s.skip() })
	case c == '[':
		s.i++
		if s.expect(']') {
			return true
		}
		for {
			if !s.skip() {
				return false
			}
			if s.expect(',') {
				continue
			}
			return s.expect(']')
		}
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	default:
		n, ok := s.number()
		return ok && jsonNumber(n)
	}
}

func (s *jscan) lit(w string) bool {
	if bytes.HasPrefix(s.b[s.i:], []byte(w)) {
		s.i += len(w)
		return true
	}
	return false
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
