package collector

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// portCounter maps a file of ports/N/counters (or legacy counters_ext) to a
// metric in base units.
type portCounter struct {
	name  string  // metric name after fabric_rdma_port_
	help  string  //
	scale float64 // 4 for the 4-octet data words
}

// portCounters lists the files of ports/N/counters we name ourselves. Any
// other numeric file there is exported as fabric_rdma_port_<file>_total.
var portCounters = map[string]portCounter{
	"port_xmit_data":                  {"transmitted_bytes_total", "Bytes transmitted by the port (port_xmit_data counts 4-octet words; multiplied by 4). On mlx5 RoCE this is RDMA traffic only.", 4},
	"port_rcv_data":                   {"received_bytes_total", "Bytes received by the port (port_rcv_data counts 4-octet words; multiplied by 4). On mlx5 RoCE this is RDMA traffic only.", 4},
	"port_xmit_packets":               {"transmitted_packets_total", "Packets transmitted by the port.", 1},
	"port_rcv_packets":                {"received_packets_total", "Packets received by the port.", 1},
	"unicast_xmit_packets":            {"transmitted_unicast_packets_total", "Unicast packets transmitted by the port.", 1},
	"unicast_rcv_packets":             {"received_unicast_packets_total", "Unicast packets received by the port.", 1},
	"multicast_xmit_packets":          {"transmitted_multicast_packets_total", "Multicast packets transmitted by the port.", 1},
	"multicast_rcv_packets":           {"received_multicast_packets_total", "Multicast packets received by the port.", 1},
	"port_xmit_wait":                  {"transmit_wait_ticks_total", "Ticks during which the port had data to transmit but none was sent (port_xmit_wait; the tick length is device-specific).", 1},
	"port_xmit_discards":              {"transmit_discards_total", "Outbound packets discarded by the port.", 1},
	"port_rcv_discards":               {"receive_discards_total", "Inbound packets discarded by the port.", 1},
	"port_rcv_errors":                 {"receive_errors_total", "Packets with errors received by the port.", 1},
	"port_xmit_constraint_errors":     {"transmit_constraint_errors_total", "Packets not transmitted because of constraints.", 1},
	"port_rcv_constraint_errors":      {"receive_constraint_errors_total", "Packets received and discarded because of constraints.", 1},
	"port_rcv_remote_physical_errors": {"receive_remote_physical_errors_total", "Packets received marked with the EBP delimiter.", 1},
	"port_rcv_switch_relay_errors":    {"receive_switch_relay_errors_total", "Packets received that could not be forwarded by the switch.", 1},
	"link_downed":                     {"link_downed_total", "Times the link error recovery process failed and the link went down.", 1},
	"link_error_recovery":             {"link_error_recovery_total", "Times the link error recovery process completed successfully.", 1},
	"local_link_integrity_errors":     {"local_link_integrity_errors_total", "Times the local physical errors exceeded the threshold.", 1},
	"excessive_buffer_overrun_errors": {"excessive_buffer_overrun_errors_total", "Times consecutive flow control update periods had buffer overruns.", 1},
	"symbol_error":                    {"symbol_errors_total", "Minor link errors detected on one or more physical lanes.", 1},
	"VL15_dropped":                    {"vl15_dropped_total", "Incoming VL15 packets dropped for lack of buffers.", 1},
}

// legacyCounters maps the pre-4.5 kernel counters_ext files to the metric of
// the same meaning. Being 64 bits wide, they win over counters/.
var legacyCounters = map[string]string{
	"port_xmit_data_64":           "port_xmit_data",
	"port_rcv_data_64":            "port_rcv_data",
	"port_xmit_packets_64":        "port_xmit_packets",
	"port_rcv_packets_64":         "port_rcv_packets",
	"port_unicast_xmit_packets":   "unicast_xmit_packets",
	"port_unicast_rcv_packets":    "unicast_rcv_packets",
	"port_multicast_xmit_packets": "multicast_xmit_packets",
	"port_multicast_rcv_packets":  "multicast_rcv_packets",
}

