package collector

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// RailConfig is one --rail NAME=DEVICE[:PORT] flag.
type RailConfig struct {
	Name   string
	Device string
	Port   int
}

var railNameRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

// ParseRail parses NAME=DEVICE[:PORT]; PORT defaults to 1.
func ParseRail(s string) (RailConfig, error) {
	name, dev, ok := strings.Cut(s, "=")
	if !ok || name == "" || dev == "" {
		return RailConfig{}, fmt.Errorf("rail %q: want NAME=DEVICE[:PORT], e.g. rail0=mlx5_0:1", s)
	}
	if !railNameRE.MatchString(name) {
		return RailConfig{}, fmt.Errorf("rail %q: name %q must be 1-64 characters of [A-Za-z0-9_.:-]", s, name)
	}
	rc := RailConfig{Name: name, Device: dev, Port: 1}
	if d, p, ok := strings.Cut(dev, ":"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 255 {
			return RailConfig{}, fmt.Errorf("rail %q: port %q must be a number from 1 to 255", s, p)
		}
		rc.Device, rc.Port = d, n
	}
	if rc.Device == "" || strings.ContainsAny(rc.Device, "/\x00") || rc.Device == "." || rc.Device == ".." {
		return RailConfig{}, fmt.Errorf("rail %q: bad device name %q", s, rc.Device)
	}
	return rc, nil
}

// Rail is a rail as resolved in one scrape.
type Rail struct {
	Name    string
	Device  string
	Port    string
	Netdev  string // "" when the port has no netdev (or the device is gone)
	Present bool   // the RDMA port exists now
}

// Rails maps rail names to RDMA ports and their netdevs. With no --rail
// flags, every port whose link layer is Ethernet (RoCE) is a rail named
// after its device. Resolution runs at most once per scrape and is shared by
// the collectors of that scrape.
type Rails struct {
	sysfs  string
	static []RailConfig

	mu       sync.Mutex
	lastID   uint64
	last     []Rail
	reader   *sysfs.Reader
	links    map[string]string   // class/infiniband/<dev> -> its link target
	ethPorts map[string][]string // default rails: Ethernet ports per device
	// everUp holds the default-rail ports (device:port) seen up since the
	// exporter started: a port becomes a rail when it first comes up, so
	// the uncabled ports of a dual-port HCA (DOWN from boot) are never
	// rails, and a rail that goes down stays one.
	everUp map[string]bool
	// missing lists the --rail ports that did not exist at start-up.
	missing []string
	// known holds every rail seen since startup with its last known
	// labels: a rail whose port disappears stays, not present.
	known map[string]Rail
}

// maxKnownRails bounds how many vanished rails are remembered.
const maxKnownRails = 256

// NewRails returns the rail resolver. Static rails are checked for names
// given twice and ports named twice (errors); a named device or port that
// does not exist now is not an error: the rail is reported as not present
// (fabric_rail_device_present 0, which pages as RailLinkDown) and
// StartupWarnings says why, so that a node whose HCA is missing at boot
// raises the rail page instead of only FabricExporterDown.
func NewRails(sysfsRoot string, static []RailConfig) (*Rails, error) {
	r := &Rails{sysfs: sysfsRoot, static: static, reader: sysfs.NewReaderIn(sysfsRoot), links: map[string]string{}, ethPorts: map[string][]string{}, known: map[string]Rail{}, everUp: map[string]bool{}}
	seen := map[string]bool{}
	ports := map[string]string{} // device:port -> rail name
	for _, rc := range static {
		if seen[rc.Name] {
			return nil, fmt.Errorf("rail %q is given twice", rc.Name)
		}
		seen[rc.Name] = true
		key := rc.Device + ":" + strconv.Itoa(rc.Port)
		if other, dup := ports[key]; dup {
			return nil, fmt.Errorf("rails %q and %q name the same RDMA port %s: give each port one rail name", other, rc.Name, key)
		}
		ports[key] = rc.Name
	}
	for _, rc := range static {
		portDir := filepath.Join(r.ibDir(), rc.Device, "ports", strconv.Itoa(rc.Port))
		if _, err := sysfs.ListDir(filepath.Join(r.ibDir(), rc.Device), false); err != nil {
			devs, _ := sysfs.ListDir(r.ibDir(), false)
			found := "none"
			if len(devs) > 0 {
				found = strings.Join(devs, ", ")
			}
			r.missing = append(r.missing, fmt.Sprintf("rail %q: RDMA device %q not found in %s (found: %s); reported as not present until it appears", rc.Name, rc.Device, r.ibDir(), found))
		} else if _, err := sysfs.ListDir(portDir, false); err != nil {
			r.missing = append(r.missing, fmt.Sprintf("rail %q: RDMA device %q has no port %d (%s); reported as not present until it appears", rc.Name, rc.Device, rc.Port, portDir))
		}
	}
	return r, nil
}

