package collector

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// pfcKind is the metric an mlx5 ethtool statistic maps to.
type pfcKind int

const (
	pfcNone             pfcKind = iota
	pfcPauseFrames              // {rx,tx}_{prioN,global}_pause
	pfcPauseDuration            // {rx,tx}_{prioN,global}_pause_duration (µs)
	pfcPauseTransitions         // rx_{prioN,global}_pause_transition
	pfcStorm                    // tx_pause_storm_{warning,error}_events
	pfcPauseCtrl                // {rx,tx}_pause_ctrl_phy
	pfcPhyDiscards              // {rx,tx}_discards_phy
	pfcOutOfBuffer              // rx_out_of_buffer
	pfcLinkDown                 // link_down_events_phy
	pfcVportRDMA                // {rx,tx}_vport_rdma_{unicast,multicast}_bytes
	pfcPrioBytes                // {rx,tx}_prioN_bytes: the driver exposes per-priority stats
	pfcPhyCorrectedBits         // rx_corrected_bits_phy
	pfcPhyRawErrors             // rx_err_lane_N_phy
	pfcPhySymbolErrors          // rx_pcs_symbol_err_phy
)

// ethtoolStat is what one ethtool statistic name means.
type ethtoolStat struct {
	kind      pfcKind
	direction string // rx|tx
	priority  string // 0-7 or global
	severity  string // warning|error
	lane      string // 0-7 for rx_err_lane_N_phy
	scale     float64
}

// mapEthtoolName maps an mlx5 `ethtool -S` name to a typed metric. Names
// outside the allow-list give kind pfcNone.
func mapEthtoolName(name string) ethtoolStat {
	switch name {
	case "tx_pause_storm_warning_events":
		return ethtoolStat{kind: pfcStorm, severity: "warning", scale: 1}
	case "tx_pause_storm_error_events":
		return ethtoolStat{kind: pfcStorm, severity: "error", scale: 1}
	case "rx_out_of_buffer":
		return ethtoolStat{kind: pfcOutOfBuffer, direction: "rx", scale: 1}
	case "link_down_events_phy":
		return ethtoolStat{kind: pfcLinkDown, scale: 1}
	case "rx_corrected_bits_phy":
		return ethtoolStat{kind: pfcPhyCorrectedBits, direction: "rx", scale: 1}
	case "rx_pcs_symbol_err_phy":
		return ethtoolStat{kind: pfcPhySymbolErrors, direction: "rx", scale: 1}
	}
	if l, ok := strings.CutPrefix(name, "rx_err_lane_"); ok && len(l) == len("N_phy") && l[0] >= '0' && l[0] <= '7' && l[1:] == "_phy" {
		return ethtoolStat{kind: pfcPhyRawErrors, direction: "rx", lane: l[:1], scale: 1}
	}
	dir, rest, ok := strings.Cut(name, "_")
	if !ok || (dir != "rx" && dir != "tx") {
		return ethtoolStat{}
	}
	switch rest {
	case "pause_ctrl_phy":
		return ethtoolStat{kind: pfcPauseCtrl, direction: dir, scale: 1}
	case "discards_phy":
		return ethtoolStat{kind: pfcPhyDiscards, direction: dir, scale: 1}
	case "vport_rdma_unicast_bytes", "vport_rdma_multicast_bytes":
		return ethtoolStat{kind: pfcVportRDMA, direction: dir, scale: 1}
	}
	// {prioN,global}_pause[_duration|_transition], prioN_bytes
	var prio string
	switch {
	case strings.HasPrefix(rest, "global_"):
		prio, rest = "global", rest[len("global_"):]
	case strings.HasPrefix(rest, "prio") && len(rest) > 5 && rest[4] >= '0' && rest[4] <= '7' && rest[5] == '_':
		prio, rest = rest[4:5], rest[6:]
	default:
		return ethtoolStat{}
	}
	switch rest {
	case "pause":
		return ethtoolStat{kind: pfcPauseFrames, direction: dir, priority: prio, scale: 1}
	case "pause_duration":
		return ethtoolStat{kind: pfcPauseDuration, direction: dir, priority: prio, scale: 1e-6}
	case "pause_transition":
		return ethtoolStat{kind: pfcPauseTransitions, direction: dir, priority: prio, scale: 1}
	case "bytes":
		if prio != "global" {
			return ethtoolStat{kind: pfcPrioBytes, direction: dir, priority: prio, scale: 1}
		}
	}
	return ethtoolStat{}
}

