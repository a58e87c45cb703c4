package dashboards

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// The fabric events row of Fabric overview (issue 36): each rail's RDMA
// throughput with the events of its HCA, netdev, module, PCIe path and
// GPUs drawn on it as annotations, the events per rail and class over
// time, the devlink health reporters, and the queue pairs by state.
//
// The kernel-events collector is off by default and the queue-pair owners
// need RDMA netlink: without them these panels and markers are empty (the
// Collector state table says why), never 0.

// Titles of the panels the event annotations are drawn on.
const (
	eventsThroughputTitle = "RDMA throughput per rail, with fabric events"
	queuePairsTitle       = "Queue pairs by state per RDMA device"
)

// railListM matches a rail variable against a kernel event's rail label,
// which joins several rails with "," (a switch port's line names every
// rail behind it): an event counts for each rail it names. With "All" it
// matches every event, those that name no rail (a GPU's Xid) included.
const railListM = `rail=~"(.*,)?($rail)(,.*)?"`

// dash fills the given labels with "-" where they are empty: Grafana's
// legend and annotation templates print a missing label's name instead.
func dash(expr string, labels ...string) string {
	for _, l := range labels {
		expr = fmt.Sprintf(`label_replace(%s, "%s", "-", "%s", "")`, expr, l, l)
	}
	return expr
}

// eventsWithin counts the events of a counter within window, its first
// ones included: a kernel event series is born at 1 by its first event,
// and increase(), which needs two samples, sees no rise there. A series
// that did not exist window ago counts with its whole value.
func eventsWithin(series, window string) string {
	return fmt.Sprintf("(%[1]s unless %[1]s offset %[2]s) or increase(%[1]s[%[2]s])", series, window)
}

// eventAnnotation is a Prometheus annotation of the events row: a marker
// or region wherever expr has a value above 0 (or, with valueIsTime, a
// marker at the time in milliseconds the value says), named by title and
// text (label templates), tagged with tags.
type eventAnnotation struct {
	name, color, expr, title, text, tags string
	valueIsTime                          bool
}

// eventAnnotations are the fabric events drawn on eventsPanels. Each
// filters on the cluster, instance and (where the series has one) rail
// variables, like the panels.
func eventAnnotations() []eventAnnotation {
	rail := sel(railM)
	where := "{{instance}}: rail {{rail}}, RDMA device {{device}}"
	return []eventAnnotation{
		{
			// The kernel's own time of each series' latest event: exact,
			// and the first event of a new series shows too (an increase
			// needs two samples).
			name: "Kernel events", color: "orange", valueIsTime: true,
			expr:  dash("fabric_kernel_event_last_timestamp_seconds"+sel(railListM)+" * 1000", "rail", "device", "netdev", "gpu", "pci_bus_id"),
			title: "{{class}} {{kind}}",
			text:  where + ", netdev {{netdev}}, GPU {{gpu}}, PCI {{pci_bus_id}}",
			tags:  "rail,class,kind",
		},
		{
			name: "devlink reporter errors", color: "red",
			expr:  dash("increase(fabric_devlink_health_reporter_errors_total"+rail+"[$__rate_interval]) > 0", "rail"),
			title: "devlink {{reporter}} errors",
			text:  where + " ({{pci_bus_id}}): the driver reported errors to its {{reporter}} health reporter",
			tags:  "rail,reporter",
		},
		{
			name: "devlink reporter unhealthy", color: "dark-red",
			expr:  dash("1 - fabric_devlink_health_reporter_healthy"+rail+" > 0", "rail"),
			title: "devlink {{reporter}} in error state",
			text:  where + " ({{pci_bus_id}}): an error reported and not recovered",
			tags:  "rail,reporter",
		},
		{
			name: "devlink not answering", color: "dark-red",
			expr:  dash("1 - fabric_devlink_up"+rail+" > 0", "rail"),
			title: "devlink not answering",
			text:  where + " ({{pci_bus_id}}): the driver does not answer devlink (holds its lock: a wedged mlx5)",
			tags:  "rail",
		},
		{
			// Per device: queue pairs carry no rail label.
			name: "Queue pairs in error", color: "purple",
			expr:  `sum by (cluster, instance, device) (fabric_rdma_owner_queue_pairs` + sel(`state="err"`) + `) > 0`,
			title: "queue pairs in error",
			text:  "{{instance}}: RDMA device {{device}}: its owners must destroy them (fabric_rdma_owner_queue_pairs names them)",
			tags:  "device",
		},
	}
}

// eventsPanels are the panels eventAnnotations are drawn on; Grafana draws
// an annotation query on every panel unless its filter names them.
var eventsPanels = []string{eventsThroughputTitle, queuePairsTitle}

func (a eventAnnotation) builder() *dashboard.AnnotationQueryBuilder {
	return dashboard.NewAnnotationQueryBuilder().
		Name(a.name).
		Datasource(datasource()).
		Enable(true).
		Hide(false).
		IconColor(a.color).
		Expr(a.expr).
		Step(minInterval).
		TitleFormat(a.title).
		TextFormat(a.text).
		TagKeys(a.tags).
		UseValueForTime(a.valueIsTime).
		Target(query(a.expr, "").target("Anno"))
}

