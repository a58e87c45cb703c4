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
