package collector

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/devlinknl"
	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// The devlink collector reports the driver's own view of each RDMA HCA on
// PCI (every device of --path.sysfs class/infiniband whose device is a PCI
// function), through the kernel's devlink generic netlink family
// (internal/devlinknl): its health reporters (mlx5: fw, fw_fatal, vnic, and
// tx, rx on the uplink port — what `devlink health show` prints), and its
// driver and firmware versions (`devlink dev info`). A wedged mlx5 driver
// (firmware command timeouts, a fatal firmware syndrome) shows as a
// reporter in error state, as growing error counts, or as a device that no
// longer answers devlink at all: the kernel takes the instance's lock to
// answer, and a driver stuck in recovery holds it.
//
// Reads run in the background on the shared poller, every
// --collector.devlink.interval: each device in its own goroutine with its
// own socket, bounded by --collector.devlink.timeout. A device that does
// not answer is fabric_devlink_up 0 and loses its reporter series; the
// other devices' series are kept; while its request stays blocked in the
// kernel it is not asked again (devlinknl.Client), so a wedged driver
// costs one blocked thread, not one per poll. Device information is read
// at start, when a device appears or answers again, and every
// devlinkInfoEvery (mlx5 answers it with firmware commands).
//
// States: no RDMA device on PCI, no devlink family, or no devlink instance
// for any of them (an exporter outside the host's network namespace sees
// none) → no_hardware; a device that does not answer, or the kernel
// refusing the requests → failed (the other devices' series kept).

// DevlinkOptions configures the devlink collector.
type DevlinkOptions struct {
	Interval time.Duration // --collector.devlink.interval
	Timeout  time.Duration // --collector.devlink.timeout
	// Fixtures, when set, is a directory of `devlink -j` output read
	// instead of devlink netlink (devlinknl.Fixtures).
	Fixtures string
	// Source overrides the source (tests).
	Source DevlinkSource
}

// DevlinkSource answers devlink requests for one instance
// (devlinknl.Client, devlinknl.Fixtures).
type DevlinkSource interface {
	HealthReporters(ctx context.Context, h devlinknl.Handle) ([]devlinknl.Reporter, error)
	Info(ctx context.Context, h devlinknl.Handle) (devlinknl.Info, error)
}

func devlinkFlags(app *kingpin.Application, o *Options) {
	app.Flag("collector.devlink.interval", "How often the devlink health reporters of the RDMA HCAs are read (in the background; a scrape reports the last read). Driver and firmware versions are read at start, when a device appears or answers again, and every 10 minutes.").
		Default("15s").Action(atLeastDuration("collector.devlink.interval", &o.Devlink.Interval, time.Second)).DurationVar(&o.Devlink.Interval)
	app.Flag("collector.devlink.timeout", "How long one device's devlink request may take. A device that does not answer in time is reported as not answering (fabric_devlink_up 0) and is not asked again until the kernel lets its request go.").
		Default("5s").Action(atLeastDuration("collector.devlink.timeout", &o.Devlink.Timeout, 10*time.Millisecond)).DurationVar(&o.Devlink.Timeout)
	app.Flag("collector.devlink.fixtures", "Read DIR/health.json (devlink -j health show), DIR/info.json (devlink -j dev info) and DIR/not-answering (devlink handles that time out, one a line) instead of devlink netlink (demos and tests).").
		PlaceHolder("DIR").Hidden().StringVar(&o.Devlink.Fixtures)
}

// devlinkInfoEvery is how often device information is read again; a failed
// read is retried after devlinkInfoRetry.
const (
	devlinkInfoEvery = 10 * time.Minute
	devlinkInfoRetry = time.Minute
)

// maxDevlinkHCAs bounds the devices asked in one poll.
const maxDevlinkHCAs = 64

// devlinkHCA is an RDMA device on a PCI function.
type devlinkHCA struct {
	device, pci string
	// unloaded: the RDMA device left class/infiniband while its PCI
	// function stays bound to mlx5_core (a fatal firmware error whose
	// recovery failed unloads the IB device, mlx5_unload_one, and keeps
	// the devlink instance with its fw_fatal reporter in error). device
	// is "" for a function the exporter never saw with an RDMA device
	// (it failed before the exporter started): its name is not known.
	unloaded bool
}

// devlinkInfo is the last device information read of an HCA.
type devlinkInfo struct {
	ok                                  bool // read (false: no info_get, or not read yet)
	driver, driverVersion, fw, fwStored string
	boardID, serial                     string
	next                                time.Time // when to read it again
}

// devlinkDevice is the last poll of an HCA that has a devlink instance.
type devlinkDevice struct {
	hca       devlinkHCA
	err       error // the health request's; nil when it answered
	reporters []devlinknl.Reporter
	info      *devlinkInfo // nil before a read
}