// retransmissionCounters are the hw_counters of RoCE retransmission-class
// events that fabric_rdma_retransmission_events_total adds up (the
// RoCERetransmissions page reads that one series per rail instead of six).
var retransmissionCounters = map[string]bool{
	"local_ack_timeout_err": true, "packet_seq_err": true, "out_of_sequence": true,
	"implied_nak_seq_err": true, "roce_adp_retrans": true, "req_transport_retries_exceeded": true,
}

// maxDynamicNames bounds how many distinct hw_counter or unknown counter
// names one collector turns into metric names.
const maxDynamicNames = 512

type rdmaCollector struct {
	env     Env
	opts    *Options
	rails   *Rails
	reader  *sysfs.Reader
	devices *sysfs.ClassCache[*ibDevice]
	names   map[string]bool // dynamic family names this collector created
	filter  Filter
	buf     [sysfs.MaxAttrSize]byte

	portInfo, portUp, portRate, deviceInfo, lifespan, railInfo, railPresent, retrans *exposition.Family
}

type ibPort struct {
	num       string
	linkLayer string // static per registration
	numInt    int
	dir       string
	counters  []counterFile
	// listErr is set while a counter directory could not be listed; the
	// port's counters are then listed again on every scrape.
	listErr           error
	up, rate, retrans *exposition.Series
	// events sums the port's retransmission-class hw counters.
	events eventSum
	// rail is the rail label the port's series were bound with ("" for
	// none); they are bound again when the port's rail changes.
	rail string
	// attribute paths read on every scrape
	statePath, physPath, ratePath string
}

type ibDevice struct {
	name, dir string
	info      *exposition.Series // fabric_rdma_device_info
	ports     []*ibPort
}

// RDMAOptions configures the rdma collector.
type RDMAOptions struct {
	DeviceInclude, DeviceExclude string
}

func rdmaFlags(app *kingpin.Application, o *Options) {
	app.Flag("collector.rdma.device-include", "Regexp of RDMA devices to include (mutually exclusive with device-exclude).").PlaceHolder("REGEXP").StringVar(&o.RDMA.DeviceInclude)
	app.Flag("collector.rdma.device-exclude", "Regexp of RDMA devices to exclude.").PlaceHolder("REGEXP").StringVar(&o.RDMA.DeviceExclude)
}

func newRDMACollector(env Env, o *Options) (Collector, error) {
	filter, err := NewFilter(o.RDMA.DeviceInclude, o.RDMA.DeviceExclude)
	if err != nil {
		return nil, fmt.Errorf("--collector.rdma.%w", err)
	}
	gauge := prometheus.GaugeValue
	reader := sysfs.NewReaderIn(o.SysfsPath)
	c := &rdmaCollector{
		env: env, opts: o, rails: o.Rails, reader: reader,
		devices: sysfs.NewClassCache[*ibDevice](o.sysPath("class", "infiniband"), reader), names: map[string]bool{}, filter: filter,
		portInfo: env.Families.NewFamily("fabric_rdma_port_info",
			"RDMA port metadata: netdev from gid_attrs/ndevs/0 (or the PCI function's net/), link layer (Ethernet = RoCE), state, physical state and the rail it carries (\"\" for none).",
			gauge, "device", "port", "netdev", "link_layer", "state", "phys_state", "rail"),
		portUp:   env.Families.NewFamily("fabric_rdma_port_up", "1 if the RDMA port state is ACTIVE, else 0.", gauge, "device", "port", "rail"),
		portRate: env.Families.NewFamily("fabric_rdma_port_rate_bytes_per_second", "Link rate of the RDMA port in bytes per second (sysfs rate, e.g. 400 Gb/sec = 5e10).", gauge, "device", "port", "rail"),
		deviceInfo: env.Families.NewFamily("fabric_rdma_device_info",
			"RDMA device metadata; numa_node is \"\" when the kernel reports no node (-1).",
			gauge, "device", "board_id", "fw_ver", "hca_type", "node_guid", "pci_bus_id", "numa_node"),
		lifespan: env.Families.NewFamily("fabric_rdma_hw_lifespan_seconds", "How long the kernel caches hw_counters before querying the device again (hw_counters/lifespan, milliseconds in sysfs).", gauge, "device", "port", "rail"),
		railInfo: env.Families.NewFamily("fabric_rail_info", "A rail: the RDMA port it is and the netdev of that port (\"\" when unresolved).",
			gauge, "rail", "device", "port", "netdev"),
		railPresent: env.Families.NewFamily("fabric_rail_device_present", "1 if the RDMA port of the rail exists now, 0 if it disappeared.",
			gauge, "rail", "device", "port"),
		retrans: env.Families.NewFamily("fabric_rdma_retransmission_events_total",
			"RoCE retransmission-class events of the port: the hw counters local_ack_timeout_err, packet_seq_err, out_of_sequence, implied_nak_seq_err, "+
				"roce_adp_retrans and req_transport_retries_exceeded that it has, added up by the exporter (it starts at their sum and adds each one's increase, "+
				"across 32-bit wraps); absent when the port has none of them.",
			prometheus.CounterValue, "device", "port", "rail"),
	}
	return c, nil
}

