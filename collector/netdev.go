package collector

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// netdevStat names a file of class/net/<if>/statistics.
type netdevStat struct {
	name, help string
}

// netdevStats names every file the kernel puts in statistics/. rx_/tx_
// become received_/transmitted_; unknown files are skipped.
var netdevStats = map[string]netdevStat{
	"rx_bytes":            {"received_bytes_total", "Bytes received by the interface (kernel stack; RoCE traffic bypasses it)."},
	"tx_bytes":            {"transmitted_bytes_total", "Bytes transmitted by the interface (kernel stack; RoCE traffic bypasses it)."},
	"rx_packets":          {"received_packets_total", "Packets received by the interface."},
	"tx_packets":          {"transmitted_packets_total", "Packets transmitted by the interface."},
	"rx_errors":           {"received_errors_total", "Receive errors."},
	"tx_errors":           {"transmitted_errors_total", "Transmit errors."},
	"rx_dropped":          {"received_dropped_total", "Received packets dropped."},
	"tx_dropped":          {"transmitted_dropped_total", "Transmitted packets dropped."},
	"multicast":           {"received_multicast_packets_total", "Multicast packets received."},
	"collisions":          {"collisions_total", "Collisions."},
	"rx_compressed":       {"received_compressed_total", "Compressed packets received."},
	"tx_compressed":       {"transmitted_compressed_total", "Compressed packets transmitted."},
	"rx_crc_errors":       {"received_crc_errors_total", "Received packets with CRC errors."},
	"rx_frame_errors":     {"received_frame_errors_total", "Received frame alignment errors."},
	"rx_fifo_errors":      {"received_fifo_errors_total", "Receive FIFO overruns."},
	"rx_length_errors":    {"received_length_errors_total", "Received packets with length errors."},
	"rx_missed_errors":    {"received_missed_errors_total", "Packets missed by the host (no buffer)."},
	"rx_over_errors":      {"received_over_errors_total", "Receive ring overflows."},
	"rx_nohandler":        {"received_nohandler_total", "Received packets dropped for lack of a protocol handler."},
	"tx_aborted_errors":   {"transmitted_aborted_errors_total", "Aborted transmissions."},
	"tx_carrier_errors":   {"transmitted_carrier_errors_total", "Transmit carrier errors."},
	"tx_fifo_errors":      {"transmitted_fifo_errors_total", "Transmit FIFO errors."},
	"tx_heartbeat_errors": {"transmitted_heartbeat_errors_total", "Transmit heartbeat errors."},
	"tx_window_errors":    {"transmitted_window_errors_total", "Transmit late-collision (window) errors."},
}

type netdevCollector struct {
	env    Env
	opts   *Options
	reader *sysfs.Reader
	fams   map[string]*exposition.Family // statistics file -> family
	ifs    *sysfs.ClassCache[*netIf]
	filter Filter
	buf    [sysfs.MaxAttrSize]byte

	info, up, speed *exposition.Family
}

type netIf struct {
	name, dir           string
	physical            bool
	driver, pci, numa   string
	stats               []counterFile
	up, speed           *exposition.Series
	operPath, speedPath string
	// rail is the rail label the series were bound with ("" for none);
	// they are bound again when the interface's rail changes.
	rail string
}

// NetdevOptions configures the netdev collector.
type NetdevOptions struct {
	DeviceInclude, DeviceExclude string
}

func netdevFlags(app *kingpin.Application, o *Options) {
	app.Flag("collector.netdev.device-include", "Regexp of network interfaces to include besides rail netdevs (default: every physical NIC).").PlaceHolder("REGEXP").StringVar(&o.Netdev.DeviceInclude)
	app.Flag("collector.netdev.device-exclude", "Regexp of non-rail network interfaces to exclude.").PlaceHolder("REGEXP").StringVar(&o.Netdev.DeviceExclude)
}

func newNetdevCollector(env Env, o *Options) (Collector, error) {
	filter, err := NewFilter(o.Netdev.DeviceInclude, o.Netdev.DeviceExclude)
	if err != nil {
		return nil, fmt.Errorf("--collector.netdev.%w", err)
	}
	reader := sysfs.NewReaderIn(o.SysfsPath)
	c := &netdevCollector{
		env: env, opts: o, reader: reader,
		fams: map[string]*exposition.Family{}, ifs: sysfs.NewClassCache[*netIf](o.sysPath("class", "net"), reader), filter: filter,
		info: env.Families.NewFamily("fabric_netdev_info",
			"Network interface metadata; rail is \"\" when the interface carries no rail, numa_node \"\" when unknown.",
			prometheus.GaugeValue, "netdev", "operstate", "driver", "pci_bus_id", "numa_node", "rail"),
		up:    env.Families.NewFamily("fabric_netdev_up", "1 if the interface's operstate is up, else 0.", prometheus.GaugeValue, "netdev", "rail"),
		speed: env.Families.NewFamily("fabric_netdev_speed_bytes_per_second", "Link speed in bytes per second (absent while the link is down).", prometheus.GaugeValue, "netdev", "rail"),
	}
	for file, s := range netdevStats {
		c.fams[file] = env.Families.NewFamily("fabric_netdev_"+s.name, s.help, prometheus.CounterValue, "netdev", "rail")
	}
	return c, nil
}

