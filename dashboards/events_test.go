package dashboards

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// The fabric events row sits after Links on Fabric overview with its four
// panels, in this order.
func TestEventsRow(t *testing.T) {
	want := []struct{ typ, title string }{
		{"row", "Fabric events and driver health"},
		{"timeseries", eventsThroughputTitle},
		{"state-timeline", "Fabric events per rail and class"},
		{"state-timeline", "devlink health reporters per rail"},
		{"timeseries", queuePairsTitle},
		{"row", "Physical path"},
	}
	ps := loadCommitted(t)["fabric-overview.json"].Panels
	start := slices.IndexFunc(ps, func(p jsonPanel) bool { return p.Type == "row" && p.Title == want[0].title })
	if start < 1 || ps[start-1].Title != "Rail link rate" {
		t.Fatalf("no row %q after the Links row", want[0].title)
	}
	for i, w := range want {
		if start+i >= len(ps) || ps[start+i].Type != w.typ || ps[start+i].Title != w.title {
			t.Fatalf("panel %d of the row: want %s %q", i, w.typ, w.title)
		}
	}
	// The throughput panel reads the rail throughput rules, per rail.
	tp := ps[start+1]
	if len(tp.Targets) != 2 || !strings.HasPrefix(tp.Targets[0].Expr, "rail:fabric_rdma_transmitted_bits:rate") ||
		!strings.HasPrefix(tp.Targets[1].Expr, "rail:fabric_rdma_received_bits:rate") {
		t.Errorf("%s: targets %+v", tp.Title, tp.Targets)
	}
	for _, p := range ps[start+1 : start+len(want)-1] {
		for _, q := range p.Targets {
			// Absent is absent: an empty panel is a collector that is
			// off or a source that is missing, not a healthy 0.
			if strings.Contains(q.Expr, "vector(") || strings.Contains(q.Expr, "absent(") {
				t.Errorf("%s / %s: %s makes up values", p.Title, q.RefID, q.Expr)
			}
			if !strings.Contains(q.Expr, `rail=~"`) && p.Title != queuePairsTitle {
				t.Errorf("%s / %s: %s does not filter on the rail variable", p.Title, q.RefID, q.Expr)
			}
		}
	}
}

// The event annotations are drawn only on the throughput and queue-pair
// panels, listed by their ids as numbers (not the SDK's base64 of a
// []uint8, which matches no panel), with a class/kind/device text.
func TestEventAnnotations(t *testing.T) {
	d := loadCommitted(t)["fabric-overview.json"]
	ids := map[string]int{}
	for _, p := range allPanels(d.Panels) {
		if p.ID != nil {
			ids[p.Title] = *p.ID
		}
	}
	var wantIDs []int
	for _, title := range eventsPanels {
		wantIDs = append(wantIDs, ids[title])
	}
	if !slices.Equal(wantIDs, []int{ids[eventsThroughputTitle], ids[queuePairsTitle]}) || slices.Contains(wantIDs, 0) {
		t.Fatalf("panel ids %v", wantIDs)
	}
	byName := map[string]jsonAnnotation{}
	for _, a := range d.Annotations.List {
		byName[a.Name] = a
	}
	for _, e := range eventAnnotations() {
		a, ok := byName[e.name]
		if !ok {
			t.Errorf("no annotation %q", e.name)
			continue
		}
		if a.Filter == nil || a.Filter.Exclude || !slices.Equal(a.Filter.IDs, wantIDs) {
			t.Errorf("%s: filter %+v, want the panels %v", a.Name, a.Filter, wantIDs)
		}
		if a.TitleFormat == "" || a.TextFormat == "" || a.TagKeys == "" {
			t.Errorf("%s: title %q text %q tags %q", a.Name, a.TitleFormat, a.TextFormat, a.TagKeys)
		}
		if strings.Contains(a.Expr, "vector(") {
			t.Errorf("%s: %s makes up values", a.Name, a.Expr)
		}
	}
	// Every kernel event class and kind is named on its marker.
	k := byName["Kernel events"]
	for _, l := range []string{"{{class}}", "{{kind}}", "{{rail}}", "{{device}}", "{{gpu}}"} {
		if !strings.Contains(k.TitleFormat+k.TextFormat, l) {
			t.Errorf("Kernel events annotation lacks %s", l)
		}
	}
	// The kernel's timestamp in milliseconds places the marker.
	if !k.UseValueForTime || !strings.Contains(k.Expr, "fabric_kernel_event_last_timestamp_seconds{") || !strings.Contains(k.Expr, "* 1000") {
		t.Errorf("Kernel events: useValueForTime %v, %s", k.UseValueForTime, k.Expr)
	}
}