type pfcCollector struct {
	env     Env
	opts    *Options
	ethtool sysfs.EthtoolSource

	pauseFrames, pauseDuration, pauseTransitions, storms, pauseCtrl,
	phyDiscards, outOfBuffer, linkDown, vportRDMA, prioEnabled *exposition.Family
	phyCorrectedBits, phyRawErrors, phySymbolErrors *exposition.Family
}

// PFCOptions configures the pfc collector.
type PFCOptions struct {
	// EthtoolFixtures, when set, is a directory of `ethtool -S` dumps
	// (DIR/<netdev>) read instead of the ioctl.
	EthtoolFixtures string
	// Ethtool overrides the statistics source (tests).
	Ethtool sysfs.EthtoolSource
}

func pfcFlags(app *kingpin.Application, o *Options) {
	app.Flag("collector.pfc.ethtool-fixtures", "Read `ethtool -S` output from DIR/<netdev> files instead of the ethtool ioctl (demos and tests).").PlaceHolder("DIR").Hidden().StringVar(&o.PFC.EthtoolFixtures)
}

func newPFCCollector(env Env, o *Options) (Collector, error) {
	src := o.PFC.Ethtool
	switch {
	case src != nil:
	case o.PFC.EthtoolFixtures != "":
		src = sysfs.FileEthtool{Dir: o.PFC.EthtoolFixtures}
	default:
		src = sysfs.NewIoctlEthtool()
	}
	nd := func(name, help string, labels ...string) *exposition.Family {
		typ := prometheus.CounterValue
		if name == "fabric_pfc_priority_enabled" {
			typ = prometheus.GaugeValue
		}
		return env.Families.NewFamily(name, help, typ, append(append([]string{"netdev"}, labels...), "rail")...)
	}
	return &pfcCollector{
		env: env, opts: o, ethtool: src,
		pauseFrames:      nd("fabric_pfc_pause_frames_total", "Pause frames by direction (rx: the peer paused this NIC; tx: this NIC paused the peer) and priority (0-7, or global for 802.3x pause); per-priority series exist only while PFC is enabled on that priority.", "direction", "priority"),
		pauseDuration:    nd("fabric_pfc_pause_duration_seconds_total", "Time spent paused by direction and priority (ethtool *_pause_duration in microseconds / 1e6); its rate is the paused fraction of time.", "direction", "priority"),
		pauseTransitions: nd("fabric_pfc_pause_transitions_total", "Transitions between paused and unpaused for received pause (rx_*_pause_transition).", "priority"),
		storms:           nd("fabric_pause_storm_events_total", "Pause storms the NIC detected: warning = it sent pauses for a long time, error = it stopped sending pauses (drops may have occurred).", "severity"),
		pauseCtrl:        nd("fabric_pause_control_frames_total", "MAC pause control frames on the physical port (*_pause_ctrl_phy).", "direction"),
		phyDiscards:      nd("fabric_netdev_phy_discards_total", "Packets discarded on the physical port for lack of buffers (*_discards_phy).", "direction"),
		outOfBuffer:      nd("fabric_netdev_rx_out_of_buffer_total", "Packets dropped because a receive queue of the Ethernet netdev had no buffer (rx_out_of_buffer; 32 bits wide)."),
		linkDown:         nd("fabric_netdev_link_down_events_total", "Times the physical link went down (link_down_events_phy; may mean flapping)."),
		vportRDMA:        nd("fabric_netdev_vport_rdma_bytes_total", "RoCE bytes the NIC counted on its vport (unicast + multicast): the NIC's own count of RDMA traffic, a cross-check for fabric_rdma_port_*_bytes_total.", "direction"),
		phyCorrectedBits: nd("fabric_netdev_phy_corrected_bit_errors_total", "Bits the active FEC corrected on the physical port (mlx5 rx_corrected_bits_phy). Its rate over the line rate is the pre-FEC bit error ratio."),
		phyRawErrors:     nd("fabric_netdev_phy_raw_errors_total", "Raw physical errors per lane before FEC correction (mlx5 rx_err_lane_N_phy; lane numbered from 0 as the driver names it).", "lane"),
		phySymbolErrors:  nd("fabric_netdev_phy_symbol_errors_total", "PCS symbol errors FEC did not correct, or all symbol errors when FEC is off (mlx5 rx_pcs_symbol_err_phy)."),
		prioEnabled:      nd("fabric_pfc_priority_enabled", "1 if PFC is enabled on the priority (its pause statistics exist), 0 if not; absent when the driver has no per-priority statistics.", "priority"),
	}, nil
}

