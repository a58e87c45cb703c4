package collector

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/devlinknl"
	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
)

// newTestDevlink returns a devlink collector on the fixture sysfs tree
// (default rails mlx5_0 and mlx5_3) without its poller: tests call poll.
func newTestDevlink(t testing.TB, do DevlinkOptions) *devlinkCollector {
	t.Helper()
	o := fixtureOptions(t, fixtureSys)
	o.Devlink = do
	env, _ := testEnv()
	c, err := newDevlinkState(env, o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// devlinkFixture copies fixtures/devlink to a temp dir, applies the
// replacements to health.json and writes not-answering.
func devlinkFixture(t *testing.T, notAnswering string, replace ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"health.json", "info.json"} {
		b, err := os.ReadFile(filepath.Join("fixtures/devlink", f))
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		if f == "health.json" {
			s = strings.NewReplacer(replace...).Replace(s)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if notAnswering != "" {
		if err := os.WriteFile(filepath.Join(dir, "not-answering"), []byte(notAnswering+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const devlinkHeaders = `# HELP fabric_devlink_up 1 if the RDMA HCA's devlink instance (pci/<pci_bus_id>) answered the last health request within --collector.devlink.timeout, 0 if it failed or timed out: the driver does not answer (mlx5 holding the instance's lock through a firmware recovery, firmware commands timing out) or an earlier request is still blocked in the kernel. Absent for a device without a devlink instance and when the kernel has no devlink.
# TYPE fabric_devlink_up gauge
`

func TestDevlinkFixtures(t *testing.T) {
	c := newTestDevlink(t, DevlinkOptions{Fixtures: "fixtures/devlink"})
	c.poll(t.Context())
	compare(t, c, devlinkHeaders+`fabric_devlink_up{device="mlx5_0",pci_bus_id="0000:18:00.0",rail="mlx5_0"} 1
fabric_devlink_up{device="mlx5_3",pci_bus_id="0000:9a:00.0",rail="mlx5_3"} 1
# HELP fabric_devlink_info The RDMA HCA's driver and firmware as devlink reports them: driver name, driver_version (/sys/module/<driver>/version: out-of-tree drivers such as MLNX_OFED's; "" for an in-tree driver, which has the kernel's), fw_version running and fw_version_stored (the flashed image: different after a firmware update that a reset has not activated yet), board_id (the PSID) and serial ("" when the driver gives none). The last read is kept while the device does not answer.
# TYPE fabric_devlink_info gauge
fabric_devlink_info{board_id="MT_0000000838",device="mlx5_0",driver="mlx5_core",driver_version="",fw_version="28.41.1000",fw_version_stored="28.41.1000",pci_bus_id="0000:18:00.0",rail="mlx5_0",serial=""} 1
fabric_devlink_info{board_id="MT_0000000838",device="mlx5_3",driver="mlx5_core",driver_version="",fw_version="28.41.1000",fw_version_stored="28.43.1014",pci_bus_id="0000:9a:00.0",rail="mlx5_3",serial=""} 1
# HELP fabric_devlink_health_reporter_errors_total Errors the driver reported to a devlink health reporter (devlink health's error count; it restarts when the driver re-registers the reporter).
# TYPE fabric_devlink_health_reporter_errors_total counter
fabric_devlink_health_reporter_errors_total{device="mlx5_0",devlink_port="",pci_bus_id="0000:18:00.0",rail="mlx5_0",reporter="fw"} 0
fabric_devlink_health_reporter_errors_total{device="mlx5_0",devlink_port="",pci_bus_id="0000:18:00.0",rail="mlx5_0",reporter="fw_fatal"} 0
fabric_devlink_health_reporter_errors_total{device="mlx5_0",devlink_port="",pci_bus_id="0000:18:00.0",rail="mlx5_0",reporter="vnic"} 0
fabric_devlink_health_reporter_errors_total{device="mlx5_0",devlink_port="65535",pci_bus_id="0000:18:00.0",rail="mlx5_0",reporter="rx"} 0
fabric_devlink_health_reporter_errors_total{device="mlx5_0",devlink_port="65535",pci_bus_id="0000:18:00.0",rail="mlx5_0",reporter="tx"} 0
fabric_devlink_health_reporter_errors_total{device="mlx5_3",devlink_port="",pci_bus_id="0000:9a:00.0",rail="mlx5_3",reporter="fw"} 0
fabric_devlink_health_reporter_errors_total{device="mlx5_3",devlink_port="",pci_bus_id="0000:9a:00.0",rail="mlx5_3",reporter="fw_fatal"} 0
fabric_devlink_health_reporter_errors_total{device="mlx5_3",devlink_port="",pci_bus_id="0000:9a:00.0",rail="mlx5_3",reporter="vnic"} 0
fabric_devlink_health_reporter_errors_total{device="mlx5_3",devlink_port="65535",pci_bus_id="0000:9a:00.0",rail="mlx5_3",reporter="rx"} 0
fabric_devlink_health_reporter_errors_total{device="mlx5_3",devlink_port="65535",pci_bus_id="0000:9a:00.0",rail="mlx5_3",reporter="tx"} 2
# HELP fabric_devlink_health_reporter_dump_timestamp_seconds When the dump the kernel keeps for a devlink health reporter was taken (Unix time): at the first error after the last `+"`devlink health dump clear`"+`, not necessarily the latest. Absent while no dump is kept, and on kernels that give only the boot-relative time.
# TYPE fabric_devlink_health_reporter_dump_timestamp_seconds gauge
fabric_devlink_health_reporter_dump_timestamp_seconds{device="mlx5_3",devlink_port="65535",pci_bus_id="0000:9a:00.0",rail="mlx5_3",reporter="tx"} 1.767323045e+09
`, "fabric_devlink_up", "fabric_devlink_info", "fabric_devlink_health_reporter_errors_total", "fabric_devlink_health_reporter_dump_timestamp_seconds")
	v := updateValues(t, c)
	if len(v) != 2+2+2+3*10+1 {
		t.Errorf("%d series, want 37", len(v))
	}
	if v[`fabric_devlink_health_reporter_healthy{mlx5_3,0000:9a:00.0,65535,tx,mlx5_3}`] != 1 ||
		v[`fabric_devlink_health_reporter_recoveries_total{mlx5_3,0000:9a:00.0,65535,tx,mlx5_3}`] != 2 {
		t.Errorf("mlx5_3 tx: %v", v)
	}
}

// A fatal firmware error that was not recovered: fw_fatal in error state.
func TestDevlinkReporterInError(t *testing.T) {
	dir := devlinkFixture(t, "", `"reporter": "fw_fatal",
                "state": "healthy",
                "error": 0,
                "recover": 0,`, `"reporter": "fw_fatal",
                "state": "error",
                "error": 1,
                "recover": 0,
                "last_dump_date": "2026-03-04",
                "last_dump_time": "05:06:07",`)
	c := newTestDevlink(t, DevlinkOptions{Fixtures: dir})
	c.poll(t.Context())
	v := updateValues(t, c)
	for _, dev := range []string{"mlx5_0,0000:18:00.0", "mlx5_3,0000:9a:00.0"} {
		if v["fabric_devlink_health_reporter_healthy{"+dev+",,fw_fatal,"+dev[:6]+"}"] != 0 ||
			v["fabric_devlink_health_reporter_errors_total{"+dev+",,fw_fatal,"+dev[:6]+"}"] != 1 ||
			v["fabric_devlink_health_reporter_dump_timestamp_seconds{"+dev+",,fw_fatal,"+dev[:6]+"}"] != 1772600767 ||
			v["fabric_devlink_up{"+dev+","+dev[:6]+"}"] != 1 {
			t.Errorf("%s: %v", dev, v)
		}
	}
}

// Per-device isolation: a device that stops answering is up 0 without its
// reporter series (its last device information kept), the other keeps all
// of its; the collector fails with a stable reason naming the device, and
// recovers when it answers again.
func TestDevlinkDeviceNotAnswering(t *testing.T) {
	dir := devlinkFixture(t, "")
	c := newTestDevlink(t, DevlinkOptions{Fixtures: dir, Timeout: time.Second})
	c.poll(t.Context())
	if err := os.WriteFile(filepath.Join(dir, "not-answering"), []byte("# wedged\npci/0000:9a:00.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		c.poll(t.Context())
	}
	var b strings.Builder
	v := updateValuesErr(t, c)
	for _, k := range slices.Sorted(maps.Keys(v)) {
		if strings.Contains(k, "mlx5_3") {
			b.WriteString(k + "\n")
		}
	}
	if b.String() != "fabric_devlink_info{mlx5_3,0000:9a:00.0,mlx5_core,,28.41.1000,28.43.1014,MT_0000000838,,mlx5_3}\nfabric_devlink_rdma_device_present{mlx5_3,0000:9a:00.0,mlx5_3}\nfabric_devlink_up{mlx5_3,0000:9a:00.0,mlx5_3}\n" {
		t.Errorf("mlx5_3's series:\n%s", b.String())
	}
	if v["fabric_devlink_up{mlx5_3,0000:9a:00.0,mlx5_3}"] != 0 || v["fabric_devlink_up{mlx5_0,0000:18:00.0,mlx5_0}"] != 1 ||
		v["fabric_devlink_health_reporter_healthy{mlx5_0,0000:18:00.0,65535,tx,mlx5_0}"] != 1 || len(v) != 2+2+2+15 {
		t.Errorf("%d series: %v", len(v), v)
	}
	st, reason := classify(c.Update(t.Context(), &exposition.Batch{}))
	if st != StateFailed || reason != "devlink: mlx5_3 (pci/0000:9a:00.0): no answer within 1s (the driver holds its devlink instance, or an earlier request is still blocked)" {
		t.Errorf("state %s %q", st, reason)
	}
	// It answers again: its series come back.
	os.Remove(filepath.Join(dir, "not-answering"))
	c.poll(t.Context())
	v = updateValues(t, c)
	if v["fabric_devlink_up{mlx5_3,0000:9a:00.0,mlx5_3}"] != 1 || v["fabric_devlink_health_reporter_errors_total{mlx5_3,0000:9a:00.0,65535,tx,mlx5_3}"] != 2 || len(v) != 2+2+2+30+1 {
		t.Errorf("after recovery: %v", v)
	}
}

// blockingSource answers for mlx5_0's function and blocks for mlx5_3's
// until the request's deadline, as the kernel does while a driver holds
// its devlink lock.
type blockingSource struct {
	infos atomic.Int32
	mu    sync.Mutex
	fail  error // when set, every request's answer
	// healthy: mlx5_0's fw_fatal reporter is healthy (else in error).
	healthy atomic.Bool
}

func (s *blockingSource) HealthReporters(ctx context.Context, h devlinknl.Handle) ([]devlinknl.Reporter, error) {
	s.mu.Lock()
	fail := s.fail
	s.mu.Unlock()
	if fail != nil {
		return nil, fail
	}
	if h.Device == "0000:9a:00.0" {
		<-ctx.Done()
		return nil, devlinknl.ErrTimeout
	}
	if h.Device != "0000:18:00.0" {
		return nil, devlinknl.ErrNoDevice
	}
	st := uint8(devlinknl.StateError)
	if s.healthy.Load() {
		st = devlinknl.StateHealthy
	}
	return []devlinknl.Reporter{{Name: "fw_fatal", State: st, Errors: 3}}, nil
}

func (s *blockingSource) Info(ctx context.Context, h devlinknl.Handle) (devlinknl.Info, error) {
	s.infos.Add(1)
	return devlinknl.Info{Driver: "mlx5_core", Running: map[string]string{"fw.version": "28.41.1000"}}, nil
}

func TestDevlinkBlockedDevice(t *testing.T) {
	src := &blockingSource{}
	c := newTestDevlink(t, DevlinkOptions{Source: src, Timeout: 50 * time.Millisecond})
	start := time.Now()
	c.poll(t.Context())
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("poll took %v", d)
	}
	v := updateValuesErr(t, c)
	if v["fabric_devlink_up{mlx5_3,0000:9a:00.0,mlx5_3}"] != 0 || v["fabric_devlink_up{mlx5_0,0000:18:00.0,mlx5_0}"] != 1 ||
		v["fabric_devlink_health_reporter_healthy{mlx5_0,0000:18:00.0,,fw_fatal,mlx5_0}"] != 0 ||
		v["fabric_devlink_health_reporter_errors_total{mlx5_0,0000:18:00.0,,fw_fatal,mlx5_0}"] != 3 {
		t.Errorf("%v", v)
	}
	// Not while a reporter is in error (firmware commands under the
	// instance's lock, before 6.0 under devlink's global mutex); once
	// healthy, information is read once, then every devlinkInfoEvery.
	if n := src.infos.Load(); n != 0 {
		t.Errorf("%d info reads of a device in error, want 0", n)
	}
	src.healthy.Store(true)
	c.poll(t.Context())
	c.poll(t.Context())
	if n := src.infos.Load(); n != 1 {
		t.Errorf("%d info reads after two polls, want 1", n)
	}
	now := time.Now().Add(devlinkInfoEvery + time.Second)
	c.now = func() time.Time { return now }
	c.poll(t.Context())
	if n := src.infos.Load(); n != 2 {
		t.Errorf("%d info reads after the interval, want 2", n)
	}
}

func TestDevlinkStates(t *testing.T) {
	for _, tc := range []struct {
		name   string
		do     DevlinkOptions
		sysfs  string
		state  State
		reason string
	}{
		{name: "no devlink", do: DevlinkOptions{Source: &blockingSource{fail: devlinknl.ErrNotAvailable}}, state: StateNoHardware, reason: "devlink: not available"},
		{name: "fixtures without files", do: DevlinkOptions{Fixtures: "fixtures/nonexistent"}, state: StateNoHardware, reason: "devlink: not available: no health.json or info.json in fixtures/nonexistent"},
		{name: "other network namespace", do: DevlinkOptions{Source: &blockingSource{fail: devlinknl.ErrNoDevice}}, state: StateNoHardware,
			reason: "none of the RDMA devices (i40iw0, mlx4_0, mlx5_0, mlx5_3) has a devlink instance in the exporter's network namespace (devlink instances live in the host's: run with the host network, hostNetwork: true or --network host)"},
		{name: "refused", do: DevlinkOptions{Source: &blockingSource{fail: devlinknl.ErrNoPrivilege}}, state: StateFailed,
			reason: "the kernel refused the devlink requests (they need no privilege: a seccomp or LSM policy?): devlink: not permitted"},
		{name: "wrong sysfs", do: DevlinkOptions{Fixtures: "fixtures/devlink"}, sysfs: "/nonexistent/sys", state: StateSourceMissing},
	} {
		o := fixtureOptions(t, fixtureSys)
		if tc.sysfs != "" {
			o.SysfsPath = tc.sysfs
		}
		o.Devlink = tc.do
		env, _ := testEnv()
		c, err := newDevlinkState(env, o)
		if err != nil {
			t.Fatal(err)
		}
		c.poll(t.Context())
		st, reason := classify(c.Update(t.Context(), &exposition.Batch{}))
		if st != tc.state || tc.reason != "" && reason != tc.reason {
			t.Errorf("%s: %s %q", tc.name, st, reason)
		}
		if n := len(updateValuesErr(t, c)); n != 0 {
			t.Errorf("%s: %d series", tc.name, n)
		}
	}
	if _, err := newDevlinkState(Env{}, &Options{Devlink: DevlinkOptions{Interval: time.Millisecond}}); err == nil {
		t.Error("interval 1ms accepted")
	}
}

// Through the poller: the first scrape waits for the first poll; Close
// stops it.
func TestDevlinkPoller(t *testing.T) {
	o := fixtureOptions(t, fixtureSys)
	o.Devlink = DevlinkOptions{Fixtures: "fixtures/devlink"}
	env, _ := testEnv()
	c, err := newDevlinkCollector(env, o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.(*devlinkCollector).Close()
	if v := updateValues(t, c); v["fabric_devlink_up{mlx5_0,0000:18:00.0,mlx5_0}"] != 1 {
		t.Errorf("%v", v)
	}
}

func TestParseDevlinkFixtures(t *testing.T) {
	b, err := os.ReadFile("fixtures/devlink/health.json")
	if err != nil {
		t.Fatal(err)
	}
	h, err := devlinknl.ParseHealthJSON(b)
	if err != nil || len(h) != 2 || len(h[devlinknl.PCI("0000:18:00.0")]) != 5 {
		t.Errorf("%v %v", h, err)
	}
}

// updateValuesErr is updateValues for a collector whose Update fails.
func updateValuesErr(t testing.TB, c Collector) map[string]float64 {
	t.Helper()
	b := &exposition.Batch{}
	c.Update(t.Context(), b)
	out := map[string]float64{}
	for s, v := range b.All() {
		out[s.Family().Name()+"{"+strings.Join(s.Values(), ",")+"}"] = v
	}
	return out
}

// BenchmarkDevlinkUpdate is what a scrape costs the devlink collector: the
// fixture's 35 series, bound by the last poll (which runs on the shared
// poller, off the scrape path). The rails are resolved once per scrape for
// every collector, so the benchmark runs inside one scrape (rails=shared);
// rails=resolved resolves them on every call, as a scrape of devlink alone
// would.
func BenchmarkDevlinkUpdate(b *testing.B) {
	c := newTestDevlink(b, DevlinkOptions{Fixtures: "fixtures/devlink"})
	c.poll(b.Context())
	var batch exposition.Batch
	for _, bc := range []struct {
		name string
		ctx  context.Context
	}{{"rails=shared", context.WithValue(b.Context(), scrapeIDKey{}, uint64(1))}, {"rails=resolved", b.Context()}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				batch.Reset()
				if err := c.Update(bc.ctx, &batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	if batch.Len() == 0 {
		b.Fatal("no series")
	}
}

// BenchmarkDevlinkPoll is one poll of both HCAs' recorded answers (health
// and info), on the poller.
func BenchmarkDevlinkPoll(b *testing.B) {
	c := newTestDevlink(b, DevlinkOptions{Fixtures: "fixtures/devlink"})
	for b.Loop() {
		c.poll(b.Context())
	}
}

// A fatal firmware error whose recovery failed: mlx5 unloads the IB device
// (mlx5_health_try_recover → mlx5_unload_one_devl_locked), so mlx5_3 leaves
// class/infiniband, while its PCI function stays bound to mlx5_core and its
// devlink instance keeps fw_fatal in error. The HCA is still asked, under
// its old name and rail: RailHCAFailed's fw_fatal branch can name it. A
// function no longer bound (removed, unbound) is forgotten.
func TestDevlinkFailedRecoveryUnloadedDevice(t *testing.T) {
	sys := copyTree(t, fixtureSys)
	dir := devlinkFixture(t, "")
	o := fixtureOptions(t, sys)
	o.Devlink = DevlinkOptions{Fixtures: dir, Timeout: time.Second}
	env, _ := testEnv()
	c, err := newDevlinkState(env, o)
	if err != nil {
		t.Fatal(err)
	}
	c.poll(t.Context())
	updateValues(t, c) // the rails of the devices, as they carry them now
	// The recovery fails: fw_fatal in error, the IB device unloaded.
	b, _ := os.ReadFile(filepath.Join(dir, "health.json"))
	i := strings.Index(string(b), `"pci/0000:9a:00.0"`)
	j := strings.Index(string(b)[i:], `"reporter": "fw_fatal"`)
	if i < 0 || j < 0 {
		t.Fatal("fixture: no fw_fatal reporter of pci/0000:9a:00.0")
	}
	k := i + j
	rest := strings.Replace(string(b)[k:], `"state": "healthy"`, `"state": "error"`, 1)
	os.WriteFile(filepath.Join(dir, "health.json"), []byte(string(b)[:k]+rest), 0o644)
	for _, p := range []string{"class/infiniband/mlx5_3", "class/infiniband_verbs/uverbs1"} {
		if err := os.RemoveAll(filepath.Join(sys, p)); err != nil {
			t.Fatal(err)
		}
	}
	drv := filepath.Join(sys, "bus/pci/drivers/mlx5_core")
	os.MkdirAll(drv, 0o755)
	if err := os.Symlink("../../../../devices/pci0000:97/0000:97:02.0/0000:9a:00.0", filepath.Join(drv, "0000:9a:00.0")); err != nil {
		t.Fatal(err)
	}
	c.poll(t.Context())
	v := updateValues(t, c)
	if v[`fabric_devlink_health_reporter_healthy{mlx5_3,0000:9a:00.0,,fw_fatal,mlx5_3}`] != 0 ||
		v[`fabric_devlink_rdma_device_present{mlx5_3,0000:9a:00.0,mlx5_3}`] != 0 ||
		v[`fabric_devlink_rdma_device_present{mlx5_0,0000:18:00.0,mlx5_0}`] != 1 {
		t.Errorf("the unloaded HCA: %v", v)
	}
	if _, ok := v[`fabric_devlink_health_reporter_healthy{mlx5_3,0000:9a:00.0,,fw_fatal,mlx5_3}`]; !ok {
		t.Errorf("no fw_fatal series of the unloaded HCA: %v", v)
	}
	// Unbound: forgotten.
	os.Remove(filepath.Join(drv, "0000:9a:00.0"))
	c.poll(t.Context())
	for k := range updateValues(t, c) {
		if strings.Contains(k, "0000:9a:00.0") {
			t.Errorf("an unbound function still reported: %s", k)
		}
	}
}

// An exporter started after mlx5_3's recovery failed (or restarted since):
// the function 0000:9a:00.0 is bound to mlx5_core with no RDMA device and
// was never seen with one. It is still asked by its devlink instance, with
// device "" (its name went with the device): fw_fatal in error, present 0;
// its information is not read (firmware failing). A virtual function bound
// to mlx5_core is not asked; without mlx5_ib (no RDMA device, no module) no
// function is.
func TestDevlinkUnnamedFunctionFailedBeforeStart(t *testing.T) {
	sys := copyTree(t, fixtureSys)
	dir := devlinkFixture(t, "")
	b, _ := os.ReadFile(filepath.Join(dir, "health.json"))
	i := strings.Index(string(b), `"pci/0000:9a:00.0"`)
	j := strings.Index(string(b)[i:], `"reporter": "fw_fatal"`)
	if i < 0 || j < 0 {
		t.Fatal("fixture: no fw_fatal reporter of pci/0000:9a:00.0")
	}
	k := i + j
	os.WriteFile(filepath.Join(dir, "health.json"), []byte(string(b)[:k]+strings.Replace(string(b)[k:], `"state": "healthy"`, `"state": "error"`, 1)), 0o644)
	for _, p := range []string{"class/infiniband/mlx5_3", "class/infiniband_verbs/uverbs1"} {
		if err := os.RemoveAll(filepath.Join(sys, p)); err != nil {
			t.Fatal(err)
		}
	}
	drv := filepath.Join(sys, "bus/pci/drivers/mlx5_core")
	os.MkdirAll(drv, 0o755)
	for _, l := range [][2]string{
		{"0000:18:00.0", "../../../../devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0"},
		{"0000:9a:00.0", "../../../../devices/pci0000:97/0000:97:02.0/0000:9a:00.0"},
		{"0000:9a:00.2", "../../../../devices/pci0000:97/0000:97:02.0/0000:9a:00.2"},
	} {
		if err := os.Symlink(l[1], filepath.Join(drv, l[0])); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"bind", "unbind", "uevent"} {
		os.WriteFile(filepath.Join(drv, f), nil, 0o200)
	}
	vf := filepath.Join(sys, "devices/pci0000:97/0000:97:02.0/0000:9a:00.2")
	os.MkdirAll(vf, 0o755)
	os.Symlink("../0000:9a:00.0", filepath.Join(vf, "physfn"))

	o := fixtureOptions(t, sys)
	o.Devlink = DevlinkOptions{Fixtures: dir, Timeout: time.Second}
	env, _ := testEnv()
	c, err := newDevlinkState(env, o)
	if err != nil {
		t.Fatal(err)
	}
	c.poll(t.Context())
	v := updateValues(t, c)
	if got, ok := v[`fabric_devlink_health_reporter_healthy{,0000:9a:00.0,,fw_fatal,}`]; !ok || got != 0 {
		t.Errorf("the unnamed function's fw_fatal: %v (%v): %v", got, ok, v)
	}
	if got, ok := v[`fabric_devlink_rdma_device_present{,0000:9a:00.0,}`]; !ok || got != 0 {
		t.Errorf("the unnamed function's presence: %v", v)
	}
	if v[`fabric_devlink_rdma_device_present{mlx5_0,0000:18:00.0,mlx5_0}`] != 1 {
		t.Errorf("mlx5_0: %v", v)
	}
	for k := range v {
		if strings.Contains(k, "0000:9a:00.2") || strings.HasPrefix(k, "fabric_devlink_info{,0000:9a:00.0") {
			t.Errorf("%s", k)
		}
	}

	// No mlx5_ib: an Ethernet-only host's mlx5 functions are not asked.
	os.RemoveAll(filepath.Join(sys, "class/infiniband"))
	os.RemoveAll(filepath.Join(sys, "module/mlx5_ib"))
	c2, err := newDevlinkState(env, o)
	if err != nil {
		t.Fatal(err)
	}
	c2.poll(t.Context())
	c2.mu.Lock()
	n, state := len(c2.devices), c2.state
	c2.mu.Unlock()
	if n != 0 || state == nil {
		t.Errorf("without mlx5_ib: %d devices, state %v", n, state)
	}
}
