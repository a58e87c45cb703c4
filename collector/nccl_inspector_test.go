package collector

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/nccl/inspector"
	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

const inspectorFixtures = "fixtures/nccl-inspector"

func newTestInspector(t testing.TB, o NCCLInspectorOptions) *ncclInspectorCollector {
	t.Helper()
	env, _ := testEnv()
	c, err := newNCCLInspectorState(env, &Options{NCCLInspector: o})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *ncclInspectorCollector) poll() { c.pollOnce(context.Background()) }

// inspectorScrape runs Update and returns every sample as
// name{label="value",…} (labels sorted) → value, and Update's error.
func inspectorScrape(t testing.TB, c Collector) (map[string]float64, error) {
	t.Helper()
	var uerr error
	reg := prometheus.NewRegistry()
	reg.MustRegister(updater{c: c, err: &uerr})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			sort.Strings(ls)
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue() + m.GetUntyped().GetValue()
			out[mf.GetName()+"{"+strings.Join(ls, ",")+"}"] = v
		}
	}
	return out, uerr
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

func checkSamples(t *testing.T, got, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("missing %s", k)
		case !near(g, v):
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
}

func countPrefix(m map[string]float64, prefix string) int {
	n := 0
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}

// The real JSON dumps of the lent H200 (200 AllReduce of 64 MiB per rank):
// expected sums computed from the files with Python's json module.
func TestNCCLInspectorJSONFixture(t *testing.T) {
	dir := copyTree(t, filepath.Join(inspectorFixtures, "json"))
	c := newTestInspector(t, NCCLInspectorOptions{DumpDir: dir, Retention: 0})
	c.poll()
	got, err := inspectorScrape(t, c)
	if err != nil {
		t.Fatal(err)
	}
	l := func(pid string) string {
		return `{comm="0xa6ce86ab2388df",host="vm",op="AllReduce",pid="` + pid + `",size="16-256MiB"}`
	}
	checkSamples(t, got, map[string]float64{
		`fabric_nccl_inspector_comm_info{comm="0xa6ce86ab2388df",comm_name="unknown",host="vm",nodes="2",pid="692",rank="0",ranks="2"}`: 1,
		`fabric_nccl_inspector_comm_info{comm="0xa6ce86ab2388df",comm_name="unknown",host="vm",nodes="2",pid="693",rank="1",ranks="2"}`: 1,
		"fabric_nccl_inspector_operations_total" + l("692"):                                                                             200,
		"fabric_nccl_inspector_operation_bytes_total" + l("692"):                                                                        13421772800,
		"fabric_nccl_inspector_operation_seconds_total" + l("692"):                                                                      7.240889,
		"fabric_nccl_inspector_bus_bytes_total" + l("692"):                                                                              13421772629.331009,
		"fabric_nccl_inspector_operations_total" + l("693"):                                                                             200,
		"fabric_nccl_inspector_operation_seconds_total" + l("693"):                                                                      7.176987,
		"fabric_nccl_inspector_bus_bytes_total" + l("693"):                                                                              13421772782.146013,
		"fabric_nccl_inspector_lines_total{}":                                                                                           400,
		"fabric_nccl_inspector_unparsed_lines_total{}":                                                                                  0,
		"fabric_nccl_inspector_communicators{}":                                                                                         2,
		`fabric_nccl_inspector_files{format="json"}`:                                                                                    2,
		`fabric_nccl_inspector_files{format="prom"}`:                                                                                    0,
	})
	// Bus bandwidth as the recording rule computes it: about 1.85 GB/s.
	bw := got["fabric_nccl_inspector_bus_bytes_total"+l("692")] / got["fabric_nccl_inspector_operation_seconds_total"+l("692")]
	if bw < 1.8e9 || bw > 1.9e9 {
		t.Errorf("bus bandwidth %v B/s, want about 1.85e9", bw)
	}
	if n := countPrefix(got, "fabric_nccl_inspector_operations_total"); n != 2 {
		t.Errorf("%d operation series, want 2", n)
	}
}

