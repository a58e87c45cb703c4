package inspector

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The plugin's output captured on the lent H200 (the collector's fixtures).
const inspectorFixtures = "../../../collector/fixtures/nccl-inspector"

const inspLine = `{"header":{"id":"0x%x","comm_name":"tp","rank":0,"n_ranks":8,"nnodes":2},"metadata":{"inspector_output_format_version":"v4.0","git_rev":"","rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":1,"hostname":"%s","pid":%d},"coll_perf":{"coll":"%s","coll_sn":1,"coll_msg_size_bytes":%d,"coll_exec_time_us":%d,"coll_timing_source":"kernel_gpu","coll_algobw_gbs":1.0,"coll_busbw_gbs":%g}}` + "\n"

func inspJSON(comm int, host string, pid int, op string, size, us int, busbw float64) string {
	return fmt.Sprintf(inspLine, comm, host, pid, op, size, us, busbw)
}

func TestInspectorSizeBuckets(t *testing.T) {
	for _, c := range []struct {
		b    float64
		want string
	}{{0, "0-64KiB"}, {65535, "0-64KiB"}, {65536, "64KiB-1MiB"}, {1 << 20, "1-16MiB"}, {64 << 20, "16-256MiB"}, {1 << 30, "256MiB-4GiB"}, {17179869184, "4GiB+"}} {
		if got := SizeBucket(c.b); got != c.want {
			t.Errorf("%v: %s, want %s", c.b, got, c.want)
		}
	}
	for s, want := range map[string]float64{"0B": 0, "1-2KB": 1024, "64-65MB": 64 << 20, "4-5GB": 4 << 30, "7-8B": 7} {
		if got, ok := sizeRangeMin(s); !ok || got != want {
			t.Errorf("%s: %v %v, want %v", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "-", "1-", "x-2MB", "1-2XB", "1-MB"} {
		if _, ok := sizeRangeMin(s); ok {
			t.Errorf("%q accepted", s)
		}
	}
}

func inspectorSeeds(f *testing.F) {
	for _, p := range []string{"json/vm-pid692.log", "prom/nccl_inspector_metrics_14a9cb09-ae08-55c9-60a5-427ca9b9477d.prom"} {
		b, err := os.ReadFile(filepath.Join(inspectorFixtures, p))
		if err != nil {
			f.Fatal(err)
		}
		for i, l := range strings.SplitN(string(b), "\n", 4) {
			if i < 3 {
				f.Add([]byte(l))
			}
		}
	}
	f.Add([]byte(inspJSON(1, "n", 1, "Send", 1, 1, 1)))
	f.Add([]byte(`{"header":{"id":"0x1","comm_name":"x","rank":0,"n_ranks":2,"nnodes":1},"metadata":{"hostname":"h","pid":3},"p2p_perf":{"p2p":"Send","p2p_sn":1,"p2p_peer":1,"p2p_msg_size_bytes":9000,"p2p_exec_time_us":5,"p2p_timing_source":"kernel_gpu","p2p_algobw_gbs":1,"p2p_busbw_gbs":1}}`))
}

// refParseInspectorJSON is the reference: encoding/json into the plugin's
// structure (what the scanner replaced for speed).
func refParseInspectorJSON(line []byte) (Op, bool) {
	type perf struct {
		Coll      string   `json:"coll"`
		CollSize  *float64 `json:"coll_msg_size_bytes"`
		CollTime  *float64 `json:"coll_exec_time_us"`
		CollBusBW *float64 `json:"coll_busbw_gbs"`
		P2P       string   `json:"p2p"`
		P2PSize   *float64 `json:"p2p_msg_size_bytes"`
		P2PTime   *float64 `json:"p2p_exec_time_us"`
		P2PBusBW  *float64 `json:"p2p_busbw_gbs"`
	}
	var l struct {
		Header struct {
			ID       string `json:"id"`
			CommName string `json:"comm_name"`
			Rank     int64  `json:"rank"`
			NRanks   int64  `json:"n_ranks"`
			NNodes   int64  `json:"nnodes"`
		} `json:"header"`
		Metadata struct {
			Hostname string  `json:"hostname"`
			PID      *uint32 `json:"pid"`
		} `json:"metadata"`
		Coll *perf `json:"coll_perf"`
		P2P  *perf `json:"p2p_perf"`
	}
	if json.Unmarshal(line, &l) != nil || (l.Coll == nil) == (l.P2P == nil) || l.Metadata.PID == nil {
		return Op{}, false
	}
	var name string
	var size, us, bw *float64
	if p := l.Coll; p != nil {
		name, size, us, bw = p.Coll, p.CollSize, p.CollTime, p.CollBusBW
	} else {
		p = l.P2P
		name, size, us, bw = p.P2P, p.P2PSize, p.P2PTime, p.P2PBusBW
	}
	if name == "" || size == nil || us == nil || bw == nil || l.Header.ID == "" || l.Metadata.Hostname == "" {
		return Op{}, false
	}
	for _, v := range []float64{*size, *us, *bw} {
		if v < 0 {
			return Op{}, false
		}
	}
	return Op{Host: boundLabel(l.Metadata.Hostname), PID: fmt.Sprint(*l.Metadata.PID), Comm: boundLabel(l.Header.ID),
		CommName: boundLabel(l.Header.CommName), Rank: l.Header.Rank, Ranks: l.Header.NRanks, Nodes: l.Header.NNodes,
		Name: opName(name), Bytes: *size, Seconds: *us / 1e6, BusBytesPerSecond: *bw * 1e9}, true
}

// plainJSON: printable ASCII without escapes or null, and no key with an
// upper-case letter, where encoding/json and the scanner must agree
// exactly. (encoding/json matches keys to fields case-insensitively:
// "Comm_nAme" sets comm_name there. The scanner takes NCCL's keys as NCCL
// writes them, lower case, and ignores others: found by FuzzInspectorJSON,
// testdata/fuzz/FuzzInspectorJSON/a9a198d4383f99f1.)
func plainJSON(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c > 0x7e || c == '\\' {
			return false
		}
	}
	for _, m := range jsonKey.FindAllSubmatch(b, -1) {
		if strings.ToLower(string(m[1])) != string(m[1]) {
			return false
		}
	}
	return !strings.Contains(string(b), "null")
}

var jsonKey = regexp.MustCompile(`"([^"]*)"\s*:`)

func FuzzInspectorJSON(f *testing.F) {
	inspectorSeeds(f)
	f.Fuzz(func(t *testing.T, line []byte) {
		op, err := ParseJSON(line)
		if ref, ok := refParseInspectorJSON(line); ok && err == nil && plainJSON(line) {
			if ref != op {
				t.Fatalf("scanner %+v, encoding/json %+v", op, ref)
			}
		}
		if err != nil {
			return
		}
		for _, s := range []string{op.Host, op.PID, op.Comm, op.CommName} {
			if len(s) > maxLabel {
				t.Fatalf("label of %d bytes", len(s))
			}
		}
		if opName(op.Name) != op.Name {
			t.Fatalf("unbounded op %q", op.Name)
		}
		if op.Bytes < 0 || op.Seconds < 0 || op.BusBytesPerSecond < 0 || math.IsNaN(op.BusBytesPerSecond) || math.IsInf(op.BusBytesPerSecond, 0) {
			t.Fatalf("bad numbers %+v", op)
		}
	})
}

func FuzzInspectorProm(f *testing.F) {
	inspectorSeeds(f)
	f.Fuzz(func(t *testing.T, line []byte) {
		s, err := parsePromLine(line)
		if err != nil {
			return
		}
		if opName(s.op) != s.op {
			t.Fatalf("unbounded op %q", s.op)
		}
		if s.algo != "" && s.algo != "other" && algoProto(s.algo) != s.algo {
			t.Fatalf("unbounded algo_proto %q", s.algo)
		}
		ok := false
		for _, b := range sizeBuckets {
			ok = ok || b.name == s.size
		}
		if !ok || s.value < 0 || math.IsNaN(s.value) || len(s.node) > maxLabel || len(s.comm) > maxLabel {
			t.Fatalf("bad sample %+v", s)
		}
	})
}

// The scanner on the plugin's escapes ('/' is written as "\/"), verbose
// event traces, P2P and malformed lines.
func TestInspectorJSONScanner(t *testing.T) {
	verbose := `{"header":{"id":"0xe62dedaa97644a","comm_name":"DP\/0 \"a\"","rank":4,"n_ranks":8,"nnodes":1},"metadata":{"inspector_output_format_version":"v4.0","git_rev":"9019a1912-dirty","rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":1752867229276385,"hostname":"example-hostname","pid":438776},"coll_perf":{"coll":"ReduceScatter","coll_sn":1231,"coll_msg_size_bytes":2147483648,"coll_exec_time_us":41057,"coll_timing_source":"kernel_gpu","coll_algobw_gbs":418.439467,"coll_busbw_gbs":366.134533,"event_trace_sn":{"coll_start_sn":1,"coll_stop_sn":2,"kernel_events":[{"channel_id":0,"kernel_start_sn":3,"kernel_stop_sn":48,"kernel_record_sn":47}]},"event_trace_ts":{"coll_start_ts":1752867229235059,"coll_stop_ts":1752867229235064,"kernel_events":[{"channel_id":0,"kernel_start_ts":1752867229235181,"kernel_stop_ts":1752867229275811,"kernel_record_ts":1752867229275811}]}}}`
	op, err := ParseJSON([]byte(verbose))
	want := Op{Host: "example-hostname", PID: "438776", Comm: "0xe62dedaa97644a", CommName: `DP/0 "a"`, Rank: 4, Ranks: 8, Nodes: 1,
		Name: "ReduceScatter", Bytes: 2147483648, Seconds: 0.041057, BusBytesPerSecond: 366.134533e9}
	if err != nil || op != want {
		t.Errorf("verbose line: %+v %v, want %+v", op, err, want)
	}
	p2p := `{"header":{"id":"0x1","comm_name":"pp","rank":0,"n_ranks":2,"nnodes":2},"metadata":{"hostname":"h","pid":3},"p2p_perf":{"p2p":"Send","p2p_sn":1,"p2p_peer":1,"p2p_msg_size_bytes":9000,"p2p_exec_time_us":5,"p2p_timing_source":"kernel_gpu","p2p_algobw_gbs":1.8,"p2p_busbw_gbs":1.8}}`
	if op, err := ParseJSON([]byte(p2p)); err != nil || op.Name != "Send" || op.Bytes != 9000 || op.BusBytesPerSecond != 1.8e9 {
		t.Errorf("p2p line: %+v %v", op, err)
	}
	for _, bad := range []string{
		"{" + verbose, verbose + "}", verbose[:len(verbose)-1],
		strings.Replace(p2p, `"p2p_busbw_gbs":1.8`, `"p2p_busbw_gbs":"nan"`, 1), // the plugin writes NaN as a string
		strings.Replace(p2p, `"pid":3`, `"pid":-3`, 1),
		strings.Replace(p2p, `"pid":3`, `"pid":3.5`, 1),
		strings.Replace(p2p, `"p2p_msg_size_bytes":9000`, `"p2p_msg_size_bytes":+9000`, 1),
		strings.Replace(p2p, `"rank":0`, `"rank":"0"`, 1),
		strings.Replace(p2p, `"p2p_perf"`, `"coll_perf"`, 1), // p2p fields under coll_perf
		strings.Replace(p2p, `"comm_name":"pp"`, `"comm_name":"p\x"`, 1),
		p2p[:len(p2p)-1] + `,"coll_perf":{}}`, // two operations
	} {
		if op, err := ParseJSON([]byte(bad)); err == nil {
			t.Errorf("accepted %q: %+v", bad, op)
		}
	}
}

// ParseProm: samples averaged per label set after bucketing, the uuid from
// the file name, comments skipped, garbage counted, a partial last line
// (the plugin rewriting the file) ignored.
func TestParseProm(t *testing.T) {
	const lbl = `{version="v5.1",slurm_job_id="unknown",node="n1",gpu="GPU0",comm_name="tp",n_nodes="2",nranks="16",collective="AllReduce",message_size="%s",algo_proto="Ring_ll"}`
	l := func(size string) string { return fmt.Sprintf(lbl, size) }
	data := "# HELP nccl_bus_bandwidth_gbs x\n" +
		"nccl_bus_bandwidth_gbs" + l("4-5GB") + " 40\n" +
		"nccl_bus_bandwidth_gbs" + l("5-6GB") + " 44\n" +
		"nccl_collective_exec_time_microseconds" + l("4-5GB") + " 9000\n" +
		`nccl_p2p_exec_time_microseconds{node="n1",comm_name="pp",n_nodes="2",nranks="2",p2p_operation="Send",message_size="1-2KB"} 5` + "\n" +
		"garbage\n" +
		"nccl_bus_bandwidth_gbs" + l("1-2MB") + " 3"
	got, bad := ParseProm(PromPrefix+"00000000-0000-0000-0000-000000000001.prom", []byte(data))
	uuid := "GPU-00000000-0000-0000-0000-000000000001"
	want := []PromSeries{
		{Labels: [8]string{"n1", uuid, "pp", "2", "2", "Send", "0-64KiB", ""}, ExecTime: 5e-6, HasExecTime: true},
		{Labels: [8]string{"n1", uuid, "tp", "2", "16", "AllReduce", "4GiB+", "RING_LL"}, BusBandwidth: 42e9, HasBusBandwidth: true, ExecTime: 9e-3, HasExecTime: true},
	}
	if bad != 1 || len(got) != len(want) {
		t.Fatalf("%d bad lines, series %+v", bad, got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Labels != w.Labels || g.HasBusBandwidth != w.HasBusBandwidth || g.HasExecTime != w.HasExecTime ||
			math.Abs(g.BusBandwidth-w.BusBandwidth) > 1e-3 || math.Abs(g.ExecTime-w.ExecTime) > 1e-12 {
			t.Errorf("series %d: got %+v, want %+v", i, g, w)
		}
	}
	if got, _ := ParseProm(PromPrefix+"MIG-1.prom", []byte("nccl_bus_bandwidth_gbs"+l("0B")+" 1\n")); len(got) != 1 || got[0].Labels[1] != "MIG-1" {
		t.Errorf("MIG file: %+v", got)
	}
	if got, bad := ParseProm(PromPrefix+"x.prom", []byte("nccl_bus_bandwidth_gbs"+l("0B"))); len(got) != 0 || bad != 0 {
		t.Errorf("a file without a complete line: %+v, %d bad", got, bad)
	}
	if !IsPromFile(PromPrefix+"x.prom") || IsPromFile("x.prom") || IsPromFile(PromPrefix+"x.log") {
		t.Error("IsPromFile")
	}
}