// Each label an annotation's or the row's legend templates name is one the
// series carries: documented for the metric in docs/metrics.md, and kept
// by the aggregation (Grafana prints a missing label's name instead).
func TestEventTemplatesNameLabels(t *testing.T) {
	labels := metricLabels(t)
	byLabels := regexp.MustCompile(`by \(([^)]*)\)`)
	tmpl := regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)
	check := func(where, expr, tags string, templates ...string) {
		t.Helper()
		sels, err := metricSelectors(expr)
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, s := range sels {
			if !strings.HasPrefix(s.name, "fabric_") {
				continue
			}
			ls, ok := labels[s.name]
			if !ok {
				t.Errorf("%s: %s is not in docs/metrics.md", where, s.name)
			}
			for _, l := range ls {
				have[l] = true
			}
		}
		if len(have) == 0 {
			return // a recording rule's series
		}
		if m := byLabels.FindStringSubmatch(expr); m != nil {
			kept := map[string]bool{}
			for _, l := range strings.Split(m[1], ",") {
				if l = strings.TrimSpace(l); have[l] || l == "cluster" || l == "instance" {
					kept[l] = true
				}
			}
			have = kept
		}
		have["instance"], have["cluster"] = true, true
		for _, s := range templates {
			for _, m := range tmpl.FindAllStringSubmatch(s, -1) {
				if !have[m[1]] {
					t.Errorf("%s: {{%s}} is not a label of %s", where, m[1], expr)
				}
			}
		}
		for _, l := range strings.Split(tags, ",") {
			if l != "" && !have[l] {
				t.Errorf("%s: tag %s is not a label of %s", where, l, expr)
			}
		}
	}
	for _, a := range eventAnnotations() {
		check("annotation "+a.name, a.expr, a.tags, a.title, a.text)
	}
	in := false
	for _, p := range loadCommitted(t)["fabric-overview.json"].Panels {
		if p.Type == "row" {
			in = p.Title == "Fabric events and driver health"
			continue
		}
		for _, q := range p.Targets {
			if in {
				check(p.Title+" / "+q.RefID, q.Expr, "", q.LegendFormat)
			}
		}
	}
}

// metricLabels reads the label column of docs/metrics.md's tables: `name`
// (or several) | type | labels | …; "as above" repeats the row before.
func metricLabels(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| ((?:`fabric_\\w+`(?:, )?)+) \\| \\w+(?: \\(1\\))? \\| ([^|]*) \\|")
	name := regexp.MustCompile("`(fabric_\\w+)`")
	out := map[string][]string{}
	var prev []string
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		var ls []string
		if col := strings.TrimSpace(m[2]); col == "as above" {
			ls = prev
		} else {
			for _, l := range strings.Split(col, ",") {
				if l = strings.TrimSpace(l); l != "" {
					ls = append(ls, l)
				}
			}
		}
		for _, n := range name.FindAllStringSubmatch(m[1], -1) {
			out[n[1]] = ls
		}
		prev = ls
	}
	return out
}

// The kernel events' rail matcher selects an event for every rail its
// comma-joined rail label names, and with "All" every event.
func TestRailListMatcher(t *testing.T) {
	match := func(railVar, rail string) bool {
		expr, err := Expand(railListM, map[string]string{"rail": railVar})
		if err != nil {
			t.Fatal(err)
		}
		re := regexp.MustCompile(`^(?:` + strings.TrimSuffix(strings.TrimPrefix(expr, `rail=~"`), `"`) + `)$`)
		return re.MatchString(rail)
	}
	for _, c := range []struct {
		railVar, rail string
		want          bool
	}{
		{"mlx5_3", "mlx5_3", true},
		{"mlx5_3", "mlx5_0,mlx5_3", true},
		{"mlx5_3", "mlx5_3,mlx5_4", true},
		{"mlx5_3", "mlx5_0,mlx5_3,mlx5_4", true},
		{"mlx5_3", "mlx5_30", false},
		{"mlx5_3", "xmlx5_3", false},
		{"mlx5_3", "", false},
		{"(mlx5_0|mlx5_3)", "mlx5_1,mlx5_3", true}, // Grafana's multi-value
		{"(mlx5_0|mlx5_3)", "mlx5_1", false},
		{".*", "", true}, // All: a GPU's Xid without a rail
		{".*", "mlx5_0,mlx5_3", true},
	} {
		if got := match(c.railVar, c.rail); got != c.want {
			t.Errorf("$rail=%s, rail=%q: %v, want %v", c.railVar, c.rail, got, c.want)
		}
	}
}