// The real .prom dumps: no pid, the uuid from the file name.
func TestNCCLInspectorPromFixture(t *testing.T) {
	dir := copyTree(t, filepath.Join(inspectorFixtures, "prom"))
	c := newTestInspector(t, NCCLInspectorOptions{DumpDir: dir})
	c.poll()
	got, err := inspectorScrape(t, c)
	if err != nil {
		t.Fatal(err)
	}
	l := func(uuid string) string {
		return `{algo_proto="RING_SIMPLE",comm_name="unknown",host="vm",nodes="2",op="AllReduce",ranks="2",size="16-256MiB",uuid="GPU-` + uuid + `"}`
	}
	a, b := "14a9cb09-ae08-55c9-60a5-427ca9b9477d", "ad651c3e-bc0d-1de3-36b0-20a8f39979e1"
	checkSamples(t, got, map[string]float64{
		"fabric_nccl_inspector_bus_bandwidth_bytes_per_second" + l(a): 1.85572e9,
		"fabric_nccl_inspector_exec_time_seconds" + l(a):              0.0361646,
		"fabric_nccl_inspector_bus_bandwidth_bytes_per_second" + l(b): 1.86627e9,
		"fabric_nccl_inspector_exec_time_seconds" + l(b):              0.0359637,
		`fabric_nccl_inspector_files{format="prom"}`:                  2,
		"fabric_nccl_inspector_unparsed_lines_total{}":                0,
	})
	if n := countPrefix(got, "fabric_nccl_inspector_bus_bandwidth_bytes_per_second"); n != 2 {
		t.Errorf("%d bandwidth series, want 2", n)
	}
}

const inspLine = `{"header":{"id":"0x%x","comm_name":"tp","rank":0,"n_ranks":8,"nnodes":2},"metadata":{"inspector_output_format_version":"v4.0","git_rev":"","rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":1,"hostname":"%s","pid":%d},"coll_perf":{"coll":"%s","coll_sn":1,"coll_msg_size_bytes":%d,"coll_exec_time_us":%d,"coll_timing_source":"kernel_gpu","coll_algobw_gbs":1.0,"coll_busbw_gbs":%g}}` + "\n"

func inspJSON(comm int, host string, pid int, op string, size, us int, busbw float64) string {
	return fmt.Sprintf(inspLine, comm, host, pid, op, size, us, busbw)
}

// A line cut in the middle (the plugin's buffered writes, a crash) is not
// counted until its end arrives; garbage and wrong JSON are counted as
// unparsed and change nothing else.
func TestNCCLInspectorTruncatedAndGarbage(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "n1-pid10.log")
	line := inspJSON(1, "n1", 10, "AllReduce", 1<<30, 20000, 40)
	testenv.WriteFile(t, p, line+line[:57])
	c := newTestInspector(t, NCCLInspectorOptions{DumpDir: dir})
	c.poll()
	key := `{comm="0x1",host="n1",op="AllReduce",pid="10",size="256MiB-4GiB"}`
	got, _ := inspectorScrape(t, c)
	checkSamples(t, got, map[string]float64{"fabric_nccl_inspector_operations_total" + key: 1, "fabric_nccl_inspector_unparsed_lines_total{}": 0})
	testenv.AppendFile(t, p, line[57:])
	c.poll()
	got, _ = inspectorScrape(t, c)
	checkSamples(t, got, map[string]float64{
		"fabric_nccl_inspector_operations_total" + key: 2,
		"fabric_nccl_inspector_bus_bytes_total" + key:  2 * 40e9 * 0.02,
	})
	for _, g := range []string{
		"garbage\n", "\x00\x00\x00\n", "{\"header\":{\n", line[:100] + "\n",
		`{"header":{"id":"0x1"},"metadata":{"hostname":"n1","pid":"x"},"coll_perf":{"coll":"AllReduce","coll_msg_size_bytes":1,"coll_exec_time_us":1,"coll_busbw_gbs":1}}` + "\n",
		`{"header":{"id":"0x1"},"metadata":{"hostname":"n1","pid":10},"coll_perf":{"coll":"AllReduce","coll_msg_size_bytes":-1,"coll_exec_time_us":1,"coll_busbw_gbs":1}}` + "\n",
		`{"header":{"id":"0x1"},"metadata":{"hostname":"n1","pid":10},"coll_perf":{"coll":"AllReduce"}}` + "\n",
	} {
		testenv.AppendFile(t, p, g)
	}
	testenv.AppendFile(t, p, inspJSON(1, "n1", 10, "<script>", 8192, 10, 1))
	c.poll()
	got, _ = inspectorScrape(t, c)
	checkSamples(t, got, map[string]float64{
		"fabric_nccl_inspector_operations_total" + key:                                                    2,
		"fabric_nccl_inspector_unparsed_lines_total{}":                                                    7,
		"fabric_nccl_inspector_lines_total{}":                                                             10,
		`fabric_nccl_inspector_operations_total{comm="0x1",host="n1",op="other",pid="10",size="0-64KiB"}`: 1,
	})
}

