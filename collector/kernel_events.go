package collector

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/kmsg"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// The kernel-events collector follows the kernel log (/dev/kmsg) from the
// exporter's start and counts the lines internal/kmsg classifies: mlx5
// health and command timeouts, transmit queue timeouts, port module
// (cable) events, PCIe AER summaries, hot-plug link loss and DPC, NVIDIA
// Xid and GPUs fallen off the bus: the failures no counter moves for.
// Each event is joined to what it breaks: the PCI function the line
// names, the RDMA device and netdev on it, and the rails and GPUs at or
// below it in the PCI tree (a switch port's line names every device behind
// it), from sysfs. A GPU is numbered as the topology collector numbers
// it: NVIDIA display and 3D functions in PCI bus order (nvidia-smi's
// order); Env.GPUs offers no PCI address, so it is not used.
//
// The log is read on the shared poller (every --collector.kernel-events.
// poll-interval, at most kernelEventsBurst records a poll, the rest at
// once after); a scrape copies the counts. Memory is bounded: at most
// --collector.kernel-events.max-series label sets (further events are
// counted per class in fabric_kernel_events_dropped_total), the device
// tables as large as the host's PCI tree.

// KernelEventsOptions configures the kernel-events collector. Zero
// PollInterval and MaxSeries (Options built in code) mean the defaults.
type KernelEventsOptions struct {
	Path         string        // --collector.kernel-events.path
	Replay       bool          // --collector.kernel-events.replay
	PollInterval time.Duration // --collector.kernel-events.poll-interval
	MaxSeries    int           // --collector.kernel-events.max-series
}

func kernelEventsFlags(app *kingpin.Application, o *Options) {
	k := &o.KernelEvents
	app.Flag("collector.kernel-events.path", "The kernel log device, followed from the exporter's start. Not under --path.rootfs: a container reads the host's log only through the device itself (docker run --device /dev/kmsg) or through the FIFO of `fabric_exporter relay-kmsg`; reading the device needs CAP_SYSLOG where kernel.dmesg_restrict is 1. A regular file or FIFO is read from its start as a recording of /dev/kmsg records: the relay's FIFO (deploy/kubernetes/components/kernel-events), tests, make demo.").
		Default("/dev/kmsg").StringVar(&k.Path)
	app.Flag("collector.kernel-events.replay", "Also count the records still in the kernel's log buffer at start (events since boot, as far as the buffer reaches). Off: every restart of the exporter would count the same old events again as new ones.").BoolVar(&k.Replay)
	app.Flag("collector.kernel-events.poll-interval", "How often the kernel log is read.").Default("1s").
		Action(atLeastDuration("collector.kernel-events.poll-interval", &k.PollInterval, kernelEventsMinPoll)).DurationVar(&k.PollInterval)
	app.Flag("collector.kernel-events.max-series", "Most label sets (class, kind, device) of fabric_kernel_events_total; events of further ones are counted in fabric_kernel_events_dropped_total.").Default("256").
		Action(atLeastInt("collector.kernel-events.max-series", &k.MaxSeries, 1)).IntVar(&k.MaxSeries)
}

const (
	kernelEventsMinPoll = 10 * time.Millisecond
	kernelEventsBurst   = 4096             // records read per poll
	kevRebuildEvery     = 30 * time.Second // device tables re-read at most this often
)

// kevKey is an event's label set before the join (what the line says).
type kevKey struct{ class, kind, pci, netdev string }

type kevEvent struct {
	labels        [7]string // class, kind, device, netdev, pci_bus_id, rail, gpu
	count, last   float64
	total, lastTS *exposition.Series // built by Update
}

type kernelEventsCollector struct {
	opts   KernelEventsOptions
	procfs string
	env    Env
	poller
	now    func() time.Time
	uptime func() time.Duration // the clock of the kernel's log timestamps
	devs   *kevDevices          // poll goroutine only
	reader *kmsg.Reader         // poll goroutine only
	// live: the reader has drained what the log held when it was opened;
	// records read from then on are stamped with the time they were read
	// (poll goroutine only).
	live bool

	base    kmsg.Stats // what readers closed after a read error had read (poll goroutine only)
	mu      sync.Mutex // what the polls read, for Update
	openErr error
	readErr error
	stats   kmsg.Stats
	byKey   map[kevKey]*kevEvent
	events  []*kevEvent // in the order first seen
	dropped [len(kmsg.Classes)]float64
	// self counts the events of commands the exporter itself issued (its
	// PIDs: selfPIDs), by class and kind: not in fabric_kernel_events_total.
	self     map[[2]string]float64
	selfPIDs map[int]bool
	selfF    *exposition.Family

	total, last     *exposition.Family
	recordsS, lostS *exposition.Series
	droppedS        [len(kmsg.Classes)]*exposition.Series
}

