package collector

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
)

const (
	kmsgFixture  = "../internal/kmsg/testdata/fabric.kmsg"
	kevTotalHelp = `Kernel log lines of a fabric event (internal/kmsg) since the exporter started, by class (mlx5, netdev, port_module, pcie, xid) and kind (an Xid's code for xid): the PCI function the line names (pci_bus_id), the RDMA device and netdev on it, the rails and GPUs (as fabric_pci_device_info numbers them) at or below it, "" where none.`
	kevLastHelp  = "When the latest event of the series of fabric_kernel_events_total was logged: the time the exporter read it (within --collector.kernel-events.poll-interval of the kernel logging it), or for records already in the log when the exporter opened it, the record's boot-relative time on this host's clock (which drifts from the wall clock with uptime)."
)

// newTestKernelEvents builds the collector on the sysfs fixture reading
// path, with the clock fixed (now 2026-01-01T00:00:00Z, 20 s since boot),
// without its poller: the test polls.
func newTestKernelEvents(t testing.TB, path string, maxSeries int) *kernelEventsCollector {
	t.Helper()
	env, _ := testEnv()
	o := fixtureOptions(t, fixtureSys)
	o.KernelEvents = KernelEventsOptions{Path: path, MaxSeries: maxSeries}
	c, err := newKernelEventsState(env, o)
	if err != nil {
		t.Fatal(err)
	}
	c.now = func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }
	c.uptime = func() time.Duration { return 20 * time.Second }
	c.devs.now = c.now
	t.Cleanup(c.Close)
	return c
}

// The fixture's events joined to the sysfs fixture's devices: the HCA's
// own lines name its RDMA device, netdev and rail; the pre-6.8 watchdog
// line names only eth3 (its function and rail from sysfs); a switch
// downstream port's link loss names GPU 0 below it, the switch upstream
// port's AER line mlx5_0's rail and GPUs 0 and 1; the Xid's address is
// GPU 2's function. The record a process wrote is no event; the missing
// sequence number 1004 is a lost record.
func TestKernelEventsFixture(t *testing.T) {
	c := newTestKernelEvents(t, kmsgFixture, 0)
	c.pollOnce(context.Background())
	const boot = 1767225580 // now less 20 s
	want := fmt.Sprintf(`
# HELP fabric_kernel_events_total %[1]s
# TYPE fabric_kernel_events_total counter
fabric_kernel_events_total{class="mlx5",device="mlx5_0",gpu="",kind="command_timeout",netdev="eth0",pci_bus_id="0000:18:00.0",rail="mlx5_0"} 2
fabric_kernel_events_total{class="netdev",device="mlx5_3",gpu="",kind="tx_timeout",netdev="eth3",pci_bus_id="0000:9a:00.0",rail="mlx5_3"} 1
fabric_kernel_events_total{class="netdev",device="mlx5_3",gpu="",kind="mlx5e_tx_timeout",netdev="eth3",pci_bus_id="0000:9a:00.0",rail="mlx5_3"} 1
fabric_kernel_events_total{class="port_module",device="mlx5_3",gpu="",kind="cable_unplugged",netdev="eth3",pci_bus_id="0000:9a:00.0",rail="mlx5_3"} 1
fabric_kernel_events_total{class="pcie",device="",gpu="0",kind="link_down",netdev="",pci_bus_id="0000:17:01.0",rail=""} 1
fabric_kernel_events_total{class="xid",device="",gpu="0",kind="79",netdev="",pci_bus_id="0000:19:00.0",rail=""} 1
fabric_kernel_events_total{class="pcie",device="",gpu="0",kind="gpu_fallen_off_bus",netdev="",pci_bus_id="0000:19:00.0",rail=""} 1
fabric_kernel_events_total{class="pcie",device="",gpu="0,1",kind="aer_correctable",netdev="",pci_bus_id="0000:16:00.0",rail="mlx5_0"} 1
fabric_kernel_events_total{class="xid",device="",gpu="2",kind="48",netdev="",pci_bus_id="0000:3a:00.0",rail=""} 1
# HELP fabric_kernel_event_last_timestamp_seconds %[2]s
# TYPE fabric_kernel_event_last_timestamp_seconds gauge
fabric_kernel_event_last_timestamp_seconds{class="mlx5",device="mlx5_0",gpu="",kind="command_timeout",netdev="eth0",pci_bus_id="0000:18:00.0",rail="mlx5_0"} %[3]v
fabric_kernel_event_last_timestamp_seconds{class="netdev",device="mlx5_3",gpu="",kind="tx_timeout",netdev="eth3",pci_bus_id="0000:9a:00.0",rail="mlx5_3"} %[4]v
fabric_kernel_event_last_timestamp_seconds{class="netdev",device="mlx5_3",gpu="",kind="mlx5e_tx_timeout",netdev="eth3",pci_bus_id="0000:9a:00.0",rail="mlx5_3"} %[5]v
fabric_kernel_event_last_timestamp_seconds{class="port_module",device="mlx5_3",gpu="",kind="cable_unplugged",netdev="eth3",pci_bus_id="0000:9a:00.0",rail="mlx5_3"} %[6]v
fabric_kernel_event_last_timestamp_seconds{class="pcie",device="",gpu="0",kind="link_down",netdev="",pci_bus_id="0000:17:01.0",rail=""} %[7]v
fabric_kernel_event_last_timestamp_seconds{class="xid",device="",gpu="0",kind="79",netdev="",pci_bus_id="0000:19:00.0",rail=""} %[8]v
fabric_kernel_event_last_timestamp_seconds{class="pcie",device="",gpu="0",kind="gpu_fallen_off_bus",netdev="",pci_bus_id="0000:19:00.0",rail=""} %[9]v
fabric_kernel_event_last_timestamp_seconds{class="pcie",device="",gpu="0,1",kind="aer_correctable",netdev="",pci_bus_id="0000:16:00.0",rail="mlx5_0"} %[10]v
fabric_kernel_event_last_timestamp_seconds{class="xid",device="",gpu="2",kind="48",netdev="",pci_bus_id="0000:3a:00.0",rail=""} %[11]v
# HELP fabric_kernel_log_records_total Kernel log records read since the exporter started (every record, kernel's and userspace's).
# TYPE fabric_kernel_log_records_total counter
fabric_kernel_log_records_total 12
# HELP fabric_kernel_log_lost_records_total Kernel log records overwritten in the kernel's buffer before the exporter read them (gaps in the sequence numbers): events among them are not counted.
# TYPE fabric_kernel_log_lost_records_total counter
fabric_kernel_log_lost_records_total 1
`, kevTotalHelp, kevLastHelp, boot+9.5, boot+5.1, boot+5.1, boot+6.0, boot+7.0, boot+7.0, boot+7.0, boot+8.0, boot+10.0)
	compare(t, c, want, "fabric_kernel_events_total", "fabric_kernel_event_last_timestamp_seconds",
		"fabric_kernel_log_records_total", "fabric_kernel_log_lost_records_total", "fabric_kernel_events_dropped_total")
	// Read again: nothing new, the same counts.
	c.pollOnce(context.Background())
	if v := updateValues(t, c)["fabric_kernel_events_total{mlx5,command_timeout,mlx5_0,eth0,0000:18:00.0,mlx5_0,}"]; v != 2 {
		t.Errorf("after a second poll: %v", v)
	}
}