func (c *rdmaCollector) dir() string { return c.opts.sysPath("class", "infiniband") }

func (c *rdmaCollector) Update(ctx context.Context, b *exposition.Batch) error {
	var rails []Rail
	if c.rails != nil {
		rails = c.rails.Current(ctx)
		for _, r := range rails {
			b.AddWith(c.railInfo, 1, r.Name, r.Device, r.Port, r.Netdev)
			b.AddWith(c.railPresent, b2f(r.Present), r.Name, r.Device, r.Port)
		}
	}
	names, err := sysfs.ListDir(c.dir(), false)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return checkSysfs(c.opts.SysfsPath, c.dir()+" does not exist (no RDMA device)")
		}
		return fmt.Errorf("listing RDMA devices: %w", err)
	}
	seen := make(map[string]bool, len(names))
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err // the scrape's deadline passed
		}
		if c.filter.Ignored(name) {
			continue
		}
		seen[name] = true
		justScanned := false
		dev, err := c.devices.Get(name, func(dir string) (*ibDevice, error) { justScanned = true; return c.scanDevice(name, dir, rails) })
		if err != nil {
			c.env.ReadErrors.Inc()
			c.env.Once.Debug("scan:"+name, "msg", "skipping RDMA device", "device", name, "err", err)
			continue
		}
		c.env.Once.Clear("scan:" + name)
		for _, p := range dev.ports {
			if p.listErr != nil && !justScanned {
				c.relist(dev, p)
			}
		}
		if !c.collectDevice(dev, rails, b) {
			// The device went away mid-read; rebuild it next scrape.
			c.devices.Drop(name)
		}
	}
	c.devices.KeepOnly(seen)
	return nil
}

// scanDevice reads a device's static attributes and lists its ports and
// counter files, once per registration.
func (c *rdmaCollector) scanDevice(name, dir string, rails []Rail) (*ibDevice, error) {
	d := &ibDevice{name: name, dir: dir}
	str := func(file string) string {
		s, err := c.reader.ReadString(filepath.Join(dir, file))
		if err != nil {
			return ""
		}
		return s
	}
	pciAddr, _ := sysfs.PCIFunction(filepath.Join(dir, "device"))
	numa := ""
	if b, err := c.reader.Read(filepath.Join(dir, "device", "numa_node"), c.buf[:]); err == nil {
		if v, err := sysfs.ParseInt(b); err == nil && v >= 0 {
			numa = strconv.FormatInt(v, 10)
		}
	}
	d.info = c.deviceInfo.With(name, str("board_id"), str("fw_ver"), str("hca_type"), str("node_guid"),
		pciAddr, numa)
	// Static attributes are read once per registration; drop their fds.
	c.reader.ForgetPrefix(dir)

	ports, err := sysfs.ListDir(filepath.Join(dir, "ports"), false)
	if err != nil {
		return nil, fmt.Errorf("listing ports: %w", err)
	}
	sort.Slice(ports, func(i, j int) bool { return portLess(ports[i], ports[j]) })
	for _, p := range ports {
		n, err := strconv.Atoi(p)
		if err != nil {
			continue
		}
		pd := filepath.Join(dir, "ports", p)
		rail := railOfPort(rails, name, p)
		port := &ibPort{num: p, numInt: n, dir: pd, rail: rail, up: c.portUp.With(name, p, rail), rate: c.portRate.With(name, p, rail), retrans: c.retrans.With(name, p, rail),
			statePath: filepath.Join(pd, "state"), physPath: filepath.Join(pd, "phys_state"), ratePath: filepath.Join(pd, "rate")}
		port.linkLayer, _ = c.reader.ReadString(filepath.Join(pd, "link_layer"))
		c.reader.Forget(filepath.Join(pd, "link_layer"))
		port.counters, port.listErr = c.scanCounters(pd, name, p, rail)
		port.bindSums(nil)
		if port.listErr != nil {
			c.listFailed(name, port)
		}
		d.ports = append(d.ports, port)
	}
	return d, nil
}