// fixPanelFilterIDs turns the SDK's base64 ids into numbers and leaves the
// rest of the JSON as it was.
func TestFixPanelFilterIDs(t *testing.T) {
	d := dashboard.Dashboard{Title: ptr("x"), Annotations: dashboard.AnnotationContainer{List: []dashboard.AnnotationQuery{
		{Name: "a", Filter: &dashboard.AnnotationPanelFilter{Exclude: ptr(false), Ids: []uint8{18, 21, 255}}},
		{Name: "b", Filter: &dashboard.AnnotationPanelFilter{Ids: []uint8{7}}},
		{Name: "c"},
	}}}
	b, err := encode(d)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Annotations struct {
			List []struct {
				Name   string
				Filter *struct {
					Exclude *bool
					IDs     []int `json:"ids"`
				}
			}
		}
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	l := got.Annotations.List
	if len(l) != 3 || !slices.Equal(l[0].Filter.IDs, []int{18, 21, 255}) || l[0].Filter.Exclude == nil || *l[0].Filter.Exclude ||
		!slices.Equal(l[1].Filter.IDs, []int{7}) || l[1].Filter.Exclude != nil || l[2].Filter != nil {
		t.Errorf("%s", b)
	}
	if !bytes.HasSuffix(b, []byte("}\n")) || !bytes.Contains(b, []byte("\n  \"annotations\": {")) {
		t.Errorf("not indented JSON ending in a newline:\n%s", b)
	}
}

// The events-per-rail query, run by promtool on a kernel event series born
// by its first event (at 1, where increase sees no rise) on a line naming
// two rails: that first event counts within the rate window after it, a
// quiet series is 0 (not absent) once the window has passed, and a rail
// selection keeps the lines that name the rail.
func TestEventsPerRailCountsFirstEvent(t *testing.T) {
	promtool := testenv.Tool(t, "promtool")
	var expr string
	for _, q := range mustQueries(t) {
		if q.Panel == "Fabric events per rail and class" && q.RefID == "A" {
			v := DefaultValues()
			v["rail"] = "(mlx5_3)" // Grafana's value for one selected rail
			var err error
			if expr, err = Expand(q.Template, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	if expr == "" {
		t.Fatal("no query A on Fabric events per rail and class")
	}
	ser := func(class, rail string) string {
		return fmt.Sprintf(`fabric_kernel_events_total{cluster="c", instance="n", class=%q, kind="k", device="", netdev="", gpu="", pci_bus_id="p", rail=%q}`, class, rail)
	}
	dir := t.TempDir()
	rules, _ := json.Marshal(expr)
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("rules.yml", "groups:\n- name: events\n  rules:\n  - record: events:per_rail\n    expr: "+string(rules)+"\n")
	// 15 s samples; the pcie series appears at 2m with its first event.
	test := write("test.yml", fmt.Sprintf(`rule_files: [rules.yml]
evaluation_interval: 15s
tests:
- interval: 15s
  input_series:
  - series: '%s'
    values: '_x8 1x20'
  - series: '%s'
    values: '1x28'
  - series: '%s'
    values: '_x8 1x20'
  promql_expr_test:
  - expr: events:per_rail
    eval_time: 2m30s
    exp_samples:
    - labels: 'events:per_rail{cluster="c", instance="n", class="pcie", rail="mlx5_0,mlx5_3"}'
      value: 1
    - labels: 'events:per_rail{cluster="c", instance="n", class="netdev", rail="mlx5_3"}'
      value: 0
  - expr: events:per_rail
    eval_time: 4m
    exp_samples:
    - labels: 'events:per_rail{cluster="c", instance="n", class="pcie", rail="mlx5_0,mlx5_3"}'
      value: 0
    - labels: 'events:per_rail{cluster="c", instance="n", class="netdev", rail="mlx5_3"}'
      value: 0
`, ser("pcie", "mlx5_0,mlx5_3"), ser("netdev", "mlx5_3"), ser("xid", "mlx5_0")))
	cmd := exec.Command(promtool, "test", "rules", test)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s\nexpr: %s", err, out, expr)
	}
}
