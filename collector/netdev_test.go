package collector

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func newTestNetdev(t testing.TB, o *Options) *netdevCollector {
	t.Helper()
	env, _ := testEnv()
	c, err := newNetdevCollector(env, o)
	if err != nil {
		t.Fatal(err)
	}
	return c.(*netdevCollector)
}

func TestNetdevFixture(t *testing.T) {
	c := newTestNetdev(t, fixtureOptions(t, fixtureSys))
	// Physical NICs only (lo and docker0 have no device link); eth2's link is
	// down, so it has no speed. Speeds: 400000 Mb/s x 125000 = 5e10 B/s.
	compare(t, c, `
# HELP fabric_netdev_info Network interface metadata; rail is "" when the interface carries no rail, numa_node "" when unknown.
# TYPE fabric_netdev_info gauge
fabric_netdev_info{driver="ixgbe",netdev="eth1",numa_node="0",operstate="up",pci_bus_id="0000:03:00.0",rail=""} 1
fabric_netdev_info{driver="ixgbe",netdev="eth2",numa_node="0",operstate="down",pci_bus_id="0000:03:00.1",rail=""} 1
fabric_netdev_info{driver="mlx5_core",netdev="eth0",numa_node="0",operstate="up",pci_bus_id="0000:18:00.0",rail="mlx5_0"} 1
fabric_netdev_info{driver="mlx5_core",netdev="eth3",numa_node="1",operstate="up",pci_bus_id="0000:9a:00.0",rail="mlx5_3"} 1
# HELP fabric_netdev_speed_bytes_per_second Link speed in bytes per second (absent while the link is down).
# TYPE fabric_netdev_speed_bytes_per_second gauge
fabric_netdev_speed_bytes_per_second{netdev="eth0",rail="mlx5_0"} 5e+10
fabric_netdev_speed_bytes_per_second{netdev="eth1",rail=""} 1.25e+09
fabric_netdev_speed_bytes_per_second{netdev="eth3",rail="mlx5_3"} 5e+10
# HELP fabric_netdev_up 1 if the interface's operstate is up, else 0.
# TYPE fabric_netdev_up gauge
fabric_netdev_up{netdev="eth0",rail="mlx5_0"} 1
fabric_netdev_up{netdev="eth1",rail=""} 1
fabric_netdev_up{netdev="eth2",rail=""} 0
fabric_netdev_up{netdev="eth3",rail="mlx5_3"} 1
# HELP fabric_netdev_received_bytes_total Bytes received by the interface (kernel stack; RoCE traffic bypasses it).
# TYPE fabric_netdev_received_bytes_total counter
fabric_netdev_received_bytes_total{netdev="eth0",rail="mlx5_0"} 2.195783498134e+12
fabric_netdev_received_bytes_total{netdev="eth1",rail=""} 9.61500123e+08
fabric_netdev_received_bytes_total{netdev="eth2",rail=""} 0
fabric_netdev_received_bytes_total{netdev="eth3",rail="mlx5_3"} 8.8034564921e+10
# HELP fabric_netdev_received_missed_errors_total Packets missed by the host (no buffer).
# TYPE fabric_netdev_received_missed_errors_total counter
fabric_netdev_received_missed_errors_total{netdev="eth0",rail="mlx5_0"} 0
fabric_netdev_received_missed_errors_total{netdev="eth1",rail=""} 0
fabric_netdev_received_missed_errors_total{netdev="eth2",rail=""} 0
fabric_netdev_received_missed_errors_total{netdev="eth3",rail="mlx5_3"} 12
`, "fabric_netdev_info", "fabric_netdev_speed_bytes_per_second", "fabric_netdev_up", "fabric_netdev_received_bytes_total", "fabric_netdev_received_missed_errors_total")
}

// Rail netdevs are always collected, even when the filter excludes them.
func TestNetdevFilterKeepsRails(t *testing.T) {
	o := fixtureOptions(t, fixtureSys)
	o.Netdev.DeviceExclude = "eth.*"
	c := newTestNetdev(t, o)
	compare(t, c, `
# HELP fabric_netdev_up 1 if the interface's operstate is up, else 0.
# TYPE fabric_netdev_up gauge
fabric_netdev_up{netdev="eth0",rail="mlx5_0"} 1
fabric_netdev_up{netdev="eth3",rail="mlx5_3"} 1
`, "fabric_netdev_up")
	// An include pattern may select virtual interfaces too.
	o.Netdev = NetdevOptions{DeviceInclude: "lo|eth1"}
	c = newTestNetdev(t, o)
	if n := testutil.CollectAndCount(updater{c: c}, "fabric_netdev_info"); n != 4 {
		t.Errorf("interfaces with include lo|eth1 = %d, want 4 (lo, eth1 and the two rail netdevs)", n)
	}
}

// A renamed interface is re-read under its new name; the old name vanishes.
func TestNetdevRenamed(t *testing.T) {
	sys := copyTree(t, fixtureSys)
	c := newTestNetdev(t, fixtureOptions(t, sys))
	if n := testutil.CollectAndCount(updater{c: c}, "fabric_netdev_up"); n != 4 {
		t.Fatalf("interfaces = %d, want 4", n)
	}
	classNet := filepath.Join(sys, "class", "net")
	target, _ := os.Readlink(filepath.Join(classNet, "eth1"))
	newTarget := filepath.Join(filepath.Dir(target), "ens1f0")
	if err := os.Rename(filepath.Join(classNet, target), filepath.Join(classNet, newTarget)); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(classNet, "eth1"))
	if err := os.Symlink(newTarget, filepath.Join(classNet, "ens1f0")); err != nil {
		t.Fatal(err)
	}
	compare(t, c, `
# HELP fabric_netdev_up 1 if the interface's operstate is up, else 0.
# TYPE fabric_netdev_up gauge
fabric_netdev_up{netdev="eth0",rail="mlx5_0"} 1
fabric_netdev_up{netdev="ens1f0",rail=""} 1
fabric_netdev_up{netdev="eth2",rail=""} 0
fabric_netdev_up{netdev="eth3",rail="mlx5_3"} 1
`, "fabric_netdev_up")
	if c.ifs.Has("eth1") {
		t.Error("old interface name still cached")
	}
}

