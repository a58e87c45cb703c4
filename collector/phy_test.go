package collector

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-kit/log"

	"github.com/fabric-exporter/fabric_exporter/internal/ethtoolnl"
	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
)

func newTestPhy(t testing.TB, o *Options) (*phyCollector, *exposition.Counter) {
	t.Helper()
	env, errs := testEnv()
	c, err := newPhyCollector(env, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.(*phyCollector).Close)
	return c.(*phyCollector), errs
}

// The fixture: healthy 400G OSFPs with RS-FEC (eth3 with old uncorrectable
// blocks); the test puts a module with a dark lane 3 in eth3.
func TestPhyFixture(t *testing.T) {
	dir := copyTree(t, "fixtures/phy")
	dark, err := os.ReadFile("../internal/optics/testdata/cmis-osfp-400g-dark-lane3.dump")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "eth3.eeprom"), dark, 0o644); err != nil {
		t.Fatal(err)
	}
	o := fixtureOptions(t, fixtureSys)
	o.Phy.Fixtures = dir
	c, errs := newTestPhy(t, o)
	v := updateValues(t, c)
	want := map[string]float64{
		"fabric_netdev_fec_info{eth0,rs,mlx5_0}":                                                          1,
		"fabric_netdev_fec_corrected_blocks_total{eth0,mlx5_0}":                                           1524,
		"fabric_netdev_fec_uncorrectable_blocks_total{eth3,mlx5_3}":                                       17,
		"fabric_transceiver_info{eth0,CMIS,OSFP,NVIDIA,MMS4X00-NS400,A6,MT2330FT01234,47.218,smf,mlx5_0}": 1,
		"fabric_transceiver_temperature_celsius{eth0,mlx5_0}":                                             46.25,
		"fabric_transceiver_rx_power_watts{eth3,3,mlx5_3}":                                                0,
		"fabric_transceiver_temperature_threshold_celsius{eth0,high_warning,mlx5_0}":                      75,
		"fabric_transceiver_tx_bias_amperes{eth0,1,mlx5_0}":                                               0.0075,
	}
	for k, w := range want {
		if got, ok := v[k]; !ok || got != w {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, w)
		}
	}
	if lw := v["fabric_transceiver_rx_power_threshold_watts{eth3,low_warning,mlx5_3}"]; !(lw > 1e-4 && lw < 1.4e-4) {
		t.Errorf("rx low warning %v W, want -8.9 dBm", lw)
	}
	for _, k := range []string{"fabric_transceiver_rx_power_watts{eth0,5,mlx5_0}", "fabric_netdev_fec_corrected_bit_errors_total{eth0,mlx5_0}", "fabric_netdev_fec_lane_corrected_blocks_total{eth0,0,mlx5_0}"} {
		if _, ok := v[k]; ok {
			t.Errorf("%s present", k)
		}
	}
	if ts := v["fabric_transceiver_read_timestamp_seconds{eth0,mlx5_0}"]; time.Since(time.Unix(int64(ts), 0)) > time.Minute {
		t.Errorf("read timestamp %v", ts)
	}
	if errs.Value() != 0 {
		t.Errorf("read errors %v", errs.Value())
	}
}