type devlinkCollector struct {
	env  Env
	opts *Options
	do   DevlinkOptions
	src  DevlinkSource
	now  func() time.Time

	poller
	first chan struct{}           // closed after the first poll
	infos map[string]*devlinkInfo // by PCI address; the poll goroutine's
	known map[string]string       // PCI address → RDMA device last seen there; the poll goroutine's

	mu      sync.Mutex
	devices []devlinkDevice
	state   error  // the last poll's collector state
	gen     uint64 // polls stored

	bound    map[devlinkSeriesKey]*devlinkSeries // Update's (serialised): the series of poll boundGen
	boundGen uint64
	railOf   map[string]string // Update's: PCI address → the rails its device last carried

	presentF *exposition.Family

	upF, healthyF, errorsF, recoveriesF, dumpF, infoF *exposition.Family
}

func newDevlinkCollector(env Env, o *Options) (Collector, error) {
	c, err := newDevlinkState(env, o)
	if err != nil {
		return nil, err
	}
	c.poller.start(c.do.Interval, c.poll)
	return c, nil
}

func newDevlinkState(env Env, o *Options) (*devlinkCollector, error) {
	do := o.Devlink
	if do.Interval == 0 {
		do.Interval = 15 * time.Second
	}
	if do.Timeout == 0 {
		do.Timeout = 5 * time.Second
	}
	if do.Interval < time.Second || do.Timeout < 10*time.Millisecond {
		return nil, fmt.Errorf("--collector.devlink.*: interval at least 1s, timeout at least 10ms")
	}
	src := do.Source
	switch {
	case src != nil:
	case do.Fixtures != "":
		src = devlinknl.Fixtures{Dir: do.Fixtures}
	default:
		src = devlinknl.NewClient()
	}
	g, ctr := prometheus.GaugeValue, prometheus.CounterValue
	dev := []string{"device", "pci_bus_id", "rail"}
	rep := []string{"device", "pci_bus_id", "devlink_port", "reporter", "rail"}
	f := env.Families
	c := &devlinkCollector{
		env: env, opts: o, do: do, src: src, now: time.Now, first: make(chan struct{}), infos: map[string]*devlinkInfo{},
		known: map[string]string{}, railOf: map[string]string{},
		presentF: f.NewFamily("fabric_devlink_rdma_device_present", "1 while the HCA's RDMA device is in class/infiniband, 0 for one that left it while its PCI function stays bound to mlx5_core with its devlink instance (a fatal firmware error whose recovery failed unloads the IB device: mlx5_unload_one). Such an HCA keeps its device and rail labels from when it was last seen, so RailHCAFailed names it; a physical function bound to mlx5_core that the exporter never saw with an RDMA device (its recovery failed before the exporter started) is 0 with device and rail \"\" (HCAFunctionFailed).", g, dev...),
		upF:      f.NewFamily("fabric_devlink_up", "1 if the RDMA HCA's devlink instance (pci/<pci_bus_id>) answered the last health request within --collector.devlink.timeout, 0 if it failed or timed out: the driver does not answer (mlx5 holding the instance's lock through a firmware recovery, firmware commands timing out) or an earlier request is still blocked in the kernel. Absent for a device without a devlink instance and when the kernel has no devlink.", g, dev...),
		healthyF: f.NewFamily("fabric_devlink_health_reporter_healthy", "1 if a devlink health reporter of the driver is healthy, 0 in error state (an error was reported and not recovered: auto-recovery off, failed, or held back by the reporter's grace period). mlx5: fw (firmware syndrome), fw_fatal (fatal firmware error; recovery reloads the device), vnic on the device; tx and rx (send and receive queue errors) on the uplink port. devlink_port is the devlink port index of a port's reporter, \"\" for the device's. Absent while the device does not answer.",
			g, rep...),
		errorsF:     f.NewFamily("fabric_devlink_health_reporter_errors_total", "Errors the driver reported to a devlink health reporter (devlink health's error count; it restarts when the driver re-registers the reporter).", ctr, rep...),
		recoveriesF: f.NewFamily("fabric_devlink_health_reporter_recoveries_total", "Recoveries of a devlink health reporter that succeeded (devlink health's recover count).", ctr, rep...),
		dumpF:       f.NewFamily("fabric_devlink_health_reporter_dump_timestamp_seconds", "When the dump the kernel keeps for a devlink health reporter was taken (Unix time): at the first error after the last `devlink health dump clear`, not necessarily the latest. Absent while no dump is kept, and on kernels that give only the boot-relative time.", g, rep...),
		infoF: f.NewFamily("fabric_devlink_info", "The RDMA HCA's driver and firmware as devlink reports them: driver name, driver_version (/sys/module/<driver>/version: out-of-tree drivers such as MLNX_OFED's; \"\" for an in-tree driver, which has the kernel's), fw_version running and fw_version_stored (the flashed image: different after a firmware update that a reset has not activated yet), board_id (the PSID) and serial (\"\" when the driver gives none). The last read is kept while the device does not answer.",
			g, "device", "pci_bus_id", "driver", "driver_version", "fw_version", "fw_version_stored", "board_id", "serial", "rail"),
	}
	return c, nil
}

