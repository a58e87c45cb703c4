package main

import (
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// The what-if rules keep every rule and lose every rail join, and
// promtool still accepts them.
func TestDropRailJoins(t *testing.T) {
	b, err := os.ReadFile("../../alerts/fabric-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	out := string(dropRailJoins(b))
	// The counter joins with fabric_rdma_port_info / fabric_netdev_info are
	// gone (the GPUDirect records join the topology's GPU x HCA paths with
	// fabric_rail_info on purpose: no counter, no what-if).
	for _, join := range []string{"group_left (rail) fabric_rdma_port_info", "group_left (rail) fabric_netdev_info"} {
		if strings.Contains(out, join) {
			t.Errorf("a rail join is left: %s", join)
		}
	}
	if got, want := strings.Count(out, "- record:")+strings.Count(out, "- alert:"), strings.Count(string(b), "- record:")+strings.Count(string(b), "- alert:"); got != want {
		t.Errorf("%d rules, want %d", got, want)
	}
	promtool := testenv.Tool(t, "promtool")
	p := filepath.Join(t.TempDir(), "rules.yml")
	os.WriteFile(p, []byte(out), 0o644)
	if o, err := exec.Command(promtool, "check", "rules", p).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, o)
	}
}

func TestAddRailLabel(t *testing.T) {
	in := `# TYPE fabric_rdma_port_info gauge
fabric_rdma_port_info{device="mlx5_0",link_layer="Ethernet",port="1",rail="mlx5_0"} 1
fabric_rdma_port_info{device="mlx5_9",link_layer="Ethernet",port="1",rail=""} 1
fabric_netdev_info{driver="mlx5_core",netdev="eth0",rail="mlx5_0"} 1
fabric_rdma_port_transmitted_bytes_total{device="mlx5_0",port="1"} 5
fabric_rdma_port_transmitted_bytes_total{device="mlx5_9",port="1"} 5
fabric_pfc_pause_frames_total{direction="rx",netdev="eth0",priority="3"} 7
fabric_process_rdma_device_visible{comm="x",device="mlx5_0",node="uverbs0",pid="1"} 1
`
	want := `# TYPE fabric_rdma_port_info gauge
fabric_rdma_port_info{device="mlx5_0",link_layer="Ethernet",port="1",rail="mlx5_0"} 1
fabric_rdma_port_info{device="mlx5_9",link_layer="Ethernet",port="1",rail=""} 1
fabric_netdev_info{driver="mlx5_core",netdev="eth0",rail="mlx5_0"} 1
fabric_rdma_port_transmitted_bytes_total{device="mlx5_0",port="1",rail="mlx5_0"} 5
fabric_rdma_port_transmitted_bytes_total{device="mlx5_9",port="1"} 5
fabric_pfc_pause_frames_total{direction="rx",netdev="eth0",priority="3",rail="mlx5_0"} 7
fabric_process_rdma_device_visible{comm="x",device="mlx5_0",node="uverbs0",pid="1"} 1
`
	if got := string(addRailLabel([]byte(in))); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// Planted nodes change only what their fault needs; healthy nodes move
// their traffic counters and keep their error counters flat.
func TestFleetPlanted(t *testing.T) {
	tm := parseTemplate([]byte(`# TYPE fabric_rdma_port_transmitted_bytes_total counter
fabric_rdma_port_transmitted_bytes_total{device="mlx5_0",port="1"} 10
fabric_rdma_port_transmitted_bytes_total{device="mlx5_1",port="1"} 10
# TYPE fabric_rdma_hw_local_ack_timeout_err_total counter
fabric_rdma_hw_local_ack_timeout_err_total{device="mlx5_2",port="1"} 3
# TYPE fabric_nccl_net_info gauge
fabric_nccl_net_info{host="h",net="IB",pid="1"} 1
# TYPE fabric_process_rdma_device_visible gauge
fabric_process_rdma_device_visible{comm="x",device="mlx5_0",node="uverbs0",pid="1"} 0
`))
	f := newFleet(tm, 5)
	if v := f.nodes["node0000"].series[4].value; v != 1 {
		t.Errorf("rdma_device_visible = %v, want 1 (made healthy)", v)
	}
	if r := f.nodes["node0000"].series[2].rate; r != 0 {
		t.Errorf("healthy local_ack_timeout_err rate %v, want 0", r)
	}
	if r := f.nodes["node0003"].series[2].rate; r != 200 {
		t.Errorf("retrans node local_ack_timeout_err rate %v, want 200", r)
	}
	if a, b := f.nodes["node0001"].series[0].rate, f.nodes["node0001"].series[1].rate; a != 10*b || b == 0 {
		t.Errorf("imbalance node rates %v, %v: want mlx5_1 at a tenth of mlx5_0", a, b)
	}
	if l := f.nodes["node0004"].series[3].labels; !strings.Contains(l, `net="Socket"`) {
		t.Errorf("socket node: %s", l)
	}
	if l := f.nodes["node0000"].series[3].labels; !strings.Contains(l, `net="IB"`) {
		t.Errorf("healthy node: %s", l)
	}
	// The socket node's channels on NET/Socket (the rule's evidence that
	// the job spans nodes); no other node has them.
	if s := f.nodes["node0004"].series; len(s) != 6 || s[5].name != "fabric_nccl_connections" || s[5].labels != `{gdr="false",host="h",pid="1",transport="NET/Socket"}` {
		t.Errorf("socket node connections: %+v", s[len(s)-1])
	}
	if n := len(f.nodes["node0000"].series); n != 5 {
		t.Errorf("healthy node: %d series, want 5", n)
	}
}

func TestFleetRailDownAndSteady(t *testing.T) {
	tm := parseTemplate([]byte(`# TYPE fabric_rdma_port_up gauge
fabric_rdma_port_up{device="mlx5_0",port="1",rail="mlx5_0"} 1
fabric_rdma_port_up{device="mlx5_1",port="1",rail="mlx5_1"} 1
# TYPE fabric_rdma_port_transmitted_bytes_total counter
fabric_rdma_port_transmitted_bytes_total{device="mlx5_0",port="1"} 10
`))
	f := newFleet(tm, 6)
	if v := f.nodes["node0005"].series[1].value; v != 0 {
		t.Errorf("rail down node: mlx5_1 up = %v, want 0", v)
	}
	if v := f.nodes["node0005"].series[0].value; v != 1 {
		t.Errorf("rail down node: mlx5_0 up = %v, want 1", v)
	}
	// Steady: the counter is its value plus rate × the time since t0,
	// whoever scraped before.
	f.steady, f.t0 = true, time.Now().Add(-10*time.Second)
	for range 2 {
		rec := httptest.NewRecorder()
		f.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics?node=node0000", nil))
		var v float64
		for _, l := range strings.Split(rec.Body.String(), "\n") {
			if strings.HasPrefix(l, "fabric_rdma_port_transmitted_bytes_total{") {
				var ms int64
				fmt.Sscan(l[strings.IndexByte(l, ' ')+1:], &v, &ms)
				// The value is the counter's at the sample's timestamp.
				if want := 10 + 3e9*float64(ms-f.t0.UnixMilli())/1000; v != want {
					t.Errorf("steady counter %g at %d, want %g", v, ms, want)
				}
			}
		}
		if v == 0 {
			t.Error("no counter")
		}
	}
}

// Evaluations fall into the epoch-aligned rounds of the interval; the
// peak is the round whose evaluations add up to most, partial rounds at
// the window's edges are left out.
func TestRounds(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0) // a multiple of 15 s
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	evs := []evaluation{
		{"fabric_exporter.alerts", at(3), 0.5},      // round 0
		{"fabric_exporter.alerts", at(18), 0.5},     // round 1
		{"fabric_exporter.physical", at(20), 4},     // round 1
		{"fabric_exporter.rail_derived", at(29), 1}, // round 1, ends in round 2
		{"fabric_exporter.alerts", at(33), 0.5},     // round 2
		{"fabric_exporter.alerts", at(48), 9},       // round 3: outside the window
	}
	st := rounds(evs, 15*time.Second, t0, at(45))
	if st.Rounds != 3 {
		t.Fatalf("rounds %d, want 3", st.Rounds)
	}
	if st.PeakS != 5.5 || st.PeakAt != t0.Add(15*time.Second).UTC().Format("15:04:05") {
		t.Errorf("peak %.2f at %s, want 5.5 at round 1", st.PeakS, st.PeakAt)
	}
	if st.PeakSpanS != 12 { // 18 s to 30 s
		t.Errorf("span %.2f, want 12", st.PeakSpanS)
	}
	if want := (0.5 + 5.5 + 0.5) / 3; st.MeanS != want {
		t.Errorf("mean %.3f, want %.3f", st.MeanS, want)
	}
	if got := strings.Join(st.PeakParts, ", "); got != "physical 4.00, rail_derived 1.00, alerts 0.50" {
		t.Errorf("peak parts %q", got)
	}
	// The window starts mid-round: that round is left out.
	if st := rounds(evs, 15*time.Second, at(1), at(45)); st.Rounds != 2 {
		t.Errorf("rounds from mid-round %d, want 2", st.Rounds)
	}
	off := offsets(map[string]evaluation{"g": {"g", at(20), 1}}, map[string]float64{"g": 60})
	if off["g"] != float64((t0.Unix()+20)%60) {
		t.Errorf("offset %.1f", off["g"])
	}
}

