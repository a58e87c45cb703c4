package collector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// The pcie collector reports the health of the PCIe links on the path of
// every GPU and RDMA device: each function from the device itself up to its
// root port (the bridges the topology collector walks), with the link's
// current and maximum speed and width and the kernel's AER error counters.
//
// sysfs (no privilege; Documentation/ABI/testing/sysfs-bus-pci and
// sysfs-bus-pci-devices-aer_stats):
//
//	current_link_speed, max_link_speed   "32.0 GT/s PCIe", "8 GT/s", "8.0 GT/s", "Unknown"
//	current_link_width, max_link_width   "16"
//	aer_dev_correctable, aer_dev_nonfatal, aer_dev_fatal
//	                                     one "NAME count" line per error type, then TOTAL_ERR_*
//	aer_rootport_total_err_cor, _fatal, _nonfatal   root ports only: one number
//
// A function's link registers describe the link above it for an endpoint
// or a switch upstream port, and the link below it for a root port or a
// switch downstream port, so every link is seen from both ends. The link a
// function trained with its upstream port may run at most at the lower of
// the two ends' maxima: fabric_pcie_link_supported_* gives that figure for
// every endpoint and switch upstream port (one series per physical link),
// and a link is degraded when it runs below it. Files that do not exist (VMs expose no aer_* files, some
// devices no link files) are left out quietly: which files exist is probed
// when the tree is (re)built, the maxima (link capabilities) are read then
// too, and a scrape reads only the current speed and width and the AER
// files that exist.

// pcieFunc is one PCI function on the path of a GPU or RDMA device.
type pcieFunc struct {
	bdf      string
	dir      string // sysfs devices/... directory of the function
	role     string // endpoint, root_port, switch_upstream_port, switch_downstream_port
	upstream *pcieFunc

	speed, maxSpeed, width, maxWidth, supSpeed, supWidth *exposition.Series
	// The maxima are link capabilities: read once per rebuild (again each
	// update while unknown because of a read error).
	maxS, maxW     float64
	okMaxS, okMaxW bool
	retryMax       bool
	// files that existed at rebuild; a missing file is not tried again
	// until the tree changes (most functions have no AER files).
	curS, curW string // paths of current_link_speed/width, "" when absent
	aer        []pcieAER
}

// pcieAER is one AER file of a function and the series of its lines.
type pcieAER struct {
	path, class string
	rootport    bool
	series      map[string]*exposition.Series // error name -> series (AER files)
	total       *exposition.Series            // aer_rootport_total_err_*
	classTotal  *exposition.Series            // the class total of an aer_dev_* file
}

type pcieCollector struct {
	env    Env
	topo   *topologyCollector // locates GPUs and RDMA devices in the PCI tree
	reader *sysfs.Reader
	sig    uint64
	built  bool
	funcs  []*pcieFunc
	static []*exposition.Series // link and path info
	acs    pcieACS              // ACS of the bridges, read at rebuild

	speed, maxSpeed, width, maxWidth, supSpeed, supWidth *exposition.Family
	linkInfo, pathInfo, aer, aerClass, rootport          *exposition.Family
}

