package dashboards

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/fabric-exporter/fabric_exporter/alerts"
)

// ncclDashboard: what NCCL chose in each process (network, transports,
// devices, socket interfaces, versions), its warnings and log activity, and
// the health of the nccl collector.
func ncclDashboard(c alerts.Config) (dashboard.Dashboard, error) {
	s := sel()
	b := newBoard(c, boardOpts{
		uid:   "fabric-nccl",
		title: "NCCL",
		description: "NCCL as its logs describe it, per process: network and transports chosen (RDMA or TCP sockets), " +
			"RDMA devices and socket interfaces used, versions, warnings, and the nccl collector's health.",
	}).
		WithRow(row("Transport")).
		WithPanel(statPanel("Processes on TCP sockets",
			"NCCL processes whose network is Socket: every inter-node collective goes over TCP (alert NCCLSocketFallback).",
			"none", quarter,
			query(`count(max by (cluster, instance, host, pid) (fabric_nccl_net_info`+sel(`net="Socket"`)+`))`, "processes")).
			NoValue("0").
			Thresholds(thresholds(1, false))).
		WithPanel(statPanel("NET/Socket connections",
			"Channel connections NCCL logged over the Socket transport.",
			"none", quarter,
			query(`sum(fabric_nccl_connections`+sel(`transport="NET/Socket"`)+`)`, "connections")).
			NoValue("0").
			Thresholds(thresholds(1, false))).
		WithPanel(statPanel("NET connections with GPUDirect RDMA",
			"Share of NET connections logged with /GDRDMA. Low: GPUDirect RDMA is off (nvidia-peermem not loaded, "+
				"NCCL_NET_GDR_LEVEL, or the GPU and HCA too far apart on PCIe: see the Placement dashboard).",
			unitRatio, quarter,
			query(`(sum(fabric_nccl_connections`+sel(`transport=~"NET/.*"`, `gdr="true"`)+`) or vector(0)) / sum(fabric_nccl_connections`+sel(`transport=~"NET/.*"`)+`)`, "GDR")).
			Min(0).Max(1).
			Thresholds(thresholds(0.99, true))).
		WithPanel(statPanel("Tracked NCCL processes",
			"NCCL processes whose logs the nccl collector follows, per node.",
			"none", quarter,
			query("fabric_nccl_tracked_processes"+s, "{{instance}}"))).
		WithPanel(tablePanel("Network per process",
			"The network each NCCL process chose: IB (RDMA, RoCE included) or Socket (TCP).",
			half, []string{"instance", "host", "pid", "net"}, []string{"Value"},
			instant("fabric_nccl_net_info"+s)).
			OverrideByName("net", colorCells(valueMappings(
				mapping{"IB", "IB", "green"}, mapping{"Socket", "Socket", "red"})))).
		WithPanel(tablePanel("Connections per transport",
			"Channel connections logged per transport (NET/IB, NET/Socket, P2P/IPC, P2P/CUMEM, SHM, …) and GPUDirect RDMA.",
			half, []string{"instance", "host", "pid", "transport", "gdr", "Value"}, nil,
			instant("fabric_nccl_connections"+s))).
		WithPanel(tablePanel("RDMA devices used",
			"RDMA device ports NCCL uses (NET/IB : Using …), with link layer (RoCE or IB).",
			third, []string{"instance", "host", "pid", "device", "port", "link"}, []string{"Value"},
			instant("fabric_nccl_net_device_info"+s))).
		WithPanel(tablePanel("Socket interfaces",
			"Network interfaces NCCL's socket transport and bootstrap use (NET/Socket : Using …; see NCCL_SOCKET_IFNAME).",
			third, []string{"instance", "host", "pid", "interface"}, []string{"Value"},
			instant("fabric_nccl_socket_interface_info"+s))).
		WithPanel(tablePanel("NCCL versions",
			"NCCL version of each process and the CUDA version it was built for.",
			third, []string{"instance", "host", "pid", "version", "cuda"}, []string{"Value"},
			instant("fabric_nccl_info"+s))).
		WithRow(row("Bus bandwidth (NCCL Inspector)")).
		WithPanel(timeseriesPanel("Bus bandwidth per communicator",
			"NCCL bus bandwidth from the NCCL Inspector profiler plugin (collector nccl-inspector), collectives of 16 MiB and more. "+
				"JSON mode: per process (pid) and communicator, time-weighted over the rate window; joins the network NCCL chose "+
				"for that pid (Transport row). Prometheus mode (.prom): per GPU (uuid) for the plugin's last dump, no pid. "+
				"Alert NCCLBusBandwidthLow: under a fraction of the rail link speed while NCCL uses IB.",
			unitBytesPS, full,
			query(fmt.Sprintf("comm:fabric_nccl_inspector_bus_bandwidth_bytes_per_second:rate%s", c.RateWindow)+
				sel(`size!~"0-64KiB|64KiB-1MiB|1-16MiB"`), "{{instance}} {{host}} pid {{pid}} {{comm}} {{op}} {{size}}"),
			query("fabric_nccl_inspector_bus_bandwidth_bytes_per_second"+sel(`size!~"0-64KiB|64KiB-1MiB|1-16MiB"`),
				"{{instance}} {{host}} {{uuid}} {{comm_name}} {{op}} {{size}} {{algo_proto}}"))).
		WithRow(row("Log")).
		WithPanel(timeseriesPanel("Warnings",
			"NCCL WARN lines per second, per process.",
			unitPerSec, half,
			query("rate(fabric_nccl_warnings_total"+s+"[$__rate_interval])", "{{instance}} {{host}} pid {{pid}}"))).
		WithPanel(tablePanel("Last log line",
			"When each process last wrote to its NCCL log (modification time of the log file its latest line came from).",
			half, []string{"instance", "host", "pid", "Value"}, nil,
			instant("fabric_nccl_last_log_timestamp_seconds"+s+" * 1000")).
			OverrideByName("Value", []dashboard.DynamicConfigValue{
				{Id: "displayName", Value: "last line"},
				{Id: "unit", Value: "dateTimeFromNow"},
			})).
		WithRow(row("Collector health")).
		WithPanel(timeseriesPanel("Log lines read",
			"Lines per second the nccl collector read from NCCL logs, and those that were not NCCL lines (application output, garbage).",
			unitPerSec, third,
			query("rate(fabric_nccl_log_lines_total"+s+"[$__rate_interval])", "{{instance}} lines"),
			query("rate(fabric_nccl_log_unparsed_lines_total"+s+"[$__rate_interval])", "{{instance}} unparsed"))).
		WithPanel(timeseriesPanel("Tracked processes",
			"NCCL processes tracked by the collector.",
			unitShort, third,
			query("fabric_nccl_tracked_processes"+s, "{{instance}}"))).
		WithPanel(stateTimelinePanel("nccl collector",
			"fabric_scrape_collector_success of the nccl collector: FAIL when it failed or --collector.nccl.log-path matches no file; "+
				"OK also while the path is not set (the Collector state table of Fabric overview tells them apart).",
			third, upDown("OK", "FAIL"),
			query("fabric_scrape_collector_success"+sel(`collector="nccl"`), "{{instance}}")))
	return finish(b)
}
