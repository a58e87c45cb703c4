// Package dashboards builds fabric_exporter's Grafana dashboards as code with
// the Grafana Foundation SDK. The JSON they render to is committed under
// json/ (`make dashboards` rewrites it; a test fails when it is stale).
//
// Panels read the recording rules of alerts/fabric-rules.yml wherever one
// exists, so the dashboards and the alerts agree; rule names, the retransmission
// counters, the GPU fields and the thresholds come from the alerts package.
// Every panel query filters on the cluster and instance variables.
//
// Queries lists every PromQL expression of every dashboard with the dashboard
// variables substituted, for tests that run them against a real Prometheus.
package dashboards

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"

	"github.com/fabric-exporter/fabric_exporter/alerts"
)

// spec is one dashboard: its stable UID, the file it is written to under
// json/, and the function that builds it.
type spec struct {
	UID   string
	File  string
	Build func(c alerts.Config) (dashboard.Dashboard, error)
}

// specs lists the dashboards, in the order of docs/dashboards.md.
var specs = []spec{
	{UID: "fabric-overview", File: "fabric-overview.json", Build: fabricOverview},
	{UID: "fabric-gpu-activity", File: "gpu-activity.json", Build: gpuActivity},
	{UID: "fabric-placement", File: "placement.json", Build: placement},
	{UID: "fabric-nccl", File: "nccl.json", Build: ncclDashboard},
}

// Tag is on every dashboard; the dashboards link to each other through it.
const Tag = "fabric_exporter"

// render returns the JSON of every dashboard, keyed by file name, built with
// the selectors and thresholds of alerts/config.yml.
func render() (map[string][]byte, error) {
	c := alerts.DefaultConfig()
	out := make(map[string][]byte, len(specs))
	for _, s := range specs {
		d, err := s.Build(c)
		if err != nil {
			return nil, fmt.Errorf("dashboard %s: %w", s.UID, err)
		}
		b, err := encode(d)
		if err != nil {
			return nil, fmt.Errorf("dashboard %s: %w", s.UID, err)
		}
		out[s.File] = b
	}
	return out, nil
}

// Generate writes every dashboard to dir (created if missing).
func Generate(dir string) error {
	files, err := render()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// encode renders a dashboard as indented JSON without HTML escaping (PromQL
// is full of < > &), ending in a newline; annotation panel filters list
// their panel ids as numbers (fixPanelFilterIDs).
func encode(d dashboard.Dashboard) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	compact, err := fixPanelFilterIDs(b.Bytes())
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, compact, "", "  "); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// The SDK types AnnotationPanelFilter.Ids as []uint8, which encoding/json
// writes as a base64 string ("ids": "Jyk="); Grafana reads a list of panel
// ids, and with a string no panel matches. fixPanelFilterIDs rewrites them
// in the compact JSON as lists of numbers.
var panelFilterIDs = regexp.MustCompile(`"filter":\{("exclude":(?:true|false),)?"ids":"([A-Za-z0-9+/]*={0,2})"\}`)

func fixPanelFilterIDs(compact []byte) ([]byte, error) {
	var err error
	out := panelFilterIDs.ReplaceAllFunc(compact, func(m []byte) []byte {
		sub := panelFilterIDs.FindSubmatch(m)
		raw, e := base64.StdEncoding.DecodeString(string(sub[2]))
		if e != nil {
			err = e
			return m
		}
		nums := make([]string, len(raw))
		for i, v := range raw {
			nums[i] = fmt.Sprint(v)
		}
		return []byte(fmt.Sprintf(`"filter":{%s"ids":[%s]}`, sub[1], strings.Join(nums, ",")))
	})
	return out, err
}

// ---- dashboard skeleton ----

// boardOpts are the per-dashboard choices of newBoard.
type boardOpts struct {
	uid, title, description string
	rail, gpu               bool // add the rail / gpu variables
}

