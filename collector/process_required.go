package collector

import (
	"strings"

	"github.com/fabric-exporter/fabric_exporter/internal/proc"
	"github.com/fabric-exporter/fabric_exporter/internal/procwatch"
)

// RDMA need: which rail devices a process needs, judged from its
// environment at exec (process_env.go), so that a container without the
// verbs devices is blamed only where the process would use them
// (fabric_process_rdma_device_required next to
// fabric_process_rdma_device_visible). A single-node job needs no rail.

// Reasons a process needs a rail device (the reason label), in the order
// they are tried.
const (
	reasonIBHCA     = "nccl_ib_hca" // NCCL_IB_HCA selects the device
	reasonNetIB     = "nccl_net_ib" // NCCL_NET=IB
	reasonMultiNode = "multi_node"  // the launcher's sizes: the job spans nodes
)

// rdmaNeed is what a process's environment says of its RDMA devices.
type rdmaNeed struct {
	off    bool // NCCL_IB_DISABLE non-zero or NCCL_NET=Socket: no RDMA at all
	hasHCA bool // NCCL_IB_HCA set and not empty
	hca    proc.IBHCA
	netIB  bool // NCCL_NET=IB
	multi  bool // proc.MultiNode
}

// needFromEnv judges the need from the allow-listed NCCL variables and the
// launcher's verdict.
func needFromEnv(vars []procwatch.EnvVar, multi bool) rdmaNeed {
	n := rdmaNeed{multi: multi}
	for _, v := range vars {
		switch v.Name {
		case "NCCL_IB_DISABLE":
			if ibDisabled(v.Value) { // the cause nccl_ib_disable (fallback_cause.go)
				n.off = true
			}
		case "NCCL_NET":
			// NCCL compares NCCL_NET with its networks' names ignoring case.
			switch {
			case netSocket(v.Value):
				n.off = true
			case strings.EqualFold(v.Value, "IB"):
				n.netIB = true
			}
		case "NCCL_IB_HCA":
			if v.Value != "" {
				n.hasHCA, n.hca = true, proc.ParseIBHCA(v.Value)
			}
		}
	}
	return n
}

// reason returns why the process needs dev, "" when it does not. When
// NCCL_IB_HCA is set, NCCL opens no device it leaves out, whatever else
// applies.
func (n rdmaNeed) reason(dev procwatch.RailDevice) string {
	if n.off {
		return ""
	}
	if n.hasHCA {
		for _, p := range dev.Ports {
			if n.hca.Selects(dev.Name, p) {
				return reasonIBHCA
			}
		}
		return ""
	}
	switch {
	case n.netIB:
		return reasonNetIB
	case n.multi:
		return reasonMultiNode
	}
	return ""
}
