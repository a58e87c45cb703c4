package collector

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaultRails(t *testing.T) {
	rs, err := NewRails(fixtureSys, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := rs.Current(context.Background())
	want := []Rail{
		{Name: "mlx5_0", Device: "mlx5_0", Port: "1", Netdev: "eth0", Present: true},
		{Name: "mlx5_3", Device: "mlx5_3", Port: "1", Netdev: "eth3", Present: true}, // ndevs/0 empty: device/net fallback
	}
	if len(got) != len(want) {
		t.Fatalf("rails = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("rail %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestStaticRails(t *testing.T) {
	sys := copyTree(t, fixtureSys)
	cfg := []RailConfig{{"rail0", "mlx5_0", 1}, {"rail1", "mlx5_3", 1}}
	rs, err := NewRails(sys, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := rs.Current(context.Background()); len(got) != 2 || got[1].Netdev != "eth3" || got[0].Name != "rail0" {
		t.Fatalf("rails = %+v", got)
	}
	// A rail whose device disappears later is reported, not fatal.
	if err := os.Remove(filepath.Join(sys, "class", "infiniband", "mlx5_3")); err != nil {
		t.Fatal(err)
	}
	got := rs.Current(context.Background())
	if got[1].Present || got[1].Netdev != "eth3" || !got[0].Present {
		t.Errorf("after removal rails = %+v, want rail1 not present with its last netdev eth3", got)
	}
}

func TestStaticRailErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  []RailConfig
		want string
	}{
		{[]RailConfig{{"a", "mlx5_0", 1}, {"a", "mlx5_3", 1}}, `rail "a" is given twice`},
		{[]RailConfig{{"a", "mlx5_0", 1}, {"b", "mlx5_0", 1}}, `rails "a" and "b" name the same RDMA port mlx5_0:1: give each port one rail name`},
	} {
		_, err := NewRails(fixtureSys, tc.cfg)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("NewRails(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// A --rail whose HCA or port is missing at start-up does not stop the
// exporter: the rail is reported as not present (RailLinkDown pages) and
// the start-up warning says what was looked for; when the device appears,
// the rail is present without a restart.
func TestStaticRailMissingAtStartup(t *testing.T) {
	for _, tc := range []struct {
		cfg  []RailConfig
		want string
	}{
		{[]RailConfig{{"rail0", "mlx5_9", 1}}, `rail "rail0": RDMA device "mlx5_9" not found in fixtures/sys/class/infiniband (found: i40iw0, mlx4_0, mlx5_0, mlx5_3)`},
		{[]RailConfig{{"rail0", "mlx5_0", 2}}, `rail "rail0": RDMA device "mlx5_0" has no port 2`},
	} {
		rs, err := NewRails(fixtureSys, tc.cfg)
		if err != nil {
			t.Fatalf("NewRails(%+v) = %v, want no error", tc.cfg, err)
		}
		if w := rs.StartupWarnings(); len(w) != 1 || !strings.HasPrefix(w[0], tc.want) {
			t.Errorf("NewRails(%+v) warnings = %q, want %q", tc.cfg, w, tc.want)
		}
		if got := rs.Current(context.Background()); len(got) != 1 || got[0].Present || got[0].Name != "rail0" {
			t.Errorf("NewRails(%+v) rails = %+v, want rail0 not present", tc.cfg, got)
		}
	}
	rs, err := NewRails(t.TempDir(), []RailConfig{{"rail0", "mlx5_0", 1}})
	if err != nil || len(rs.StartupWarnings()) != 1 || !strings.Contains(rs.StartupWarnings()[0], "(found: none)") {
		t.Errorf("NewRails on a host without RDMA = %v, %q", err, rs.StartupWarnings())
	}

	// The device appears later: present, with its netdev.
	sys := copyTree(t, fixtureSys)
	link := filepath.Join(sys, "class", "infiniband", "mlx5_3")
	target, err := os.Readlink(link)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(link)
	rs, err = NewRails(sys, []RailConfig{{"rail0", "mlx5_0", 1}, {"rail1", "mlx5_3", 1}})
	if err != nil {
		t.Fatal(err)
	}
	if got := rs.Current(context.Background()); len(got) != 2 || got[1].Present || !got[0].Present {
		t.Fatalf("rails before the device appears = %+v", got)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if got := rs.Current(context.Background()); len(got) != 2 || !got[1].Present || got[1].Netdev != "eth3" {
		t.Errorf("rails after the device appears = %+v, want rail1 present on eth3", got)
	}
}

// Default rails: an Ethernet port becomes a rail when it first comes up
// (state ACTIVE or physical state LinkUp). The uncabled ports of a dual-port
// HCA, DOWN from boot, are no rails; a rail that goes down stays one; a
// port that comes up later becomes one.
func TestDefaultRailsOnlyPortsThatCameUp(t *testing.T) {
	sys := copyTree(t, fixtureSys)
	port := filepath.Join(sys, "class", "infiniband", "mlx5_3", "ports", "1")
	write := func(name, v string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(port, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	names := func(rs []Rail) (out []string) {
		for _, r := range rs {
			out = append(out, r.Name)
		}
		return out
	}
	// mlx5_3 port 1 is uncabled from boot: DOWN, Polling (no signal).
	write("state", "1: DOWN")
	write("phys_state", "2: Polling")
	rs, err := NewRails(sys, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(rs.Current(context.Background())); strings.Join(got, ",") != "mlx5_0" {
		t.Fatalf("rails with mlx5_3 never up = %v, want [mlx5_0]", got)
	}
	// Disabled as well.
	write("phys_state", "3: Disabled")
	if got := names(rs.Current(context.Background())); strings.Join(got, ",") != "mlx5_0" {
		t.Fatalf("rails with mlx5_3 disabled = %v, want [mlx5_0]", got)
	}
	// The physical link comes up (the logical state follows a moment later).
	write("phys_state", "5: LinkUp")
	if got := names(rs.Current(context.Background())); strings.Join(got, ",") != "mlx5_0,mlx5_3" {
		t.Fatalf("rails after mlx5_3 came up = %v", got)
	}
	// It goes down again: still a rail (RailLinkDown's business).
	write("state", "1: DOWN")
	write("phys_state", "3: Disabled")
	got := rs.Current(context.Background())
	if strings.Join(names(got), ",") != "mlx5_0,mlx5_3" || !got[1].Present || got[1].Netdev != "eth3" {
		t.Fatalf("rails after mlx5_3 went down = %+v, want it kept, present, on eth3", got)
	}
	// A port up from the start is a rail at once (state ACTIVE alone).
	write("state", "4: ACTIVE")
	write("phys_state", "")
	rs2, _ := NewRails(sys, nil)
	if got := names(rs2.Current(context.Background())); strings.Join(got, ",") != "mlx5_0,mlx5_3" {
		t.Errorf("rails of a fresh resolver with mlx5_3 ACTIVE = %v", got)
	}
}

// Resolution is shared by the collectors of one scrape.
func TestRailsMemoizedPerScrape(t *testing.T) {
	sys := copyTree(t, fixtureSys)
	rs, err := NewRails(sys, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.WithValue(context.Background(), scrapeIDKey{}, uint64(7))
	if n := len(rs.Current(ctx)); n != 2 {
		t.Fatalf("rails = %d", n)
	}
	os.Remove(filepath.Join(sys, "class", "infiniband", "mlx5_3"))
	if n := len(rs.Current(ctx)); n != 2 {
		t.Errorf("same scrape re-resolved: %d rails", n)
	}
	ctx = context.WithValue(context.Background(), scrapeIDKey{}, uint64(8))
	if got := rs.Current(ctx); len(got) != 2 || got[1].Present {
		t.Errorf("next scrape: %+v, want mlx5_3 kept as not present", got)
	}
}

// A default rail seen once stays known when its device vanishes: the rdma
// collector keeps fabric_rail_info with its last labels and reports
// fabric_rail_device_present 0 (fabric_rdma_port_info of the port goes);
// when the device comes back it is present again, without a restart.
func TestDefaultRailVanishesAndReturns(t *testing.T) {
	sys := copyTree(t, fixtureSys)
	o := fixtureOptions(t, sys)
	env, _ := testEnv()
	c, err := newRDMACollector(env, o)
	if err != nil {
		t.Fatal(err)
	}
	const railInfo = `# HELP fabric_rail_info A rail: the RDMA port it is and the netdev of that port ("" when unresolved).
# TYPE fabric_rail_info gauge
fabric_rail_info{device="mlx5_0",netdev="eth0",port="1",rail="mlx5_0"} 1
fabric_rail_info{device="mlx5_3",netdev="eth3",port="1",rail="mlx5_3"} 1
`
	present := func(v string) string {
		return `# HELP fabric_rail_device_present 1 if the RDMA port of the rail exists now, 0 if it disappeared.
# TYPE fabric_rail_device_present gauge
fabric_rail_device_present{device="mlx5_0",port="1",rail="mlx5_0"} 1
fabric_rail_device_present{device="mlx5_3",port="1",rail="mlx5_3"} ` + v + "\n"
	}
	compare(t, c, railInfo+present("1"), "fabric_rail_info", "fabric_rail_device_present")

	link := filepath.Join(sys, "class", "infiniband", "mlx5_3")
	target, err := os.Readlink(link)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	compare(t, c, railInfo+present("0"), "fabric_rail_info", "fabric_rail_device_present")
	if got := portInfoDevices(t, c); strings.Contains(got, "mlx5_3") {
		t.Errorf("fabric_rdma_port_info of the vanished device still reported: %s", got)
	}

	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	compare(t, c, railInfo+present("1"), "fabric_rail_info", "fabric_rail_device_present")
	if got := portInfoDevices(t, c); !strings.Contains(got, "mlx5_3") {
		t.Errorf("fabric_rdma_port_info of the returned device missing: %s", got)
	}
}

// portInfoDevices returns the device labels of fabric_rdma_port_info.
func portInfoDevices(t *testing.T, c Collector) string {
	t.Helper()
	var devs []string
	for _, s := range scrapeSamples(t, c, "fabric_rdma_port_info") {
		devs = append(devs, s["device"])
	}
	return strings.Join(devs, ",")
}

// FuzzParseRail: any --rail value either parses into a valid rail or is
// rejected with an error; it never panics.
func FuzzParseRail(f *testing.F) {
	for _, s := range []string{"rail0=mlx5_0", "rail1=mlx5_3:1", "r=roceP2p1s0f1:2", "=x", "a=b:0", "a=../x", "a=b:99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rc, err := ParseRail(s)
		if err != nil {
			return
		}
		if !railNameRE.MatchString(rc.Name) || rc.Device == "" || strings.ContainsAny(rc.Device, "/\x00") || rc.Port < 1 || rc.Port > 255 {
			t.Fatalf("ParseRail(%q) accepted %+v", s, rc)
		}
	})
}

func TestParseRail(t *testing.T) {
	for in, want := range map[string]RailConfig{
		"rail0=mlx5_0":     {"rail0", "mlx5_0", 1},
		"rail1=mlx5_3:1":   {"rail1", "mlx5_3", 1},
		"r=roceP2p1s0f1:2": {"r", "roceP2p1s0f1", 2},
	} {
		if got, err := ParseRail(in); err != nil || got != want {
			t.Errorf("ParseRail(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "mlx5_0", "=mlx5_0", "rail0=", "rail0=mlx5_0:0", "rail0=mlx5_0:x", "rail 0=mlx5_0", "r=../x", "r=a/b"} {
		if _, err := ParseRail(bad); err == nil {
			t.Errorf("ParseRail(%q) succeeded", bad)
		}
	}
}

// railLabels scrapes c once through client_golang and returns, per family
// the collector emitted, the rail label of each series keyed by its netdev
// (or device:port); series without a netdev or port label are left out, and
// so are the families keyed by rail or by device (fabric_rail_*,
// fabric_rdma_device_info).
func railLabels(t *testing.T, c Collector) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, mf := range gather(t, c) {
		if strings.HasPrefix(mf.GetName(), "fabric_rail_") || mf.GetName() == "fabric_rdma_device_info" {
			continue
		}
		for _, m := range mf.GetMetric() {
			ls := map[string]string{}
			hasRail := false
			for _, lp := range m.GetLabel() {
				ls[lp.GetName()] = lp.GetValue()
				hasRail = hasRail || lp.GetName() == "rail"
			}
			key := ls["netdev"]
			if ls["port"] != "" {
				key = ls["device"] + ":" + ls["port"]
			}
			if key == "" {
				continue
			}
			if !hasRail {
				ls["rail"] = "<no rail label>"
			}
			if out[mf.GetName()] == nil {
				out[mf.GetName()] = map[string]string{}
			}
			if old, dup := out[mf.GetName()][key]; dup && old != ls["rail"] {
				t.Errorf("%s: %s has series with rail %q and %q", mf.GetName(), key, old, ls["rail"])
			}
			out[mf.GetName()][key] = ls["rail"]
		}
	}
	return out
}

// checkRails checks that every family of got labels each series with the
// rail want gives its netdev or port ("" for none), and that the families
// in mustHave were emitted.
func checkRails(t *testing.T, what string, got map[string]map[string]string, want map[string]string, mustHave ...string) {
	t.Helper()
	for _, f := range mustHave {
		if got[f] == nil {
			t.Errorf("%s: family %s not emitted", what, f)
		}
	}
	for fam, series := range got {
		for key, rail := range series {
			if rail != want[key] {
				t.Errorf("%s: %s of %s has rail %q, want %q", what, fam, key, rail, want[key])
			}
		}
	}
}

// Every per-port and per-netdev series of the rdma, netdev, pfc and phy
// collectors carries the rail of its port or netdev as the resolver names
// it (here a --rail flag), and series of ports and netdevs that carry no
// rail have none.
func TestRailLabelOnEverySeries(t *testing.T) {
	o := fixtureOptions(t, fixtureSys, "fast0=mlx5_0")
	o.Phy.Fixtures = "fixtures/phy"
	env, _ := testEnv()
	want := map[string]string{"mlx5_0:1": "fast0", "eth0": "fast0"} // mlx5_3/eth3 carry no rail here
	for _, tc := range []struct {
		name     string
		new      func(Env, *Options) (Collector, error)
		mustHave []string
	}{
		{"rdma", newRDMACollector, []string{"fabric_rdma_port_up", "fabric_rdma_port_rate_bytes_per_second", "fabric_rdma_port_transmitted_bytes_total",
			"fabric_rdma_hw_lifespan_seconds", "fabric_rdma_hw_local_ack_timeout_err_total", "fabric_rdma_port_info"}},
		{"netdev", newNetdevCollector, []string{"fabric_netdev_up", "fabric_netdev_speed_bytes_per_second", "fabric_netdev_received_bytes_total", "fabric_netdev_info"}},
		{"pfc", newPFCCollector, []string{"fabric_pfc_pause_frames_total", "fabric_pause_storm_events_total", "fabric_pfc_priority_enabled", "fabric_netdev_vport_rdma_bytes_total"}},
		{"phy", newPhyCollector, []string{"fabric_netdev_fec_info", "fabric_netdev_fec_corrected_blocks_total", "fabric_transceiver_info", "fabric_transceiver_rx_power_watts"}},
	} {
		c, err := tc.new(env, o)
		if err != nil {
			t.Fatal(err)
		}
		if cl, ok := c.(interface{ Close() }); ok {
			t.Cleanup(cl.Close)
		}
		got := railLabels(t, c)
		checkRails(t, tc.name, got, want, tc.mustHave...)
		if tc.name == "netdev" && got["fabric_netdev_up"]["eth3"] != "" {
			t.Errorf("eth3 (no rail) missing or labelled: %v", got["fabric_netdev_up"])
		}
	}
}
