package collector

import (
	"context"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/procwatch"
)

// Fallback cause without a log: fabric_process_rdma_fallback_cause_info{pid,
// comm, cause}, the causes of fabric_nccl_fallback_cause_info
// (fallback_cause.go: the same names, order and label bound) that the
// process collector can see, so that a socket fallback paged from RAS and
// the kernel's evidence, with NCCL_DEBUG off, names its cause too. One
// series per selected process for which a cause applies; absent when none
// does (the alert then says "unknown"; the rules keep the cause an incident
// began with). The log-only causes (ib_no_device_found,
// libibverbs_missing) never apply here.
//
//   - no_verbs_devices_in_container: the last visibility check found none
//     of the verbs nodes of the rail devices the host has (no verdict when
//     the root could not be read or a lookup failed);
//   - nccl_ib_disable, nccl_net_socket, nccl_ib_hca_matches_no_rail: the
//     allow-listed environment at exec;
//   - socket_ifname_not_a_rail: NCCL_SOCKET_IFNAME set and selecting none
//     of the rails' netdevs (unset: NCCL picks an interface itself);
//   - rail_down: every rail of the node down or its device gone.
//
// The rails' port states are read on the poller after each refresh of the
// process table, at most every --collector.process.numa-maps-interval or
// when the rails change; a scrape computes the causes from what was read
// (no I/O).

// railCause is what the causes need of the rails; never changed once
// published.
type railCause struct {
	at      time.Time
	rails   []Rail
	sum     uint64 // railsSum(rails)
	allDown bool
}

// refreshRailCause reads whether every rail is down when the last reading
// is older than the slow interval or the rails changed.
func (c *processCollector) refreshRailCause(ctx context.Context) {
	if c.rails == nil {
		return
	}
	rails := c.rails.Current(ctx)
	sum := railsSum(rails)
	now := c.w.Now()
	if rc := c.causeRails.Load(); rc != nil && sum == rc.sum && now.Sub(rc.at) < c.slow && !now.Before(rc.at) {
		return
	}
	c.causeRails.Store(&railCause{at: now, rails: rails, sum: sum, allDown: railsAllDown(c.sysfs, rails)})
}

// causesOf returns the causes of a process from the last reads.
func causesOf(p *procwatch.Process, rc *railCause) causeMask {
	var m causeMask
	if noVerbsVisible(p.Vis) {
		m |= maskNoVerbs
	}
	var rails []Rail
	if rc != nil {
		rails = rc.rails
	}
	if p.EnvRead {
		m |= envCauses(p.Getenv, rails)
		if v, ok := p.Getenv("NCCL_SOCKET_IFNAME"); socketIfnameNoRail(v, ok, rails) {
			m |= maskIfnameNoRail
		}
	}
	if rc != nil && rc.allDown {
		m |= maskRailDown
	}
	return m
}

// noVerbsVisible reports whether the visibility check looked up verbs
// nodes and found none, every lookup answered.
func noVerbsVisible(vis []procwatch.Vis) bool {
	looked := false
	for _, v := range vis {
		if v.Node == procwatch.RDMACMNode {
			continue
		}
		if v.OK || v.Failed {
			return false
		}
		looked = true
	}
	return looked
}
