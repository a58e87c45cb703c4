package collector

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/ethtoolnl"
	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/optics"
)

// The phy collector reports the physical layer of the rail netdevs:
//
//   - FEC statistics (the kernel's ethtool netlink FEC request with
//     statistics: active mode, corrected and uncorrectable blocks,
//     corrected bits, per lane where the driver gives them), read on every
//     scrape — one netlink round trip per rail;
//   - the optical module: identity, temperature, supply voltage, per-lane
//     TX/RX power and bias current and the module's own thresholds, read
//     through the ethtool netlink module-EEPROM request (SFF-8636 and CMIS
//     pages, decoded by internal/optics). Module memory is read over I2C,
//     which is slow: a background goroutine refreshes it every
//     --collector.phy.module-interval and scrapes copy the latest result.
//     A module that does not answer costs one log line and its series.
//
// mlx5's *_phy error counters (rx_corrected_bits_phy, rx_err_lane_N_phy,
// rx_pcs_symbol_err_phy) come with the other `ethtool -S` statistics in the
// pfc collector.

// PhySource reads FEC statistics and module memory of a netdev.
type PhySource interface {
	FEC(netdev string) (ethtoolnl.FEC, error)
	ReadModuleEEPROM(netdev string, offset, length uint32, page, bank uint8) ([]byte, error)
}

// PhyOptions configures the phy collector.
type PhyOptions struct {
	// Fixtures, when set, is a directory of DIR/<netdev>.fec and
	// DIR/<netdev>.eeprom files read instead of ethtool netlink.
	Fixtures string
	// ModuleInterval is the module memory refresh period.
	ModuleInterval time.Duration
	// DeviceExclude: netdevs whose FEC and module memory are not read
	// (--collector.phy.device-exclude, an anchored regexp).
	DeviceExclude string
	// Source overrides the source (tests).
	Source PhySource
}

func phyFlags(app *kingpin.Application, o *Options) {
	app.Flag("collector.phy.fixtures", "Read FEC statistics from DIR/<netdev>.fec and module memory dumps from DIR/<netdev>.eeprom instead of ethtool netlink (demos and tests).").PlaceHolder("DIR").Hidden().StringVar(&o.Phy.Fixtures)
	app.Flag("collector.phy.device-exclude", "Anchored regexp of rail netdevs whose FEC statistics and module memory are not read: devices whose firmware refuses the register reads and logs an error for each (mlx5 ACCESS_REG failures on HGX B200/B300 limited PFs). Their phy series are absent.").PlaceHolder("REGEXP").StringVar(&o.Phy.DeviceExclude)
	app.Flag("collector.phy.module-interval", "How often optical module memory (DOM monitors, thresholds, identity) is read in the background. Module reads go over I2C and take tens to hundreds of milliseconds.").Default("60s").DurationVar(&o.Phy.ModuleInterval)
}

// phyModule is the latest decoded module of a netdev.
type phyModule struct {
	mod *optics.Module
	at  time.Time
}

type phyCollector struct {
	env  Env
	opts *Options
	src  PhySource
	// exclude: --collector.phy.device-exclude (nil: none).
	exclude *regexp.Regexp
	first   chan struct{} // closed after the first module refresh
	stop    chan struct{}
	done    chan struct{}

	mu      sync.Mutex
	modules map[string]phyModule

	fecInfo, fecCorrected, fecUncorr, fecBits, fecLaneCorrected, fecLaneUncorr *exposition.Family
	modInfo, modTemp, modVolt, modTx, modRx, modBias, modAt                    *exposition.Family
	thTemp, thVolt, thTx, thRx, thBias                                         *exposition.Family
}

// phyFirstWait bounds how long the first scrape waits for the first module
// refresh, so that a freshly started exporter reports its modules.
const phyFirstWait = time.Second

