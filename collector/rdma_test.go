package collector

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/fabric-exporter/fabric_exporter/alerts"
	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/fixturetree"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

func newTestRDMA(t testing.TB, o *Options) (*rdmaCollector, *exposition.Counter) {
	t.Helper()
	env, errs := testEnv()
	c, err := newRDMACollector(env, o)
	if err != nil {
		t.Fatal(err)
	}
	return c.(*rdmaCollector), errs
}

func TestRDMAFixture(t *testing.T) {
	c, errs := newTestRDMA(t, fixtureOptions(t, fixtureSys))
	// Values checked by hand against collector/fixtures/sys:
	// mlx5_0 port_xmit_data 230442669431839 words x4 = 921770677727356 bytes,
	// port_rcv_data 230539874932483 x4 = 922159499729932; mlx4_0 port 2 takes
	// the 64-bit counters_ext value (3733440 x4 = 14933760) over counters/ (0).
	compare(t, c, `
# HELP fabric_rdma_port_transmitted_bytes_total Bytes transmitted by the port (port_xmit_data counts 4-octet words; multiplied by 4). On mlx5 RoCE this is RDMA traffic only.
# TYPE fabric_rdma_port_transmitted_bytes_total counter
fabric_rdma_port_transmitted_bytes_total{device="mlx4_0",port="1",rail=""} 1.493376e+07
fabric_rdma_port_transmitted_bytes_total{device="mlx4_0",port="2",rail=""} 1.493376e+07
fabric_rdma_port_transmitted_bytes_total{device="mlx5_0",port="1",rail="mlx5_0"} 9.21770677727356e+14
fabric_rdma_port_transmitted_bytes_total{device="mlx5_3",port="1",rail="mlx5_3"} 9.21770677727356e+14
# HELP fabric_rdma_port_received_bytes_total Bytes received by the port (port_rcv_data counts 4-octet words; multiplied by 4). On mlx5 RoCE this is RDMA traffic only.
# TYPE fabric_rdma_port_received_bytes_total counter
fabric_rdma_port_received_bytes_total{device="mlx4_0",port="1",rail=""} 1.8527668e+07
fabric_rdma_port_received_bytes_total{device="mlx4_0",port="2",rail=""} 1.8527668e+07
fabric_rdma_port_received_bytes_total{device="mlx5_0",port="1",rail="mlx5_0"} 9.22159499729932e+14
fabric_rdma_port_received_bytes_total{device="mlx5_3",port="1",rail="mlx5_3"} 8.20514751096996e+14
# HELP fabric_rdma_hw_lifespan_seconds How long the kernel caches hw_counters before querying the device again (hw_counters/lifespan, milliseconds in sysfs).
# TYPE fabric_rdma_hw_lifespan_seconds gauge
fabric_rdma_hw_lifespan_seconds{device="mlx5_0",port="1",rail="mlx5_0"} 0.012
fabric_rdma_hw_lifespan_seconds{device="mlx5_3",port="1",rail="mlx5_3"} 0.01
# HELP fabric_rdma_hw_local_ack_timeout_err_total RDMA hardware counter local_ack_timeout_err (sysfs hw_counters; mlx5 Q counters are 32 bits wide and wrap).
# TYPE fabric_rdma_hw_local_ack_timeout_err_total counter
fabric_rdma_hw_local_ack_timeout_err_total{device="mlx5_0",port="1",rail="mlx5_0"} 2705
fabric_rdma_hw_local_ack_timeout_err_total{device="mlx5_3",port="1",rail="mlx5_3"} 0
# HELP fabric_rdma_hw_np_cnp_sent_total RDMA hardware counter np_cnp_sent (sysfs hw_counters; mlx5 Q counters are 32 bits wide and wrap).
# TYPE fabric_rdma_hw_np_cnp_sent_total counter
fabric_rdma_hw_np_cnp_sent_total{device="mlx5_0",port="1",rail="mlx5_0"} 1333
# HELP fabric_rdma_hw_req_transport_retries_exceeded_total RDMA hardware counter req_transport_retries_exceeded (sysfs hw_counters; mlx5 Q counters are 32 bits wide and wrap).
# TYPE fabric_rdma_hw_req_transport_retries_exceeded_total counter
fabric_rdma_hw_req_transport_retries_exceeded_total{device="mlx5_0",port="1",rail="mlx5_0"} 0
fabric_rdma_hw_req_transport_retries_exceeded_total{device="mlx5_3",port="1",rail="mlx5_3"} 0
# HELP fabric_rdma_port_info RDMA port metadata: netdev from gid_attrs/ndevs/0 (or the PCI function's net/), link layer (Ethernet = RoCE), state, physical state and the rail it carries ("" for none).
# TYPE fabric_rdma_port_info gauge
fabric_rdma_port_info{device="i40iw0",link_layer="InfiniBand",netdev="",phys_state="LinkUp",port="1",rail="",state="ACTIVE"} 1
fabric_rdma_port_info{device="mlx4_0",link_layer="InfiniBand",netdev="",phys_state="LinkUp",port="1",rail="",state="ACTIVE"} 1
fabric_rdma_port_info{device="mlx4_0",link_layer="InfiniBand",netdev="",phys_state="LinkUp",port="2",rail="",state="ACTIVE"} 1
fabric_rdma_port_info{device="mlx5_0",link_layer="Ethernet",netdev="eth0",phys_state="LinkUp",port="1",rail="mlx5_0",state="ACTIVE"} 1
fabric_rdma_port_info{device="mlx5_3",link_layer="Ethernet",netdev="eth3",phys_state="LinkUp",port="1",rail="mlx5_3",state="ACTIVE"} 1
# HELP fabric_rdma_port_rate_bytes_per_second Link rate of the RDMA port in bytes per second (sysfs rate, e.g. 400 Gb/sec = 5e10).
# TYPE fabric_rdma_port_rate_bytes_per_second gauge
fabric_rdma_port_rate_bytes_per_second{device="i40iw0",port="1",rail=""} 1.25e+09
fabric_rdma_port_rate_bytes_per_second{device="mlx4_0",port="1",rail=""} 5e+09
fabric_rdma_port_rate_bytes_per_second{device="mlx4_0",port="2",rail=""} 5e+09
fabric_rdma_port_rate_bytes_per_second{device="mlx5_0",port="1",rail="mlx5_0"} 5e+10
fabric_rdma_port_rate_bytes_per_second{device="mlx5_3",port="1",rail="mlx5_3"} 5e+10
# HELP fabric_rdma_device_info RDMA device metadata; numa_node is "" when the kernel reports no node (-1).
# TYPE fabric_rdma_device_info gauge
fabric_rdma_device_info{board_id="I40IW Board ID",device="i40iw0",fw_ver="0.2",hca_type="I40IW",node_guid="",numa_node="",pci_bus_id="0000:09:00.0"} 1
fabric_rdma_device_info{board_id="MT_0000000838",device="mlx5_0",fw_ver="28.41.1000",hca_type="MT4129",node_guid="a088:c203:0052:8e1a",numa_node="0",pci_bus_id="0000:18:00.0"} 1
fabric_rdma_device_info{board_id="MT_0000000838",device="mlx5_3",fw_ver="28.41.1000",hca_type="MT4129",node_guid="a088:c203:0052:8e7e",numa_node="1",pci_bus_id="0000:9a:00.0"} 1
fabric_rdma_device_info{board_id="SM_1141000001000",device="mlx4_0",fw_ver="2.31.5050",hca_type="MT4099",node_guid="",numa_node="0",pci_bus_id="0000:04:00.0"} 1
# HELP fabric_rail_info A rail: the RDMA port it is and the netdev of that port ("" when unresolved).
# TYPE fabric_rail_info gauge
fabric_rail_info{device="mlx5_0",netdev="eth0",port="1",rail="mlx5_0"} 1
fabric_rail_info{device="mlx5_3",netdev="eth3",port="1",rail="mlx5_3"} 1
`, "fabric_rdma_port_transmitted_bytes_total", "fabric_rdma_port_received_bytes_total", "fabric_rdma_hw_lifespan_seconds",
		"fabric_rdma_hw_local_ack_timeout_err_total", "fabric_rdma_hw_np_cnp_sent_total", "fabric_rdma_hw_req_transport_retries_exceeded_total",
		"fabric_rdma_port_info", "fabric_rdma_port_rate_bytes_per_second", "fabric_rdma_device_info", "fabric_rail_info")

	// The i40iw0 "N/A (no PMA)" counters, mlx5_3's "N/A" np_cnp_sent and
	// empty rp_cnp_ignored are "not available": no series, no error. Only the
	// garbage out_of_buffer ("0x1f!") counts as a read error (once per scrape).
	if got := errs.Value(); got != 1 {
		t.Errorf("read errors after one scrape = %v, want 1", got)
	}
	out, err := testutil.CollectAndFormat(updater{c: c}, expfmt.TypeTextPlain)
	if err != nil {
		t.Fatal(err)
	}
	for _, absent := range []string{`device="i40iw0",port="1",rail=""} `, `fabric_rdma_hw_out_of_buffer_total{device="mlx5_3"`,
		`fabric_rdma_hw_rp_cnp_ignored_total{device="mlx5_3"`, `fabric_rdma_port_symbol_errors_total{device="mlx5_3"`} {
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, absent) && !strings.Contains(line, "_info{") && !strings.Contains(line, "rate_bytes") && !strings.Contains(line, "port_up") {
				t.Errorf("unexpected series %q", line)
			}
		}
	}
}

