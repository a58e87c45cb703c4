package collector

import (
	"context"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
)

// Fallback cause without a log: fabric_process_rdma_fallback_cause_info{pid,
// comm, cause}, the causes of fabric_nccl_fallback_cause_info
// (fallback_cause.go: the same names, order and label bound) that the
// process collector can see, so that a socket fallback paged from RAS and
// the kernel's evidence, with NCCL_DEBUG off, names its cause too. One
// series per selected process for which a cause applies; absent when none
// does (the alert then says "unknown"). The log-only causes
// (ib_no_device_found, libibverbs_missing) never apply here.
//
//   - no_verbs_devices_in_container: the visibility check
//     (process_devices.go) found none of the verbs nodes of the rail
//     devices the host has (no verdict when the root could not be read or
//     a lookup failed);
//   - nccl_ib_disable, nccl_net_socket, nccl_ib_hca_matches_no_rail: the
//     allow-listed environment at exec (process_env.go);
//   - socket_ifname_not_a_rail: NCCL_SOCKET_IFNAME set and selecting none
//     of the rails' netdevs (unset: NCCL picks an interface itself);
//   - rail_down: every rail of the node down or its device gone.
//
// Computed with the visibility check, at most every
// --collector.process.numa-maps-interval per process, and when the rails
// change; the rails' port states are read at most as often. A scrape adds
// the last result.

// railCause is what the causes need of the rails, kept between scrapes.
type railCause struct {
	at      time.Time // when allDown was read; zero: never
	rails   []Rail
	sum     uint64 // railsSum(rails)
	allDown bool
}

// procCause is the last cause of one process.
type procCause struct {
	at      time.Time // computed at; zero: never
	railsAt time.Time // the railCause it was computed with
	env     bool      // whether the environment had been read
	mask    causeMask
	s       *exposition.Series // nil when mask is 0
}

// refreshRailCause takes the rails of this scrape and reads whether every
// one is down when the last reading is older than the interval or the
// rails changed.
func (c *processCollector) refreshRailCause(ctx context.Context, now time.Time) {
	if c.rails == nil {
		return
	}
	rails := c.rails.Current(ctx)
	sum := railsSum(rails)
	rc := &c.railCause
	if rc.at.IsZero() || sum != rc.sum || now.Sub(rc.at) >= c.interval || now.Before(rc.at) {
		*rc = railCause{at: now, rails: rails, sum: sum, allDown: railsAllDown(c.sysfs, rails)}
	}
}

// fallbackCause recomputes a process's causes when due: the visibility was
// checked in this scrape (visChecked), the interval passed, the rails were
// re-read or the environment was read since. No I/O.
func (c *processCollector) fallbackCause(st *procState, now time.Time, visChecked bool) {
	pc := &st.cause
	if !visChecked && !pc.at.IsZero() && now.Sub(pc.at) < c.interval && !now.Before(pc.at) &&
		pc.railsAt.Equal(c.railCause.at) && pc.env == st.envDone {
		return
	}
	m := c.causesOf(st)
	if m != pc.mask || (m != 0) != (pc.s != nil) {
		pc.s = nil
		if m != 0 {
			pc.s = c.causeFam.With(st.pidS, st.comm, joinCauses(m))
		}
	}
	pc.at, pc.railsAt, pc.env, pc.mask = now, c.railCause.at, st.envDone, m
}

// causesOf returns the causes of a process from what the collector holds.
func (c *processCollector) causesOf(st *procState) causeMask {
	var m causeMask
	if noVerbsVisible(st.vis) {
		m |= maskNoVerbs
	}
	rails := c.railCause.rails
	if st.envDone {
		get := func(name string) (string, bool) {
			for _, e := range st.envVars {
				if e.name == name {
					return e.value, true
				}
			}
			return "", false
		}
		m |= envCauses(get, rails)
		if v, ok := get("NCCL_SOCKET_IFNAME"); socketIfnameNoRail(v, ok, rails) {
			m |= maskIfnameNoRail
		}
	}
	if c.railCause.allDown {
		m |= maskRailDown
	}
	return m
}

// noVerbsVisible reports whether the visibility check looked up verbs
// nodes and found none, every lookup answered.
func noVerbsVisible(vis []procVis) bool {
	looked := false
	for _, v := range vis {
		if v.node == rdmaCMNode {
			continue
		}
		if v.ok || v.failed {
			return false
		}
		looked = true
	}
	return looked
}

// bindCause rebinds a process's cause series to its pid and comm.
func (c *processCollector) bindCause(st *procState) {
	if st.cause.s != nil {
		st.cause.s = c.causeFam.With(st.pidS, st.comm, joinCauses(st.cause.mask))
	}
}
