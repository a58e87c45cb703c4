package inspector

import (
	"bytes"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Bounds of the parsers.
const (
	maxLabel = 128 // bytes of a label value
	// MaxPromFile is the most ParseProm reads of a .prom file.
	MaxPromFile = 1 << 20
	// PromPrefix starts the name of every Prometheus-mode file,
	// nccl_inspector_metrics_<GPU UUID>.prom.
	PromPrefix = "nccl_inspector_metrics_"
)

// IsPromFile reports whether a file name is one of the plugin's
// Prometheus-mode files.
func IsPromFile(name string) bool {
	return strings.HasPrefix(name, PromPrefix) && strings.HasSuffix(name, ".prom")
}

// PromSeries is one label set of a Prometheus-mode file after bucketing,
// its samples averaged.
type PromSeries struct {
	// Labels are host (the node label), uuid (from the file name), comm_name,
	// nodes, ranks, op, size (our bucket) and algo_proto ("" for P2P).
	Labels [8]string
	// BusBandwidth in bytes per second and ExecTime in seconds, when
	// HasBusBandwidth and HasExecTime.
	BusBandwidth, ExecTime       float64
	HasBusBandwidth, HasExecTime bool
}

// ParseProm parses the contents of the Prometheus-mode file fileName:
// complete lines only (the plugin truncates and rewrites in place), the
// samples with the same labels after bucketing averaged. It returns the
// series sorted by labels and the number of lines that are none of the
// plugin's samples.
func ParseProm(fileName string, data []byte) ([]PromSeries, int) {
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[:i+1]
	} else {
		data = nil
	}
	uuid := strings.TrimSuffix(strings.TrimPrefix(fileName, PromPrefix), ".prom")
	if !strings.HasPrefix(uuid, "GPU-") && !strings.HasPrefix(uuid, "MIG-") {
		uuid = "GPU-" + uuid
	}
	uuid = boundLabel(uuid)
	type agg struct {
		labels        [8]string
		bw, t, nb, nt float64
	}
	byKey := map[string]*agg{}
	var keys []string
	bad := 0
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		line := data[:i]
		data = data[i+1:]
		if len(bytes.TrimSpace(line)) == 0 || line[0] == '#' {
			continue
		}
		s, err := parsePromLine(line)
		if err != nil {
			bad++
			continue
		}
		l := [8]string{s.node, uuid, s.comm, s.nodes, s.ranks, s.op, s.size, s.algo}
		k := strings.Join(l[:], "\x00")
		a := byKey[k]
		if a == nil {
			a = &agg{labels: l}
			byKey[k] = a
			keys = append(keys, k)
		}
		if s.metric == "bus_bandwidth" {
			a.bw += s.value * 1e9
			a.nb++
		} else {
			a.t += s.value / 1e6
			a.nt++
		}
	}
	sort.Strings(keys)
	out := make([]PromSeries, 0, len(keys))
	for _, k := range keys {
		a := byKey[k]
		ps := PromSeries{Labels: a.labels}
		if a.nb > 0 {
			ps.BusBandwidth, ps.HasBusBandwidth = a.bw/a.nb, true
		}
		if a.nt > 0 {
			ps.ExecTime, ps.HasExecTime = a.t/a.nt, true
		}
		out = append(out, ps)
	}
	return out, bad
}

// Message-size buckets: powers of 16 from 64 KiB, so that small
// (latency-bound) and large (bandwidth-bound) operations are told apart
// with six label values whatever the sizes.
var sizeBuckets = [...]struct {
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

// SizeBucket names the bucket of a message size in bytes.
func SizeBucket(b float64) string {
	name := sizeBuckets[0].name
	for _, sb := range sizeBuckets {
		if b >= sb.min {
			name = sb.name
		}
	}
	return name
}

// sizeRangeMin returns the lower bound in bytes of the plugin's
// message_size label ("64-65MB", "1-2KB", "0B"; units of 1024).
func sizeRangeMin(s string) (float64, bool) {
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
	algos  = [...]string{"TREE", "RING", "COLLNETDIRECT", "COLLNETCHAIN", "NVLS", "NVLSTREE", "PAT", "UNKNOWN"}
	protos = [...]string{"LL", "LL128", "SIMPLE", "UNKNOWN"}
)

// algoProto bounds the algo_proto label: the upper-cased value
// when it is ALGO_PROTO of names NCCL has, else "other".
func algoProto(s string) string {
	u := strings.ToUpper(s)
	i := strings.LastIndexByte(u, '_')
	if i <= 0 {
		return "other"
	}
	algo, proto := strings.ReplaceAll(u[:i], "_", ""), u[i+1:]
	okA, okP := false, false
	for _, a := range algos {
		okA = okA || a == algo
	}
	for _, p := range protos {
		okP = okP || p == proto
	}
	if okA && okP {
		return u
	}
	return "other"
}

// promSample is one line of a Prometheus-mode file.
type promSample struct {
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

// parsePromLine parses one line of a Prometheus-mode file. Lines
// of other metrics, comments and anything malformed are rejected.
func parsePromLine(line []byte) (promSample, error) {
	var s promSample
	brace := bytes.IndexByte(line, '{')
	end := bytes.LastIndexByte(line, '}')
	if brace <= 0 || end < brace {
		return s, errLine
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
		return s, errLine
	}
	vs := bytes.TrimSpace(line[end+1:])
	if sp := bytes.IndexByte(vs, ' '); sp >= 0 { // an optional timestamp
		vs = vs[:sp]
	}
	v, err := strconv.ParseFloat(string(vs), 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return s, errLine
	}
	s.value = v
	labels := line[brace+1 : end]
	var sizeLabel string
	for len(labels) > 0 {
		eq := bytes.IndexByte(labels, '=')
		if eq <= 0 || eq+1 >= len(labels) || labels[eq+1] != '"' {
			return s, errLine
		}
		name := string(labels[:eq])
		rest := labels[eq+2:]
		q := bytes.IndexByte(rest, '"') // the plugin does not escape values
		if q < 0 {
			return s, errLine
		}
		val := string(rest[:q])
		labels = rest[q+1:]
		if len(labels) > 0 {
			if labels[0] != ',' {
				return s, errLine
			}
			labels = labels[1:]
		}
		switch name {
		case "node":
			s.node = boundLabel(val)
		case "comm_name":
			s.comm = boundLabel(val)
		case "n_nodes":
			s.nodes = boundCount(val)
		case "nranks":
			s.ranks = boundCount(val)
		case "collective", "p2p_operation":
			s.op = opName(val)
		case "message_size":
			sizeLabel = val
		case "algo_proto":
			s.algo = algoProto(val)
		}
	}
	lo, ok := sizeRangeMin(sizeLabel)
	if !ok || s.op == "" || s.node == "" {
		return s, errLine
	}
	s.size = SizeBucket(lo)
	if s.p2p {
		s.algo = ""
	} else if s.algo == "" {
		return s, errLine
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