// scanCounters lists the counter files of a port once per registration. A
// directory that does not exist is not an error (mlx4 has no hw_counters,
// new kernels no counters_ext); any other listing error is returned with
// the counters that could be listed.
func (c *rdmaCollector) scanCounters(portDir, dev, port, rail string) ([]counterFile, error) {
	var listErr error
	list := func(sub string) []string {
		names, err := sysfs.ListDir(filepath.Join(portDir, sub), true)
		if err != nil && !errors.Is(err, os.ErrNotExist) && listErr == nil {
			listErr = err
		}
		return names
	}
	byMetric := map[string]counterFile{}
	var order []string
	add := func(key string, ctr counterFile) {
		if _, ok := byMetric[key]; !ok {
			order = append(order, key)
		}
		byMetric[key] = ctr
	}
	files := list("counters")
	for _, f := range files {
		pc, ok := portCounters[f]
		if !ok {
			s := sysfs.SanitizeName(f)
			if s == "" {
				continue
			}
			pc = portCounter{name: s + "_total", help: "RDMA port counter " + f + " (sysfs counters/" + f + ", exported as read).", scale: 1}
		}
		fam := c.family("fabric_rdma_port_"+pc.name, pc.help, prometheus.CounterValue)
		if fam == nil {
			continue
		}
		add(fam.Name(), counterFile{path: filepath.Join(portDir, "counters", f), series: fam.With(dev, port, rail), scale: pc.scale})
	}
	ext := list("counters_ext")
	for _, f := range ext {
		base, ok := legacyCounters[f]
		if !ok {
			continue
		}
		pc := portCounters[base]
		fam := c.family("fabric_rdma_port_"+pc.name, pc.help, prometheus.CounterValue)
		if fam == nil {
			continue
		}
		add(fam.Name(), counterFile{path: filepath.Join(portDir, "counters_ext", f), series: fam.With(dev, port, rail), scale: pc.scale})
	}
	hw := list("hw_counters")
	for _, f := range hw {
		path := filepath.Join(portDir, "hw_counters", f)
		if f == "lifespan" {
			add(c.lifespan.Name(), counterFile{path: path, series: c.lifespan.With(dev, port, rail), scale: 0.001})
			continue
		}
		s := sysfs.SanitizeName(f)
		if s == "" {
			continue
		}
		fam := c.family("fabric_rdma_hw_"+s+"_total", "RDMA hardware counter "+s+" (sysfs hw_counters; mlx5 Q counters are 32 bits wide and wrap).", prometheus.CounterValue)
		if fam == nil {
			continue
		}
		add(fam.Name(), counterFile{path: path, series: fam.With(dev, port, rail), scale: 1})
	}
	out := make([]counterFile, 0, len(order))
	for _, k := range order {
		out = append(out, byMetric[k])
	}
	return out, listErr
}

// bindSums points the port's retransmission-class hw counters at its event
// sum. Counters listed again keep their last value from old, so that
// listing them again adds only what they counted since.
func (p *ibPort) bindSums(old []counterFile) {
	prev := make(map[string]*counterFile, len(old))
	for i := range old {
		if old[i].sum != nil {
			prev[old[i].path] = &old[i]
		}
	}
	for i := range p.counters {
		ctr := &p.counters[i]
		dir, name := filepath.Split(ctr.path)
		if filepath.Base(dir) != "hw_counters" || !retransmissionCounters[name] {
			continue
		}
		ctr.sum = &p.events
		if o := prev[ctr.path]; o != nil {
			ctr.last, ctr.seen = o.last, o.seen
		}
	}
}

