package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// The GPUDirect and P2P panels of the Placement dashboard: the judgement
// of every GPU pair and GPU × rail (the records of the gpudirect rule
// group: open, closed, by_design, unknown with a cause), what is unknown
// and what to grant to know it, and whether ACS could be read.

// grantText says, per cause of an unknown judgement, what makes it known.
var grantText = []mapping{
	{"acs_unreadable", "ACS not readable (64 bytes of config space): Helm pcieACSReader.enabled, kustomize components/pcie-acs-reader, or CAP_SYS_ADMIN", "orange"},
	{"no_nvml_p2p_status", "no NVML P2P status: run the gpu collector with NVML on the node (the DCGM backend without local NVML reads none)", "orange"},
	{"dmabuf_unknown", "no peer-memory module and no word from NCCL: give the exporter NCCL's log (NCCL_DEBUG=INFO, --collector.nccl.log-path) or load nvidia_peermem", "orange"},
}

// judgementColors colors a "state cause" cell.
func judgementColors() []dashboard.DynamicConfigValue {
	var ms []dashboard.ValueMapping
	for i, m := range []struct{ pattern, color string }{
		{"^open.*", "green"}, {"^closed.*", "red"}, {"^unknown.*", "orange"}, {"^by_design.*", "blue"},
	} {
		ms = append(ms, dashboard.ValueMapping{RegexMap: &dashboard.RegexMap{
			Type:    dashboard.MappingTypeRegexToText,
			Options: dashboard.DashboardRegexMapOptions{Pattern: m.pattern, Result: dashboard.ValueMappingResult{Color: ptr(m.color), Index: ptr(int32(i))}},
		}})
	}
	return colorCells(ms)
}

// judgementMatrix queries one judgement record for a matrix (matrixBy):
// rows node and GPU, cells "state cause".
func judgementMatrix(record string) *promQuery {
	return instant(`label_join(label_join(` + record + sel() + `, "node_gpu", " GPU ", "instance", "gpu"), "judgement", " ", "state", "cause")`)
}

func matrixBy(column string) []dashboard.DataTransformerConfig {
	return []dashboard.DataTransformerConfig{{
		Id: "groupingToMatrix",
		Options: map[string]any{
			"columnField": column,
			"rowField":    "node_gpu",
			"valueField":  "judgement",
		},
	}}
}

// gpudirectRows adds the GPUDirect and P2P row to the Placement dashboard.
func gpudirectRows(b *dashboard.DashboardBuilder) *dashboard.DashboardBuilder {
	s := sel()
	byState := `count by (cluster, instance, record, state, cause) (
  label_replace(gpu_pair:fabric_p2p_path:info` + s + `, "record", "P2P (GPU pairs)", "", "")
  or label_replace(gpu_rail:fabric_gdr_path:info` + s + `, "record", "GPUDirect RDMA (GPU × rail)", "", "")
)`
	return b.
		WithRow(row("GPUDirect and P2P")).
		WithPanel(tablePanel("Judgements by state, and what to grant",
			"GPU pairs and GPU × rail paths per node, state and cause. An unknown one (orange) lacks an input that decides it; "+
				"the cause column says what makes it known. An unknown path is never reported open and never warns "+
				"(docs/runbooks.md, GPUP2PClosed and GPUDirectRDMAOff).",
			half, []string{"instance", "record", "state", "cause", "Value"}, nil,
			instant(byState)).
			OverrideByName("state", colorCells(valueMappings(
				mapping{"open", "open", "green"}, mapping{"closed", "closed", "red"},
				mapping{"by_design", "by design", "blue"}, mapping{"unknown", "unknown", "orange"}))).
			OverrideByName("cause", colorCells(valueMappings(grantText...)))).
		WithPanel(tablePanel("PCIe configuration space read (ACS)",
			"Least configuration space the exporter (or the ACS file of the opt-in reader) could read of the bridges on its GPUs' "+
				"and HCAs' paths: 4096 says ACS; 64 is a reader without CAP_SYS_ADMIN (ACS unknown: Helm pcieACSReader.enabled or "+
				"kustomize components/pcie-acs-reader); 256 a conventional or VM bridge. Second query: age of the ACS file "+
				"(--collector.pcie.acs-file) in seconds, -1 without one; restart the pod, or use the refresh sidecar, after changing ACS.",
			half, nil, nil,
			instant("min by (cluster, instance) (fabric_pcie_config_space_readable_bytes"+s+")"),
			instant("max by (cluster, instance) (time() - fabric_pcie_acs_file_timestamp_seconds"+s+")\n"+
				"or on (cluster, instance) min by (cluster, instance) (0 * fabric_pcie_config_space_readable_bytes"+s+") - 1")).
			Transformations([]dashboard.DataTransformerConfig{{Id: "merge", Options: map[string]any{}},
				organize([]string{"instance", "Value #A", "Value #B"}, []string{"cluster"})}).
			OverrideByName("Value #B", append([]dashboard.DynamicConfigValue{{Id: "unit", Value: unitSeconds}},
				colorCells(valueMappings(mapping{"-1", "no ACS file", "text"}))...)).
			OverrideByName("Value #A", colorCells(valueMappings(
				mapping{"4096", "4096: ACS read", "green"}, mapping{"256", "256: no extended space", "orange"},
				mapping{"64", "64: ACS unknown (no CAP_SYS_ADMIN)", "orange"})))).
		WithPanel(tablePanel("P2P between GPUs",
			"gpu_pair:fabric_p2p_path:info per node and GPU (rows) and peer GPU (columns): state and the first cause that applies. "+
				"open (green; nvlink: over NVLink), closed (red: the node closes a path NCCL would use: acs_redirect, iommu_translation, "+
				"nvml_unsupported, nccl_p2p_disabled, nccl_chose_shm), by_design (blue: beyond NCCL's P2P level, cross_socket, "+
				"path_beyond_p2p_level), unknown (orange: acs_unreadable, no_nvml_p2p_status). docs/physical.md, \"The judgement\".",
			full, nil, nil,
			judgementMatrix("gpu_pair:fabric_p2p_path:info")).
			Transformations(matrixBy("peer_gpu")).
			OverrideByRegexp(".+", judgementColors())).
		WithPanel(tablePanel("GPUDirect RDMA between GPUs and rails",
			"gpu_rail:fabric_gdr_path:info per node and GPU (rows) and rail (columns). closed: nccl_gdr_disabled (NCCL said "+
				"\"GPU Direct RDMA Disabled for HCA\"), acs_redirect, iommu_translation, no_peer_memory, nccl_no_gdrdma; by_design: "+
				"path_beyond_gdr_level (NCCL_NET_GDR_LEVEL, default PXB); unknown: acs_unreadable, dmabuf_unknown.",
			full, nil, nil,
			judgementMatrix("gpu_rail:fabric_gdr_path:info")).
			Transformations(matrixBy("rail")).
			OverrideByRegexp(".+", judgementColors()))
}