func newPCIeCollector(env Env, o *Options) (Collector, error) {
	t, _ := newTopologyCollector(env, o)
	g, ctr := prometheus.GaugeValue, prometheus.CounterValue
	return &pcieCollector{
		env: env, topo: t.(*topologyCollector), reader: sysfs.NewReaderIn(o.SysfsPath), acs: newPCIeACS(env, o.PCIe.ACSFile),
		speed: env.Families.NewFamily("fabric_pcie_link_speed_transfers_per_second",
			"Current PCIe link speed in transfers per second (current_link_speed; 32.0 GT/s = 3.2e10). Endpoints commonly lower it while idle.", g, "pci_bus_id"),
		maxSpeed: env.Families.NewFamily("fabric_pcie_link_max_speed_transfers_per_second",
			"Highest PCIe link speed this function supports (max_link_speed), transfers per second.", g, "pci_bus_id"),
		width: env.Families.NewFamily("fabric_pcie_link_width",
			"Current PCIe link width in lanes (current_link_width).", g, "pci_bus_id"),
		maxWidth: env.Families.NewFamily("fabric_pcie_link_max_width",
			"Widest PCIe link this function supports (max_link_width), lanes.", g, "pci_bus_id"),
		supSpeed: env.Families.NewFamily("fabric_pcie_link_supported_speed_transfers_per_second",
			"Speed the link above this function (an endpoint or switch upstream port) can reach: the lower of both ends' max_link_speed (this function's alone when the port above reports none). One series per physical link; absent for root and downstream ports, whose registers describe the link below them.", g, "pci_bus_id"),
		supWidth: env.Families.NewFamily("fabric_pcie_link_supported_width",
			"Width the link above this function (an endpoint or switch upstream port) can reach: the lower of both ends' max_link_width. Absent for root and downstream ports.", g, "pci_bus_id"),
		linkInfo: env.Families.NewFamily("fabric_pcie_link_info",
			"A PCI function on the path of a GPU or RDMA device: its role (endpoint, root_port, switch_upstream_port, switch_downstream_port: switch ports alternate below a root port), the function above it (\"\" for a root port) and PCI vendor/device IDs.",
			g, "pci_bus_id", "role", "upstream_pci_bus_id", "vendor", "device"),
		pathInfo: env.Families.NewFamily("fabric_pcie_path_info",
			"The function pci_bus_id is on the PCIe path from the GPU or RDMA device (kind, name as in fabric_pci_device_info) to its root port, the device itself included.",
			g, "pci_bus_id", "kind", "name"),
		aer: env.Families.NewFamily("fabric_pcie_aer_errors_total",
			"PCIe AER errors the function reported, per error type (aer_dev_correctable, aer_dev_nonfatal, aer_dev_fatal: class correctable, nonfatal, fatal). Absent where the kernel exposes no AER statistics.",
			ctr, "pci_bus_id", "class", "error"),
		aerClass: env.Families.NewFamily("fabric_pcie_aer_class_errors_total",
			"PCIe AER errors the function reported, per class (the TOTAL_ERR_COR, TOTAL_ERR_NONFATAL, TOTAL_ERR_FATAL line of aer_dev_correctable, aer_dev_nonfatal, aer_dev_fatal; the sum of the error types where a kernel prints no total). One series per class: what the alerts and the overview read instead of every error type.",
			ctr, "pci_bus_id", "class"),
		rootport: env.Families.NewFamily("fabric_pcie_aer_rootport_errors_total",
			"AER error messages a root port received from the devices below it (aer_rootport_total_err_cor, _nonfatal, _fatal).",
			ctr, "pci_bus_id", "class"),
	}, nil
}

func (c *pcieCollector) Update(ctx context.Context, b *exposition.Batch) error {
	sig, found := uint64(14695981039346656037), 0
	for _, d := range c.topo.dirs[:2] {
		var err error
		sig, err = sysfs.DirHash(d, sig)
		if err == nil {
			found++
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("listing %s: %w", d, err)
		}
	}
	if found == 0 {
		return checkSysfs(c.topo.sysfs, "neither "+c.topo.dirs[0]+" nor "+c.topo.dirs[1]+" exists")
	}
	changed, err := c.acs.file.refresh()
	if err != nil {
		skipValue(c.env, c.acs.file.path, err)
	}
	if changed {
		c.built = false // read the bridges' ACS again with the new file
	}
	if !c.built || sig != c.sig {
		c.rebuild()
		c.sig, c.built = sig, true
	}
	if len(c.funcs) == 0 {
		return noHardware("no GPU or RDMA device on PCI in %s", c.topo.sysfs)
	}
	for _, s := range c.static {
		b.Add(s, 1)
	}
	c.acs.add(b)
	var buf [sysfs.MaxAttrSize]byte
	for _, f := range c.funcs {
		if f.retryMax {
			c.readMax(f, buf[:])
		}
		if f.okMaxS {
			b.Add(f.maxSpeed, f.maxS)
		}
		if f.okMaxW {
			b.Add(f.maxWidth, f.maxW)
		}
		if f.curS != "" {
			if v, ok := c.readLink(f.curS, buf[:], parseLinkSpeed); ok {
				b.Add(f.speed, v)
			}
		}
		if f.curW != "" {
			if v, ok := c.readLink(f.curW, buf[:], parseLinkWidth); ok {
				b.Add(f.width, v)
			}
		}
		for i := range f.aer {
			a := &f.aer[i]
			raw, ok := c.read(a.path, buf[:])
			if !ok {
				continue
			}
			if a.rootport {
				v, err := sysfs.ParseUint(raw)
				if err != nil {
					skipValue(c.env, a.path, err)
					continue
				}
				b.Add(a.total, float64(v))
				continue
			}
			total, err := parseAER(raw, func(name string, v uint64) {
				s := a.series[name]
				if s == nil {
					if len(a.series) >= 64 { // bounded: the kernel prints about 20 names
						return
					}
					s = c.aer.With(f.bdf, a.class, name)
					a.series[name] = s
				}
				b.Add(s, float64(v))
			})
			if err != nil {
				skipValue(c.env, a.path, err)
			} else {
				if a.classTotal == nil {
					a.classTotal = c.aerClass.With(f.bdf, a.class)
				}
				b.Add(a.classTotal, float64(total))
			}
		}
	}
	// The link above an endpoint or upstream port can do what both of its
	// ends can.
	for _, f := range c.funcs {
		if f.role != "endpoint" && f.role != "switch_upstream_port" {
			continue // its registers describe the link below it
		}
		if f.okMaxS {
			v := f.maxS
			if u := f.upstream; u != nil && u.okMaxS {
				v = min(v, u.maxS)
			}
			b.Add(f.supSpeed, v)
		}
		if f.okMaxW {
			v := f.maxW
			if u := f.upstream; u != nil && u.okMaxW {
				v = min(v, u.maxW)
			}
			b.Add(f.supWidth, v)
		}
	}
	return nil
}

