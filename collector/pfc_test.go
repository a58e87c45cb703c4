package collector

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

func newTestPFC(t testing.TB, o *Options) (*pfcCollector, *exposition.Counter) {
	t.Helper()
	env, errs := testEnv()
	c, err := newPFCCollector(env, o)
	if err != nil {
		t.Fatal(err)
	}
	return c.(*pfcCollector), errs
}

func TestPFCFixture(t *testing.T) {
	c, _ := newTestPFC(t, fixtureOptions(t, fixtureSys))
	// eth3: rx_prio3_pause_duration 392493240 µs = 392.49324 s; eth0:
	// vport RDMA tx 921770677727358 (unicast) + 0 (multicast).
	compare(t, c, `
# HELP fabric_pfc_pause_duration_seconds_total Time spent paused by direction and priority (ethtool *_pause_duration in microseconds / 1e6); its rate is the paused fraction of time.
# TYPE fabric_pfc_pause_duration_seconds_total counter
fabric_pfc_pause_duration_seconds_total{direction="rx",netdev="eth0",priority="3",rail="mlx5_0"} 4.81576
fabric_pfc_pause_duration_seconds_total{direction="rx",netdev="eth3",priority="3",rail="mlx5_3"} 392.49323999999996
fabric_pfc_pause_duration_seconds_total{direction="tx",netdev="eth0",priority="3",rail="mlx5_0"} 3.52448
fabric_pfc_pause_duration_seconds_total{direction="tx",netdev="eth3",priority="3",rail="mlx5_3"} 0.28004
# HELP fabric_pfc_pause_frames_total Pause frames by direction (rx: the peer paused this NIC; tx: this NIC paused the peer) and priority (0-7, or global for 802.3x pause); per-priority series exist only while PFC is enabled on that priority.
# TYPE fabric_pfc_pause_frames_total counter
fabric_pfc_pause_frames_total{direction="rx",netdev="eth0",priority="3",rail="mlx5_0"} 120394
fabric_pfc_pause_frames_total{direction="rx",netdev="eth3",priority="3",rail="mlx5_3"} 9.812331e+06
fabric_pfc_pause_frames_total{direction="tx",netdev="eth0",priority="3",rail="mlx5_0"} 88112
fabric_pfc_pause_frames_total{direction="tx",netdev="eth3",priority="3",rail="mlx5_3"} 7001
# HELP fabric_pause_storm_events_total Pause storms the NIC detected: warning = it sent pauses for a long time, error = it stopped sending pauses (drops may have occurred).
# TYPE fabric_pause_storm_events_total counter
fabric_pause_storm_events_total{netdev="eth0",rail="mlx5_0",severity="error"} 0
fabric_pause_storm_events_total{netdev="eth0",rail="mlx5_0",severity="warning"} 0
fabric_pause_storm_events_total{netdev="eth3",rail="mlx5_3",severity="error"} 0
fabric_pause_storm_events_total{netdev="eth3",rail="mlx5_3",severity="warning"} 2
# HELP fabric_netdev_vport_rdma_bytes_total RoCE bytes the NIC counted on its vport (unicast + multicast): the NIC's own count of RDMA traffic, a cross-check for fabric_rdma_port_*_bytes_total.
# TYPE fabric_netdev_vport_rdma_bytes_total counter
fabric_netdev_vport_rdma_bytes_total{direction="rx",netdev="eth0",rail="mlx5_0"} 9.22159499729934e+14
fabric_netdev_vport_rdma_bytes_total{direction="rx",netdev="eth3",rail="mlx5_3"} 8.20514751096998e+14
fabric_netdev_vport_rdma_bytes_total{direction="tx",netdev="eth0",rail="mlx5_0"} 9.21770677727358e+14
fabric_netdev_vport_rdma_bytes_total{direction="tx",netdev="eth3",rail="mlx5_3"} 9.21770677727358e+14
# HELP fabric_pfc_priority_enabled 1 if PFC is enabled on the priority (its pause statistics exist), 0 if not; absent when the driver has no per-priority statistics.
# TYPE fabric_pfc_priority_enabled gauge
fabric_pfc_priority_enabled{netdev="eth0",priority="0",rail="mlx5_0"} 0
fabric_pfc_priority_enabled{netdev="eth0",priority="1",rail="mlx5_0"} 0
fabric_pfc_priority_enabled{netdev="eth0",priority="2",rail="mlx5_0"} 0
fabric_pfc_priority_enabled{netdev="eth0",priority="3",rail="mlx5_0"} 1
fabric_pfc_priority_enabled{netdev="eth0",priority="4",rail="mlx5_0"} 0
fabric_pfc_priority_enabled{netdev="eth0",priority="5",rail="mlx5_0"} 0
fabric_pfc_priority_enabled{netdev="eth0",priority="6",rail="mlx5_0"} 0
fabric_pfc_priority_enabled{netdev="eth0",priority="7",rail="mlx5_0"} 0
fabric_pfc_priority_enabled{netdev="eth3",priority="0",rail="mlx5_3"} 0
fabric_pfc_priority_enabled{netdev="eth3",priority="1",rail="mlx5_3"} 0
fabric_pfc_priority_enabled{netdev="eth3",priority="2",rail="mlx5_3"} 0
fabric_pfc_priority_enabled{netdev="eth3",priority="3",rail="mlx5_3"} 1
fabric_pfc_priority_enabled{netdev="eth3",priority="4",rail="mlx5_3"} 0
fabric_pfc_priority_enabled{netdev="eth3",priority="5",rail="mlx5_3"} 0
fabric_pfc_priority_enabled{netdev="eth3",priority="6",rail="mlx5_3"} 0
fabric_pfc_priority_enabled{netdev="eth3",priority="7",rail="mlx5_3"} 0
`, "fabric_pfc_pause_duration_seconds_total", "fabric_pfc_pause_frames_total", "fabric_pause_storm_events_total",
		"fabric_netdev_vport_rdma_bytes_total", "fabric_pfc_priority_enabled")
}