func TestRDMANoInfinibandIsNoData(t *testing.T) {
	dir := t.TempDir()
	c, _ := newTestRDMA(t, fixtureOptions(t, dir))
	err := c.Update(context.Background(), &exposition.Batch{})
	if !errors.Is(err, ErrNoData) {
		t.Fatalf("Update on a host without class/infiniband = %v, want ErrNoData", err)
	}
}

// A Broadcom bnxt_re device has hw_counters but no counters/ directory.
func TestRDMADeviceWithoutCounters(t *testing.T) {
	root := t.TempDir()
	port := filepath.Join(root, "class", "infiniband", "bnxt_re0", "ports", "1")
	for f, v := range map[string]string{
		"link_layer": "Ethernet", "state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "100 Gb/sec (4X EDR)",
		"hw_counters/rx_pkts": "123", "hw_counters/tx_bytes": "4567",
	} {
		testenv.WriteFile(t, filepath.Join(port, f), v+"\n")
	}
	c, errs := newTestRDMA(t, fixtureOptions(t, root))
	compare(t, c, `
# HELP fabric_rdma_hw_tx_bytes_total RDMA hardware counter tx_bytes (sysfs hw_counters; mlx5 Q counters are 32 bits wide and wrap).
# TYPE fabric_rdma_hw_tx_bytes_total counter
fabric_rdma_hw_tx_bytes_total{device="bnxt_re0",port="1",rail="bnxt_re0"} 4567
# HELP fabric_rdma_port_up 1 if the RDMA port state is ACTIVE, else 0.
# TYPE fabric_rdma_port_up gauge
fabric_rdma_port_up{device="bnxt_re0",port="1",rail="bnxt_re0"} 1
`, "fabric_rdma_hw_tx_bytes_total", "fabric_rdma_port_up")
	if got := errs.Value(); got != 0 {
		t.Errorf("read errors = %v, want 0", got)
	}
}