// read returns a file's trimmed content; a missing file is quiet, other
// errors are counted.
func (c *pcieCollector) read(path string, buf []byte) ([]byte, bool) {
	raw, err := c.reader.Read(path, buf)
	if err != nil {
		if !sysfs.IsGone(err) {
			skipValue(c.env, path, err)
		}
		return nil, false
	}
	return raw, true
}

// readMax reads a function's link capabilities; a read error (not a
// missing file) makes the next update try again.
func (c *pcieCollector) readMax(f *pcieFunc, buf []byte) {
	f.retryMax = false
	for _, m := range []struct {
		name  string
		parse func([]byte) (float64, error)
		v     *float64
		ok    *bool
	}{{"max_link_speed", parseLinkSpeed, &f.maxS, &f.okMaxS}, {"max_link_width", parseLinkWidth, &f.maxW, &f.okMaxW}} {
		if *m.ok {
			continue
		}
		p := filepath.Join(f.dir, m.name)
		raw, err := c.reader.Read(p, buf)
		if err != nil {
			if !sysfs.IsGone(err) {
				skipValue(c.env, p, err)
				f.retryMax = true
			}
			continue
		}
		c.reader.Forget(p) // static: no need to keep it open
		v, err := m.parse(raw)
		if err != nil {
			if !errors.Is(err, sysfs.ErrNotAvailable) {
				f.retryMax = true
			}
			skipValue(c.env, p, err)
			continue
		}
		*m.v, *m.ok = v, true
	}
}

// exists reports whether a file is there (probed at rebuild).
func (c *pcieCollector) exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func (c *pcieCollector) readLink(p string, buf []byte, parse func([]byte) (float64, error)) (float64, bool) {
	raw, ok := c.read(p, buf)
	if !ok {
		return 0, false
	}
	v, err := parse(raw)
	if err != nil {
		skipValue(c.env, p, err)
		return 0, false
	}
	return v, true
}

// rebuild walks the paths of the GPUs and RDMA devices again.
func (c *pcieCollector) rebuild() {
	c.reader.Close()
	c.funcs, c.static, c.acs.values = c.funcs[:0], c.static[:0], c.acs.values[:0]
	devRoot, err := filepath.EvalSymlinks(filepath.Join(c.topo.sysfs, "devices"))
	if err != nil {
		return
	}
	byBDF := map[string]*pcieFunc{}
	type member struct{ bdf, kind, name string }
	var members []member
	gpus, hcas := c.topo.findGPUs(devRoot), c.topo.locateClass(devRoot, c.topo.dirs[1])
	for i, locs := range [][]*pciLoc{gpus, hcas} {
		kind := [...]string{"gpu", "hca"}[i]
		for _, l := range locs {
			var up *pcieFunc
			for k, bdf := range l.chain {
				if !isBDF(bdf) {
					continue
				}
				f := byBDF[bdf]
				if f == nil {
					// sysfs does not say a port's type (that is in
					// config space beyond what users may read): below a
					// root port, switch ports alternate upstream and
					// downstream port.
					role := "switch_downstream_port"
					switch {
					case k == len(l.chain)-1:
						role = "endpoint"
					case k == 0:
						role = "root_port"
					case k%2 == 1:
						role = "switch_upstream_port"
					}
					f = &pcieFunc{bdf: bdf, role: role, upstream: up,
						dir: filepath.Join(devRoot, l.root, filepath.Join(l.chain[:k+1]...))}
					byBDF[bdf] = f
				}
				members = append(members, member{bdf, kind, l.name})
				up = f
			}
		}
	}
	for _, f := range byBDF {
		c.funcs = append(c.funcs, f)
	}
	depth := func(f *pcieFunc) int {
		n := 0
		for u := f.upstream; u != nil; u = u.upstream {
			n++
		}
		return n
	}
	sort.Slice(c.funcs, func(i, j int) bool {
		di, dj := depth(c.funcs[i]), depth(c.funcs[j])
		if di != dj {
			return di < dj
		}
		return c.funcs[i].bdf < c.funcs[j].bdf
	})
	var buf [sysfs.MaxAttrSize]byte
	for _, f := range c.funcs {
		f.speed, f.maxSpeed, f.width, f.maxWidth = c.speed.With(f.bdf), c.maxSpeed.With(f.bdf), c.width.With(f.bdf), c.maxWidth.With(f.bdf)
		f.supSpeed, f.supWidth = c.supSpeed.With(f.bdf), c.supWidth.With(f.bdf)
		c.readMax(f, buf[:])
		f.curS, f.curW = "", ""
		if p := filepath.Join(f.dir, "current_link_speed"); c.exists(p) {
			f.curS = p
		}
		if p := filepath.Join(f.dir, "current_link_width"); c.exists(p) {
			f.curW = p
		}
		for _, a := range [...][2]string{{"aer_dev_correctable", "correctable"}, {"aer_dev_nonfatal", "nonfatal"}, {"aer_dev_fatal", "fatal"}} {
			if p := filepath.Join(f.dir, a[0]); c.exists(p) {
				f.aer = append(f.aer, pcieAER{path: p, class: a[1], series: map[string]*exposition.Series{}})
			}
		}
		if f.role == "root_port" {
			for _, a := range [...][2]string{{"cor", "correctable"}, {"nonfatal", "nonfatal"}, {"fatal", "fatal"}} {
				if p := filepath.Join(f.dir, "aer_rootport_total_err_"+a[0]); c.exists(p) {
					f.aer = append(f.aer, pcieAER{path: p, class: a[1], rootport: true, total: c.rootport.With(f.bdf, a[1])})
				}
			}
		}
		up := ""
		if f.upstream != nil {
			up = f.upstream.bdf
		}
		c.static = append(c.static, c.linkInfo.With(f.bdf, f.role, up,
			sysfs.ReadSmall(c.topo.sysfs, filepath.Join(f.dir, "vendor")), sysfs.ReadSmall(c.topo.sysfs, filepath.Join(f.dir, "device"))))
	}
	for _, m := range members {
		c.static = append(c.static, c.pathInfo.With(m.bdf, m.kind, m.name))
	}
	c.acs.rebuild(c.env, c.funcs)
	c.acs.paths(gpus, hcas)
}