func (c *rdmaCollector) listFailed(dev string, p *ibPort) {
	c.env.ReadErrors.Inc()
	c.env.Once.Warn("list:"+p.dir, "msg", "cannot list RDMA port counters; retrying every scrape", "device", dev, "port", p.num, "err", p.listErr)
}

// relist lists the counters of a port whose listing failed before. Each
// failure counts as a read error; the first is logged at warn, and the
// recovery at info.
func (c *rdmaCollector) relist(d *ibDevice, p *ibPort) {
	key := "list:" + p.dir
	if p.listErr == nil {
		return
	}
	ctrs, err := c.scanCounters(p.dir, d.name, p.num, p.rail)
	if err != nil {
		p.listErr = err
		c.listFailed(d.name, p)
		return
	}
	old := p.counters
	p.counters, p.listErr = ctrs, nil
	p.bindSums(old)
	if c.env.Once.Clear(key) {
		level.Info(c.env.Logger).Log("msg", "RDMA port counters listed", "device", d.name, "port", p.num, "counters", len(ctrs))
	}
}

// family returns a {device,port,rail} family named from a kernel file name;
// nil once this collector made maxDynamicNames of them.
func (c *rdmaCollector) family(name, help string, typ prometheus.ValueType) *exposition.Family {
	if !c.names[name] {
		if len(c.names) >= maxDynamicNames {
			return nil
		}
		c.names[name] = true
	}
	return c.env.Families.NewFamily(name, help, typ, "device", "port", "rail")
}

// collectDevice sends one device's metrics; false means the device vanished.
func (c *rdmaCollector) collectDevice(d *ibDevice, rails []Rail, b *exposition.Batch) bool {
	b.Add(d.info, 1)
	for _, p := range d.ports {
		stateID, state, err := c.readState(p.statePath)
		if err != nil && sysfs.IsGone(err) {
			return false
		}
		_, phys, _ := c.readState(p.physPath)
		netdev := portNetdev(c.reader, d.dir, p.dir, p.numInt)
		rail := railOfPort(rails, d.name, p.num)
		if rail != p.rail {
			c.rebind(d, p, rail)
		}
		b.AddWith(c.portInfo, 1, d.name, p.num, netdev, p.linkLayer, state, phys, rail)
		if state != "" {
			b.Add(p.up, b2f(stateID == 4))
		}
		if rs, err := c.reader.Read(p.ratePath, c.buf[:]); err == nil {
			if v, err := sysfs.ParseRate(string(rs)); err == nil {
				b.Add(p.rate, v)
			} else {
				skipValue(c.env, p.ratePath, err)
			}
		}
		gone := addCounters(c.env, c.reader, c.buf[:], p.counters, b)
		if p.events.read {
			b.Add(p.retrans, p.events.total)
			p.events.read = false
		}
		if gone > 0 && gone == len(p.counters) {
			return false
		}
	}
	return true
}

// rebind binds a port's cached series to a new rail label: the rail a port
// carries can change while the device stays registered (a netdev appears
// or is renamed, a default rail is renamed when its device gains a port).
func (c *rdmaCollector) rebind(d *ibDevice, p *ibPort, rail string) {
	p.rail = rail
	p.up = c.portUp.With(d.name, p.num, rail)
	p.rate = c.portRate.With(d.name, p.num, rail)
	p.retrans = c.retrans.With(d.name, p.num, rail)
	for i := range p.counters {
		p.counters[i].series = p.counters[i].series.Family().With(d.name, p.num, rail)
	}
}

func (c *rdmaCollector) readState(path string) (int, string, error) {
	b, err := c.reader.Read(path, c.buf[:])
	if err != nil {
		if !sysfs.IsGone(err) {
			skipValue(c.env, path, err)
		}
		return 0, "", err
	}
	id, name, err := sysfs.ParseState(string(b))
	if err != nil {
		skipValue(c.env, path, err)
		return 0, "", err
	}
	return id, name, nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
