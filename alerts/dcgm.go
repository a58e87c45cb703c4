package alerts

import (
	"fmt"
	"strings"
)

// DCGMField pairs a dcgm-exporter metric with the fabric_gpu_* series that
// carries the same quantity (docs/kubernetes.md, "dcgm-exporter users").
type DCGMField struct {
	DCGM, Fabric string
	Scale        string // PromQL applied to the value ("" or " * 100")
}

// dcgmFields are the dcgm-exporter names the compatibility rules record.
// The PROF fields are ratios (0-1) and bytes per second in both exporters;
// DCGM_FI_DEV_GPU_UTIL is a percentage, fabric_gpu_utilization_ratio the
// same NVML utilization.gpu as a ratio.
var dcgmFields = []DCGMField{
	{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "fabric_gpu_graphics_engine_active_ratio", ""},
	{"DCGM_FI_PROF_SM_ACTIVE", "fabric_gpu_sm_active_ratio", ""},
	{"DCGM_FI_PROF_SM_OCCUPANCY", "fabric_gpu_sm_occupancy_ratio", ""},
	{"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "fabric_gpu_tensor_active_ratio", ""},
	{"DCGM_FI_PROF_DRAM_ACTIVE", "fabric_gpu_dram_active_ratio", ""},
	{"DCGM_FI_PROF_PCIE_TX_BYTES", "fabric_gpu_pcie_transmitted_bytes_per_second", ""},
	{"DCGM_FI_PROF_PCIE_RX_BYTES", "fabric_gpu_pcie_received_bytes_per_second", ""},
	{"DCGM_FI_DEV_GPU_UTIL", "fabric_gpu_utilization_ratio", " * 100"},
}

// RenderDCGMCompat returns recording rules that write this exporter's GPU
// series under dcgm-exporter's names and labels: gpu, UUID, pci_bus_id,
// device ("nvidia<gpu>"), modelName, Hostname and hostname (the instance
// without its port; dcgm-exporter renamed the label in 4.x), and
// namespace, pod, container for a GPU the kubelet allocated to a pod
// (fabric_gpu_pod_info; one series per pod on a shared GPU, as
// dcgm-exporter does; GPUs without a pod keep no pod labels).
func RenderDCGMCompat(c Config) []byte {
	C := c.ClusterLabel
	var b strings.Builder
	b.WriteString(`# Optional: dcgm-exporter's metric names and labels from fabric_exporter's
# series, so dashboards built for dcgm-exporter keep working on nodes that run
# fabric_exporter instead. Rendered by ` + "`make rules`" + ` (alerts/dcgm.go); load it
# next to fabric-rules.yml. Mapping: docs/kubernetes.md.
groups:
- name: fabric_exporter.dcgm_compat
  rules:
`)
	for _, f := range dcgmFields {
		on := fmt.Sprintf("on (%s, instance, gpu, uuid)", C)
		perGPU := fmt.Sprintf("(%s%s) * %s group_left (pci_bus_id, name) fabric_gpu_info", f.Fabric, f.Scale, on)
		expr := fmt.Sprintf(`label_replace(label_replace(label_replace(label_replace(label_replace(
  (
    fabric_gpu_pod_info * %[1]s group_left (pci_bus_id, name) (%[2]s)
    or %[1]s
    %[2]s
  ),
  "UUID", "$1", "uuid", "(.*)"),
  "modelName", "$1", "name", "(.*)"),
  "device", "nvidia$1", "gpu", "(.*)"),
  "Hostname", "$1", "instance", "(.*?)(:[0-9]+)?"),
  "hostname", "$1", "instance", "(.*?)(:[0-9]+)?")
`, on, perGPU)
		fmt.Fprintf(&b, "  - record: %s\n    expr: |\n", f.DCGM)
		for _, l := range strings.Split(strings.TrimSuffix(expr, "\n"), "\n") {
			b.WriteString("      " + l + "\n")
		}
	}
	return []byte(b.String())
}