// faultFile fails every read with err.
type faultFile struct{ err error }

func (f faultFile) ReadAt([]byte, int64) (int, error) { return 0, f.err }
func (f faultFile) Close() error                      { return nil }

// Read errors on single files (EINVAL, EACCES, EIO) skip that value only.
func TestRDMAReadErrorsAreIsolated(t *testing.T) {
	c, errs := newTestRDMA(t, fixtureOptions(t, fixtureSys))
	faults := map[string]error{
		"mlx5_0/ports/1/hw_counters/local_ack_timeout_err": syscall.EACCES,
		"mlx5_0/ports/1/hw_counters/np_cnp_sent":           syscall.EINVAL,
		"mlx5_0/ports/1/counters/port_xmit_data":           syscall.EIO,
	}
	c.reader = sysfs.NewReaderFunc(func(path string) (sysfs.File, error) {
		for suffix, err := range faults {
			if strings.HasSuffix(path, suffix) {
				return faultFile{err}, nil
			}
		}
		return sysfs.Open(path)
	})
	c.devices = sysfs.NewClassCache[*ibDevice](c.opts.sysPath("class", "infiniband"), c.reader)
	compare(t, c, `
# HELP fabric_rdma_port_received_bytes_total Bytes received by the port (port_rcv_data counts 4-octet words; multiplied by 4). On mlx5 RoCE this is RDMA traffic only.
# TYPE fabric_rdma_port_received_bytes_total counter
fabric_rdma_port_received_bytes_total{device="mlx4_0",port="1",rail=""} 1.8527668e+07
fabric_rdma_port_received_bytes_total{device="mlx4_0",port="2",rail=""} 1.8527668e+07
fabric_rdma_port_received_bytes_total{device="mlx5_0",port="1",rail="mlx5_0"} 9.22159499729932e+14
fabric_rdma_port_received_bytes_total{device="mlx5_3",port="1",rail="mlx5_3"} 8.20514751096996e+14
# HELP fabric_rdma_hw_local_ack_timeout_err_total RDMA hardware counter local_ack_timeout_err (sysfs hw_counters; mlx5 Q counters are 32 bits wide and wrap).
# TYPE fabric_rdma_hw_local_ack_timeout_err_total counter
fabric_rdma_hw_local_ack_timeout_err_total{device="mlx5_3",port="1",rail="mlx5_3"} 0
# HELP fabric_rdma_port_transmitted_bytes_total Bytes transmitted by the port (port_xmit_data counts 4-octet words; multiplied by 4). On mlx5 RoCE this is RDMA traffic only.
# TYPE fabric_rdma_port_transmitted_bytes_total counter
fabric_rdma_port_transmitted_bytes_total{device="mlx4_0",port="1",rail=""} 1.493376e+07
fabric_rdma_port_transmitted_bytes_total{device="mlx4_0",port="2",rail=""} 1.493376e+07
fabric_rdma_port_transmitted_bytes_total{device="mlx5_3",port="1",rail="mlx5_3"} 9.21770677727356e+14
`, "fabric_rdma_port_received_bytes_total", "fabric_rdma_hw_local_ack_timeout_err_total", "fabric_rdma_port_transmitted_bytes_total")
	// EACCES and EIO count (plus the fixture's garbage value); EINVAL is
	// "not available".
	if got := errs.Value(); got != 3 {
		t.Errorf("read errors = %v, want 3", got)
	}
}