// Rotation: a renamed file keeps its offset, a new file at the old name is
// read from its start, a truncated file (copytruncate) is read again.
func TestNCCLInspectorRotation(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "n1-pid10.log")
	line := inspJSON(1, "n1", 10, "AllGather", 1<<20, 1000, 10)
	testenv.WriteFile(t, p, strings.Repeat(line, 3))
	c := newTestInspector(t, NCCLInspectorOptions{DumpDir: dir})
	c.poll()
	key := "fabric_nccl_inspector_operations_total" + `{comm="0x1",host="n1",op="AllGather",pid="10",size="1-16MiB"}`
	if err := os.Rename(p, p+".1.log"); err != nil {
		t.Fatal(err)
	}
	testenv.WriteFile(t, p, line)
	c.poll()
	got, _ := inspectorScrape(t, c)
	checkSamples(t, got, map[string]float64{key: 4, `fabric_nccl_inspector_files{format="json"}`: 2})
	testenv.AppendFile(t, p+".1.log", line)
	c.poll()
	got, _ = inspectorScrape(t, c)
	checkSamples(t, got, map[string]float64{key: 5})
	// copytruncate of the current file, then two new lines: read again from 0.
	testenv.WriteFile(t, p, "")
	c.poll()
	testenv.AppendFile(t, p, line+line)
	c.poll()
	got, _ = inspectorScrape(t, c)
	checkSamples(t, got, map[string]float64{key: 7})
}