// A virtio NIC's device link names the virtio device (virtio2), not its PCI
// function: pci_bus_id (and numa_node) come from the PCI function it sits
// on, the same 0000:00:03.0 form that fabric_pci_device_info gives.
func TestNetdevVirtioPCIAddress(t *testing.T) {
	sys := copyTree(t, fixtureSys)
	pci := filepath.Join(sys, "devices", "pci0000:00", "0000:00:03.0")
	nd := filepath.Join(pci, "virtio2", "net", "eth9")
	for _, d := range []string{filepath.Join(nd, "statistics"), filepath.Join(sys, "bus", "virtio", "drivers", "virtio_net")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(pci, "numa_node"):             "1\n",
		filepath.Join(nd, "operstate"):              "up\n",
		filepath.Join(nd, "speed"):                  "-1\n",
		filepath.Join(nd, "statistics", "rx_bytes"): "1234\n",
	}
	for p, v := range files {
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		filepath.Join(nd, "device"):                "../../../virtio2",
		filepath.Join(pci, "virtio2", "driver"):    "../../../../bus/virtio/drivers/virtio_net",
		filepath.Join(sys, "class", "net", "eth9"): "../../devices/pci0000:00/0000:00:03.0/virtio2/net/eth9",
	}
	for p, target := range links {
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	c := newTestNetdev(t, fixtureOptions(t, sys))
	var got map[string]string
	for _, s := range scrapeSamples(t, c, "fabric_netdev_info") {
		if s["netdev"] == "eth9" {
			got = s
		}
	}
	if got["pci_bus_id"] != "0000:00:03.0" || got["numa_node"] != "1" || got["driver"] != "virtio_net" {
		t.Errorf("virtio eth9 = %v, want pci_bus_id 0000:00:03.0, numa_node 1, driver virtio_net", got)
	}
}

// The rail label of an interface follows its rail without the interface
// being re-registered: when the RDMA device of eth0's rail goes away
// (mlx5_ib unloaded, mlx5_core's netdev stays) eth0's cached series are
// bound again without the rail, and with it when the device comes back. No
// series keeps the old label.
func TestNetdevRailFollowsRDMADevice(t *testing.T) {
	sys := copyTree(t, fixtureSys)
	c := newTestNetdev(t, fixtureOptions(t, sys))
	fams := []string{"fabric_netdev_up", "fabric_netdev_speed_bytes_per_second", "fabric_netdev_received_bytes_total", "fabric_netdev_info"}
	check := func(step, rail0 string) {
		t.Helper()
		got := railLabels(t, c)
		checkRails(t, step, got, map[string]string{"eth0": rail0, "eth3": "mlx5_3"}, fams...)
		if len(got["fabric_netdev_up"]) != 4 {
			t.Errorf("%s: fabric_netdev_up of %v, want eth0-eth3", step, got["fabric_netdev_up"])
		}
	}
	check("start", "mlx5_0")
	eth0, _ := c.ifs.Get("eth0", nil)
	link := filepath.Join(sys, "class", "infiniband", "mlx5_0")
	target, err := os.Readlink(link)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	check("RDMA device gone", "")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	check("RDMA device back", "mlx5_0")
	if now, _ := c.ifs.Get("eth0", nil); now != eth0 {
		t.Error("eth0 was scanned again; the test means its cached series to be bound again")
	}
}

// A rail netdev renamed after the exporter started (udev renaming eth0 to
// ens1f0np0 once the driver loaded) carries the rail under its new name.
func TestNetdevRailNetdevRenamed(t *testing.T) {
	sys := copyTree(t, fixtureSys)
	c := newTestNetdev(t, fixtureOptions(t, sys))
	checkRails(t, "start", railLabels(t, c), map[string]string{"eth0": "mlx5_0", "eth3": "mlx5_3"}, "fabric_netdev_up")

	classNet := filepath.Join(sys, "class", "net")
	target, _ := os.Readlink(filepath.Join(classNet, "eth0"))
	newTarget := filepath.Join(filepath.Dir(target), "ens1f0np0")
	if err := os.Rename(filepath.Join(classNet, target), filepath.Join(classNet, newTarget)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(classNet, "eth0")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(newTarget, filepath.Join(classNet, "ens1f0np0")); err != nil {
		t.Fatal(err)
	}
	ndev := filepath.Join(sys, "class", "infiniband", "mlx5_0", "ports", "1", "gid_attrs", "ndevs", "0")
	if err := os.WriteFile(ndev, []byte("ens1f0np0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := railLabels(t, c)
	checkRails(t, "renamed", got, map[string]string{"ens1f0np0": "mlx5_0", "eth3": "mlx5_3"}, "fabric_netdev_up", "fabric_netdev_received_bytes_total")
	if _, ok := got["fabric_netdev_up"]["ens1f0np0"]; !ok {
		t.Errorf("renamed rail netdev missing: %v", got["fabric_netdev_up"])
	}
}
