package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/fabric-exporter/fabric_exporter/alerts"
)

// gpuField is one of the activity ratios of the gpu collector.
type gpuField struct {
	field, title, description string
}

// gpuFields are the ratio fields in the order of alerts.GPUFields
// (fabric_gpu_<field>_ratio, recorded as instance:fabric_gpu_<field>:avg).
var gpuFields = []gpuField{
	{"graphics_engine_active", "Graphics engine active", "Fraction of time any graphics or compute engine was active (DCGM 1001, GPM GRAPHICS_UTIL)."},
	{"sm_active", "SM active", "Fraction of time at least one warp was resident on an SM, averaged over all SMs (DCGM 1002, GPM SM_UTIL)."},
	{"sm_occupancy", "SM occupancy", "Resident warps relative to the maximum, averaged over all SMs (DCGM 1003, GPM SM_OCCUPANCY)."},
	{"tensor_active", "Tensor cores active", "Fraction of cycles the tensor pipes were active (DCGM 1004, GPM ANY_TENSOR_UTIL)."},
	{"dram_active", "DRAM active", "Fraction of cycles the device memory interface was sending or receiving data (DCGM 1005, GPM DRAM_BW_UTIL)."},
}

// gpuActivity: the seven activity fields per GPU, node averages, the metric
// source and the compute processes.
func gpuActivity(c alerts.Config) (dashboard.Dashboard, error) {
	gpu := sel(gpuM)
	b := newBoard(c, boardOpts{
		uid:   "fabric-gpu-activity",
		title: "GPU activity",
		description: "GPU activity from fabric_exporter's gpu collector (DCGM profiling fields or NVML GPM): " +
			"engine, SM, tensor and DRAM activity and PCIe throughput per GPU, node averages, source and compute processes.",
		gpu: true,
	}).
		WithRow(row("Per GPU"))
	for i, f := range gpuFields {
		width := uint32(half)
		if i == len(gpuFields)-1 {
			width = full // five ratio panels: the last one takes the whole row
		}
		b.WithPanel(ratioPanel(f.title, f.description, width,
			query("fabric_gpu_"+f.field+"_ratio"+gpu, "{{instance}} GPU {{gpu}}")))
	}
	b.WithPanel(timeseriesPanel("PCIe transmitted",
		"Bytes per second the GPU sent over its own PCIe link, headers included (DCGM 1009, GPM PCIE_TX_PER_SEC).",
		unitBytesPS, half,
		query("fabric_gpu_pcie_transmitted_bytes_per_second"+gpu, "{{instance}} GPU {{gpu}}"))).
		WithPanel(timeseriesPanel("PCIe received",
			"Bytes per second the GPU received over its own PCIe link, headers included (DCGM 1010, GPM PCIE_RX_PER_SEC).",
			unitBytesPS, half,
			query("fabric_gpu_pcie_received_bytes_per_second"+gpu, "{{instance}} GPU {{gpu}}")))

	var avgs []*promQuery
	for _, f := range alerts.GPUFields() {
		avgs = append(avgs, query("instance:fabric_gpu_"+f+":avg"+sel(), "{{instance}} "+f))
	}
	b.WithRow(row("Node averages")).
		WithPanel(ratioPanel("Activity, average of the node's GPUs",
			"Each activity ratio averaged over the GPUs of a node (recording rules instance:fabric_gpu_<field>:avg; all GPUs, not only the selected ones).",
			half, avgs...).
			Legend(statsLegend())).
		WithPanel(timeseriesPanel("PCIe throughput, sum of the node's GPUs",
			"PCIe bytes per second of all GPUs of a node, per direction.",
			unitBytesPS, half,
			query("instance:fabric_gpu_pcie_transmitted_bytes_per_second:sum"+sel(), "{{instance}} tx"),
			query("instance:fabric_gpu_pcie_received_bytes_per_second:sum"+sel(), "{{instance}} rx")).
			Legend(statsLegend())).
		WithRow(row("Source and processes")).
		WithPanel(tablePanel("GPU metric source",
			"Where the activity fields come from on each node: dcgm, nvml_gpm, or nvml (no activity fields).",
			quarter, []string{"instance", "source"}, []string{"Value"},
			instant("fabric_gpu_source_info"+sel()))).
		WithPanel(stateTimelinePanel("DCGM host engine",
			"Only where DCGM is the source: connected, or reconnecting (no activity values meanwhile).",
			quarter, upDown("connected", "reconnecting"),
			query("fabric_dcgm_up"+sel(), "{{instance}}"))).
		WithPanel(tablePanel("GPU compute processes",
			"Compute processes on each GPU (host PIDs).",
			half, []string{"instance", "gpu", "pid", "uuid"}, []string{"Value"},
			instant("fabric_gpu_process_info"+gpu)))
	return finish(b)
}