func newKernelEventsCollector(env Env, o *Options) (Collector, error) {
	c, err := newKernelEventsState(env, o)
	if err != nil || c.opts.Path == "" {
		return c, err
	}
	c.reader, c.openErr = kmsg.Open(c.opts.Path, c.opts.Replay)
	c.poller.start(c.opts.PollInterval, c.pollOnce)
	return c, nil
}

// newKernelEventsState builds the collector without opening the log.
func newKernelEventsState(env Env, o *Options) (*kernelEventsCollector, error) {
	k := o.KernelEvents
	if k.PollInterval == 0 {
		k.PollInterval = time.Second
	}
	if k.MaxSeries == 0 {
		k.MaxSeries = 256
	}
	if k.PollInterval < kernelEventsMinPoll || k.MaxSeries < 1 {
		return nil, fmt.Errorf("--collector.kernel-events.poll-interval %s (at least %s), --collector.kernel-events.max-series %d (at least 1)",
			k.PollInterval, kernelEventsMinPoll, k.MaxSeries)
	}
	procfs := o.ProcfsPath
	if procfs == "" {
		procfs = "/proc"
	}
	labels := []string{"class", "kind", "device", "netdev", "pci_bus_id", "rail", "gpu"}
	c := &kernelEventsCollector{opts: k, procfs: procfs, env: env, now: time.Now, uptime: monotonic,
		devs:  &kevDevices{sysfs: o.SysfsPath, rails: o.Rails, now: time.Now},
		byKey: map[kevKey]*kevEvent{},
		total: env.Families.NewFamily("fabric_kernel_events_total",
			"Kernel log lines of a fabric event (internal/kmsg) since the exporter started, by class (mlx5, netdev, port_module, pcie, xid) and kind (an Xid's code for xid): the PCI function the line names (pci_bus_id), the RDMA device and netdev on it, the rails and GPUs (as fabric_pci_device_info numbers them) at or below it, \"\" where none.",
			prometheus.CounterValue, labels...),
		last: env.Families.NewFamily("fabric_kernel_event_last_timestamp_seconds",
			"When the latest event of the series of fabric_kernel_events_total was logged: the time the exporter read it (within --collector.kernel-events.poll-interval of the kernel logging it), or for records already in the log when the exporter opened it, the record's boot-relative time on this host's clock (which drifts from the wall clock with uptime).",
			prometheus.GaugeValue, labels...),
	}
	c.recordsS = env.Families.NewFamily("fabric_kernel_log_records_total",
		"Kernel log records read since the exporter started (every record, kernel's and userspace's).", prometheus.CounterValue).With()
	c.lostS = env.Families.NewFamily("fabric_kernel_log_lost_records_total",
		"Kernel log records overwritten in the kernel's buffer before the exporter read them (gaps in the sequence numbers): events among them are not counted.", prometheus.CounterValue).With()
	c.self, c.selfPIDs = map[[2]string]float64{}, selfPIDs(c.procfs)
	c.selfF = env.Families.NewFamily("fabric_kernel_events_self_inflicted_total",
		"Kernel log events of driver commands the exporter itself issued (the line's (pid N) is the exporter's: an ethtool statistics or module read that the device refused, as HGX B200/B300 limited PFs refuse ACCESS_REG), by class and kind. Not counted in fabric_kernel_events_total, and no alert reads them; exclude such devices with --collector.phy.device-exclude.", prometheus.CounterValue, "class", "kind")
	dropped := env.Families.NewFamily("fabric_kernel_events_dropped_total",
		"Events not counted in fabric_kernel_events_total because --collector.kernel-events.max-series label sets were in use.", prometheus.CounterValue, "class")
	for i, cl := range kmsg.Classes {
		c.droppedS[i] = dropped.With(cl)
	}
	return c, nil
}