// An HCA that disappears is dropped (and its files closed); when it comes
// back it is read again without a restart.
func TestRDMADeviceRemovedAndRestored(t *testing.T) {
	sys := copyTree(t, fixtureSys)
	c, _ := newTestRDMA(t, fixtureOptions(t, sys))
	count := func() int {
		return testutil.CollectAndCount(updater{c: c}, "fabric_rdma_port_transmitted_bytes_total")
	}
	if n := count(); n != 4 {
		t.Fatalf("series before = %d, want 4", n)
	}
	link := filepath.Join(sys, "class", "infiniband", "mlx5_3")
	target, _ := os.Readlink(link)
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 3 {
		t.Fatalf("series with mlx5_3 removed = %d, want 3", n)
	}
	if c.devices.Has("mlx5_3") {
		t.Error("removed device still cached")
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 4 {
		t.Fatalf("series after restore = %d, want 4", n)
	}
}

// Counters are exported raw: a 32-bit hw counter that wraps goes down and
// Prometheus' rate() treats it as a reset. Values written in place (as sysfs
// changes them) are seen through the kept-open files.
func TestRDMACountersFollowUpdates(t *testing.T) {
	sys := copyTree(t, fixtureSys)
	c, _ := newTestRDMA(t, fixtureOptions(t, sys))
	path := filepath.Join(sys, "class", "infiniband", "mlx5_0", "ports", "1", "hw_counters", "local_ack_timeout_err")
	want := func(v string) {
		t.Helper()
		compare(t, c, `
# HELP fabric_rdma_hw_local_ack_timeout_err_total RDMA hardware counter local_ack_timeout_err (sysfs hw_counters; mlx5 Q counters are 32 bits wide and wrap).
# TYPE fabric_rdma_hw_local_ack_timeout_err_total counter
fabric_rdma_hw_local_ack_timeout_err_total{device="mlx5_0",port="1",rail="mlx5_0"} `+v+`
fabric_rdma_hw_local_ack_timeout_err_total{device="mlx5_3",port="1",rail="mlx5_3"} 0
`, "fabric_rdma_hw_local_ack_timeout_err_total")
	}
	want("2705")
	testenv.RewriteFile(t, path, "4294967295\n")
	want("4.294967295e+09")
	testenv.RewriteFile(t, path, "7\n")
	want("7")
}

func TestRDMADeviceFilter(t *testing.T) {
	o := fixtureOptions(t, fixtureSys)
	o.RDMA.DeviceInclude = "mlx5_.*"
	c, _ := newTestRDMA(t, o)
	if n := testutil.CollectAndCount(updater{c: c}, "fabric_rdma_device_info"); n != 2 {
		t.Errorf("devices with include mlx5_.* = %d, want 2", n)
	}
}

// Reads never leave --path.sysfs: a counter that is an absolute symlink, or
// a relative one climbing out of the tree, is not read.
func TestRDMASymlinksConfinedToSysfs(t *testing.T) {
	outside := t.TempDir()
	testenv.WriteFile(t, filepath.Join(outside, "secret"), "4242\n")
	root := t.TempDir()
	hw := filepath.Join(root, "class", "infiniband", "mlx5_9", "ports", "1", "hw_counters")
	testenv.WriteFile(t, filepath.Join(hw, "..", "link_layer"), "Ethernet\n")
	testenv.WriteFile(t, filepath.Join(hw, "..", "state"), "4: ACTIVE\n")
	testenv.WriteFile(t, filepath.Join(hw, "ok_counter"), "7\n")
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(hw, "abs_escape")); err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(hw, filepath.Join(outside, "secret"))
	if err := os.Symlink(rel, filepath.Join(hw, "rel_escape")); err != nil {
		t.Fatal(err)
	}
	c, _ := newTestRDMA(t, fixtureOptions(t, root))
	// Symlinks are not regular files: list them as counters to make sure the
	// read itself refuses them.
	c.devices.Get("mlx5_9", func(dir string) (*ibDevice, error) { return c.scanDevice("mlx5_9", dir, nil) })
	d, _ := c.devices.Get("mlx5_9", nil)
	for _, f := range []string{"abs_escape", "rel_escape"} {
		fam := c.family("fabric_rdma_hw_"+f+"_total", "h", prometheus.CounterValue)
		d.ports[0].counters = append(d.ports[0].counters, counterFile{path: filepath.Join(hw, f), series: fam.With("mlx5_9", "1", ""), scale: 1})
	}
	var b exposition.Batch
	if err := c.Update(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	testFamilies.WriteText(&buf, []*exposition.Batch{&b})
	out := buf.String()
	if strings.Contains(out, "4242") || strings.Contains(out, "escape") {
		t.Errorf("a value from outside the sysfs root was exported:\n%s", out)
	}
	if !strings.Contains(out, `fabric_rdma_hw_ok_counter_total{device="mlx5_9",port="1",rail="mlx5_9"} 7`) {
		t.Errorf("the counter inside the tree is missing:\n%s", out)
	}
}

// A counter directory that cannot be listed when a device is first seen
// (hotplug, driver reload, permissions) is counted as a read error, logged
// once at warn and listed again on every scrape; its series appear as soon
// as the listing succeeds, without a restart.
func TestRDMACounterListingRetried(t *testing.T) {
	sys := copyTree(t, fixtureSys)
	hw := filepath.Join(sys, "class", "infiniband", "mlx5_0", "ports", "1", "hw_counters")
	if err := os.Rename(hw, hw+".saved"); err != nil {
		t.Fatal(err)
	}
	// A file where the directory should be: listing fails with ENOTDIR,
	// also when the test runs as root.
	if err := os.WriteFile(hw, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The fixture has deliberately broken counter files: read errors per
	// scrape of the intact tree.
	clean, _ := testEnv()
	cc, err := newRDMACollector(clean, fixtureOptions(t, fixtureSys))
	if err != nil {
		t.Fatal(err)
	}
	scrapeSamples(t, cc, "fabric_rdma_port_up")
	base := clean.ReadErrors.Value()

	var logs bytes.Buffer
	l := log.NewLogfmtLogger(&logs)
	env := Env{Logger: l, Families: testFamilies, ReadErrors: &exposition.Counter{}, Once: NewOnceLogger(l, 1024)}
	c, err := newRDMACollector(env, fixtureOptions(t, sys))
	if err != nil {
		t.Fatal(err)
	}
	hwSeries := func() int {
		n := 0
		for _, s := range scrapeSamples(t, c, "fabric_rdma_hw_local_ack_timeout_err_total") {
			if s["device"] == "mlx5_0" {
				n++
			}
		}
		return n
	}
	for scrape := 1; scrape <= 2; scrape++ {
		if n := hwSeries(); n != 0 {
			t.Fatalf("scrape %d: hw counter of mlx5_0 reported from a directory that cannot be listed", scrape)
		}
		if got, want := env.ReadErrors.Value(), float64(scrape)*(base+1); got != want {
			t.Errorf("scrape %d: read errors = %v, want %v (one per failed listing and %v of the fixture)", scrape, got, want, base)
		}
	}
	if n := strings.Count(logs.String(), "level=warn"); n != 1 || !strings.Contains(logs.String(), "cannot list RDMA port counters") {
		t.Errorf("want one warn line about the listing, got:\n%s", logs.String())
	}
	// The directory comes back: the counters appear on the next scrape.
	if err := os.Remove(hw); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(hw+".saved", hw); err != nil {
		t.Fatal(err)
	}
	if n := hwSeries(); n != 1 {
		t.Fatalf("after the directory came back: %d series of mlx5_0, want 1", n)
	}
	if got, want := env.ReadErrors.Value(), 2*(base+1)+base; got != want {
		t.Errorf("read errors after recovery = %v, want %v", got, want)
	}
	if !strings.Contains(logs.String(), "RDMA port counters listed") {
		t.Errorf("recovery not logged:\n%s", logs.String())
	}
}

// A device re-registered with a second Ethernet port renames its default
// rails (mlx5_0 becomes mlx5_0:1 and mlx5_0:2): the port series are bound
// to the new names and none keeps the old one, which fabric_rail_info
// still lists as not present.
func TestRDMARailRenamedOnReregistration(t *testing.T) {
	sys := copyTree(t, fixtureSys)
	c, _ := newTestRDMA(t, fixtureOptions(t, sys))
	fams := []string{"fabric_rdma_port_up", "fabric_rdma_port_rate_bytes_per_second", "fabric_rdma_port_transmitted_bytes_total", "fabric_rdma_hw_lifespan_seconds", "fabric_rdma_port_info"}
	checkRails(t, "start", railLabels(t, c), map[string]string{"mlx5_0:1": "mlx5_0", "mlx5_3:1": "mlx5_3"}, fams...)

	link := filepath.Join(sys, "class", "infiniband", "mlx5_0")
	target, err := os.Readlink(link)
	if err != nil {
		t.Fatal(err)
	}
	dev := filepath.Join(filepath.Dir(link), target)
	if err := fixturetree.Copy(filepath.Join(dev, "ports", "1"), filepath.Join(dev, "ports", "2")); err != nil {
		t.Fatal(err)
	}
	testenv.WriteFile(t, filepath.Join(dev, "ports", "2", "gid_attrs", "ndevs", "0"), "")
	// Re-registration changes the class link; the new link names the same
	// directory by another path (not filepath.Join: it would clean it).
	os.Remove(link)
	if err := os.Symlink(filepath.Dir(target)+"/../infiniband/mlx5_0", link); err != nil {
		t.Fatal(err)
	}
	got := railLabels(t, c)
	checkRails(t, "re-registered", got, map[string]string{"mlx5_0:1": "mlx5_0:1", "mlx5_0:2": "mlx5_0:2", "mlx5_3:1": "mlx5_3"}, fams...)
	if len(got["fabric_rdma_port_up"]) != 6 {
		t.Errorf("fabric_rdma_port_up of %v, want mlx5_0 ports 1 and 2 among them", got["fabric_rdma_port_up"])
	}
}

// When the rail of a port changes while its device stays registered, the
// port's cached series are bound to the new rail, counters listed at scan
// time included. The resolver changes a port's rail without a
// re-registration only in corner cases (a rail whose port was unreadable
// when its device was first seen); swapping the resolver between scrapes
// drives that path directly.
func TestRDMARebindsWhenRailChanges(t *testing.T) {
	sys := copyTree(t, fixtureSys)
	c, _ := newTestRDMA(t, fixtureOptions(t, sys, "fast0=mlx5_0"))
	fams := []string{"fabric_rdma_port_up", "fabric_rdma_port_rate_bytes_per_second", "fabric_rdma_port_transmitted_bytes_total",
		"fabric_rdma_hw_lifespan_seconds", "fabric_rdma_hw_local_ack_timeout_err_total", "fabric_rdma_port_info"}
	got := railLabels(t, c)
	checkRails(t, "fast0", got, map[string]string{"mlx5_0:1": "fast0"}, fams...)
	dev, _ := c.devices.Get("mlx5_0", nil)

	c.rails = fixtureOptions(t, sys, "slow0=mlx5_3", "fast1=mlx5_0").Rails
	got = railLabels(t, c)
	checkRails(t, "fast1", got, map[string]string{"mlx5_0:1": "fast1", "mlx5_3:1": "slow0"}, fams...)
	if now, _ := c.devices.Get("mlx5_0", nil); now != dev {
		t.Error("mlx5_0 was scanned again; the test means its cached series to be bound again")
	}
}

// fabric_rdma_retransmission_events_total adds up the port's six
// retransmission-class hw counters (fixture mlx5_0: local_ack_timeout_err
// 2705 + roce_adp_retrans 3), follows their increases, counts a 32-bit wrap
// of one of them as the events it counted (not as a reset of the sum), and
// is absent on ports without such counters (mlx4_0).
func TestRDMARetransmissionEventSum(t *testing.T) {
	sys := copyTree(t, fixtureSys)
	c, _ := newTestRDMA(t, fixtureOptions(t, sys))
	hw := filepath.Join(sys, "class", "infiniband", "mlx5_0", "ports", "1", "hw_counters")
	sum := func() map[string]float64 {
		t.Helper()
		out := map[string]float64{}
		for k, v := range updateValues(t, c) {
			if strings.HasPrefix(k, "fabric_rdma_retransmission_events_total{") {
				out[k] = v
			}
		}
		return out
	}
	want := func(mlx50 float64) {
		t.Helper()
		got := sum()
		exp := map[string]float64{
			"fabric_rdma_retransmission_events_total{mlx5_0,1,mlx5_0}": mlx50,
			"fabric_rdma_retransmission_events_total{mlx5_3,1,mlx5_3}": 3, // roce_adp_retrans
		}
		if len(got) != len(exp) {
			t.Fatalf("series %v, want %v", got, exp)
		}
		for k, v := range exp {
			if got[k] != v {
				t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
			}
		}
	}
	want(2708)
	testenv.RewriteFile(t, filepath.Join(hw, "packet_seq_err"), "10\n")
	want(2718)
	testenv.RewriteFile(t, filepath.Join(hw, "local_ack_timeout_err"), "4294967290\n") // +4294964585
	want(4294967303)
	testenv.RewriteFile(t, filepath.Join(hw, "local_ack_timeout_err"), "4\n") // wrapped: +10
	want(4294967313)
	// A counter listed again (a failed listing retried) keeps its last value.
	d, err := c.devices.Get("mlx5_0", func(string) (*ibDevice, error) { return nil, errors.New("not cached") })
	if err != nil {
		t.Fatal(err)
	}
	p := d.ports[0]
	p.listErr = errors.New("listing failed before")
	c.relist(d, p)
	testenv.RewriteFile(t, filepath.Join(hw, "roce_adp_retrans"), "5\n") // +2
	want(4294967315)
}

// The counters the exporter adds up are the ones the rules and the
// RoCERetransmissions runbook name as the retransmission class.
func TestRetransmissionCountersMatchRules(t *testing.T) {
	want := alerts.RetransmissionEventCounters()
	if len(want) != len(retransmissionCounters) {
		t.Fatalf("exporter sums %d counters, the rules name %d: %v", len(retransmissionCounters), len(want), want)
	}
	for _, c := range want {
		if !retransmissionCounters[c] {
			t.Errorf("the rules name %s; the exporter does not add it up", c)
		}
	}
}