// newBoard returns a dashboard with what every fabric dashboard has: the
// benchmark time settings (last 15 minutes, 5 s refresh), the datasource,
// cluster and instance variables (plus rail and gpu where asked), Grafana's
// built-in annotations, the load start/stop annotations and links to the
// other fabric dashboards.
func newBoard(c alerts.Config, o boardOpts) *dashboard.DashboardBuilder {
	b := dashboard.NewDashboardBuilder(o.title).
		Uid(o.uid).
		Description(o.description).
		Tags([]string{Tag}).
		Editable().
		Timezone("browser").
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Time("now-15m", "now").
		Refresh("5s").
		Link(dashboard.NewDashboardLinkBuilder("Fabric dashboards").
			Type(dashboard.DashboardLinkTypeDashboards).
			Tags([]string{Tag}).
			AsDropdown(true).
			IncludeVars(true).
			KeepTime(true)).
		Annotation(builtInAnnotation()).
		Annotation(loadAnnotation(c, true)).
		Annotation(loadAnnotation(c, false)).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").
			Label("Data source").
			Type("prometheus")).
		WithVariable(queryVar("cluster", "Cluster", "label_values(up, cluster)")).
		WithVariable(nodeVar())
	if o.rail {
		b.WithVariable(queryVar("rail", "Rail", `label_values(fabric_rail_info{cluster=~"$cluster", instance=~"$instance"}, rail)`))
	}
	if o.gpu {
		b.WithVariable(queryVar("gpu", "GPU", `label_values(fabric_gpu_info{cluster=~"$cluster", instance=~"$instance"}, gpu)`).
			Sort(dashboard.VariableSortNumericalAsc))
	}
	return b
}

// finish builds the dashboard and numbers its panels (rows included) 1, 2, …
// in layout order, so IDs are stable for a given layout.
func finish(b *dashboard.DashboardBuilder) (dashboard.Dashboard, error) {
	d, err := b.Build()
	if err != nil {
		return d, err
	}
	for i := range d.Panels {
		id := uint32(i + 1)
		switch p := d.Panels[i]; {
		case p.Panel != nil:
			p.Panel.Id = &id
		case p.RowPanel != nil:
			p.RowPanel.Id = id
		}
	}
	// The SDK sets placement "inControlsMenu" on every annotation; leave
	// the toggles where Grafana shows them by default.
	for i := range d.Annotations.List {
		d.Annotations.List[i].Placement = nil
	}
	return d, nil
}

// queryVar is a multi-value Prometheus query variable with an "All" option
// that matches everything, series without the label included (allValue .*).
func queryVar(name, label, query string) *dashboard.QueryVariableBuilder {
	all := "All"
	allValue := "$__all"
	selected := true
	return dashboard.NewQueryVariableBuilder(name).
		Label(label).
		Datasource(datasource()).
		Query(dashboard.StringOrMap{String: &query}).
		Definition(query).
		Refresh(dashboard.VariableRefreshOnDashboardLoad).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).
		IncludeAll(true).
		AllValue(".*").
		Current(dashboard.VariableOption{
			Selected: &selected,
			Text:     dashboard.StringOrArrayOfString{String: &all},
			Value:    dashboard.StringOrArrayOfString{String: &allValue},
		})
}

// nodeVar is the instance variable: multi-value without "All", so that
// Grafana opens the dashboard on the first node. On a fleet, "All" draws
// every rail or GPU of every node in each panel (4,000 lines at 500 nodes)
// and costs 0.4-1.3 CPU s per panel on Prometheus 2.42; one node costs
// under 0.02 s (docs/benchmarks.md, "Fleet scale"). Select several nodes
// to compare them.
func nodeVar() *dashboard.QueryVariableBuilder {
	q := `label_values(fabric_exporter_build_info{cluster=~"$cluster"}, instance)`
	return dashboard.NewQueryVariableBuilder("instance").
		Label("Instance").
		Datasource(datasource()).
		Query(dashboard.StringOrMap{String: &q}).
		Definition(q).
		Refresh(dashboard.VariableRefreshOnDashboardLoad).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).
		IncludeAll(false)
}