// monotonic is CLOCK_MONOTONIC, the clock the kernel's log timestamps
// follow (local_clock: since boot, without suspend).
func monotonic() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// pollOnce reads what the kernel logged since the last poll.
func (c *kernelEventsCollector) pollOnce(ctx context.Context) {
	if c.reader == nil { // not opened yet, or reopened after a read error
		r, err := kmsg.Open(c.opts.Path, c.opts.Replay)
		c.mu.Lock()
		c.openErr = err
		c.mu.Unlock()
		if err != nil {
			return
		}
		c.reader = r
	}
	// A record's time: the kernel stamps it with local_clock(), which NTP
	// does not slew, so now - CLOCK_MONOTONIC + the stamp drifts from the
	// wall clock as the host's uptime grows (20 ppm over 180 days: 5
	// minutes), and the rules' windows with it. A record read as it comes
	// (within a poll interval of being logged) is stamped when read; only
	// the backlog found at open (--collector.kernel-events.replay, or
	// records a relay kept while the exporter restarted) takes the
	// boot-relative estimate.
	now := c.now()
	boot := now.Add(-c.uptime())
	live := c.live
	more, err := c.reader.Poll(kernelEventsBurst, func(r *kmsg.Record) {
		if e, ok := kmsg.Classify(r); ok {
			if pid, ok := kmsg.IssuerPID(r.Message); ok && c.selfPIDs[pid] {
				c.mu.Lock()
				c.self[[2]string{e.Class, e.Kind}]++
				c.mu.Unlock()
				return
			}
			at := now
			if !live {
				at = boot.Add(time.Duration(r.Usec) * time.Microsecond)
			}
			c.count(ctx, e, at)
		}
	})
	if err == nil && !more {
		c.live = true
	}
	st, total := c.reader.Stats(), c.base
	total.Records, total.Lost, total.Malformed = total.Records+st.Records, total.Lost+st.Lost, total.Malformed+st.Malformed
	if err != nil {
		c.env.ReadErrors.Inc()
		c.env.Once.Warn("kernel-events:read", "msg", "cannot read the kernel log; reopening it", "path", c.opts.Path, "err", err)
		c.reader.Close()
		c.reader, c.base, c.live = nil, total, false
	}
	c.mu.Lock()
	c.stats, c.readErr = total, err
	c.mu.Unlock()
	if more {
		c.poller.Wake()
	}
}

// count adds one event, joining a new label set to its devices first.
func (c *kernelEventsCollector) count(ctx context.Context, e kmsg.Event, at time.Time) {
	key := kevKey{e.Class, e.Kind, e.PCI, e.Netdev}
	c.mu.Lock()
	ev := c.byKey[key]
	full := ev == nil && len(c.events) >= c.opts.MaxSeries
	if i := slices.Index(kmsg.Classes[:], e.Class); full && i >= 0 {
		c.dropped[i]++
	}
	c.mu.Unlock()
	if full {
		return
	}
	if ev == nil {
		ev = &kevEvent{labels: c.devs.labels(ctx, e)}
		c.mu.Lock()
		c.byKey[key] = ev
		c.events = append(c.events, ev)
		c.mu.Unlock()
	}
	ts := float64(at.UnixMilli()) / 1e3
	c.mu.Lock()
	ev.count++
	ev.last = max(ev.last, ts)
	c.mu.Unlock()
}