func (c *pfcCollector) Update(ctx context.Context, b *exposition.Batch) error {
	if c.opts.Rails == nil {
		return noHardware("no rails")
	}
	seen := map[string]bool{}
	var netdevs []string
	rails := c.opts.Rails.Current(ctx)
	for _, r := range rails {
		if r.Present && r.Netdev != "" && !seen[r.Netdev] {
			seen[r.Netdev] = true
			netdevs = append(netdevs, r.Netdev)
		}
	}
	if len(netdevs) == 0 {
		if err := sysfsRootError(c.opts.SysfsPath); err != nil {
			return err
		}
		if len(rails) > 0 {
			return noHardware("no rail netdev: none of the rails (%s) has a present port with a netdev (an InfiniBand port, a device that is gone, or a --rail that names none)", railNames(rails))
		}
		return noHardware("no rail netdev (no Ethernet RDMA port with a netdev, and no --rail)")
	}
	sort.Strings(netdevs)
	var errs []error
	for _, nd := range netdevs {
		stats, err := c.ethtool.Stats(nd)
		if err != nil {
			c.env.ReadErrors.Inc()
			c.env.Once.Warn("ethtool:"+nd, "msg", "cannot read ethtool statistics", "netdev", nd, "err", err)
			errs = append(errs, fmt.Errorf("%s: %w", nd, err))
			continue
		}
		c.env.Once.Clear("ethtool:" + nd)
		c.emit(nd, railOfNetdev(rails, nd), stats, b)
	}
	if len(errs) == len(netdevs) {
		err := errors.Join(errs...)
		if allUnsupported(errs) {
			return noHardware("ethtool statistics not supported: %v", err)
		}
		return err
	}
	return nil
}

func allUnsupported(errs []error) bool {
	for _, e := range errs {
		if !errors.Is(e, syscall.EOPNOTSUPP) {
			return false
		}
	}
	return true
}

// emit turns one interface's statistics into metrics.
// rail is the rail label of the interface.
func (c *pfcCollector) emit(nd, rail string, stats map[string]uint64, b *exposition.Batch) {
	var vport [2]float64 // rx, tx
	var vportSeen [2]bool
	var prioStats, pfcOn [8]bool
	names := make([]string, 0, 32)
	for name := range stats {
		if mapEthtoolName(name).kind != pfcNone {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		s := mapEthtoolName(name)
		v := float64(stats[name]) * s.scale
		switch s.kind {
		case pfcPauseFrames:
			b.AddWith(c.pauseFrames, v, nd, s.direction, s.priority, rail)
			if s.priority != "global" {
				p, _ := strconv.Atoi(s.priority)
				pfcOn[p] = true
			}
		case pfcPauseDuration:
			b.AddWith(c.pauseDuration, v, nd, s.direction, s.priority, rail)
		case pfcPauseTransitions:
			b.AddWith(c.pauseTransitions, v, nd, s.priority, rail)
		case pfcStorm:
			b.AddWith(c.storms, v, nd, s.severity, rail)
		case pfcPauseCtrl:
			b.AddWith(c.pauseCtrl, v, nd, s.direction, rail)
		case pfcPhyDiscards:
			b.AddWith(c.phyDiscards, v, nd, s.direction, rail)
		case pfcOutOfBuffer:
			b.AddWith(c.outOfBuffer, v, nd, rail)
		case pfcLinkDown:
			b.AddWith(c.linkDown, v, nd, rail)
		case pfcVportRDMA:
			i := 0
			if s.direction == "tx" {
				i = 1
			}
			vport[i] += v
			vportSeen[i] = true
		case pfcPrioBytes:
			p, _ := strconv.Atoi(s.priority)
			prioStats[p] = true
		case pfcPhyCorrectedBits:
			b.AddWith(c.phyCorrectedBits, v, nd, rail)
		case pfcPhyRawErrors:
			b.AddWith(c.phyRawErrors, v, nd, s.lane, rail)
		case pfcPhySymbolErrors:
			b.AddWith(c.phySymbolErrors, v, nd, rail)
		}
	}
	for i, dir := range []string{"rx", "tx"} {
		if vportSeen[i] {
			b.AddWith(c.vportRDMA, vport[i], nd, dir, rail)
		}
	}
	perPrio := false
	for _, b := range prioStats {
		perPrio = perPrio || b
	}
	if perPrio {
		for p := range 8 {
			b.AddWith(c.prioEnabled, b2f(pfcOn[p]), nd, strconv.Itoa(p), rail)
		}
	}
}

// railNames lists rails by name for a message.
func railNames(rails []Rail) string {
	var out []string
	for _, r := range rails {
		out = append(out, r.Name)
	}
	return strings.Join(out, ", ")
}
