package dashboards

import (
	"fmt"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/fabric-exporter/fabric_exporter/alerts"
)

// fabricOverview: rails (RDMA throughput, utilization, TCP on the rail
// netdevs, non-rail NICs, bytes per token), lossless Ethernet (PFC, pause
// storms, RoCE retransmissions, CNPs), links, fabric events and driver
// health (events.go), the physical path (PCIe links and AER, FEC and
// pre-FEC BER, optical modules, NVLink) and the exporter's health.
func fabricOverview(c alerts.Config) (dashboard.Dashboard, error) {
	w := c.RateWindow
	rail := sel(railM)
	railOnly := sel(railM, `rail!=""`) // raw per-port and per-netdev series: rails only
	rule := func(name string) string { return fmt.Sprintf(name, w) }
	var retrans, cnp []*promQuery
	for _, counter := range alerts.RetransCounters() {
		// The raw counter: the exporter puts the rail on it, so a node's
		// view needs no join and no recording rule.
		q := query("sum by (cluster, instance, rail) (rate(fabric_rdma_hw_"+counter+"_total"+railOnly+"[$__rate_interval]))", "{{instance}} {{rail}} "+counter)
		if strings.Contains(counter, "cnp") {
			cnp = append(cnp, q)
		} else {
			retrans = append(retrans, q)
		}
	}

	b := newBoard(c, boardOpts{
		uid:   "fabric-overview",
		title: "Fabric overview",
		description: "RoCE rails of fabric_exporter: RDMA throughput and utilization per rail, TCP on the rail netdevs " +
			"and other NICs, PFC pauses, RoCE retransmissions and congestion notifications, link state and exporter health.",
		rail: true,
	}).
		WithRow(row("Rails")).
		WithPanel(timeseriesPanel("RDMA throughput per rail",
			"RDMA bits per second sent (tx) and received (rx) by each rail's RDMA port (RoCE traffic only; the kernel's TCP counters do not see it).",
			unitBits, half,
			query(rule("rail:fabric_rdma_transmitted_bits:rate%s")+rail, "{{instance}} {{rail}} tx"),
			query(rule("rail:fabric_rdma_received_bits:rate%s")+rail, "{{instance}} {{rail}} rx")).
			Legend(statsLegend())).
		WithPanel(ratioPanel("Rail utilization of link rate",
			"RDMA throughput of each rail divided by its port's negotiated rate, per direction.",
			half,
			query(rule("rail:fabric_rdma_transmit_utilization:ratio_rate%s")+rail, "{{instance}} {{rail}} tx"),
			query(rule("rail:fabric_rdma_receive_utilization:ratio_rate%s")+rail, "{{instance}} {{rail}} rx")).
			Legend(statsLegend())).
		WithPanel(timeseriesPanel("RDMA vs TCP on the rail netdevs",
			"Per rail: RDMA bits/s (tx + rx) of the RDMA port next to kernel (TCP/IP) bits/s of the rail's netdev. "+
				"TCP on a rail while RDMA is flat means NCCL fell back to sockets (alert RailTCPFallbackSuspected).",
			unitBits, half,
			query(rule("rail:fabric_rdma_bits:rate%s")+rail, "{{instance}} {{rail}} RDMA"),
			query(rule("rail:fabric_netdev_bits:rate%s")+rail, "{{instance}} {{rail}} TCP"))).
		WithPanel(timeseriesPanel("Traffic on non-rail NICs",
			"Kernel bits/s (tx + rx) of NICs that carry no rail. Heavy traffic here during a run usually means "+
				"NCCL_SOCKET_IFNAME points at the management network (alert NonRailNICTraffic).",
			unitBits, half,
			query(rule("netdev:fabric_netdev_bits:rate%s")+sel(`rail=""`), "{{instance}} {{netdev}}"))).
		WithPanel(timeseriesPanel("Rail imbalance",
			"(busiest − least used rail) / busiest rail, RDMA bits/s per node: 0 is balanced, 1 means one rail carries everything (alert RailImbalance).",
			unitRatio, half,
			query(rule("instance:fabric_rdma_rail_imbalance:ratio_rate%s")+sel(), "{{instance}}")).
			Min(0).Max(1)).
		WithPanel(thresholdLine(ratioPanel("Rail share of the ranks' traffic",
			"Each rail that this node's ranks of multi-node communicators send on, as a share of the busiest of them (RDMA bits/s): 1 for the busiest. "+
				"NCCL spreads its channels evenly over a rank's NICs, so a healthy twin sits near 1; a rail below the dashed line for minutes "+
				"is slow or routed around (alert RailShareLow). Empty on idle nodes, single-node jobs and ranks configured for one rail.",
			half,
			query(rule("rail:fabric_rank_rail_share:ratio_rate%s")+rail, "{{instance}} {{rail}}")),
			c.RailShareLowRatio, true)).
		WithPanel(timeseriesPanel("Rails in use per rank",
			"How many of the node's rails each NCCL process sends on (queue pairs ready to send, from the kernel's RDMA resource tracker: "+
				"NCCL logs off), against the rails the node has. A rank below its node's count runs on fewer rails (alert NCCLRankLostRail "+
				"when it lost one while running).",
			unitShort, half,
			query("pid:fabric_rank_rails_in_use:count"+sel(), "{{instance}} pid {{pid}}"),
			query("instance:fabric_rails:count"+sel(), "{{instance}} rails of the node")).
			Min(0)).
		WithPanel(timeseriesPanel("RDMA bytes per input token per rail",
			"RDMA bytes a rail sends per prompt token of the whole deployment (SGLang's sglang:prompt_tokens_total summed over the cluster). "+
				"Empty while no tokens are processed.",
			unitBytes, half,
			query(rule("rail:fabric_rdma_transmitted_bytes_per_prompt_token:ratio_rate%s")+rail, "{{instance}} {{rail}}"))).
		WithRow(row("Lossless Ethernet: PFC, retransmissions, congestion")).
		WithPanel(thresholdLine(ratioPanel("PFC pause occupancy per rail and priority",
			"Fraction of time the rail's netdev was paused, per direction and priority (rx: the peer paused this NIC; tx: this NIC paused the peer). "+
				"The dashed line is the PFCStorm threshold.",
			half,
			query(rule("rail_priority:fabric_pfc_pause_duration:ratio_rate%s")+rail, "{{instance}} {{rail}} {{direction}} prio {{priority}}")),
			c.PFCPauseOccupancy, false).
			Legend(statsLegend())).
		// A recorded series that exists only where there were events: at
		// 1,000 nodes the raw form cost 5.7 CPU s per load (fleetbench).
		WithPanel(timeseriesPanel("Pause storm events",
			"tx_pause_storm_{warning,error}_events of each rail netdev within the rate window: the NIC detected it was pausing the link for too long. "+
				"Only netdevs with events are drawn.",
			unitShort, half,
			query(rule("netdev:fabric_pause_storm_events:increase%s")+sel(railM, `rail!=""`),
				"{{instance}} {{rail}} {{netdev}} {{severity}}"))).
		WithPanel(thresholdLine(timeseriesPanel("RoCE retransmission events per rail",
			"Sum of the retransmission-class hw counters per rail. The dashed line is the RoCERetransmissions threshold.",
			unitPerSec, half,
			query(rule("rail:fabric_rdma_retransmission_events:rate%s")+rail, "{{instance}} {{rail}}")),
			c.RoCERetransPerSecond, false)).
		WithPanel(timeseriesPanel("Retransmission counters per rail",
			"Each retransmission-class hw counter of each rail's RDMA port, per second.",
			unitPerSec, half, retrans...)).
		WithPanel(timeseriesPanel("Congestion notifications (CNP) per rail",
			"np_cnp_sent: CNPs this HCA sent as the notification point (it received ECN-marked packets); rp_cnp_handled: CNPs it reacted to "+
				"as the reaction point (DCQCN slowed down); rp_cnp_ignored: CNPs it ignored (alert RoCECNPIgnored).",
			unitPerSec, full, cnp...)).
		WithRow(row("Links")).
		WithPanel(stateTimelinePanel("Rail link state",
			"RDMA port state of each rail (ACTIVE is up) and whether the rail's RDMA device is present.",
			half, upDown("UP", "DOWN"),
			query("fabric_rdma_port_up"+railOnly, "{{instance}} {{rail}} ({{device}})"),
			query("fabric_rail_device_present"+rail, "{{instance}} {{rail}} device present"))).
		WithPanel(statPanel("Rail link rate",
			"Negotiated rate of each rail's RDMA port (recorded as rail:fabric_rdma_link_speed:bits: fabric_rdma_port_rate_bytes_per_second × 8). Red below the expected rate (RailLinkDegraded).",
			unitBits, half,
			query("rail:fabric_rdma_link_speed:bits"+rail, "{{instance}} {{rail}}")).
			Thresholds(thresholds(c.ExpectedRailSpeedBytes*8, true)))
	eventsRow(b, w).
		WithRow(row("Physical path")).
		WithPanel(ratioPanel("PCIe link speed of GPUs and HCAs",
			"Current PCIe link speed of each GPU and RDMA device over what both ends of its link support (1 = full speed). "+
				"Idle GPUs lower it (power management); only a busy device below 1 is a fault (alert PCIeLinkSpeedDegraded).",
			half,
			query("fabric_pcie_link_speed_transfers_per_second"+sel()+" / fabric_pcie_link_supported_speed_transfers_per_second"+sel()+
				` * on (cluster, instance, pci_bus_id) group_left (kind, name) fabric_pci_device_info`+sel(`kind=~"gpu|hca"`),
				"{{instance}} {{kind}} {{name}}")).
			Min(0).Max(1)).
		WithPanel(timeseriesPanel("PCIe lanes missing",
			"For every PCIe link on the path of a GPU or HCA (endpoints and switch upstream ports): lanes below what both ends support. "+
				"Anything above 0 halves or quarters that link's bandwidth at all times (alert PCIeLinkWidthDegraded).",
			unitShort, half,
			query("fabric_pcie_link_supported_width"+sel()+" - fabric_pcie_link_width"+sel(), "{{instance}} {{pci_bus_id}}")).
			Min(0)).
		WithPanel(timeseriesPanel("PCIe AER errors",
			"AER errors per function of the GPU and HCA paths, by class (correctable: replayed; nonfatal/fatal: lost transactions, "+
				"alert PCIeUncorrectableErrors). fabric_pcie_path_info names the devices behind a function.",
			unitShort, half,
			query("sum by (cluster, instance, pci_bus_id, class) (increase(fabric_pcie_aer_class_errors_total"+sel()+"[$__rate_interval]))",
				"{{instance}} {{pci_bus_id}} {{class}}"))).
		WithPanel(thresholdLine(timeseriesPanel("Pre-FEC bit error ratio per rail",
			"Bits the rail's FEC corrected per bit of line rate (mlx5 rx_corrected_bits_phy). The dashed line is the RailPreFECBERHigh threshold, "+
				"a decade below the 2.4e-4 IEEE 802.3 specifies for PAM4 links.",
			unitShort, half,
			query(rule("rail:fabric_phy_pre_fec_ber:ratio_rate%s")+rail, "{{instance}} {{rail}}")),
			c.PreFECBERMax, false)).
		WithPanel(timeseriesPanel("FEC uncorrectable blocks per rail",
			"Codewords FEC could not correct on each rail netdev: every one is a corrupted frame RoCE retransmits (alert FECUncorrectableErrors).",
			unitShort, half,
			query("increase(fabric_netdev_fec_uncorrectable_blocks_total"+railOnly+"[$__rate_interval])",
				"{{instance}} {{rail}} {{netdev}}"))).
		// The weakest lane of each module: a fleet's view would otherwise
		// draw four lines per rail (16,000 at 500 nodes).
		WithPanel(timeseriesPanel("Optical RX power, weakest lane per rail",
			"Received optical power of the weakest lane of each rail's module, and the module's own low-warning threshold (alert TransceiverRxPowerLow names the lane; "+
				"fabric_transceiver_rx_power_watts has every lane). A dark lane drops to the bottom of the scale.",
			unitDBm, half,
			query("10 * log10(min by (cluster, instance, rail, netdev) (fabric_transceiver_rx_power_watts"+railOnly+") * 1000)",
				"{{instance}} {{rail}}"),
			query("10 * log10(fabric_transceiver_rx_power_threshold_watts"+sel(railM, `rail!=""`, `threshold="low_warning"`)+" * 1000)",
				"{{instance}} {{rail}} low warning"))).
		WithPanel(timeseriesPanel("Optical module temperature",
			"Temperature of each rail's module and its own high-warning threshold (alert TransceiverTemperatureHigh).",
			unitCelsius, half,
			query("fabric_transceiver_temperature_celsius"+railOnly, "{{instance}} {{rail}}"),
			query("fabric_transceiver_temperature_threshold_celsius"+sel(railM, `rail!=""`, `threshold="high_warning"`),
				"{{instance}} {{rail}} high warning"))).
		WithPanel(stateTimelinePanel("NVLink state",
			"NVML state of each NVLink link (absent on GPUs without NVLink, like PCIe-only cards). Alert NVLinkDown.",
			half, upDown("UP", "DOWN"),
			query("fabric_gpu_nvlink_up"+sel(), "{{instance}} GPU {{gpu}} link {{link}}"))).
		WithPanel(timeseriesPanel("NVLink errors",
			"Replay, recovery and CRC errors per NVLink link and interval (alert NVLinkErrors).",
			unitShort, full,
			query("sum by (cluster, instance, gpu, link, type) (increase(fabric_gpu_nvlink_errors_total"+sel()+"[$__rate_interval]))",
				"{{instance}} GPU {{gpu}} link {{link}} {{type}}"))).
		WithRow(row("Exporter health")).
		WithPanel(tablePanel("Collector state",
			"Each collector's state and why (fabric_collector_state_info): ok; not_configured (needs a flag, e.g. nccl without "+
				"--collector.nccl.log-path); no_hardware (nothing of its kind on this host); source_missing (a --path.* root or the "+
				"NCCL log glob points at nothing: the reason names the path and the fix); failed (see the exporter's log). "+
				"A panel that stays empty usually has its answer here; source_missing and failed raise FabricCollectorFailing.",
			full, []string{"instance", "collector", "state", "reason"}, []string{"Value"},
			instant("fabric_collector_state_info"+sel())).
			OverrideByName("state", colorCells(valueMappings(
				mapping{"ok", "ok", "green"}, mapping{"not_configured", "not_configured", "blue"},
				mapping{"no_hardware", "no_hardware", "blue"}, mapping{"source_missing", "source_missing", "red"},
				mapping{"failed", "failed", "red"})))).
		WithPanel(stateTimelinePanel("Collector success",
			"fabric_scrape_collector_success per collector: 0 when the collector failed or its source is missing "+
				"(not for a collector that is not configured or has no hardware on the host; the Collector state table says which).",
			third, upDown("OK", "FAIL"),
			query("fabric_scrape_collector_success"+sel(), "{{instance}} {{collector}}"))).
		WithPanel(timeseriesPanel("Read errors",
			"Values, files or devices skipped per second because they could not be read or parsed.",
			unitPerSec, third,
			query("rate(fabric_scrape_read_errors_total"+sel()+"[$__rate_interval])", "{{instance}} {{collector}}"))).
		WithPanel(timeseriesPanel("Collector duration",
			"Time each collector took in the last scrape.",
			unitSeconds, third,
			query("fabric_scrape_collector_duration_seconds"+sel(), "{{instance}} {{collector}}")))
	d, err := finish(b)
	if err != nil {
		return d, err
	}
	return d, filterAnnotations(&d)
}