// phyWithModules runs the collector on the fixture with the given module
// dumps (internal/optics/testdata) in eth0 and eth3 and returns its
// samples.
func phyWithModules(t *testing.T, eth0, eth3 string) map[string]float64 {
	t.Helper()
	dir := copyTree(t, "fixtures/phy")
	for nd, name := range map[string]string{"eth0": eth0, "eth3": eth3} {
		b, err := os.ReadFile("../internal/optics/testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, nd+".eeprom"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o := fixtureOptions(t, fixtureSys)
	o.Phy.Fixtures = dir
	c, errs := newTestPhy(t, o)
	v := updateValues(t, c)
	if errs.Value() != 0 {
		t.Errorf("read errors %v", errs.Value())
	}
	return v
}

// transceiverSeries lists a netdev's fabric_transceiver_* series.
func transceiverSeries(v map[string]float64, nd string) []string {
	var out []string
	for k := range v {
		if strings.HasPrefix(k, "fabric_transceiver_") && strings.Contains(k, "{"+nd+",") {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// A QSFP-DD passive copper cable (CMIS, flat memory) has no monitors: its
// identity and read time only, no temperature or voltage of 0. An SFF-8636
// module implementing temperature and RX power only: those, its bias, and
// no supply voltage or TX power.
func TestPhyAdvertisedMonitors(t *testing.T) {
	v := phyWithModules(t, "cmis-qsfpdd-passive-copper.dump", "sff8636-qsfp28-partial-dom.dump")
	want := []string{
		"fabric_transceiver_info{eth0,CMIS,QSFP-DD,NVIDIA,MCP1660-W001E30,A3,MT2251VS00123,0.0,passive_copper,mlx5_0}",
		"fabric_transceiver_read_timestamp_seconds{eth0,mlx5_0}",
	}
	if got := transceiverSeries(v, "eth0"); !slices.Equal(got, want) {
		t.Errorf("passive copper cable series:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if v["fabric_transceiver_temperature_celsius{eth3,mlx5_3}"] != 41.5 || v["fabric_transceiver_tx_bias_amperes{eth3,2,mlx5_3}"] == 0 {
		t.Errorf("partial module's implemented monitors: %v", transceiverSeries(v, "eth3"))
	}
	for _, k := range []string{
		"fabric_transceiver_supply_voltage_volts{eth3,mlx5_3}",
		"fabric_transceiver_tx_power_watts{eth3,1,mlx5_3}",
		"fabric_transceiver_supply_voltage_threshold_volts{eth3,high_alarm,mlx5_3}",
		"fabric_transceiver_tx_power_threshold_watts{eth3,low_warning,mlx5_3}",
	} {
		if _, ok := v[k]; ok {
			t.Errorf("%s present: the module does not implement it", k)
		}
	}
	if _, ok := v["fabric_transceiver_rx_power_watts{eth3,4,mlx5_3}"]; !ok {
		t.Error("partial module: RX power lane 4 missing")
	}
}

// Unpopulated (all 0) thresholds are no limits: a module whose temperature
// thresholds are 0 would keep TransceiverTemperatureHigh firing. That set
// is left out, the module's other sets and its temperature stay; likewise
// the partial SFF-8636 module's bias thresholds.
func TestPhyZeroThresholds(t *testing.T) {
	v := phyWithModules(t, "cmis-osfp-400g-zero-temp-th.dump", "sff8636-qsfp28-partial-dom.dump")
	for _, k := range []string{
		"fabric_transceiver_temperature_threshold_celsius{eth0,high_warning,mlx5_0}",
		"fabric_transceiver_temperature_threshold_celsius{eth0,low_warning,mlx5_0}",
		"fabric_transceiver_tx_bias_threshold_amperes{eth3,high_alarm,mlx5_3}",
	} {
		if _, ok := v[k]; ok {
			t.Errorf("%s present: the module left it 0", k)
		}
	}
	for k, w := range map[string]float64{
		"fabric_transceiver_temperature_celsius{eth0,mlx5_0}":                        46.25,
		"fabric_transceiver_supply_voltage_threshold_volts{eth0,high_alarm,mlx5_0}":  3.63,
		"fabric_transceiver_temperature_threshold_celsius{eth3,high_warning,mlx5_3}": 75,
	} {
		if got, ok := v[k]; !ok || math.Abs(got-w) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, w)
		}
	}
	if _, ok := v["fabric_transceiver_rx_power_threshold_watts{eth0,low_warning,mlx5_0}"]; !ok {
		t.Error("populated rx power thresholds missing")
	}
}

// fakePhy counts module reads and can make a netdev's module silent.
type fakePhy struct {
	mu     sync.Mutex
	inner  FilePhy
	silent map[string]bool
	reads  int
	fecErr error
}

func (f *fakePhy) FEC(nd string) (ethtoolnl.FEC, error) {
	if f.fecErr != nil {
		return ethtoolnl.FEC{}, f.fecErr
	}
	return f.inner.FEC(nd)
}

func (f *fakePhy) ReadModuleEEPROM(nd string, off, n uint32, page, bank uint8) ([]byte, error) {
	f.mu.Lock()
	f.reads++
	silent := f.silent[nd]
	f.mu.Unlock()
	if silent {
		return nil, syscall.EIO
	}
	return f.inner.ReadModuleEEPROM(nd, off, n, page, bank)
}

// Module memory is read in the background, not per scrape; a silent
// module costs one warning and its series, nothing else; it comes back
// with the next refresh.
func TestPhyBackgroundAndSilentModule(t *testing.T) {
	var logBuf strings.Builder
	var logMu sync.Mutex
	l := log.NewLogfmtLogger(log.NewSyncWriter(writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logBuf.Write(p)
	})))
	env := Env{Logger: l, Families: testFamilies, ReadErrors: &exposition.Counter{}, Once: NewOnceLogger(l, 64)}
	src := &fakePhy{inner: FilePhy{Dir: "fixtures/phy"}, silent: map[string]bool{"eth3": true}}
	o := fixtureOptions(t, fixtureSys)
	o.Phy = PhyOptions{Source: src, ModuleInterval: time.Hour}
	cc, err := newPhyCollector(env, o)
	if err != nil {
		t.Fatal(err)
	}
	c := cc.(*phyCollector)
	t.Cleanup(c.Close)
	for range 3 {
		v := updateValues(t, c)
		if _, ok := v["fabric_transceiver_temperature_celsius{eth3,mlx5_3}"]; ok {
			t.Error("silent module has series")
		}
		if _, ok := v["fabric_transceiver_temperature_celsius{eth0,mlx5_0}"]; !ok {
			t.Error("eth0 module missing")
		}
		if v["fabric_netdev_fec_uncorrectable_blocks_total{eth3,mlx5_3}"] != 17 {
			t.Error("FEC of the netdev with a silent module is gone")
		}
	}
	src.mu.Lock()
	reads := src.reads
	src.mu.Unlock()
	// one refresh: eth0 lower + 4 upper pages, eth3 lower (fails)
	if reads != 6 {
		t.Errorf("%d module reads after 3 scrapes, want the 6 of one refresh", reads)
	}
	logMu.Lock()
	if n := strings.Count(logBuf.String(), "cannot read the optical module"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, logBuf.String())
	}
	logMu.Unlock()
	src.mu.Lock()
	src.silent = nil
	src.mu.Unlock()
	c.refresh(t.Context())
	if _, ok := updateValues(t, c)["fabric_transceiver_temperature_celsius{eth3,mlx5_3}"]; !ok {
		t.Error("module did not come back")
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestPhyStates(t *testing.T) {
	o := fixtureOptions(t, fixtureSys)
	o.Phy.Source = &fakePhy{inner: FilePhy{Dir: t.TempDir()}}
	c, _ := newTestPhy(t, o)
	var b exposition.Batch
	if st, _ := classify(c.Update(t.Context(), &b)); st != StateNoHardware {
		t.Errorf("no FEC, no module: %s", st)
	}
	o = fixtureOptions(t, fixtureSys)
	o.Phy.Source = &fakePhy{inner: FilePhy{Dir: "fixtures/phy"}, fecErr: errors.New("netlink receive: permission denied"), silent: map[string]bool{"eth0": true, "eth3": true}}
	c, errs := newTestPhy(t, o)
	if st, _ := classify(c.Update(t.Context(), &b)); st != StateFailed || errs.Value() != 2 {
		t.Errorf("FEC fails, modules silent: %s, %v read errors", st, errs.Value())
	}
	if _, err := newPhyCollector(Env{}, &Options{Phy: PhyOptions{ModuleInterval: time.Millisecond}}); err == nil {
		t.Error("module interval 1ms accepted")
	}
}

func TestParseFECText(t *testing.T) {
	f, err := ParseFECText([]byte("# c\nactive baser\ncorrected_blocks 10 1 2 3 4\nuncorrectable_blocks 0 0 0 0 0\ncorrected_bits 99\n"))
	if err != nil || f.Active != "baser" || f.Corrected.Total != 10 || len(f.Corrected.Lanes) != 4 || f.CorrBits.Total != 99 {
		t.Errorf("%+v %v", f, err)
	}
	for _, s := range []string{"bogus 1\n", "corrected_blocks\n", "corrected_blocks x\n"} {
		if _, err := ParseFECText([]byte(s)); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
	// A dump without the page asked for answers EINVAL, as the kernel does.
	p := &FilePhy{Dir: "fixtures/phy"}
	if _, err := p.ReadModuleEEPROM("eth0", 128, 128, 0x20, 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("missing page: %v", err)
	}
	if _, err := p.ReadModuleEEPROM("eth9", 0, 128, 0, 0); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Errorf("missing dump: %v", err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "eth0.eeprom"), []byte("lower page 00h\n00000000 zz\n"), 0o644)
	if _, err := (&FilePhy{Dir: dir}).ReadModuleEEPROM("eth0", 0, 128, 0, 0); err == nil {
		t.Error("bad dump accepted")
	}
}

// BenchmarkPhyUpdate: one scrape of two rails from fixtures (FEC parsed from
// files, modules copied from the background result).
func BenchmarkPhyUpdate(b *testing.B) {
	o := fixtureOptions(b, fixtureSys)
	o.Phy.Fixtures = "fixtures/phy"
	c, _ := newTestPhy(b, o)
	var batch exposition.Batch
	for b.Loop() {
		batch.Reset()
		if err := c.Update(b.Context(), &batch); err != nil {
			b.Fatal(err)
		}
	}
}

// --collector.phy.device-exclude: an excluded rail netdev's FEC and module
// memory are not read (a device whose firmware refuses the reads and logs
// an error each time); the other rail keeps its series. A bad regexp names
// the flag.
func TestPhyDeviceExclude(t *testing.T) {
	o := fixtureOptions(t, fixtureSys)
	o.Phy.Fixtures = "fixtures/phy"
	o.Phy.DeviceExclude = "eth3"
	c, _ := newTestPhy(t, o)
	v := updateValues(t, c)
	if _, ok := v["fabric_netdev_fec_info{eth0,rs,mlx5_0}"]; !ok {
		t.Errorf("eth0 lost its series: %v", v)
	}
	for k := range v {
		if strings.Contains(k, "{eth3,") {
			t.Errorf("the excluded eth3 is read: %s", k)
		}
	}
	o.Phy.DeviceExclude = "("
	env, _ := testEnv()
	if _, err := newPhyCollector(env, o); err == nil || !strings.Contains(err.Error(), "--collector.phy.device-exclude") {
		t.Errorf("a bad regexp: %v", err)
	}
}
