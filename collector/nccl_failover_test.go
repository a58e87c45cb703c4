package collector

import "testing"

// NCCL's port failover lines (as p2p_resiliency.cc writes them) for a rank
// on a merged device of mlx5_0 and mlx5_3, and an async fatal event on
// mlx5_3: counted per index (named mlx5_3: one merged device) and per
// device port. A process with one merged device per NIC pair of two has
// its index unnamed.
func TestNCCLFailoverSeries(t *testing.T) {
	const r = "node7:4242:4302 [0] NCCL "
	const q = "node7:5151:5151 [0] NCCL "
	c := scanText(t, r+"INFO NET/IB : Using [0]={[0] mlx5_0:1/RoCE, [1] mlx5_3:1/RoCE} ; OOB eth0:10.0.0.11<0>\n"+
		r+"WARN NET/IB : mlx5_3:1 async fatal event: port error\n"+
		r+"WARN NET/IB: Device 1 marked as failed. Initiating recovery? Yes (send comm=0x7f3a10001230, outstandingRecovery=0)\n"+
		r+"WARN NET/IB: Device 1 marked as failed. Initiating recovery? Yes (recv comm=0x7f3a10004560, outstandingRecovery=0)\n"+
		r+"INFO NET/IB: ncclIbResiliencyProgress: Device 1 has been recovered for resiliency context (send comm=0x7f3a10001230, outstandingRecovery=0)\n"+
		q+"INFO NET/IB : Using [0]={[0] mlx5_0:1/RoCE, [1] mlx5_1:1/RoCE} [1]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE} ; OOB eth0:10.0.0.11<0>\n"+
		q+"WARN NET/IB: Device 0 marked as failed. Initiating recovery? No (send comm=0x1, outstandingRecovery=0)\n")
	compare(t, c, `
# HELP fabric_nccl_ib_async_fatal_events_total NCCL's WARN "NET/IB : <device>:<port> async fatal event…" lines in the process's log (the verbs async event of a port, CQ, QP or SRQ that NCCL treats as fatal). At most 16 device ports per process.
# TYPE fabric_nccl_ib_async_fatal_events_total counter
fabric_nccl_ib_async_fatal_events_total{device="mlx5_3",host="node7",pid="4242",port="1"} 1
# HELP fabric_nccl_ib_port_failover_events_total NCCL's IB port failover events in the process's log (NCCL 2.29.7+ with NCCL_IB_RESILIENCY_PORT_FAILOVER=1; recovery 2.30.3+ with NCCL_IB_RESILIENCY_PORT_RECOVERY=1): event="failed" for WARN "NET/IB: Device N marked as failed" (one per communicator side: its traffic moved to the other ports of the same NCCL device), "recovered" for "Device N has been recovered", "given_up" for "will not be attempted to be recovered any more" and "Marking device N as permanently failed". index is N, the position among the physical devices of the merged NCCL device; device is that physical device when the process's device list has exactly one merged device, else "". At most 16 indices per process.
# TYPE fabric_nccl_ib_port_failover_events_total counter
fabric_nccl_ib_port_failover_events_total{device="",event="failed",host="node7",index="0",pid="5151"} 1
fabric_nccl_ib_port_failover_events_total{device="",event="given_up",host="node7",index="0",pid="5151"} 0
fabric_nccl_ib_port_failover_events_total{device="",event="recovered",host="node7",index="0",pid="5151"} 0
fabric_nccl_ib_port_failover_events_total{device="mlx5_3",event="failed",host="node7",index="1",pid="4242"} 2
fabric_nccl_ib_port_failover_events_total{device="mlx5_3",event="given_up",host="node7",index="1",pid="4242"} 0
fabric_nccl_ib_port_failover_events_total{device="mlx5_3",event="recovered",host="node7",index="1",pid="4242"} 1
`, "fabric_nccl_ib_port_failover_events_total", "fabric_nccl_ib_async_fatal_events_total")
}
