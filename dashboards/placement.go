package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/fabric-exporter/fabric_exporter/alerts"
)

// numaCounters are the numastat counters (fabric_numa_<name>_total, pages,
// per numa_node): allocations that went where intended and those that did not.
var (
	numaLocal     = []string{"numa_hit", "local_node", "interleave_hit"}
	numaMisplaced = []string{"numa_miss", "numa_foreign", "other_node"}
)

// placement: process memory per NUMA node against the NUMA node of the
// process's GPUs and of the HCAs, PCIe topology, the GPUDirect and P2P
// judgement (gpudirect.go), RDMA devices visible in the serving containers,
// NCCL environment and numastat.
func placement(c alerts.Config) (dashboard.Dashboard, error) {
	s := sel()
	numa := func(names []string) []*promQuery {
		qs := make([]*promQuery, len(names))
		for i, n := range names {
			qs[i] = query("rate(fabric_numa_"+n+"_total"+s+"[$__rate_interval])", "{{instance}} node {{numa_node}} "+n)
		}
		return qs
	}
	// Memory of each process on the NUMA nodes of the GPUs it uses, over
	// all its memory (the CrossNUMAPlacement alert without thresholds).
	localShare := "sum by (cluster, instance, pid, comm) (\n" +
		"  fabric_process_numa_memory_bytes" + s + "\n" +
		"  * on (cluster, instance, pid, numa_node) group_left ()\n" +
		"  max by (cluster, instance, pid, numa_node) (\n" +
		"    fabric_gpu_process_info" + s + " * on (cluster, instance, gpu, uuid) group_left (numa_node) fabric_gpu_info" + sel(`numa_node!=""`) + "\n" +
		"  )\n" +
		")\n" +
		"/ sum by (cluster, instance, pid, comm) (fabric_process_numa_memory_bytes" + s + ")"

	// RDMA devices per pod that got GPUs, 0 for none (the resource
	// regexps of alerts/config.yml, as PodWithoutRDMADevice uses them).
	gpuPods := "count by (cluster, instance, namespace, pod) (fabric_kubernetes_pod_device_info" + sel(`resource=~"`+c.KubernetesGPUResources+`"`) + ")"
	gpuPodRDMA := "(\n" +
		"  count by (cluster, instance, namespace, pod) (fabric_kubernetes_pod_device_info" + sel(`resource=~"`+c.KubernetesRDMAResources+`"`) + ")\n" +
		"  and on (cluster, instance, namespace, pod) " + gpuPods + "\n" +
		")\n" +
		"or on (cluster, instance, namespace, pod)\n" +
		"0 * " + gpuPods

	b := newBoard(c, boardOpts{
		uid:   "fabric-placement",
		title: "Placement",
		description: "Where the serving processes run relative to their GPUs and HCAs: process memory per NUMA node, " +
			"NUMA nodes and PCIe paths of GPUs and RDMA devices, GPUDirect RDMA and P2P per GPU pair and rail (open, closed, by design, unknown), " +
			"RDMA devices visible in the containers, NCCL environment and numastat.",
	}).
		WithRow(row("Process memory vs the NUMA node of its GPUs")).
		WithPanel(thresholdLine(ratioPanel("Process memory on its GPUs' NUMA nodes",
			"Share of each GPU process's memory that sits on the NUMA node(s) of the GPUs it uses. "+
				"Low values mean host-device copies cross the socket interconnect (alert CrossNUMAPlacement; dashed line: its threshold).",
			half, query(localShare, "{{instance}} {{comm}} ({{pid}})")),
			c.CrossNUMALocalRatio, true)).
		WithPanel(timeseriesPanel("Process memory per NUMA node",
			"Resident memory of each tracked process per NUMA node.",
			unitBytes, half,
			query("fabric_process_numa_memory_bytes"+s, "{{instance}} {{comm}} ({{pid}}) node {{numa_node}}"))).
		WithPanel(tablePanel("Process memory by NUMA node",
			"Resident memory of each tracked process per NUMA node, now.",
			half, []string{"instance", "comm", "pid", "numa_node", "Value"}, nil,
			instant("fabric_process_numa_memory_bytes"+s)).
			Unit(unitBytes)).
		WithPanel(tablePanel("NUMA node of each process's GPUs",
			"The GPUs each process computes on, with their PCI address and NUMA node.",
			half, []string{"instance", "pid", "gpu", "pci_bus_id", "numa_node"}, []string{"uuid", "Value"},
			instant("fabric_gpu_process_info"+s+" * on (cluster, instance, gpu, uuid) group_left (pci_bus_id, numa_node) fabric_gpu_info"+s))).
		WithRow(row("Devices and topology")).
		WithPanel(tablePanel("GPUs",
			"GPUs with PCI address and NUMA node (\"\" when the kernel does not know).",
			third, []string{"instance", "gpu", "name", "pci_bus_id", "numa_node"}, []string{"uuid", "driver_version", "Value"},
			instant("fabric_gpu_info"+s))).
		WithPanel(tablePanel("RDMA devices",
			"RDMA devices (HCAs) with PCI address and NUMA node.",
			third, []string{"instance", "device", "pci_bus_id", "numa_node", "hca_type", "fw_ver"}, []string{"board_id", "node_guid", "Value"},
			instant("fabric_rdma_device_info"+s))).
		WithPanel(tablePanel("PCI devices",
			"GPUs, RDMA devices and network interfaces by PCI function, with NUMA node and local CPUs.",
			third, []string{"instance", "kind", "name", "pci_bus_id", "numa_node", "local_cpulist"}, []string{"Value"},
			instant("fabric_pci_device_info"+s))).
		WithPanel(tablePanel("GPU ↔ RDMA device PCIe paths",
			"PCIe path between each GPU (rows: node and GPU) and RDMA device (columns), as nvidia-smi topo -m prints it: "+
				"PIX (one PCIe switch), PXB (several switches), PHB (host bridge), NODE (within a NUMA node), SYS (across NUMA nodes). "+
				"GPUDirect RDMA wants PIX or PXB.",
			full, nil, nil,
			instant(`label_join(fabric_topology_path_info`+s+`, "node_gpu", " GPU ", "instance", "gpu")`)).
			Transformations([]dashboard.DataTransformerConfig{{
				Id: "groupingToMatrix",
				Options: map[string]any{
					"columnField": "device",
					"rowField":    "node_gpu",
					"valueField":  "path",
				},
			}}))
	b = gpudirectRows(b).
		WithRow(row("Containers and NCCL environment")).
		WithPanel(tablePanel("RDMA devices visible to processes",
			"Whether /dev/infiniband/<node> of each RDMA device exists in the mount namespace of the process. "+
				"MISSING means NCCL cannot use the HCA and falls back to TCP (alert RDMADevicesMissingInContainer).",
			half, []string{"instance", "comm", "pid", "device", "node", "Value"}, nil,
			instant("fabric_process_rdma_device_visible"+s)).
			OverrideByName("Value", colorCells(valueMappings(
				mapping{"1", "visible", "green"}, mapping{"0", "MISSING", "red"})))).
		WithPanel(tablePanel("NCCL environment of processes",
			"NCCL_* variables in the environment of each tracked process.",
			half, []string{"instance", "comm", "pid", "name", "value"}, []string{"Value"},
			instant("fabric_process_nccl_env_info"+s))).
		WithPanel(tablePanel("RDMA devices of GPU pods (Kubernetes)",
			"For each pod the kubelet gave GPUs, the number of RDMA devices it got (kubernetes collector, pod-resources API). "+
				"NONE on a node that offers RDMA resources is the Kubernetes form of the incident: NCCL in that pod falls back to TCP (alert PodWithoutRDMADevice).",
			half, []string{"instance", "namespace", "pod", "Value"}, nil,
			instant(gpuPodRDMA)).
			OverrideByName("Value", colorCells(valueMappings(mapping{"0", "NONE", "red"})))).
		WithRow(row("NUMA statistics")).
		WithPanel(timeseriesPanel("NUMA allocations off the intended node",
			"Pages per second, per NUMA node (numastat): numa_miss (allocated here though another node was preferred), "+
				"numa_foreign (intended here, allocated elsewhere), other_node (allocated here by a task running on another node).",
			unitShort, half, numa(numaMisplaced)...).
			AxisLabel("pages/s")).
		WithPanel(timeseriesPanel("NUMA allocations on the intended node",
			"Pages per second, per NUMA node (numastat): numa_hit, local_node, interleave_hit.",
			unitShort, half, numa(numaLocal)...).
			AxisLabel("pages/s"))
	return finish(b)
}