func newPhyCollector(env Env, o *Options) (Collector, error) {
	p := o.Phy
	if p.ModuleInterval <= 0 {
		p.ModuleInterval = 60 * time.Second
	}
	if p.ModuleInterval < time.Second {
		return nil, fmt.Errorf("--collector.phy.module-interval %v: must be at least 1s", p.ModuleInterval)
	}
	var exclude *regexp.Regexp
	if p.DeviceExclude != "" {
		f, err := NewFilter("", p.DeviceExclude)
		if err != nil {
			return nil, fmt.Errorf("--collector.phy.%w", err)
		}
		exclude = f.exclude
	}
	src := p.Source
	switch {
	case src != nil:
	case p.Fixtures != "":
		src = &FilePhy{Dir: p.Fixtures}
	default:
		src = ethtoolnl.NewClient()
	}
	g, ctr := prometheus.GaugeValue, prometheus.CounterValue
	nd := func(name, help string, typ prometheus.ValueType, labels ...string) *exposition.Family {
		return env.Families.NewFamily(name, help, typ, append(append([]string{"netdev"}, labels...), "rail")...)
	}
	th := func(name, what string) *exposition.Family {
		return nd(name, "The module's own "+what+" thresholds (threshold: high_alarm, low_alarm, high_warning, low_warning), from its memory.", g, "threshold")
	}
	c := &phyCollector{
		env: env, opts: o, src: src, exclude: exclude, modules: map[string]phyModule{},
		first: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
		fecInfo:          nd("fabric_netdev_fec_info", "Active FEC mode of a rail netdev (off, rs, baser, llrs), from ethtool netlink.", g, "mode"),
		fecCorrected:     nd("fabric_netdev_fec_corrected_blocks_total", "FEC blocks (codewords) received with errors that FEC corrected (IEEE 802.3 FEC statistics through ethtool netlink).", ctr),
		fecUncorr:        nd("fabric_netdev_fec_uncorrectable_blocks_total", "FEC blocks received with errors FEC could not correct: each is a corrupted frame (a RoCE retransmission or drop).", ctr),
		fecBits:          nd("fabric_netdev_fec_corrected_bit_errors_total", "Bits FEC corrected (drivers that report it through ethtool netlink).", ctr),
		fecLaneCorrected: nd("fabric_netdev_fec_lane_corrected_blocks_total", "FEC corrected blocks per lane (lane numbered from 0 as ethtool --show-fec prints it), where the driver reports lanes (BASE-R/FC-FEC; RS-FEC corrects across lanes and reports totals only).", ctr, "lane"),
		fecLaneUncorr:    nd("fabric_netdev_fec_lane_uncorrectable_blocks_total", "FEC uncorrectable blocks per lane, where the driver reports lanes.", ctr, "lane"),
		modInfo: env.Families.NewFamily("fabric_transceiver_info", "The optical module (or cable) in a rail netdev's cage: management spec (SFF-8636 or CMIS), form factor (SFF-8024 name), vendor, part number, revision, serial number, firmware (CMIS active firmware; \"\" for SFF-8636), media (mmf, smf, optical, passive_copper, active_copper, active_cable, base_t; \"\" when undefined).",
			g, "netdev", "spec", "type", "vendor", "part_number", "revision", "serial", "firmware", "media", "rail"),
		modTemp: nd("fabric_transceiver_temperature_celsius", "Module temperature.", g),
		modVolt: nd("fabric_transceiver_supply_voltage_volts", "Module supply voltage.", g),
		modTx:   nd("fabric_transceiver_tx_power_watts", "Transmitted optical power per media lane (lane numbered from 1 as the module specifications and ethtool -m do).", g, "lane"),
		modRx:   nd("fabric_transceiver_rx_power_watts", "Received optical power per media lane (average power or OMA, as the module measures it). 0 is a dark lane.", g, "lane"),
		modBias: nd("fabric_transceiver_tx_bias_amperes", "Laser bias current per media lane.", g, "lane"),
		modAt:   nd("fabric_transceiver_read_timestamp_seconds", "When the module's memory was last read successfully (Unix time); module series are refreshed every --collector.phy.module-interval.", g),
		thTemp:  th("fabric_transceiver_temperature_threshold_celsius", "temperature"),
		thVolt:  th("fabric_transceiver_supply_voltage_threshold_volts", "supply voltage"),
		thTx:    th("fabric_transceiver_tx_power_threshold_watts", "transmit power"),
		thRx:    th("fabric_transceiver_rx_power_threshold_watts", "receive power"),
		thBias:  th("fabric_transceiver_tx_bias_threshold_amperes", "laser bias current"),
	}
	go c.loop(p.ModuleInterval)
	return c, nil
}

// loop refreshes module memory until Close.
func (c *phyCollector) loop(every time.Duration) {
	defer close(c.done)
	c.refresh(context.Background())
	close(c.first)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.refresh(context.Background())
		}
	}
}

// Close stops the background refresh.
func (c *phyCollector) Close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
	if cl, ok := c.src.(interface{ Close() error }); ok {
		cl.Close()
	}
}

// railNetdevs returns the netdevs of the present rails, sorted, and the
// rails they came from.
func (c *phyCollector) railNetdevs(ctx context.Context) ([]string, []Rail) {
	if c.opts.Rails == nil {
		return nil, nil
	}
	seen := map[string]bool{}
	var out []string
	rails := c.opts.Rails.Current(ctx)
	for _, r := range rails {
		if r.Present && r.Netdev != "" && !seen[r.Netdev] && (c.exclude == nil || !c.exclude.MatchString(r.Netdev)) {
			seen[r.Netdev] = true
			out = append(out, r.Netdev)
		}
	}
	sort.Strings(out)
	return out, rails
}