// fakeEthtool returns canned stats or errors per interface.
type fakeEthtool struct {
	stats map[string]map[string]uint64
	errs  map[string]error
	calls int
}

func (f *fakeEthtool) Stats(nd string) (map[string]uint64, error) {
	f.calls++
	if err := f.errs[nd]; err != nil {
		return nil, err
	}
	if s, ok := f.stats[nd]; ok {
		return s, nil
	}
	return nil, syscall.EOPNOTSUPP
}

// An ethtool error on one netdev fails that netdev only; when PFC is
// reconfigured the per-priority series follow the new stat set.
func TestPFCErrorIsolationAndReconfiguration(t *testing.T) {
	eth0, _ := sysfs.FileEthtool{Dir: "fixtures/ethtool"}.Stats("eth0")
	fake := &fakeEthtool{stats: map[string]map[string]uint64{"eth0": eth0}, errs: map[string]error{"eth3": syscall.EIO}}
	o := fixtureOptions(t, fixtureSys)
	o.PFC.Ethtool = fake
	c, errs := newTestPFC(t, o)
	compare(t, c, `
# HELP fabric_pfc_pause_transitions_total Transitions between paused and unpaused for received pause (rx_*_pause_transition).
# TYPE fabric_pfc_pause_transitions_total counter
fabric_pfc_pause_transitions_total{netdev="eth0",priority="3",rail="mlx5_0"} 60197
`, "fabric_pfc_pause_transitions_total")
	if got := errs.Value(); got != 1 {
		t.Errorf("read errors = %v, want 1", got)
	}

	// PFC moved from priority 3 to priority 5: prio3 stats disappear.
	moved := map[string]uint64{"rx_prio5_pause": 9, "rx_prio5_pause_transition": 4, "rx_prio5_bytes": 1, "rx_prio3_bytes": 1}
	fake.stats["eth0"] = moved
	compare(t, c, `
# HELP fabric_pfc_pause_transitions_total Transitions between paused and unpaused for received pause (rx_*_pause_transition).
# TYPE fabric_pfc_pause_transitions_total counter
fabric_pfc_pause_transitions_total{netdev="eth0",priority="5",rail="mlx5_0"} 4
# HELP fabric_pfc_priority_enabled 1 if PFC is enabled on the priority (its pause statistics exist), 0 if not; absent when the driver has no per-priority statistics.
# TYPE fabric_pfc_priority_enabled gauge
fabric_pfc_priority_enabled{netdev="eth0",priority="0",rail="mlx5_0"} 0
fabric_pfc_priority_enabled{netdev="eth0",priority="1",rail="mlx5_0"} 0
fabric_pfc_priority_enabled{netdev="eth0",priority="2",rail="mlx5_0"} 0
fabric_pfc_priority_enabled{netdev="eth0",priority="3",rail="mlx5_0"} 0
fabric_pfc_priority_enabled{netdev="eth0",priority="4",rail="mlx5_0"} 0
fabric_pfc_priority_enabled{netdev="eth0",priority="5",rail="mlx5_0"} 1
fabric_pfc_priority_enabled{netdev="eth0",priority="6",rail="mlx5_0"} 0
fabric_pfc_priority_enabled{netdev="eth0",priority="7",rail="mlx5_0"} 0
`, "fabric_pfc_pause_transitions_total", "fabric_pfc_priority_enabled")

	// Every rail netdev failing fails the collector.
	fake.errs["eth0"] = syscall.EIO
	err := c.Update(context.Background(), &exposition.Batch{})
	if err == nil || errors.Is(err, ErrNoData) {
		t.Errorf("Update with every netdev failing = %v, want an error", err)
	}
	// Drivers without ethtool statistics at all mean no data, not failure.
	fake.errs = nil
	fake.stats = nil
	err = c.Update(context.Background(), &exposition.Batch{})
	if !errors.Is(err, ErrNoData) {
		t.Errorf("Update with no statistics = %v, want ErrNoData", err)
	}
}