func (c *netdevCollector) dir() string { return c.opts.sysPath("class", "net") }

func (c *netdevCollector) Update(ctx context.Context, b *exposition.Batch) error {
	names, err := sysfs.ListDir(c.dir(), false)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return checkSysfs(c.opts.SysfsPath, c.dir()+" does not exist")
		}
		return fmt.Errorf("listing network interfaces: %w", err)
	}
	var rails []Rail
	if c.opts.Rails != nil {
		rails = c.opts.Rails.Current(ctx)
	}
	seen := make(map[string]bool, len(names))
	for _, name := range names {
		rail := railOfNetdev(rails, name)
		ifc, _ := c.ifs.Get(name, func(dir string) (*netIf, error) { return c.scanIface(name, dir, rail), nil })
		f := c.filter
		if rail == "" {
			if f.HasInclude() {
				if f.Ignored(name) {
					continue
				}
			} else if !ifc.physical || f.Ignored(name) {
				continue
			}
		}
		seen[name] = true
		if !c.collectIface(ifc, rail, b) {
			c.ifs.Drop(name)
		}
	}
	c.ifs.KeepOnly(seen)
	return nil
}

// scanIface reads an interface's static attributes and lists its
// statistics files, once per registration (and rename).
func (c *netdevCollector) scanIface(name, dir, rail string) *netIf {
	ifc := &netIf{name: name, dir: dir, rail: rail, up: c.up.With(name, rail), speed: c.speed.With(name, rail),
		operPath: filepath.Join(dir, "operstate"), speedPath: filepath.Join(dir, "speed")}
	if _, err := os.Lstat(filepath.Join(dir, "device")); err == nil {
		ifc.physical = true
		// A virtio (or other non-PCI) device: the address and NUMA node
		// of the PCI function it sits on.
		pciDir := filepath.Join(dir, "device")
		ifc.pci, pciDir = sysfs.PCIFunction(pciDir)
		if pciDir == "" {
			pciDir = filepath.Join(dir, "device")
		}
		ifc.driver = sysfs.ReadLinkBase(filepath.Join(dir, "device", "driver"))
		if s, err := c.reader.ReadString(filepath.Join(pciDir, "numa_node")); err == nil {
			if v, err := sysfs.ParseInt([]byte(s)); err == nil && v >= 0 {
				ifc.numa = strconv.FormatInt(v, 10)
			}
		}
		c.reader.Forget(filepath.Join(pciDir, "numa_node"))
		c.reader.ForgetPrefix(dir)
	}
	files, err := sysfs.ListDir(filepath.Join(dir, "statistics"), true)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		c.env.ReadErrors.Inc()
		c.env.Once.Debug("stats:"+name, "msg", "cannot list interface statistics", "netdev", name, "err", err)
	}
	for _, f := range files {
		if fam, ok := c.fams[f]; ok {
			ifc.stats = append(ifc.stats, counterFile{path: filepath.Join(dir, "statistics", f), series: fam.With(name, rail), scale: 1})
		}
	}
	return ifc
}

// collectIface sends one interface's metrics; false means it vanished.
func (c *netdevCollector) collectIface(ifc *netIf, rail string, b *exposition.Batch) bool {
	if rail != ifc.rail {
		c.rebind(ifc, rail)
	}
	oper, err := c.reader.ReadString(ifc.operPath)
	if err != nil {
		if sysfs.IsGone(err) {
			return false
		}
		skipValue(c.env, ifc.operPath, err)
	}
	b.AddWith(c.info, 1, ifc.name, oper, ifc.driver, ifc.pci, ifc.numa, rail)
	if oper != "" {
		b.Add(ifc.up, b2f(oper == "up"))
	}
	if raw, err := c.reader.Read(ifc.speedPath, c.buf[:]); err == nil {
		// Mb/s; -1 (or EINVAL) while the link is down.
		if v, err := sysfs.ParseInt(raw); err == nil && v > 0 {
			b.Add(ifc.speed, float64(v)*125000)
		} else if err != nil && !errors.Is(err, sysfs.ErrNotAvailable) {
			skipValue(c.env, ifc.speedPath, err)
		}
	} else if !sysfs.IsGone(err) {
		skipValue(c.env, ifc.speedPath, err)
	}
	if gone := addCounters(c.env, c.reader, c.buf[:], ifc.stats, b); gone > 0 && gone == len(ifc.stats) {
		return false
	}
	return true
}

// rebind binds an interface's cached series to a new rail label: a netdev
// becomes a rail's (or stops being one) when an RDMA port's netdev appears,
// changes or goes away, without the interface itself being re-registered.
func (c *netdevCollector) rebind(ifc *netIf, rail string) {
	ifc.rail = rail
	ifc.up = c.up.With(ifc.name, rail)
	ifc.speed = c.speed.With(ifc.name, rail)
	for i := range ifc.stats {
		ifc.stats[i].series = ifc.stats[i].series.Family().With(ifc.name, rail)
	}
}