type netdevPages struct {
	src    PhySource
	netdev string
}

func (n netdevPages) ReadEEPROM(offset, length uint32, page, bank uint8) ([]byte, error) {
	return n.src.ReadModuleEEPROM(n.netdev, offset, length, page, bank)
}

// refresh reads every rail netdev's module memory.
func (c *phyCollector) refresh(ctx context.Context) {
	netdevs, _ := c.railNetdevs(ctx)
	fresh := map[string]phyModule{}
	for _, nd := range netdevs {
		key := "phy-module:" + nd
		mem, err := optics.Read(netdevPages{c.src, nd})
		var mod *optics.Module
		if err == nil {
			mod, err = optics.Decode(mem)
		}
		if err != nil {
			if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENODEV) {
				c.env.Once.Debug(key, "msg", "no module memory for this netdev (driver or cage without one)", "netdev", nd, "err", err)
			} else {
				c.env.Once.Warn(key, "msg", "cannot read the optical module; its series are left out until it answers", "netdev", nd, "err", err)
			}
			continue
		}
		if c.env.Once.Clear(key) {
			c.env.Once.Debug(key+":back", "msg", "optical module answers again", "netdev", nd)
		}
		if len(mod.Missing) > 0 {
			c.env.Once.Debug(key+":missing", "msg", "module pages not read; their values are left out", "netdev", nd, "pages", strings.Join(mod.Missing, ","))
		}
		fresh[nd] = phyModule{mod: mod, at: time.Now()}
	}
	c.mu.Lock()
	c.modules = fresh
	c.mu.Unlock()
}

func (c *phyCollector) Update(ctx context.Context, b *exposition.Batch) error {
	select {
	case <-c.first:
	case <-time.After(phyFirstWait):
	case <-ctx.Done():
	}
	netdevs, rails := c.railNetdevs(ctx)
	if len(netdevs) == 0 {
		if err := sysfsRootError(c.opts.SysfsPath); err != nil {
			return err
		}
		return noHardware("no rail netdev")
	}
	var errs []error
	for _, nd := range netdevs {
		f, err := c.src.FEC(nd)
		if err != nil {
			switch {
			case errors.Is(err, syscall.EOPNOTSUPP):
			case errors.Is(err, syscall.ENODEV):
				c.env.ReadErrors.Inc()
				c.env.Once.Warn("phy-fec:"+nd, "msg", "rail netdev not in the exporter's network namespace; ethtool netlink needs the host network (hostNetwork: true, --network host)", "netdev", nd, "err", err)
			default:
				c.env.ReadErrors.Inc()
				c.env.Once.Warn("phy-fec:"+nd, "msg", "cannot read FEC statistics", "netdev", nd, "err", err)
			}
			errs = append(errs, fmt.Errorf("%s: %w", nd, err))
			continue
		}
		c.env.Once.Clear("phy-fec:" + nd)
		c.emitFEC(nd, railOfNetdev(rails, nd), f, b)
	}
	c.mu.Lock()
	mods := c.modules
	c.mu.Unlock()
	for _, nd := range netdevs {
		if m, ok := mods[nd]; ok {
			c.emitModule(nd, railOfNetdev(rails, nd), m, b)
		}
	}
	if len(errs) == len(netdevs) && len(mods) == 0 {
		err := errors.Join(errs...)
		if allUnsupported(errs) {
			return noHardware("neither FEC statistics nor module memory available: %v", err)
		}
		return err
	}
	return nil
}

// emitFEC and emitModule send one rail netdev's series; rail is its rail label.
func (c *phyCollector) emitFEC(nd, rail string, f ethtoolnl.FEC, b *exposition.Batch) {
	if f.Active != "" {
		b.AddWith(c.fecInfo, 1, nd, f.Active, rail)
	}
	for _, x := range []struct {
		c          ethtoolnl.Counter
		total, lan *exposition.Family
	}{{f.Corrected, c.fecCorrected, c.fecLaneCorrected}, {f.Uncorrectable, c.fecUncorr, c.fecLaneUncorr}, {f.CorrBits, c.fecBits, nil}} {
		if !x.c.OK {
			continue
		}
		b.AddWith(x.total, float64(x.c.Total), nd, rail)
		if x.lan != nil {
			for i, v := range x.c.Lanes {
				b.AddWith(x.lan, float64(v), nd, strconv.Itoa(i), rail)
			}
		}
	}
}