func (c *kernelEventsCollector) Update(ctx context.Context, b *exposition.Batch) error {
	if c.opts.Path == "" {
		return notConfigured("no --collector.kernel-events.path")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.openErr != nil {
		return c.openState(c.openErr)
	}
	for _, ev := range c.events {
		if ev.total == nil {
			ev.total, ev.lastTS = c.total.With(ev.labels[:]...), c.last.With(ev.labels[:]...)
		}
		b.Add(ev.total, ev.count)
		b.Add(ev.lastTS, ev.last)
	}
	for i, s := range c.droppedS {
		if c.dropped[i] > 0 {
			b.Add(s, c.dropped[i])
		}
	}
	for k, n := range c.self {
		b.AddWith(c.selfF, n, k[0], k[1])
	}
	b.Add(c.recordsS, float64(c.stats.Records))
	b.Add(c.lostS, float64(c.stats.Lost))
	if c.readErr != nil {
		return fmt.Errorf("reading %s: %w", c.opts.Path, c.readErr)
	}
	return nil
}

// openState explains why the log cannot be opened, and what to grant:
// for the kernel's device (the default path, or a character device there)
// the privilege of each deployment shape; for another path (the FIFO of
// fabric_exporter relay-kmsg, a recording) what makes it readable. A
// non-root exporter in the image gets no CAP_SYSLOG from docker's
// --cap-add (its binary's file capabilities are SYS_PTRACE and
// DAC_READ_SEARCH only), hence --user 0; a Kubernetes container opens a
// hostPath device only when privileged, hence the relay.
func (c *kernelEventsCollector) openState(err error) error {
	p := c.opts.Path
	device := p == "/dev/kmsg"
	if fi, serr := os.Stat(p); serr == nil {
		device = fi.Mode()&os.ModeCharDevice != 0
	}
	switch {
	case errors.Is(err, os.ErrNotExist) && !device:
		return sourceMissing(p, "start fabric_exporter relay-kmsg --output="+p+" (components/kernel-events) or correct --collector.kernel-events.path",
			"%s does not exist", p)
	case errors.Is(err, os.ErrNotExist):
		return sourceMissing(p, "give the container the host's device (docker run --device /dev/kmsg; Kubernetes: components/kernel-events relays it) or correct --collector.kernel-events.path",
			"%s does not exist", p)
	case errors.Is(err, os.ErrPermission) && !device:
		return sourceMissing(p, "let the exporter's user read it (relay-kmsg makes its FIFO mode 0644)", "cannot read %s: permission denied", p)
	case errors.Is(err, os.ErrPermission):
		restrict := strings.TrimSpace(sysfs.ReadSmall(c.procfs, filepath.Join(c.procfs, "sys", "kernel", "dmesg_restrict")))
		if restrict == "0" {
			return sourceMissing(p, "docker run --device /dev/kmsg; in Kubernetes only a privileged container opens a host device: components/kernel-events relays it",
				"cannot read %s: permission denied although kernel.dmesg_restrict is 0: a device cgroup denies it", p)
		}
		if restrict == "" {
			restrict = "unknown"
		}
		return sourceMissing(p, "docker run --user 0 --cap-add SYSLOG --device /dev/kmsg; systemd: deploy/systemd/kernel-events.conf; Kubernetes: components/kernel-events",
			"cannot read %s: permission denied: reading the kernel log needs CAP_SYSLOG (kernel.dmesg_restrict is %s)", p, restrict)
	}
	return fmt.Errorf("opening %s: %w", p, err)
}

// Close stops the poller and closes the log.
func (c *kernelEventsCollector) Close() {
	c.poller.Close()
	if c.reader != nil {
		c.reader.Close()
		c.reader = nil
	}
}

// kevDevices joins PCI functions and netdevs to the RDMA devices, netdevs,
// rails and GPUs at or below them (sysfs; poll goroutine only). It is read
// once, then again for an address it does not know, at most every
// kevRebuildEvery; functions once seen stay (a GPU that fell off the bus
// keeps its labels), and GPU numbers are never reassigned.
type kevDevices struct {
	sysfs string
	rails *Rails
	now   func() time.Time
	built time.Time
	fn    map[string]*kevFunc // PCI function → what is on and below it
	net   map[string]string   // netdev → its PCI function
	gpus  map[string]string   // GPU function → index
}

type kevFunc struct{ ibdevs, netdevs, hcas, gpus []string }

// labels returns the seven label values of an event.
func (d *kevDevices) labels(ctx context.Context, e kmsg.Event) [7]string {
	pci := e.PCI
	if pci == "" && e.Netdev != "" {
		if d.net[e.Netdev] == "" {
			d.rebuild()
		}
		pci = d.net[e.Netdev]
	}
	f := d.fn[pci]
	if pci != "" && f == nil {
		d.rebuild()
		f = d.fn[pci]
	}
	if f == nil {
		f = &kevFunc{}
	}
	netdev := e.Netdev
	if netdev == "" {
		netdev = strings.Join(f.netdevs, ",")
	}
	var rails []string
	if d.rails != nil {
		for _, r := range d.rails.Current(ctx) {
			if slices.Contains(f.hcas, r.Device) || e.Netdev != "" && r.Netdev == e.Netdev {
				rails = append(rails, r.Name)
			}
		}
	}
	slices.Sort(rails)
	return [7]string{e.Class, e.Kind, strings.Join(f.ibdevs, ","), netdev, pci,
		strings.Join(slices.Compact(rails), ","), strings.Join(f.gpus, ",")}
}

// rebuild reads class/infiniband, class/net and bus/pci/devices, adding
// what it did not know.
func (d *kevDevices) rebuild() {
	if d.fn == nil {
		d.fn, d.net, d.gpus = map[string]*kevFunc{}, map[string]string{}, map[string]string{}
	} else if d.now().Sub(d.built) < kevRebuildEvery {
		return
	}
	d.built = d.now()
	devRoot, err := filepath.EvalSymlinks(filepath.Join(d.sysfs, "devices"))
	if err != nil {
		return
	}
	fresh := map[string]*kevFunc{}
	get := func(bdf string) *kevFunc {
		if fresh[bdf] == nil {
			fresh[bdf] = &kevFunc{}
		}
		return fresh[bdf]
	}
	class := func(dir string, add func(name string, chain []string)) {
		names, _ := sysfs.ListDir(filepath.Join(d.sysfs, dir), false)
		slices.Sort(names)
		for _, n := range names {
			if chain := pciChain(devRoot, filepath.Join(d.sysfs, dir, n)); len(chain) > 0 {
				add(n, chain)
			}
		}
	}
	class("class/infiniband", func(n string, chain []string) {
		get(chain[len(chain)-1]).ibdevs = append(get(chain[len(chain)-1]).ibdevs, n)
		for _, b := range chain {
			get(b).hcas = append(get(b).hcas, n)
		}
	})
	netOf := map[string]string{}
	class("class/net", func(n string, chain []string) {
		own := chain[len(chain)-1]
		get(own).netdevs = append(get(own).netdevs, n)
		netOf[n] = own
	})
	var gpus []string
	pciDir := filepath.Join(d.sysfs, "bus", "pci", "devices")
	names, _ := sysfs.ListDir(pciDir, false)
	slices.Sort(names)
	for _, bdf := range names {
		cl := sysfs.ReadSmall(d.sysfs, filepath.Join(pciDir, bdf, "class"))
		if sysfs.ReadSmall(d.sysfs, filepath.Join(pciDir, bdf, "vendor")) == nvidiaVendor &&
			(strings.HasPrefix(cl, "0x0300") || strings.HasPrefix(cl, "0x0302")) {
			gpus = append(gpus, bdf)
		}
	}
	if len(gpus) >= len(d.gpus) { // none gone: numbers are positions
		for i, g := range gpus {
			if _, ok := d.gpus[g]; !ok {
				d.gpus[g] = strconv.Itoa(i)
			}
		}
	}
	for _, g := range gpus {
		if idx, ok := d.gpus[g]; ok {
			for _, b := range pciChain(devRoot, filepath.Join(pciDir, g)) {
				get(b).gpus = append(get(b).gpus, idx)
			}
		}
	}
	for bdf, f := range fresh {
		if _, ok := d.fn[bdf]; !ok && len(d.fn) < 4096 {
			slices.SortFunc(f.gpus, func(a, b string) int { x, _ := strconv.Atoi(a); y, _ := strconv.Atoi(b); return x - y })
			d.fn[bdf] = f
		}
	}
	for n, bdf := range netOf {
		if _, ok := d.net[n]; !ok && len(d.net) < 4096 {
			d.net[n] = bdf
		}
	}
}

// pciChain returns the PCI functions on the sysfs path of a device, from
// its root port down to its own function; nil when it is not on PCI.
func pciChain(devRoot, path string) []string {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil
	}
	rel, err := filepath.Rel(devRoot, real)
	if err != nil || strings.HasPrefix(rel, "..") {
		return nil
	}
	var chain []string
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		if isBDF(part) {
			chain = append(chain, part)
		}
	}
	return chain
}