// StartupWarnings returns why --rail ports were missing at start-up (the
// command logs them as warnings).
func (r *Rails) StartupWarnings() []string { return r.missing }

func (r *Rails) ibDir() string { return filepath.Join(r.sysfs, "class", "infiniband") }

// Static reports whether rails come from --rail flags.
func (r *Rails) Static() bool { return len(r.static) > 0 }

// Current returns the rails of this scrape, sorted by name.
func (r *Rails) Current(ctx context.Context) []Rail {
	id := scrapeID(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if id != 0 && id == r.lastID {
		return r.last
	}
	r.last = r.resolve()
	r.lastID = id
	return r.last
}

func (r *Rails) resolve() []Rail {
	var out []Rail
	if len(r.static) > 0 {
		for _, rc := range r.static {
			port := strconv.Itoa(rc.Port)
			devDir := filepath.Join(r.ibDir(), rc.Device)
			portDir := filepath.Join(devDir, "ports", port)
			rail := Rail{Name: rc.Name, Device: rc.Device, Port: port}
			if r.linkChanged(devDir) {
				r.reader.ForgetPrefix(devDir)
			}
			var buf [64]byte
			if _, err := r.reader.Read(filepath.Join(portDir, "link_layer"), buf[:]); err == nil {
				rail.Present = true
				rail.Netdev = portNetdev(r.reader, devDir, portDir, rc.Port)
			} else {
				r.reader.ForgetPrefix(devDir)
				rail.Netdev = r.known[rc.Name].Netdev // last known
			}
			r.known[rc.Name] = rail
			out = append(out, rail)
		}
	} else {
		devs, _ := sysfs.ListDir(r.ibDir(), false)
		sort.Strings(devs)
		for _, dev := range devs {
			devDir := filepath.Join(r.ibDir(), dev)
			changed := r.linkChanged(devDir)
			if changed {
				r.reader.ForgetPrefix(devDir)
			}
			eth, ok := r.ethPorts[dev]
			if !ok || changed {
				// The link layer of a port is fixed while the device is
				// registered: list it once per registration.
				eth = nil
				ports, _ := sysfs.ListDir(filepath.Join(devDir, "ports"), false)
				sort.Slice(ports, func(i, j int) bool { return portLess(ports[i], ports[j]) })
				for _, p := range ports {
					var buf [64]byte
					ll, err := r.reader.Read(filepath.Join(devDir, "ports", p, "link_layer"), buf[:])
					if err == nil && string(ll) == "Ethernet" {
						eth = append(eth, p)
					}
					r.reader.Forget(filepath.Join(devDir, "ports", p, "link_layer"))
				}
				r.ethPorts[dev] = eth
			}
			for _, p := range eth {
				name := dev
				if len(eth) > 1 {
					name = dev + ":" + p
				}
				n, _ := strconv.Atoi(p)
				portDir := filepath.Join(devDir, "ports", p)
				if !r.cameUp(dev+":"+p, portDir) {
					continue // never up since start (uncabled, disabled): not a rail yet
				}
				out = append(out, Rail{Name: name, Device: dev, Port: p, Present: true, Netdev: portNetdev(r.reader, devDir, portDir, n)})
			}
		}
		// Rails seen before whose port is gone stay, with their last
		// known labels, as not present.
		now := make(map[string]bool, len(out))
		for _, rl := range out {
			now[rl.Name] = true
			if _, ok := r.known[rl.Name]; ok || len(r.known) < maxKnownRails {
				r.known[rl.Name] = rl
			}
		}
		for name, rl := range r.known {
			if !now[name] {
				rl.Present = false
				out = append(out, rl)
			}
		}
		if len(r.ethPorts) > len(devs) { // forget devices that went away
			present := make(map[string]bool, len(devs))
			for _, d := range devs {
				present[d] = true
			}
			for d := range r.ethPorts {
				if !present[d] {
					delete(r.ethPorts, d)
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// cameUp reports whether a default-rail port has been up since the
// exporter started: its state ACTIVE or its physical state LinkUp now or at
// an earlier scrape. Only ports not yet seen up are read (a few bytes each).
func (r *Rails) cameUp(key, portDir string) bool {
	if r.everUp[key] {
		return true
	}
	var buf [64]byte
	up := false
	if b, err := r.reader.Read(portDir+"/state", buf[:]); err == nil && bytes.HasSuffix(b, []byte("ACTIVE")) {
		up = true
	} else if b, err := r.reader.Read(portDir+"/phys_state", buf[:]); err == nil && bytes.HasSuffix(b, []byte("LinkUp")) {
		up = true
	}
	if up && len(r.everUp) < maxKnownRails {
		r.everUp[key] = true
		r.reader.Forget(portDir + "/state")
		r.reader.Forget(portDir + "/phys_state")
	}
	return up
}

// linkChanged reports whether the class link of a device changed since the
// last call (the device went away, came back or was re-registered): its
// cached files must then be re-opened.
func (r *Rails) linkChanged(devDir string) bool {
	t, err := os.Readlink(devDir)
	if err != nil {
		t = ""
	}
	old, ok := r.links[devDir]
	r.links[devDir] = t
	if t == "" {
		delete(r.links, devDir)
	}
	return ok && old != t
}

// portLess orders port directory names numerically.
func portLess(a, b string) bool {
	x, errA := strconv.Atoi(a)
	y, errB := strconv.Atoi(b)
	if errA != nil || errB != nil {
		return a < b
	}
	return x < y
}

// portNetdev finds the netdev of an RDMA port the way ibdev2netdev does:
// ports/N/gid_attrs/ndevs/0 (EINVAL or empty means none), then the netdevs
// bound to the device's PCI function (device/net/*); with several, the one
// whose dev_port is N-1.
func portNetdev(r *sysfs.Reader, devDir, portDir string, port int) string {
	var buf [256]byte
	if b, err := r.Read(portDir+"/gid_attrs/ndevs/0", buf[:]); err == nil && len(b) > 0 {
		return string(b)
	}
	netDir := filepath.Join(devDir, "device", "net")
	names, err := sysfs.ListDir(netDir, false)
	if err != nil || len(names) == 0 {
		return ""
	}
	if len(names) == 1 {
		return names[0]
	}
	slices.Sort(names)
	for _, n := range names {
		b, err := r.Read(filepath.Join(netDir, n, "dev_port"), buf[:])
		if err != nil {
			continue
		}
		if v, err := sysfs.ParseUint(b); err == nil && int(v) == port-1 {
			return n
		}
	}
	return ""
}

// railOfPort returns the rail names of an RDMA port, joined by ","; rails
// whose port is gone do not count (a default rail renamed when its device
// came back with more Ethernet ports stays known under its old name, not
// present, and must not label the port it was).
func railOfPort(rails []Rail, device, port string) string {
	var names []string
	for _, r := range rails {
		if r.Present && r.Device == device && r.Port == port {
			names = append(names, r.Name)
		}
	}
	return strings.Join(names, ",")
}

// railOfNetdev returns the rail names carried by a netdev, joined by ",";
// rails whose RDMA port is gone do not count.
func railOfNetdev(rails []Rail, netdev string) string {
	var names []string
	for _, r := range rails {
		if r.Present && r.Netdev != "" && r.Netdev == netdev {
			names = append(names, r.Name)
		}
	}
	return strings.Join(names, ",")
}