// .prom files: a rewrite replaces the series, a file caught empty between
// the plugin's truncate and write keeps the last dump, a partial last line
// is ignored, a deleted file's series go, garbage left by two writers
// (a longer old dump's tail after a shorter new one) is counted.
func TestNCCLInspectorPromLifecycle(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, inspector.PromPrefix+"00000000-0000-0000-0000-000000000001.prom")
	const lbl = `{version="v5.1",slurm_job_id="unknown",node="n1",gpu="GPU0",comm_name="DP Group 0",n_nodes="2",nranks="16",collective="AllReduce",message_size="%s",algo_proto="Ring_ll"}`
	dump := func(size string, bw, us float64) string {
		l := fmt.Sprintf(lbl, size)
		return fmt.Sprintf("nccl_bus_bandwidth_gbs%s %g\nnccl_collective_exec_time_microseconds%s %g\n", l, bw, l, us)
	}
	testenv.WriteFile(t, p, dump("4-5GB", 40, 9000)+dump("5-6GB", 44, 9500)+dump("512-513MB", 30, 1000))
	c := newTestInspector(t, NCCLInspectorOptions{DumpDir: dir})
	c.poll()
	bw := func(size string) string {
		return `fabric_nccl_inspector_bus_bandwidth_bytes_per_second{algo_proto="RING_LL",comm_name="DP Group 0",host="n1",nodes="2",op="AllReduce",ranks="16",size="` + size + `",uuid="GPU-00000000-0000-0000-0000-000000000001"}`
	}
	got, _ := inspectorScrape(t, c)
	checkSamples(t, got, map[string]float64{bw("4GiB+"): 42e9, bw("256MiB-4GiB"): 30e9})
	// Truncated by the plugin, not written yet: the last dump stays.
	testenv.WriteFile(t, p, "")
	c.poll()
	got, _ = inspectorScrape(t, c)
	checkSamples(t, got, map[string]float64{bw("4GiB+"): 42e9})
	// Half written: only complete lines count.
	d := dump("512-513MB", 20, 1000)
	testenv.WriteFile(t, p, d[:len(d)-20])
	c.poll()
	got, _ = inspectorScrape(t, c)
	checkSamples(t, got, map[string]float64{bw("256MiB-4GiB"): 20e9})
	if _, ok := got[bw("4GiB+")]; ok {
		t.Error("the previous dump's bucket stays after a rewrite")
	}
	// Two writers: a short dump over the tail of a longer one.
	long := dump("4-5GB", 40, 9000) + dump("5-6GB", 44, 9500)
	short := dump("1-2MB", 5, 100)
	testenv.WriteFile(t, p, short+long[len(short):])
	c.poll()
	got, _ = inspectorScrape(t, c)
	if got["fabric_nccl_inspector_unparsed_lines_total{}"] < 1 {
		t.Errorf("the overwritten tail was not counted as unparsed: %v", got["fabric_nccl_inspector_unparsed_lines_total{}"])
	}
	checkSamples(t, got, map[string]float64{bw("1-16MiB"): 5e9})
	// Teardown: the plugin deletes the file.
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	c.poll()
	got, _ = inspectorScrape(t, c)
	if n := countPrefix(got, "fabric_nccl_inspector_bus_bandwidth_bytes_per_second"); n != 0 {
		t.Errorf("%d series of a deleted .prom file", n)
	}
	checkSamples(t, got, map[string]float64{`fabric_nccl_inspector_files{format="prom"}`: 0})
}

// A flood: many communicators and lines. Communicators stay bounded, the
// oldest are evicted, operations and sizes stay bounded label sets.
func TestNCCLInspectorFlood(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	ops := []string{"AllReduce", "AllGather", "Bogus1", "Bogus2", "ReduceScatter"}
	for i := 0; i < 20000; i++ {
		b.WriteString(inspJSON(i%500, "n1", 10+i%3, ops[i%len(ops)], 1<<(i%34), 100+i%7, 1.5))
	}
	testenv.WriteFile(t, filepath.Join(dir, "n1-pid10.log"), b.String())
	c := newTestInspector(t, NCCLInspectorOptions{DumpDir: dir, MaxCommunicators: 16})
	c.poll()
	got, _ := inspectorScrape(t, c)
	checkSamples(t, got, map[string]float64{
		"fabric_nccl_inspector_communicators{}":               16,
		"fabric_nccl_inspector_lines_total{}":                 20000,
		"fabric_nccl_inspector_evicted_communicators_total{}": 500*3 - 16,
	})
	if n := countPrefix(got, "fabric_nccl_inspector_comm_info"); n != 16 {
		t.Errorf("%d comm_info series, want 16", n)
	}
	// Each comm: at most 4 operation names (3 known + other) × 6 sizes.
	if n := countPrefix(got, "fabric_nccl_inspector_operations_total"); n > 16*4*6 {
		t.Errorf("%d operation series", n)
	}
	for k := range got {
		if strings.Contains(k, "Bogus") {
			t.Errorf("unbounded operation label: %s", k)
		}
	}
}