// parseLinkSpeed converts a sysfs link speed ("32.0 GT/s PCIe", "8 GT/s",
// "2.5 GT/s") to transfers per second. "Unknown" (a link that is down or a
// speed the kernel does not name) is not available.
func parseLinkSpeed(b []byte) (float64, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || bytes.HasPrefix(b, []byte("Unknown")) {
		return 0, sysfs.ErrNotAvailable
	}
	f := strings.Fields(string(b))
	if len(f) < 2 || f[1] != "GT/s" {
		return 0, fmt.Errorf("%w: link speed %q", sysfs.ErrGarbage, sysfs.Truncate(b, 32))
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || !(v > 0 && v <= 1e3) {
		return 0, fmt.Errorf("%w: link speed %q", sysfs.ErrGarbage, sysfs.Truncate(b, 32))
	}
	return v * 1e9, nil
}

// parseLinkWidth reads a link width in lanes. Width 0 (no link: a root
// complex integrated endpoint, a link that is not trained) and 255 (some
// devices' "not implemented") are not available.
func parseLinkWidth(b []byte) (float64, error) {
	v, err := sysfs.ParseUint(b)
	if err != nil {
		return 0, err
	}
	if v == 0 || v > 32 {
		return 0, sysfs.ErrNotAvailable
	}
	return float64(v), nil
}

// parseAER reads an aer_dev_* file: one "NAME count" line per error type,
// where NAME is a token ("RxErr", kernels since 4.19's rework) or words
// ("Receiver Error" in older kernels), followed by TOTAL_ERR_COR /
// TOTAL_ERR_NONFATAL / TOTAL_ERR_FATAL, which fn does not get: it is
// returned as total (errors the device reported, as the kernel counts
// them), or the sum of the types when the file has no total line. Bad lines
// make an error after the good ones are passed on (total is then not to be
// used).
func parseAER(b []byte, fn func(name string, v uint64)) (total uint64, err error) {
	var bad error
	var sum uint64
	hasTotal := false
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		i := bytes.LastIndexAny(line, " \t")
		if i <= 0 {
			bad = fmt.Errorf("%w: AER line %q", sysfs.ErrGarbage, sysfs.Truncate(line, 64))
			continue
		}
		name := bytes.TrimSpace(line[:i])
		v, err := sysfs.ParseUint(line[i+1:])
		if err != nil || len(name) == 0 {
			bad = fmt.Errorf("%w: AER line %q", sysfs.ErrGarbage, sysfs.Truncate(line, 64))
			continue
		}
		if bytes.HasPrefix(name, []byte("TOTAL_ERR_")) {
			total, hasTotal = v, true
			continue
		}
		sum += v
		fn(string(name), v)
	}
	if !hasTotal {
		total = sum
	}
	return total, bad
}