func (c *phyCollector) emitModule(nd, rail string, pm phyModule, b *exposition.Batch) {
	m := pm.mod
	b.AddWith(c.modInfo, 1, nd, m.Spec, m.Type, m.Vendor, m.PartNumber, m.Revision, m.Serial, m.Firmware, m.Media, rail)
	b.AddWith(c.modAt, float64(pm.at.UnixNano())/1e9, nd, rail)
	if m.Temperature.OK {
		b.AddWith(c.modTemp, m.Temperature.V, nd, rail)
	}
	if m.Voltage.OK {
		b.AddWith(c.modVolt, m.Voltage.V, nd, rail)
	}
	for i, l := range m.Lanes {
		lane := strconv.Itoa(i + 1)
		for _, x := range []struct {
			v optics.Value
			f *exposition.Family
		}{{l.TxPower, c.modTx}, {l.RxPower, c.modRx}, {l.Bias, c.modBias}} {
			if x.v.OK {
				b.AddWith(x.f, x.v.V, nd, lane, rail)
			}
		}
	}
	for _, x := range []struct {
		t *optics.Thresholds
		f *exposition.Family
	}{{m.TemperatureThresholds, c.thTemp}, {m.VoltageThresholds, c.thVolt}, {m.TxPowerThresholds, c.thTx}, {m.RxPowerThresholds, c.thRx}, {m.BiasThresholds, c.thBias}} {
		if x.t == nil {
			continue
		}
		b.AddWith(x.f, x.t.HighAlarm, nd, "high_alarm", rail)
		b.AddWith(x.f, x.t.LowAlarm, nd, "low_alarm", rail)
		b.AddWith(x.f, x.t.HighWarning, nd, "high_warning", rail)
		b.AddWith(x.f, x.t.LowWarning, nd, "low_warning", rail)
	}
}

// FilePhy reads fixtures: DIR/<netdev>.fec (FEC statistics as "key value
// [lane values...]" lines: active rs, corrected_blocks N [N...],
// uncorrectable_blocks N [N...], corrected_bits N) and DIR/<netdev>.eeprom
// (a module memory dump in internal/optics' text format). A missing file
// behaves like a driver without the request (EOPNOTSUPP).
type FilePhy struct {
	Dir string
}

func (f *FilePhy) path(netdev, ext string) (string, error) {
	if netdev == "" || strings.ContainsAny(netdev, "/\x00") {
		return "", fmt.Errorf("bad interface name %q", netdev)
	}
	return filepath.Join(f.Dir, netdev+ext), nil
}

func readFixture(p string) ([]byte, error) {
	b, err := os.ReadFile(p)
	if os.IsNotExist(err) {
		return nil, syscall.EOPNOTSUPP
	}
	return b, err
}

// FEC implements PhySource.
func (f *FilePhy) FEC(netdev string) (ethtoolnl.FEC, error) {
	p, err := f.path(netdev, ".fec")
	if err != nil {
		return ethtoolnl.FEC{}, err
	}
	b, err := readFixture(p)
	if err != nil {
		return ethtoolnl.FEC{}, err
	}
	return ParseFECText(b)
}

// ParseFECText parses the FEC fixture format of FilePhy.
func ParseFECText(b []byte) (ethtoolnl.FEC, error) {
	var out ethtoolnl.FEC
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if f[0] == "active" && len(f) == 2 {
			out.Active = f[1]
			continue
		}
		var dst *ethtoolnl.Counter
		switch f[0] {
		case "corrected_blocks":
			dst = &out.Corrected
		case "uncorrectable_blocks":
			dst = &out.Uncorrectable
		case "corrected_bits":
			dst = &out.CorrBits
		default:
			return out, fmt.Errorf("line %d: unknown key %q", n, f[0])
		}
		if len(f) < 2 {
			return out, fmt.Errorf("line %d: no value", n)
		}
		var c ethtoolnl.Counter
		for i, s := range f[1:] {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return out, fmt.Errorf("line %d: %q", n, s)
			}
			if i == 0 {
				c.Total, c.OK = v, true
			} else {
				c.Lanes = append(c.Lanes, v)
			}
		}
		*dst = c
	}
	return out, sc.Err()
}

// ReadModuleEEPROM implements PhySource from the dump file.
func (f *FilePhy) ReadModuleEEPROM(netdev string, offset, length uint32, page, bank uint8) ([]byte, error) {
	p, err := f.path(netdev, ".eeprom")
	if err != nil {
		return nil, err
	}
	b, err := readFixture(p)
	if err != nil {
		return nil, err
	}
	m, err := optics.ParseDump(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	var src []byte
	if offset < 128 {
		src = m.Lower
	} else {
		src, offset = m.Upper[optics.PageKey{Page: page, Bank: bank}], offset-128
	}
	if src == nil || int(offset+length) > len(src) {
		return nil, syscall.EINVAL // the kernel's answer for a page the module lacks
	}
	return append([]byte(nil), src[offset:offset+length]...), nil
}
