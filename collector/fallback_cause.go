package collector

import (
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fabric-exporter/fabric_exporter/internal/proc"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// The causes of a socket fallback, shared by the nccl collector
// (fabric_nccl_fallback_cause_info, nccl_cause.go: the log and /proc) and
// the process collector (fabric_process_rdma_fallback_cause_info,
// process_cause.go: /proc alone, for pages without a log): the names,
// their order, the label bound and the predicates that need no log.

// The causes, in the order they are listed.
const (
	causeNoVerbs      = "no_verbs_devices_in_container" // the process's root has no uverbs node of a rail device
	causeIBDisable    = "nccl_ib_disable"               // NCCL_IB_DISABLE non-zero
	causeNetSocket    = "nccl_net_socket"               // NCCL_NET=Socket
	causeHCANoRail    = "nccl_ib_hca_matches_no_rail"   // NCCL_IB_HCA selects no rail device
	causeIBNoDevice   = "ib_no_device_found"            // "NET/IB : No device found." (log only)
	causeVerbsLib     = "libibverbs_missing"            // "Failed to open libibverbs.so[.1]" (log only)
	causeIfnameNoRail = "socket_ifname_not_a_rail"      // the socket interfaces include no rail netdev
	causeRailDown     = "rail_down"                     // every rail down or gone
	causeUnknown      = "unknown"
)

// causeNames are the causes in their order; a causeMask has bit i for
// causeNames[i].
var causeNames = [...]string{causeNoVerbs, causeIBDisable, causeNetSocket, causeHCANoRail,
	causeIBNoDevice, causeVerbsLib, causeIfnameNoRail, causeRailDown}

type causeMask uint16

const (
	maskNoVerbs causeMask = 1 << iota
	maskIBDisable
	maskNetSocket
	maskHCANoRail
	maskIBNoDevice
	maskVerbsLib
	maskIfnameNoRail
	maskRailDown
)

// envCauses returns the causes an NCCL environment gives (get returns a
// variable and whether it is set): nccl_ib_disable, nccl_net_socket and
// nccl_ib_hca_matches_no_rail against the node's rails.
func envCauses(get func(name string) (string, bool), rails []Rail) causeMask {
	var m causeMask
	if v, ok := get("NCCL_IB_DISABLE"); ok && ibDisabled(v) {
		m |= maskIBDisable
	}
	if v, ok := get("NCCL_NET"); ok && netSocket(v) {
		m |= maskNetSocket
	}
	if v, ok := get("NCCL_IB_HCA"); ok && hcaNoRail(v, rails) {
		m |= maskHCANoRail
	}
	return m
}

// ibDisabled reports whether an NCCL_IB_DISABLE value is non-zero (NCCL's
// integer parameters: strtoll base 0; a value that is not a number is the
// default, 0).
func ibDisabled(v string) bool {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 0, 64)
	return err == nil && n != 0
}

// netSocket reports whether an NCCL_NET value names the Socket network
// (NCCL compares it with its networks' names ignoring case).
func netSocket(v string) bool { return strings.EqualFold(v, "Socket") }

// hcaNoRail reports whether the node has rails and an NCCL_IB_HCA value
// selects none of their ports.
func hcaNoRail(v string, rails []Rail) bool {
	if len(rails) == 0 {
		return false
	}
	hca := proc.ParseIBHCA(v)
	for _, r := range rails {
		port, _ := strconv.Atoi(r.Port)
		if hca.Selects(r.Device, port) {
			return false
		}
	}
	return true
}

// socketIfnameNoRail reports whether an NCCL_SOCKET_IFNAME (set says
// whether it is) makes NCCL choose among interfaces and the node has rails
// with netdevs, none of which it selects. Unset, NCCL picks an interface
// itself: no verdict.
func socketIfnameNoRail(v string, set bool, rails []Rail) bool {
	h, ok := proc.ParseSocketIfname(v, set)
	if !ok {
		return false
	}
	has := false
	for _, r := range rails {
		if r.Netdev == "" {
			continue
		}
		has = true
		if h.SelectsInterface(r.Netdev) {
			return false
		}
	}
	return has
}

// railsAllDown reports whether the node has rails and every one is down
// (port state not ACTIVE) or its device gone; it reads the ports' state
// under the sysfs root until one is up.
func railsAllDown(sysfsRoot string, rails []Rail) bool {
	for _, r := range rails {
		if r.Present && strings.HasSuffix(sysfs.ReadSmall(sysfsRoot,
			filepath.Join(sysfsRoot, "class", "infiniband", r.Device, "ports", r.Port, "state")), "ACTIVE") {
			return false
		}
	}
	return len(rails) > 0
}

// railsSum is an FNV-1a of the rails' devices, ports and netdevs: what the
// causes depend on of the rails, compared between scrapes.
func railsSum(rails []Rail) uint64 {
	sum := uint64(14695981039346656037)
	for _, r := range rails {
		for _, v := range [...]string{r.Device, r.Port, r.Netdev} {
			for i := 0; i < len(v); i++ {
				sum = (sum ^ uint64(v[i])) * 1099511628211
			}
			sum = (sum ^ 0xff) * 1099511628211
		}
	}
	return sum
}

// joinCauses joins the causes of m with commas, in their order, leaving
// out from the end (the least specific) those that do not fit in a label
// value of maxCauseLabel bytes; "unknown" when m is empty.
func joinCauses(m causeMask) string {
	var b []byte
	for i, c := range causeNames {
		if m&(1<<i) == 0 {
			continue
		}
		if len(b) > 0 {
			if len(b)+1+len(c) > maxCauseLabel {
				break
			}
			b = append(b, ',')
		}
		b = append(b, c...)
	}
	if len(b) == 0 {
		return causeUnknown
	}
	return string(b)
}

const maxCauseLabel = 128