// devlinkResult is one device's answers in a poll.
type devlinkResult struct {
	hca       devlinkHCA
	reporters []devlinknl.Reporter
	err       error
	info      *devlinkInfo
}

// poll asks every HCA at once and keeps the answers for the scrapes.
func (c *devlinkCollector) poll(ctx context.Context) {
	defer func() {
		select {
		case <-c.first:
		default:
			close(c.first)
		}
	}()
	hcas, err := c.hcas()
	if err != nil {
		c.store(nil, err)
		return
	}
	results := make([]devlinkResult, len(hcas))
	var wg sync.WaitGroup
	for i, h := range hcas {
		old := c.infos[h.pci]
		wg.Go(func() { results[i] = c.ask(ctx, h, old) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return // closing
	}
	var devs []devlinkDevice
	var absent, failed []string
	for _, r := range results {
		h := r.hca
		key := "devlink:" + h.pci
		switch {
		case errors.Is(r.err, devlinknl.ErrNotAvailable):
			c.store(nil, noHardware("%v", r.err))
			return
		case errors.Is(r.err, devlinknl.ErrNoPrivilege):
			c.store(nil, fmt.Errorf("the kernel refused the devlink requests (they need no privilege: a seccomp or LSM policy?): %v", r.err))
			return
		case errors.Is(r.err, devlinknl.ErrNoDevice):
			absent = append(absent, h.device)
			delete(c.infos, h.pci)
			c.env.Once.Clear(key)
			continue
		case r.err != nil:
			failed = append(failed, h.device+" (pci/"+h.pci+"): "+devlinkReason(r.err, c.do.Timeout))
			c.env.Once.Warn(key, "msg", "RDMA device does not answer devlink: the driver may be wedged", "device", h.device, "handle", "pci/"+h.pci, "err", r.err)
		default:
			if c.env.Once.Clear(key) {
				level.Info(c.env.Logger).Log("msg", "RDMA device answers devlink again", "device", h.device, "handle", "pci/"+h.pci)
			}
		}
		if r.info != nil {
			c.infos[h.pci] = r.info
		}
		devs = append(devs, devlinkDevice{hca: h, err: r.err, reporters: r.reporters, info: c.infos[h.pci]})
	}
	var state error
	switch {
	case len(devs) == 0:
		state = noHardware("none of the RDMA devices (%s) has a devlink instance in the exporter's network namespace (devlink instances live in the host's: run with the host network, hostNetwork: true or --network host)", strings.Join(absent, ", "))
	case len(failed) > 0:
		state = errors.New("devlink: " + strings.Join(failed, "; "))
	}
	c.store(devs, state)
}

func (c *devlinkCollector) store(devs []devlinkDevice, state error) {
	c.mu.Lock()
	c.devices, c.state = devs, state
	c.gen++
	c.mu.Unlock()
}

// devlinkReason is a failure's stable text for the collector state.
func devlinkReason(err error, timeout time.Duration) string {
	if errors.Is(err, devlinknl.ErrTimeout) {
		return "no answer within " + timeout.String() + " (the driver holds its devlink instance, or an earlier request is still blocked)"
	}
	return err.Error()
}

// ask reads one device's health reporters and, when due, its information.
func (c *devlinkCollector) ask(ctx context.Context, h devlinkHCA, old *devlinkInfo) devlinkResult {
	handle := devlinknl.PCI(h.pci)
	qctx, cancel := context.WithTimeout(ctx, c.do.Timeout)
	reps, err := c.src.HealthReporters(qctx, handle)
	cancel()
	res := devlinkResult{hca: h, reporters: reps, err: err, info: old}
	if err != nil {
		if old != nil { // read it again once the device answers
			cp := *old
			cp.next = time.Time{}
			res.info = &cp
		}
		return res
	}
	now := c.now()
	if old != nil && now.Before(old.next) {
		return res
	}
	if h.unloaded || reporterInError(reps) {
		// Not while firmware is failing: mlx5 answers an info request
		// with firmware commands (60 s each to time out), under the
		// instance's lock, and before Linux 6.0 under devlink's global
		// mutex too (devlink_nl_pre_doit), which every other HCA's
		// request waits for. Read once the device is healthy again.
		return res
	}
	qctx, cancel = context.WithTimeout(ctx, c.do.Timeout)
	i, err := c.src.Info(qctx, handle)
	cancel()
	switch {
	case err == nil:
		res.info = &devlinkInfo{ok: true, next: now.Add(devlinkInfoEvery), driver: i.Driver, serial: i.Serial,
			fw: devlinknl.Version(i.Running, "fw.version", "fw"), fwStored: devlinknl.Version(i.Stored, "fw.version", "fw"),
			boardID: devlinknl.Version(i.Fixed, "fw.psid", "board.id")}
		if res.info.serial == "" {
			res.info.serial = i.BoardSerial
		}
		if d := i.Driver; d != "" && !strings.ContainsAny(d, "/\x00") && d != "." && d != ".." {
			res.info.driverVersion = sysfs.ReadSmall(c.opts.SysfsPath, c.opts.sysPath("module", d, "version"))
		}
	case errors.Is(err, devlinknl.ErrNotSupported):
		res.info = &devlinkInfo{next: now.Add(devlinkInfoEvery)}
	default:
		c.env.Once.Debug("devlink-info:"+h.pci, "msg", "cannot read devlink device information", "device", h.device, "err", err)
		cp := devlinkInfo{}
		if old != nil {
			cp = *old
		}
		cp.next = now.Add(devlinkInfoRetry)
		res.info = &cp
	}
	return res
}

// reporterInError reports whether any of a device's reporters is in error.
func reporterInError(reps []devlinknl.Reporter) bool {
	for _, r := range reps {
		if r.State != devlinknl.StateHealthy {
			return true
		}
	}
	return false
}

// devlinkSeries are a device's series, bound once per poll and rail label.
type devlinkSeries struct {
	up, info  *exposition.Series
	reporters [][4]*exposition.Series // healthy, errors, recoveries, dump time (nil without a dump)
}

type devlinkSeriesKey struct{ pci, rail string }

func (c *devlinkCollector) bind(d devlinkDevice, rail string) *devlinkSeries {
	dev, pci := d.hca.device, d.hca.pci
	s := &devlinkSeries{up: c.upF.With(dev, pci, rail)}
	if i := d.info; i != nil && i.ok {
		s.info = c.infoF.With(dev, pci, i.driver, i.driverVersion, i.fw, i.fwStored, i.boardID, i.serial, rail)
	}
	for _, r := range d.reporters {
		port := ""
		if r.HasPort {
			port = strconv.FormatUint(uint64(r.Port), 10)
		}
		rs := [4]*exposition.Series{c.healthyF.With(dev, pci, port, r.Name, rail), c.errorsF.With(dev, pci, port, r.Name, rail),
			c.recoveriesF.With(dev, pci, port, r.Name, rail)}
		if r.DumpNS != 0 {
			rs[3] = c.dumpF.With(dev, pci, port, r.Name, rail)
		}
		s.reporters = append(s.reporters, rs)
	}
	return s
}

// Update copies the last poll into the batch. Only the first scrape waits,
// for the first poll (bounded by the scrape's deadline).
func (c *devlinkCollector) Update(ctx context.Context, b *exposition.Batch) error {
	select {
	case <-c.first:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.mu.Lock()
	devs, state, gen := c.devices, c.state, c.gen
	c.mu.Unlock()
	if c.bound == nil || gen != c.boundGen {
		c.bound, c.boundGen = map[devlinkSeriesKey]*devlinkSeries{}, gen
	}
	var rails []Rail
	if c.opts.Rails != nil && len(devs) > 0 {
		rails = c.opts.Rails.Current(ctx)
	}
	for _, d := range devs {
		rail := railsOfDevice(rails, d.hca.device)
		switch {
		case d.hca.unloaded:
			rail = c.railOf[d.hca.pci]
		case rail != "":
			c.railOf[d.hca.pci] = rail
		}
		key := devlinkSeriesKey{d.hca.pci, rail}
		s := c.bound[key]
		if s == nil {
			s = c.bind(d, key.rail)
			c.bound[key] = s
		}
		b.AddWith(c.presentF, b2f(!d.hca.unloaded), d.hca.device, d.hca.pci, rail)
		b.Add(s.up, b2f(d.err == nil))
		b.Add(s.info, 1)
		if d.err != nil {
			continue
		}
		for i, r := range d.reporters {
			rs := s.reporters[i]
			b.Add(rs[0], b2f(r.State == devlinknl.StateHealthy))
			b.Add(rs[1], float64(r.Errors))
			b.Add(rs[2], float64(r.Recoveries))
			b.Add(rs[3], float64(r.DumpNS)/1e9)
		}
	}
	return state
}

// railsOfDevice returns the names of the present rails on an RDMA
// device's ports, joined by ",".
func railsOfDevice(rails []Rail, device string) string {
	out := ""
	for _, r := range rails {
		if r.Present && r.Device == device {
			if out != "" {
				out += ","
			}
			out += r.Name
		}
	}
	return out
}
