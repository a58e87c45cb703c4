package collector

import "testing"

// NCCL's own P2P and GDR statements as series: "GPU Direct RDMA Enabled
// for HCA" of the real 2.16.5 log (NVIDIA/nccl-tests#350), and "P2P is
// disabled between [NVLINK] connected GPUs" (graph/paths.cc, 2.12+).
func TestNCCLP2PDisabledAndGDREnabledSeries(t *testing.T) {
	c := newTestNCCL(t, NCCLOptions{LogPaths: []string{"fixtures/nccl-gdr/*.log"}})
	c.poll()
	compare(t, c, `
# HELP fabric_nccl_gdr_enabled_info GPU Direct RDMA enabled for a NET device ("NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'", NCCL 2.13+): NCCL can register GPU memory with it, through a peer-memory module or DMA-BUF. The counterpart of fabric_nccl_gdr_disabled_info.
# TYPE fabric_nccl_gdr_enabled_info gauge
fabric_nccl_gdr_enabled_info{device="mlx5_0",host="n013",net="IB",pid="101855"} 1
fabric_nccl_gdr_enabled_info{device="mlx5_2",host="n013",net="IB",pid="101855"} 1
`, "fabric_nccl_gdr_enabled_info")

	c = scanText(t, "h:7:7 [0] NCCL INFO P2P is disabled between connected GPUs 0 and 1. You can repress this message with NCCL_IGNORE_DISABLED_P2P=1.\n"+
		"h:7:8 [1] paths.cc:323 NCCL WARN P2P is disabled between NVLINK connected GPUs 3 and 2. This should not be the case given their connectivity, and is probably due to a hardware issue. If you still want to proceed, you can set NCCL_IGNORE_DISABLED_P2P=1.\n")
	compare(t, c, `
# HELP fabric_nccl_p2p_disabled_info NCCL's "P2P is disabled between connected GPUs X and Y" (NCCL 2.12+; nvlink="true" for the WARN "… between NVLINK connected GPUs …", which fails the init): the pair's path is within NCCL's P2P level but NVML's P2P read or write status is not OK. gpu and peer_gpu are X and Y, NVML indices. At most 64 per process.
# TYPE fabric_nccl_p2p_disabled_info gauge
fabric_nccl_p2p_disabled_info{gpu="0",host="h",nvlink="false",peer_gpu="1",pid="7"} 1
fabric_nccl_p2p_disabled_info{gpu="3",host="h",nvlink="true",peer_gpu="2",pid="7"} 1
`, "fabric_nccl_p2p_disabled_info")
}

// The series gpudirect_states_test.yml's bus-id case starts from, as the
// collector exports them for the lines of 2.5 (transport/shm.cc:78@v2.5.6-1),
// 2.6 (p2p.cc:140@v2.6.4-1) and 2.12 (net.cc:184, paths.cc:393@v2.12.12-1).
func TestNCCLBusIDSeries(t *testing.T) {
	c := scanText(t, "g25:100:101 [0] NCCL INFO NCCL version 2.5.6+cuda10.1\n"+
		"g25:100:101 [0] NCCL INFO Ring 00 : 0[1b000] -> 1[1c000] via direct shared memory\n"+
		"g26:200:201 [2] NCCL INFO NCCL version 2.6.4+cuda10.2\n"+
		"g26:200:201 [2] NCCL INFO Ring 00 : 2[86000] -> 3[87000] via P2P/IPC\n"+
		"g212:300:301 [1] NCCL INFO NCCL version 2.12.12+cuda11.7\n"+
		"g212:300:301 [1] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.1<0>\n"+
		"g212:300:301 [1] NCCL INFO Channel 00/0 : 1[1c000] -> 9[1c000] [send] via NET/IB/0\n"+
		"g212:300:301 [1] NCCL INFO GPU Direct RDMA Disabled for GPU 1b000 / HCA 0 (distance 4 > 3)\n")
	compare(t, c, `
# HELP fabric_nccl_peer_transport_info NCCL's transport between a GPU of the process and a peer GPU of the same host, from its channel lines ("Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"): P2P/IPC, P2P/CUMEM, P2P/direct pointer (the fast path) or SHM (through host memory). gpu and peer_gpu are the devices in brackets: the NVML index (the exporter's gpu label) from NCCL 2.18.3, the PCI address for the bus id of NCCL 2.5-2.18.1 (the logged version decides) ("0[1a000]"). At most 64 per process.
# TYPE fabric_nccl_peer_transport_info gauge
fabric_nccl_peer_transport_info{gpu="0000:1b:00.0",host="g25",peer_gpu="0000:1c:00.0",pid="100",transport="SHM"} 1
fabric_nccl_peer_transport_info{gpu="0000:86:00.0",host="g26",peer_gpu="0000:87:00.0",pid="200",transport="P2P/IPC"} 1
`, "fabric_nccl_peer_transport_info")
	compare(t, c, `
# HELP fabric_nccl_net_gdr_info NET connections of a GPU of the process through one NET device, from "… [send] via NET/IB/0/GDRDMA" (the local GPU is the left device of [send], the right one of [receive]): device is the entry of that index in the latest "NET/IB : Using [0]mlx5_0:1/RoCE …" list ("" when none was logged), gdr="true" with /GDRDMA (GPUDirect RDMA), "false" when the bytes are staged through host memory. gpu as in fabric_nccl_peer_transport_info. At most 64 per process.
# TYPE fabric_nccl_net_gdr_info gauge
fabric_nccl_net_gdr_info{device="mlx5_0",gdr="false",gpu="0000:1c:00.0",host="g212",index="0",net="IB",pid="300"} 1
`, "fabric_nccl_net_gdr_info")
}