// Every record of the shipped rules lands in one pass, after every record
// it reads; alerts in none; each pass is a rules file promtool accepts.
func TestRecordPasses(t *testing.T) {
	b, err := os.ReadFile("../../alerts/fabric-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	passes, records, err := recordPasses(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(passes) < 2 {
		t.Fatalf("%d passes: the shipped rules have records that read records", len(passes))
	}
	promtool := testenv.Tool(t, "promtool")
	passOf := map[string]int{}
	var exprs [][][2]string // per pass: record name, expression
	for i, p := range passes {
		if strings.Contains(string(p), "alert:") {
			t.Errorf("pass %d holds an alert", i)
		}
		var doc ruleDoc
		if err := yaml.Unmarshal(p, &doc); err != nil {
			t.Fatal(err)
		}
		var es [][2]string
		for _, g := range doc.Groups {
			for _, r := range g.Rules {
				if _, dup := passOf[r.Record]; dup {
					t.Errorf("%s in two passes", r.Record)
				}
				passOf[r.Record] = i
				es = append(es, [2]string{r.Record, r.Expr})
			}
		}
		exprs = append(exprs, es)
		f := filepath.Join(t.TempDir(), "pass.yml")
		os.WriteFile(f, p, 0o644)
		if o, err := exec.Command(promtool, "check", "rules", f).CombinedOutput(); err != nil {
			t.Errorf("pass %d: promtool check rules: %v\n%s", i, err, o)
		}
	}
	if len(passOf) != records {
		t.Errorf("%d records in the passes, %d in the file", len(passOf), records)
	}
	// A record may read its own earlier samples (the latched causes of
	// alerts/rules/20-nccl.yml.tmpl). promtool's backfill evaluates each rule with
	// one range query over the history, so there it sees none of its own
	// samples and holds the current cause at each step; the long view draws
	// the dashboards, which read no latch.
	for i, es := range exprs {
		for _, e := range es {
			for r, pr := range passOf {
				if r != e[0] && refersTo(e[1], r) && pr >= i {
					t.Errorf("a record of pass %d reads %s of pass %d", i, r, pr)
				}
			}
		}
	}
	if !refersTo("rate(x[1m]) / rail:fabric_rdma_link_speed:bits", "rail:fabric_rdma_link_speed:bits") ||
		refersTo("rail:fabric_rdma_link_speed:bits_total", "rail:fabric_rdma_link_speed:bits") {
		t.Error("refersTo matches parts of names")
	}
}