func TestMapEthtoolName(t *testing.T) {
	for name, want := range map[string]ethtoolStat{
		"rx_prio3_pause":                {kind: pfcPauseFrames, direction: "rx", priority: "3", scale: 1},
		"tx_prio7_pause_duration":       {kind: pfcPauseDuration, direction: "tx", priority: "7", scale: 1e-6},
		"rx_global_pause_transition":    {kind: pfcPauseTransitions, direction: "rx", priority: "global", scale: 1},
		"tx_global_pause":               {kind: pfcPauseFrames, direction: "tx", priority: "global", scale: 1},
		"tx_pause_storm_error_events":   {kind: pfcStorm, severity: "error", scale: 1},
		"tx_pause_storm_warning_events": {kind: pfcStorm, severity: "warning", scale: 1},
		"rx_pause_ctrl_phy":             {kind: pfcPauseCtrl, direction: "rx", scale: 1},
		"tx_discards_phy":               {kind: pfcPhyDiscards, direction: "tx", scale: 1},
		"rx_out_of_buffer":              {kind: pfcOutOfBuffer, direction: "rx", scale: 1},
		"link_down_events_phy":          {kind: pfcLinkDown, scale: 1},
		"rx_vport_rdma_multicast_bytes": {kind: pfcVportRDMA, direction: "rx", scale: 1},
		"tx_prio0_bytes":                {kind: pfcPrioBytes, direction: "tx", priority: "0", scale: 1},
		"rx_corrected_bits_phy":         {kind: pfcPhyCorrectedBits, direction: "rx", scale: 1},
		"rx_pcs_symbol_err_phy":         {kind: pfcPhySymbolErrors, direction: "rx", scale: 1},
		"rx_err_lane_2_phy":             {kind: pfcPhyRawErrors, direction: "rx", lane: "2", scale: 1},
		"rx_err_lane_8_phy":             {},
		"rx_err_lane_10_phy":            {},
		"rx_err_lane_1":                 {},
		"rx_prio8_pause":                {},
		"rx_prio3_packets":              {},
		"rx_prio33_pause":               {},
		"rx_global_bytes":               {},
		"port.rx_dropped":               {},
		"duplicate metric":              {},
		"rx_vport_rdma_unicast_packets": {},
		"":                              {},
	} {
		if got := mapEthtoolName(name); got != want {
			t.Errorf("mapEthtoolName(%q) = %+v, want %+v", name, got, want)
		}
	}
}

func TestParseEthtoolStats(t *testing.T) {
	// Shapes from real `ethtool -S` dumps: node_exporter's e1000e fixture
	// (dotted and spaced keys, a duplicate) and mlx5 per-priority lines.
	in := "NIC statistics:\n     tx_packets: 961500\n     port.rx_dropped: 12028\n     duplicate metric: 1\n     duplicate_metric: 2\n" +
		"     rx_prio0_bytes: 88034564921216\n     garbage line\n     bad: -1\n"
	got, err := sysfs.ParseEthtoolStats([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"tx_packets": 961500, "port.rx_dropped": 12028, "duplicate metric": 1, "duplicate_metric": 2, "rx_prio0_bytes": 88034564921216}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ParseEthtoolStats = %v, want %v", got, want)
	}
}

// FuzzMapEthtoolName: no panic, and whatever maps carries valid labels.
func FuzzMapEthtoolName(f *testing.F) {
	for _, s := range []string{"rx_prio3_pause", "tx_prio3_pause_duration", "rx_prio3_pause_transition", "rx_global_pause",
		"tx_pause_storm_warning_events", "rx_pause_ctrl_phy", "rx_discards_phy", "rx_out_of_buffer", "link_down_events_phy",
		"tx_vport_rdma_unicast_bytes", "rx_prio0_bytes", "port.rx_dropped", "duplicate metric", "rx_csum_complete", "rx_prio"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		s := mapEthtoolName(name)
		if s.kind == pfcNone {
			return
		}
		if s.direction != "" && s.direction != "rx" && s.direction != "tx" {
			t.Fatalf("%q: direction %q", name, s.direction)
		}
		if s.priority != "" && s.priority != "global" && (len(s.priority) != 1 || s.priority[0] < '0' || s.priority[0] > '7') {
			t.Fatalf("%q: priority %q", name, s.priority)
		}
		if s.scale <= 0 {
			t.Fatalf("%q: scale %v", name, s.scale)
		}
	})
}