// Beyond max-series label sets, events are counted per class as dropped.
func TestKernelEventsMaxSeries(t *testing.T) {
	c := newTestKernelEvents(t, kmsgFixture, 2)
	c.pollOnce(context.Background())
	got := updateValues(t, c)
	n := 0
	for k := range got {
		if strings.HasPrefix(k, "fabric_kernel_events_total{") {
			n++
		}
	}
	// The first two label sets (mlx5 command_timeout, counted twice, and
	// netdev tx_timeout); dropped: netdev 1, port_module 1, pcie 3, xid 2.
	if n != 2 || got["fabric_kernel_events_total{mlx5,command_timeout,mlx5_0,eth0,0000:18:00.0,mlx5_0,}"] != 2 ||
		got["fabric_kernel_events_dropped_total{netdev}"] != 1 || got["fabric_kernel_events_dropped_total{port_module}"] != 1 ||
		got["fabric_kernel_events_dropped_total{pcie}"] != 3 || got["fabric_kernel_events_dropped_total{xid}"] != 2 {
		t.Errorf("%d series: %v", n, got)
	}
	if _, ok := got["fabric_kernel_events_dropped_total{mlx5}"]; ok {
		t.Error("a class with nothing dropped has a dropped series")
	}
}

// The states: no path is not configured; a missing device, and one the
// exporter may not read, are source_missing with the privilege it needs.
func TestKernelEventsStates(t *testing.T) {
	c := newTestKernelEvents(t, "", 0)
	if st, reason := classify(c.Update(context.Background(), &exposition.Batch{})); st != StateNotConfigured {
		t.Errorf("no path: %s %s", st, reason)
	}
	procfs := t.TempDir()
	if err := os.MkdirAll(filepath.Join(procfs, "sys", "kernel"), 0o755); err != nil {
		t.Fatal(err)
	}
	restrict := func(v string) {
		if err := os.WriteFile(filepath.Join(procfs, "sys", "kernel", "dmesg_restrict"), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c = newTestKernelEvents(t, "/dev/kmsg", 0)
	c.procfs = procfs
	for _, tc := range []struct {
		err      error
		restrict string
		state    State
		reason   string
	}{
		{&os.PathError{Op: "open", Path: "/dev/kmsg", Err: unix.ENOENT}, "1", StateSourceMissing,
			"/dev/kmsg does not exist: give the container the host's device (docker run --device /dev/kmsg; Kubernetes: components/kernel-events relays it) or correct --collector.kernel-events.path"},
		// The image's user 65534 gets no SYSLOG from --cap-add: its binary's
		// file capabilities are SYS_PTRACE and DAC_READ_SEARCH (Dockerfile).
		{&os.PathError{Op: "open", Path: "/dev/kmsg", Err: unix.EPERM}, "1", StateSourceMissing,
			"cannot read /dev/kmsg: permission denied: reading the kernel log needs CAP_SYSLOG (kernel.dmesg_restrict is 1): docker run --user 0 --cap-add SYSLOG --device /dev/kmsg; systemd: deploy/systemd/kernel-events.conf; Kubernetes: components/kernel-events"},
		{&os.PathError{Op: "open", Path: "/dev/kmsg", Err: unix.EPERM}, "", StateSourceMissing,
			"cannot read /dev/kmsg: permission denied: reading the kernel log needs CAP_SYSLOG (kernel.dmesg_restrict is unknown): docker run --user 0 --cap-add SYSLOG --device /dev/kmsg; systemd: deploy/systemd/kernel-events.conf; Kubernetes: components/kernel-events"},
		{&os.PathError{Op: "open", Path: "/dev/kmsg", Err: unix.EPERM}, "0", StateSourceMissing,
			"cannot read /dev/kmsg: permission denied although kernel.dmesg_restrict is 0: a device cgroup denies it: docker run --device /dev/kmsg; in Kubernetes only a privileged container opens a host device: components/kernel-events relays it"},
		{&os.PathError{Op: "open", Path: "/dev/kmsg", Err: unix.EIO}, "1", StateFailed, "opening /dev/kmsg: open /dev/kmsg: input/output error"},
	} {
		if tc.restrict == "" {
			os.Remove(filepath.Join(procfs, "sys", "kernel", "dmesg_restrict"))
		} else {
			restrict(tc.restrict)
		}
		c.mu.Lock()
		c.openErr = tc.err
		c.mu.Unlock()
		st, reason := classify(c.Update(context.Background(), &exposition.Batch{}))
		if st != tc.state || reason != tc.reason {
			t.Errorf("%v (dmesg_restrict %s): %s %q, want %s %q", tc.err, tc.restrict, st, reason, tc.state, tc.reason)
		}
	}

	// Another path: the FIFO of relay-kmsg (not made yet, or not readable).
	fifo := filepath.Join(t.TempDir(), "kmsg")
	c = newTestKernelEvents(t, fifo, 0)
	c.procfs = procfs
	for _, tc := range []struct {
		err    error
		reason string
	}{
		{&os.PathError{Op: "open", Path: fifo, Err: unix.ENOENT},
			fifo + " does not exist: start fabric_exporter relay-kmsg --output=" + fifo + " (components/kernel-events) or correct --collector.kernel-events.path"},
		{&os.PathError{Op: "open", Path: fifo, Err: unix.EACCES},
			"cannot read " + fifo + ": permission denied: let the exporter's user read it (relay-kmsg makes its FIFO mode 0644)"},
	} {
		c.mu.Lock()
		c.openErr = tc.err
		c.mu.Unlock()
		if st, reason := classify(c.Update(context.Background(), &exposition.Batch{})); st != StateSourceMissing || reason != tc.reason {
			t.Errorf("%v: %s %q, want source_missing %q", tc.err, st, reason, tc.reason)
		}
	}
}

// The collector on its own poller follows a recording that grows, as it
// follows the device, and stops with Close.
func TestKernelEventsFollows(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kmsg")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	env, _ := testEnv()
	o := fixtureOptions(t, fixtureSys)
	o.KernelEvents = KernelEventsOptions{Path: p, PollInterval: 10 * time.Millisecond}
	cc, err := newKernelEventsCollector(env, o)
	if err != nil {
		t.Fatal(err)
	}
	c := cc.(*kernelEventsCollector)
	defer c.Close()
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fmt.Fprint(f, "3,1,5,-;mlx5_core 0000:9a:00.0: poll_health:709:(pid 0): device's health compromised - reached miss count\n SUBSYSTEM=pci\n DEVICE=+pci:0000:9a:00.0\n")
	const key = "fabric_kernel_events_total{mlx5,health_compromised,mlx5_3,eth3,0000:9a:00.0,mlx5_3,}"
	deadline := time.Now().Add(10 * time.Second)
	for updateValues(t, c)[key] != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the event was not counted: %v", updateValues(t, c))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkKernelEventsBurst is one poll of a burst of 10,000 kernel log
// records (one in 100 an event of the fixture, 9 label sets), the
// collector's whole path: read, classify, join, count. ns/op is per burst.
func BenchmarkKernelEventsBurst(b *testing.B) {
	fixture, err := os.ReadFile(kmsgFixture)
	if err != nil {
		b.Fatal(err)
	}
	var events []string
	for _, l := range strings.Split(string(fixture), "\n") {
		if l != "" && l[0] != ' ' && !strings.HasPrefix(l, "12,") {
			_, msg, _ := strings.Cut(l, ";")
			events = append(events, msg)
		}
	}
	var sb strings.Builder
	for i := 0; i < 10000; i++ {
		if i%100 == 99 {
			fmt.Fprintf(&sb, "3,%d,%d,-;%s\n", i, i*10, events[(i/100)%len(events)])
		} else {
			fmt.Fprintf(&sb, "6,%d,%d,-;virtio-pci 0000:00:0%d.0: enabling device (0000 -> 0002)\n SUBSYSTEM=pci\n DEVICE=+pci:0000:00:0%d.0\n", i, i*10, i%8, i%8)
		}
	}
	p := filepath.Join(b.TempDir(), "burst.kmsg")
	if err := os.WriteFile(p, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	c := newTestKernelEvents(b, p, 0)
	c.pollOnce(context.Background()) // the device tables, once
	b.ReportAllocs()
	for b.Loop() {
		c.reader.Close()
		c.reader = nil
		c.pollOnce(context.Background())
	}
}

// Records logged after the exporter caught up are stamped when read, not
// by the kernel's local clock: on a host up 180 days the boot-relative
// estimate is minutes off (local_clock is not slewed by NTP), here 5
// minutes behind. The backlog found at open keeps its estimate.
func TestKernelEventsLiveRecordsStampedWhenRead(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kmsg")
	if err := os.WriteFile(p, []byte("3,1,5000000,-;mlx5_core 0000:18:00.0: wait_func:1166:(pid 9): ACCESS_REG(0x805) timeout. Will cause a leak of a command resource\n SUBSYSTEM=pci\n DEVICE=+pci:0000:18:00.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := newTestKernelEvents(t, p, 0)
	c.opts.Replay = true
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }
	// The kernel's clock says 20 s since boot: its stamps (5 s, then 19 s)
	// put the records 5 minutes before the wall clock's truth.
	c.uptime = func() time.Duration { return 20 * time.Second }
	c.pollOnce(context.Background())
	const key = "fabric_kernel_event_last_timestamp_seconds{mlx5,command_timeout,mlx5_0,eth0,0000:18:00.0,mlx5_0,}"
	boot := float64(now.Unix() - 20)
	if v := updateValues(t, c)[key]; v != boot+5 {
		t.Fatalf("the backlog's record at %v, want %v (its boot-relative time)", v, boot+5)
	}
	f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	fmt.Fprint(f, "3,2,19000000,-;mlx5_core 0000:18:00.0: wait_func:1166:(pid 9): ACCESS_REG(0x805) timeout. Will cause a leak of a command resource\n SUBSYSTEM=pci\n DEVICE=+pci:0000:18:00.0\n")
	f.Close()
	now = now.Add(5 * time.Minute)
	c.pollOnce(context.Background())
	if v := updateValues(t, c)[key]; v != float64(now.Unix()) {
		t.Errorf("a live record at %v, want %v (when it was read)", v, now.Unix())
	}
}

// A driver command the exporter itself issued (an ethtool statistics or
// module read the device refuses: the line's pid is the exporter's) is not
// counted as an event, nor paged on; it is counted apart. The same line
// from another process is an event.
func TestKernelEventsSelfInflicted(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kmsg")
	line := func(seq, pid int) string {
		return fmt.Sprintf("3,%d,5000000,-;mlx5_core 0000:18:00.0: wait_func:1189:(pid %d): ACCESS_REG(0x805) timeout. Will cause a leak of a command resource\n SUBSYSTEM=pci\n DEVICE=+pci:0000:18:00.0\n", seq, pid)
	}
	if err := os.WriteFile(p, []byte(line(1, os.Getpid())+line(2, os.Getpid())+line(3, 72061)), 0o644); err != nil {
		t.Fatal(err)
	}
	c := newTestKernelEvents(t, p, 0)
	c.pollOnce(context.Background())
	v := updateValues(t, c)
	if n := v["fabric_kernel_events_total{mlx5,command_timeout,mlx5_0,eth0,0000:18:00.0,mlx5_0,}"]; n != 1 {
		t.Errorf("events %v, want 1 (another process's): %v", n, v)
	}
	if n := v["fabric_kernel_events_self_inflicted_total{mlx5,command_timeout}"]; n != 2 {
		t.Errorf("self-inflicted %v, want 2: %v", n, v)
	}
}