// builtInAnnotation is Grafana's own "Annotations & Alerts" query.
func builtInAnnotation() *dashboard.AnnotationQueryBuilder {
	return dashboard.NewAnnotationQueryBuilder().
		Name("Annotations & Alerts").
		BuiltIn(1).
		Datasource(common.DataSourceRef{Type: ptr("grafana"), Uid: ptr("-- Grafana --")}).
		Enable(true).
		Hide(true).
		IconColor("rgba(0, 211, 255, 1)").
		Type("dashboard").
		Target(variants.NewUnknownDataqueryBuilderFromObject(variants.UnknownDataquery{
			"limit": 100, "matchAny": false, "tags": []string{}, "type": "dashboard",
		}))
}

// loadShift is how far back the load annotations compare the number of
// running requests: more than one SGLang scrape interval.
const loadShift = "15s"

// loadAnnotation marks where the serving load starts (SGLang's running
// requests go from 0 to > 0 within loadShift) or stops (the reverse), per
// cluster. It filters on the cluster variable only: SGLang's targets are not
// the exporter's instances.
func loadAnnotation(c alerts.Config, start bool) *dashboard.AnnotationQueryBuilder {
	name, color, now, before := "Load stops", "red", "== 0", "> 0"
	if start {
		name, color, now, before = "Load starts", "green", "> 0", "== 0"
	}
	expr := loadExpr(c, now, before)
	return dashboard.NewAnnotationQueryBuilder().
		Name(name).
		Datasource(datasource()).
		Enable(true).
		Hide(false).
		IconColor(color).
		Expr(expr).
		Step("5s").
		TitleFormat(name + " ({{cluster}})").
		TagKeys("cluster").
		UseValueForTime(false).
		Target(query(expr, "").target("Anno"))
}

func loadExpr(c alerts.Config, now, before string) string {
	m := `{cluster=~"$cluster"}`
	if strings.TrimSpace(c.SGLangSelector) != "" {
		m = fmt.Sprintf(`{%s, cluster=~"$cluster"}`, c.SGLangSelector)
	}
	return fmt.Sprintf("(sum by (cluster) (sglang:num_running_reqs%s) %s) and on (cluster) (sum by (cluster) (sglang:num_running_reqs%s offset %s) %s)",
		m, now, m, loadShift, before)
}

// ---- queries ----

// datasource is the reference every panel and query uses: the datasource
// variable.
func datasource() common.DataSourceRef {
	return common.DataSourceRef{Type: ptr("prometheus"), Uid: ptr("${datasource}")}
}

// sel returns a label matcher block filtering on the cluster and instance
// variables plus the given extra matchers.
func sel(extra ...string) string {
	s := `{cluster=~"$cluster", instance=~"$instance"`
	for _, e := range extra {
		s += ", " + e
	}
	return s + "}"
}

// Common extra matchers.
const (
	railM = `rail=~"$rail"`
	gpuM  = `gpu=~"$gpu"`
)

// query is a range query (time series panels).
func query(expr, legend string) *promQuery {
	return &promQuery{expr: expr, legend: legend}
}

// instant is an instant query in table format (tables, stats of labels).
func instant(expr string) *promQuery {
	return &promQuery{expr: expr, instant: true}
}

// promQuery is what panels are given; target turns it into the SDK's
// Prometheus query with a reference ID.
type promQuery struct {
	expr, legend string
	instant      bool
}

func (q *promQuery) target(refID string) *prometheus.DataqueryBuilder {
	b := prometheus.NewDataqueryBuilder().Datasource(datasource()).Expr(q.expr).RefId(refID)
	if q.instant {
		b.Instant().Format(prometheus.PromQueryFormatTable)
	} else {
		b.Range()
		if q.legend != "" {
			b.LegendFormat(q.legend)
		}
	}
	return b
}

// targets numbers queries A, B, C, …
func targets(qs []*promQuery) []cog.Builder[variants.Dataquery] {
	out := make([]cog.Builder[variants.Dataquery], len(qs))
	for i, q := range qs {
		out[i] = q.target(string(rune('A' + i)))
	}
	return out
}

func ptr[T any](v T) *T { return &v }