// The backfill's OpenMetrics: each family's samples together, each series
// in time order with the scrape's labels, counters rising, and promtool
// imports it.
func TestWriteOpenMetrics(t *testing.T) {
	tm := parseTemplate([]byte(`# TYPE fabric_rdma_port_transmitted_bytes_total counter
fabric_rdma_port_transmitted_bytes_total{device="mlx5_0",port="1"} 10
# TYPE fabric_nccl_net_info gauge
fabric_nccl_net_info{host="h",net="IB",pid="1"} 1
# TYPE fabric_up_gauge gauge
fabric_up_gauge 1
`))
	f := newFleet(tm, 5) // node0004 plants the socket fallback: one more family
	dir := t.TempDir()
	om := filepath.Join(dir, "f.om")
	end := time.Unix(1_800_000_000, 0)
	n, err := writeOpenMetrics(om, f, 4, end, 2*time.Minute, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// 4 nodes × 3 series + 4 up, 8 samples each; node0004: 3 series + 1
	// (NET/Socket connections) + up, one sample each (the index only).
	if n != (4*3+4)*8+5 {
		t.Errorf("%d samples", n)
	}
	b, _ := os.ReadFile(om)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if lines[len(lines)-1] != "# EOF" {
		t.Errorf("last line %q", lines[len(lines)-1])
	}
	done := map[string]bool{}
	last := ""
	prev := map[string][2]float64{}
	for _, l := range lines[:len(lines)-1] {
		name := l[:strings.IndexAny(l, "{ ")]
		if name != last {
			if done[name] {
				t.Fatalf("family %s comes back after another: %q", name, l)
			}
			done[last], last = true, name
		}
		sp := strings.LastIndexByte(l[:strings.LastIndexByte(l, ' ')], ' ')
		key := l[:sp]
		var v, ts float64
		fmt.Sscan(l[sp+1:], &v, &ts)
		if p, ok := prev[key]; ok {
			if ts != p[1]+15 {
				t.Errorf("%s: %v after %v", key, ts, p[1])
			}
			if name == "fabric_rdma_port_transmitted_bytes_total" && v <= p[0] {
				t.Errorf("counter %s falls: %v after %v", key, v, p[0])
			}
		} else if strings.Contains(key, `instance="node0004"`) != (ts == float64(end.Unix()-15)) || !strings.Contains(key, `instance="node0004"`) && ts != float64(end.Unix()-120) {
			t.Errorf("%s starts at %v", key, ts)
		}
		prev[key] = [2]float64{v, ts}
		if !strings.Contains(l, `cluster="fleet",instance="node`) || !strings.Contains(l, `job="fabric"`) {
			t.Errorf("no scrape labels: %s", l)
		}
	}
	promtool := testenv.Tool(t, "promtool")
	if o, err := exec.Command(promtool, "tsdb", "create-blocks-from", "openmetrics", om, filepath.Join(dir, "tsdb")).CombinedOutput(); err != nil {
		t.Errorf("promtool: %v\n%s", err, o)
	}
}

// Two minute groups of 1 s and a 15 s group of 0.5 s: the peak round is
// 1.5 s when the minute groups fall apart, 2.5 s when together (a quarter
// of the draws); the worst case adds everything.
func TestPlacementPeak(t *testing.T) {
	gs := []groupStat{{Name: "a", EveryS: 60, MeanS: 1}, {Name: "b", EveryS: 60, MeanS: 1}, {Name: "c", EveryS: 15, MeanS: 0.5}}
	mean, p99, worst := placementPeak(gs, 15*time.Second, 20000, 7)
	if worst != 2.5 || p99 != 2.5 {
		t.Errorf("worst %v p99 %v, want 2.5", worst, p99)
	}
	if want := 0.75*1.5 + 0.25*2.5; math.Abs(mean-want) > 0.02 {
		t.Errorf("mean %.3f, want about %.3f", mean, want)
	}
	// A 2m group spans a period of eight rounds.
	mean, _, _ = placementPeak([]groupStat{{EveryS: 120, MeanS: 3}, {EveryS: 15, MeanS: 1}}, 15*time.Second, 100, 1)
	if mean != 4 {
		t.Errorf("mean %v, want 4", mean)
	}
}