// eventsRow adds the fabric events row and its annotations.
func eventsRow(b *dashboard.DashboardBuilder, rateWindow string) *dashboard.DashboardBuilder {
	for _, a := range eventAnnotations() {
		b.Annotation(a.builder())
	}
	rail := sel(railM)
	rule := func(name string) string { return fmt.Sprintf(name, rateWindow) }
	counts := valueMappings(mapping{"0", "none", "green"})
	return b.
		WithRow(row("Fabric events and driver health")).
		WithPanel(timeseriesPanel(eventsThroughputTitle,
			"RDMA bits/s of each rail (tx, rx) with the fabric's events as annotations: kernel log events (orange: mlx5 health and "+
				"command timeouts, TX timeouts, module events, PCIe, Xid; at the kernel's time), devlink reporter errors (red) and "+
				"reporters in error or devlink not answering (dark red regions), queue pairs in error (purple, per RDMA device). "+
				"Hover a marker for its class, kind, rail and device. Select a rail to see only its events; the annotation toggles "+
				"at the top hide each kind. Kernel events need --collector.kernel-events.",
			unitBits, full,
			query(rule("rail:fabric_rdma_transmitted_bits:rate%s")+rail, "{{instance}} {{rail}} tx"),
			query(rule("rail:fabric_rdma_received_bits:rate%s")+rail, "{{instance}} {{rail}} rx")).
			Height(10).
			Legend(statsLegend())).
		WithPanel(stateTimelinePanel("Fabric events per rail and class",
			"Kernel log events per rail and class (mlx5, netdev, port_module, pcie, xid) and devlink health reporter errors per rail, "+
				"within the rate window at each point, a series' first event included (orange from 1, red from 10). A line naming several rails (a switch port's) "+
				"counts for each; \"-\" is no rail (a GPU's Xid). Only series that had an event since the exporter started exist; "+
				"empty without --collector.kernel-events (alerts RailHCAFailed, RailTXTimeouts, RailModuleEvent, GPUXidFatal).",
			half, counts,
			query(dash("sum by (cluster, instance, rail, class) ("+eventsWithin("fabric_kernel_events_total"+sel(railListM), "$__rate_interval")+")", "rail"),
				"{{instance}} {{rail}} {{class}}"),
			query("sum by (cluster, instance, rail) (increase(fabric_devlink_health_reporter_errors_total"+rail+"[$__rate_interval]))",
				"{{instance}} {{rail}} devlink errors")).
			ColorScheme(dashboard.NewFieldColorBuilder().Mode(dashboard.FieldColorModeIdThresholds)).
			Thresholds(dashboard.NewThresholdsConfigBuilder().
				Mode(dashboard.ThresholdsModeAbsolute).
				Steps([]dashboard.Threshold{{Value: nil, Color: "green"}, {Value: ptr(0.5), Color: "orange"}, {Value: ptr(10.0), Color: "red"}})).
			Decimals(0)).
		WithPanel(stateTimelinePanel("devlink health reporters per rail",
			"Each devlink health reporter of each rail's HCA: healthy, or ERROR (an error reported and not recovered; fw_fatal pages "+
				"as RailHCAFailed), and whether the device answers devlink at all (NOT ANSWERING: the driver holds its lock). "+
				"Absent for an HCA without devlink.",
			half, upDown("healthy", "ERROR"),
			query("fabric_devlink_health_reporter_healthy"+rail, "{{instance}} {{rail}} {{reporter}}"),
			query("fabric_devlink_up"+rail, "{{instance}} {{rail}} devlink")).
			OverrideByQuery("B", []dashboard.DynamicConfigValue{{Id: "mappings", Value: upDown("answers", "NOT ANSWERING")}})).
		WithPanel(timeseriesPanel(queuePairsTitle,
			"User queue pairs of every process on each RDMA device by state (reset, init, rtr, rts, sqd, sqe, err); err in red: a "+
				"queue pair stays in error until its owner destroys it, and sends nothing meanwhile (alert RDMAQueuePairsInError; "+
				"fabric_rdma_owner_queue_pairs names the processes). Needs RDMA netlink (fabric_process_rdma_netlink_available).",
			unitShort, full,
			query("sum by (cluster, instance, device, state) (fabric_rdma_owner_queue_pairs"+sel()+")", "{{instance}} {{device}} {{state}}")).
			Min(0).
			OverrideByRegexp(".* err$", []dashboard.DynamicConfigValue{
				{Id: "color", Value: map[string]any{"mode": "fixed", "fixedColor": "red"}},
				{Id: "custom.lineWidth", Value: 3},
			}).
			Legend(common.NewVizLegendOptionsBuilder().
				DisplayMode(common.LegendDisplayModeTable).
				Placement(common.LegendPlacementRight).
				ShowLegend(true).
				Calcs([]string{"max", "lastNotNull"})))
}

// filterAnnotations draws the annotations of eventAnnotations only on the
// panels titled eventsPanels (ids are known once finish numbered them).
func filterAnnotations(d *dashboard.Dashboard) error {
	var ids []uint8
	for _, title := range eventsPanels {
		var found []uint32
		for _, p := range d.Panels {
			if p.Panel != nil && p.Panel.Title != nil && *p.Panel.Title == title && p.Panel.Id != nil {
				found = append(found, *p.Panel.Id)
			}
		}
		if len(found) != 1 || found[0] > 255 {
			return fmt.Errorf("events annotations: panel %q has ids %v, want one below 256", title, found)
		}
		ids = append(ids, uint8(found[0]))
	}
	names := map[string]bool{}
	for _, a := range eventAnnotations() {
		names[a.name] = true
	}
	n := 0
	for i := range d.Annotations.List {
		if a := &d.Annotations.List[i]; names[a.Name] {
			a.Filter = &dashboard.AnnotationPanelFilter{Exclude: ptr(false), Ids: ids}
			n++
		}
	}
	if n != len(names) {
		return fmt.Errorf("events annotations: %d of %d on the dashboard", n, len(names))
	}
	return nil
}