func TestNCCLInspectorRetention(t *testing.T) {
	dir := t.TempDir()
	testenv.WriteFile(t, filepath.Join(dir, "n1-pid10.log"), inspJSON(1, "n1", 10, "AllReduce", 1<<20, 10, 1))
	prom := filepath.Join(dir, inspector.PromPrefix+"x.prom")
	testenv.WriteFile(t, prom, `nccl_p2p_bus_bandwidth_gbs{version="v5.1",slurm_job_id="unknown",node="n1",gpu="GPU0",comm_name="pp",n_nodes="2",nranks="2",p2p_operation="Send",message_size="512-513MB"} 464.9`+"\n")
	c := newTestInspector(t, NCCLInspectorOptions{DumpDir: dir, Retention: time.Hour})
	now := time.Now()
	c.now = func() time.Time { return now }
	c.poll()
	got, _ := inspectorScrape(t, c)
	checkSamples(t, got, map[string]float64{
		"fabric_nccl_inspector_communicators{}": 1,
		`fabric_nccl_inspector_bus_bandwidth_bytes_per_second{algo_proto="",comm_name="pp",host="n1",nodes="2",op="Send",ranks="2",size="256MiB-4GiB",uuid="GPU-x"}`: 464.9e9,
	})
	now = now.Add(2 * time.Hour)
	c.poll()
	got, _ = inspectorScrape(t, c)
	checkSamples(t, got, map[string]float64{"fabric_nccl_inspector_communicators{}": 0, `fabric_nccl_inspector_files{format="prom"}`: 0})
}

func TestNCCLInspectorStates(t *testing.T) {
	c := newTestInspector(t, NCCLInspectorOptions{})
	if _, err := inspectorScrape(t, c); !errors.Is(err, ErrNoData) || !strings.HasPrefix(err.Error(), string(StateNotConfigured)) {
		t.Errorf("no dump dir: %v, want not_configured", err)
	}
	missing := filepath.Join(t.TempDir(), "absent")
	c = newTestInspector(t, NCCLInspectorOptions{DumpDir: missing})
	c.poll()
	got, err := inspectorScrape(t, c)
	if st, _ := classify(err); st != StateSourceMissing {
		t.Errorf("missing dump dir: %v, want source_missing", err)
	}
	if _, ok := got[`fabric_nccl_inspector_files{format="json"}`]; ok {
		t.Error("file counts reported for a missing directory")
	}
	// The directory appears: ok.
	if err := os.Mkdir(missing, 0o755); err != nil {
		t.Fatal(err)
	}
	c.poll()
	if _, err := inspectorScrape(t, c); err != nil {
		t.Errorf("empty dump dir: %v, want ok", err)
	}
	env, _ := testEnv()
	for _, o := range []NCCLInspectorOptions{{MaxCommunicators: -1}, {PollInterval: time.Millisecond}, {Retention: -time.Second}} {
		if _, err := newNCCLInspectorState(env, &Options{NCCLInspector: o}); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// The background follower: Update never waits for it and sees its data.
func TestNCCLInspectorBackground(t *testing.T) {
	dir := copyTree(t, filepath.Join(inspectorFixtures, "json"))
	env, _ := testEnv()
	cc, err := newNCCLInspectorCollector(env, &Options{NCCLInspector: NCCLInspectorOptions{DumpDir: dir, PollInterval: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	c := cc.(*ncclInspectorCollector)
	t.Cleanup(c.Close)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := inspectorScrape(t, c)
		if err != nil {
			t.Fatal(err)
		}
		if got["fabric_nccl_inspector_lines_total{}"] == 400 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("follower read %v lines", got["fabric_nccl_inspector_lines_total{}"])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkInspectorJSONFollow measures the JSON mode end to end (follow,
// parse, sum) on the real H200 dump repeated to 64 MiB:
// go test ./collector -run XXX -bench InspectorJSONFollow -benchtime 5x
func BenchmarkInspectorJSONFollow(b *testing.B) {
	src, err := os.ReadFile(filepath.Join(inspectorFixtures, "json", "vm-pid692.log"))
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	data := []byte(strings.Repeat(string(src), (64<<20)/len(src)))
	testenv.WriteFile(b, filepath.Join(dir, "vm-pid692.log"), string(data))
	lines := strings.Count(string(data), "\n")
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := newTestInspector(b, NCCLInspectorOptions{DumpDir: dir})
		c.poll()
		if int(c.lines) != lines || c.unparsed != 0 {
			b.Fatalf("read %v lines (%v unparsed), want %d", c.lines, c.unparsed, lines)
		}
	}
	b.ReportMetric(float64(lines)*float64(b.N)/b.Elapsed().Seconds(), "lines/s")
}
