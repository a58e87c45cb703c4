package collector

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
)

func newTestTopology(t testing.TB, sysfs string) (*topologyCollector, *exposition.Counter) {
	t.Helper()
	env, errs := testEnv()
	c, err := newTopologyCollector(env, &Options{SysfsPath: sysfs})
	if err != nil {
		t.Fatal(err)
	}
	return c.(*topologyCollector), errs
}

// topoScrape runs one update and returns the samples of a family as
// "label=value,..." strings (labels in declaration order) in output order.
func topoScrape(t testing.TB, c Collector, fam *exposition.Family) []string {
	t.Helper()
	var b exposition.Batch
	if err := c.Update(t.Context(), &b); err != nil {
		t.Fatal(err)
	}
	var out []string
	for s := range b.All() {
		if s.Family() == fam {
			out = append(out, strings.Join(s.Values(), ","))
		}
	}
	return out
}

// topoMatrix returns path classes keyed "gpu/device" and "gpu/gpu:peer".
func topoMatrix(t testing.TB, c *topologyCollector) map[string]string {
	t.Helper()
	var b exposition.Batch
	if err := c.Update(t.Context(), &b); err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for s := range b.All() {
		v := s.Values()
		switch s.Family() {
		case c.pathInfo:
			m[v[0]+"/"+v[1]] = v[2]
		case c.gpuPathInfo:
			m[v[0]+"/gpu:"+v[1]] = v[2]
		}
	}
	return m
}

// The bundled fixture is laid out like the users' dual-socket 8-GPU PCIe
// server (collector/fixtures/build-sys.sh).
func TestTopologyFixture(t *testing.T) {
	c, errs := newTestTopology(t, fixtureSys)
	compare(t, c, `
# HELP fabric_pci_device_info A GPU (PCI vendor 0x10de, display or 3D class; name is its index in PCI bus order, as nvidia-smi numbers GPUs), RDMA device or PCI network interface, with its PCI function, NUMA node ("" when unknown) and local CPUs.
# TYPE fabric_pci_device_info gauge
fabric_pci_device_info{kind="gpu",local_cpulist="0-47,96-143",name="0",numa_node="0",pci_bus_id="0000:19:00.0"} 1
fabric_pci_device_info{kind="gpu",local_cpulist="0-47,96-143",name="1",numa_node="0",pci_bus_id="0000:1a:00.0"} 1
fabric_pci_device_info{kind="gpu",local_cpulist="0-47,96-143",name="2",numa_node="0",pci_bus_id="0000:3a:00.0"} 1
fabric_pci_device_info{kind="gpu",local_cpulist="0-47,96-143",name="3",numa_node="0",pci_bus_id="0000:3d:00.0"} 1
fabric_pci_device_info{kind="gpu",local_cpulist="48-95,144-191",name="4",numa_node="1",pci_bus_id="0000:9b:00.0"} 1
fabric_pci_device_info{kind="gpu",local_cpulist="48-95,144-191",name="5",numa_node="1",pci_bus_id="0000:9c:00.0"} 1
fabric_pci_device_info{kind="gpu",local_cpulist="48-95,144-191",name="6",numa_node="1",pci_bus_id="0000:bc:00.0"} 1
fabric_pci_device_info{kind="gpu",local_cpulist="48-95,144-191",name="7",numa_node="1",pci_bus_id="0000:bf:00.0"} 1
fabric_pci_device_info{kind="hca",local_cpulist="0-191",name="i40iw0",numa_node="",pci_bus_id="0000:09:00.0"} 1
fabric_pci_device_info{kind="hca",local_cpulist="0-47,96-143",name="mlx4_0",numa_node="0",pci_bus_id="0000:04:00.0"} 1
fabric_pci_device_info{kind="hca",local_cpulist="0-47,96-143",name="mlx5_0",numa_node="0",pci_bus_id="0000:18:00.0"} 1
fabric_pci_device_info{kind="hca",local_cpulist="48-95,144-191",name="mlx5_3",numa_node="1",pci_bus_id="0000:9a:00.0"} 1
fabric_pci_device_info{kind="netdev",local_cpulist="0-47,96-143",name="eth0",numa_node="0",pci_bus_id="0000:18:00.0"} 1
fabric_pci_device_info{kind="netdev",local_cpulist="0-47,96-143",name="eth1",numa_node="0",pci_bus_id="0000:03:00.0"} 1
fabric_pci_device_info{kind="netdev",local_cpulist="0-47,96-143",name="eth2",numa_node="0",pci_bus_id="0000:03:00.1"} 1
fabric_pci_device_info{kind="netdev",local_cpulist="48-95,144-191",name="eth3",numa_node="1",pci_bus_id="0000:9a:00.0"} 1
`, "fabric_pci_device_info")
	// Rows GPU0..GPU7; columns mlx5_0, mlx5_3, mlx4_0, i40iw0 (numa_node -1:
	// SYS to every GPU), then the GPU peers.
	want := map[string]string{
		"mlx5_0": "PIX PIX NODE NODE SYS SYS SYS SYS",
		"mlx5_3": "SYS SYS SYS SYS PIX PIX NODE NODE",
		"mlx4_0": "NODE NODE NODE NODE SYS SYS SYS SYS",
		"i40iw0": "SYS SYS SYS SYS SYS SYS SYS SYS",
	}
	gpuRows := []string{
		"X PIX NODE NODE SYS SYS SYS SYS",
		"PIX X NODE NODE SYS SYS SYS SYS",
		"NODE NODE X PHB SYS SYS SYS SYS",
		"NODE NODE PHB X SYS SYS SYS SYS",
		"SYS SYS SYS SYS X PIX NODE NODE",
		"SYS SYS SYS SYS PIX X NODE NODE",
		"SYS SYS SYS SYS NODE NODE X PXB",
		"SYS SYS SYS SYS NODE NODE PXB X",
	}
	m := topoMatrix(t, c)
	for dev, row := range want {
		for g, cls := range strings.Fields(row) {
			if got := m[fmt.Sprintf("%d/%s", g, dev)]; got != cls {
				t.Errorf("GPU%d <-> %s: %q, want %s", g, dev, got, cls)
			}
		}
	}
	for g, row := range gpuRows {
		for p, cls := range strings.Fields(row) {
			got, ok := m[fmt.Sprintf("%d/gpu:%d", g, p)]
			if cls == "X" {
				if ok {
					t.Errorf("GPU%d has a path to itself", g)
				}
				continue
			}
			if got != cls {
				t.Errorf("GPU%d <-> GPU%d: %q, want %s", g, p, got, cls)
			}
		}
	}
	if len(m) != 8*4+8*7 {
		t.Errorf("%d path series, want %d", len(m), 8*4+8*7)
	}
	if errs.Value() != 0 {
		t.Errorf("read errors %v", errs.Value())
	}
}

func TestPCIPathClass(t *testing.T) {
	loc := func(numa int, path string) *pciLoc {
		p := strings.Split(path, "/")
		return &pciLoc{root: p[0], chain: p[1:], numa: numa}
	}
	for _, tc := range []struct {
		a, b *pciLoc
		want string
	}{
		{loc(0, "pci0000:15/r/u/d1/gpu"), loc(0, "pci0000:15/r/u/d2/nic"), "PIX"},       // one switch
		{loc(0, "pci0000:15/r/u/d/nic.0"), loc(0, "pci0000:15/r/u/d/nic.1"), "PIX"},     // functions of one card
		{loc(0, "pci0000:15/r/nic.0"), loc(0, "pci0000:15/r/nic.1"), "PIX"},             // on the root port itself
		{loc(0, "pci0000:15/r/u/d1/u2/d2/gpu"), loc(0, "pci0000:15/r/u/d3/nic"), "PXB"}, // switch below a switch
		{loc(0, "pci0000:15/r1/u/d/gpu"), loc(0, "pci0000:15/r2/u/d/nic"), "PHB"},       // two root ports
		{loc(0, "pci0000:15/r/gpu"), loc(0, "pci0000:37/r/nic"), "NODE"},
		{loc(0, "pci0000:15/r/gpu"), loc(1, "pci0000:97/r/nic"), "SYS"},
		{loc(-1, "pci0000:15/r/gpu"), loc(-1, "pci0000:97/r/nic"), "NODE"}, // no NUMA information at all
		{loc(0, "pci0000:15/r/gpu"), loc(-1, "pci0000:97/r/nic"), "SYS"},
	} {
		if got := pciPathClass(tc.a, tc.b); got != tc.want {
			t.Errorf("%v <-> %v: %s, want %s", tc.a, tc.b, got, tc.want)
		}
		if got := pciPathClass(tc.b, tc.a); got != tc.want {
			t.Errorf("%v <-> %v (reversed): %s, want %s", tc.b, tc.a, got, tc.want)
		}
	}
}

// topoSample is a parsed `nvidia-smi topo -m` matrix.
type topoSample struct {
	cols   []string          // GPU0.., NIC0..
	cells  map[string]string // "GPU0/NIC1" -> "PIX"
	cpuAff map[string]string // GPU rows
	numa   map[string]string
	legend map[string]string // NIC0 -> mlx5_0
}

var topoDevRE = regexp.MustCompile(`^(GPU|NIC)\d+$`)

// parseTopoSample reads nvidia-smi's matrix as printed, pasted or clipped:
// CRLF line endings, prompt lines before it, header columns missing while
// the rows remain (truncated terminal), rows missing at the end.
func parseTopoSample(text string) (*topoSample, error) {
	s := &topoSample{cells: map[string]string{}, cpuAff: map[string]string{}, numa: map[string]string{}, legend: map[string]string{}}
	inMatrix := false
	for _, line := range strings.Split(strings.ReplaceAll(text, "\r", ""), "\n") {
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "#"):
		case !inMatrix && len(f) > 0 && f[0] == "GPU0":
			for _, c := range f {
				if !topoDevRE.MatchString(c) {
					break
				}
				s.cols = append(s.cols, c)
			}
			inMatrix = true
		case inMatrix && len(f) > 0 && topoDevRE.MatchString(f[0]):
			row := f[0]
			n := min(len(s.cols), len(f)-1)
			for i := 0; i < n; i++ {
				s.cells[row+"/"+s.cols[i]] = f[1+i]
			}
			if rest := f[1+n:]; strings.HasPrefix(row, "GPU") && len(rest) >= 2 {
				s.cpuAff[row], s.numa[row] = rest[0], rest[1]
			}
		case len(f) == 2 && strings.HasPrefix(f[0], "NIC") && strings.HasSuffix(f[0], ":"):
			s.legend[strings.TrimSuffix(f[0], ":")] = f[1]
		case inMatrix && len(f) == 0:
			inMatrix = false
		}
	}
	if len(s.cols) == 0 {
		return nil, errors.New("no matrix header")
	}
	return s, nil
}

// TestTopologyRealSamples classifies PCI trees built to reproduce real
// `nvidia-smi topo -m` outputs (collector/fixtures/topo/build-topo.sh) and
// compares every PCIe cell of the sample with the classifier. NV# cells
// (NVLink) are not visible in sysfs and are only counted.
func TestTopologyRealSamples(t *testing.T) {
	for _, tc := range []struct {
		sample, tree        string
		gpuNIC, gpuGPU, nic int // PCIe cells expected to be compared
	}{
		{"topo-llm-action-a800-nv8-4nic.txt", "a800-nv8-4nic", 64, 0, 12},
		{"topo-llm-action-a800-truncated-columns.txt", "a800-nv8-4nic", 32, 0, 0},
		{"topo-deepep-55-8gpu-pcie-phb-9nic-topo-mp.txt", "deepep-8gpu-pcie-9nic", 54, 42, 0},
	} {
		t.Run(tc.sample, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("fixtures/topo", tc.sample))
			if err != nil {
				t.Fatal(err)
			}
			s, err := parseTopoSample(string(raw))
			if err != nil {
				t.Fatal(err)
			}
			sys := filepath.Join("fixtures/topo", tc.tree, "sys")
			c, errs := newTestTopology(t, sys)
			m := topoMatrix(t, c)
			nicName := func(nic string) string {
				if n, ok := s.legend[nic]; ok {
					return n
				}
				return "mlx5_" + strings.TrimPrefix(nic, "NIC")
			}
			// Every RDMA device of the tree, to classify NIC<->NIC cells too.
			locs := map[string]*pciLoc{}
			devRoot, _ := filepath.EvalSymlinks(filepath.Join(sys, "devices"))
			for _, l := range c.locateClass(devRoot, c.dirs[1]) {
				locs[l.name] = l
			}
			var gpuNIC, gpuGPU, nic, nv int
			for key, want := range s.cells {
				row, col, _ := strings.Cut(key, "/")
				var got string
				switch {
				case want == "X":
					continue
				case strings.HasPrefix(want, "NV"):
					nv++
					continue
				case strings.HasPrefix(row, "GPU") && strings.HasPrefix(col, "NIC"):
					got = m[strings.TrimPrefix(row, "GPU")+"/"+nicName(col)]
					gpuNIC++
				case strings.HasPrefix(row, "NIC") && strings.HasPrefix(col, "GPU"):
					got = m[strings.TrimPrefix(col, "GPU")+"/"+nicName(row)]
					gpuNIC++
				case strings.HasPrefix(row, "GPU"):
					got = m[strings.TrimPrefix(row, "GPU")+"/gpu:"+strings.TrimPrefix(col, "GPU")]
					gpuGPU++
				default:
					a, b := locs[nicName(row)], locs[nicName(col)]
					if a == nil || b == nil {
						t.Fatalf("%s: %s or %s not in the tree", key, nicName(row), nicName(col))
					}
					got = pciPathClass(a, b)
					nic++
				}
				if got != want {
					t.Errorf("%s: classifier says %q, nvidia-smi says %s", key, got, want)
				}
			}
			if gpuNIC != tc.gpuNIC || gpuGPU != tc.gpuGPU || nic != tc.nic {
				t.Errorf("compared %d GPU<->NIC, %d GPU<->GPU, %d NIC<->NIC cells; want %d, %d, %d",
					gpuNIC, gpuGPU, nic, tc.gpuNIC, tc.gpuGPU, tc.nic)
			}
			t.Logf("%s: %d GPU<->NIC, %d GPU<->GPU, %d NIC<->NIC cells match; %d NVLink cells not comparable",
				tc.sample, gpuNIC, gpuGPU, nic, nv)
			// NUMA and CPU affinity of the GPU rows (clipped CPU lists are a suffix).
			infos := topoScrape(t, c, c.deviceInfo)
			for row, numa := range s.numa {
				var found bool
				for _, inf := range infos {
					v := strings.Split(inf, ",")
					if v[0] == "gpu" && "GPU"+v[1] == row {
						found = true
						cpus := strings.Join(v[4:], ",")
						if v[3] != numa || !strings.HasSuffix(cpus, s.cpuAff[row]) {
							t.Errorf("%s: numa_node %q local_cpulist %q; nvidia-smi says %s, %s", row, v[3], cpus, numa, s.cpuAff[row])
						}
					}
				}
				if !found {
					t.Errorf("%s not found", row)
				}
			}
			if errs.Value() != 0 {
				t.Errorf("read errors %v", errs.Value())
			}
		})
	}
}

// A GPU that goes away (hot unplug, driver unbind removing the function)
// is dropped on the next scrape; NVIDIA functions that are not display or 3D
// controllers (audio, NVSwitch bridges) are not GPUs.
func TestTopologyChanges(t *testing.T) {
	sys := copyTree(t, fixtureSys)
	c, _ := newTestTopology(t, sys)
	count := func() int {
		n := 0
		for _, s := range topoScrape(t, c, c.deviceInfo) {
			if strings.HasPrefix(s, "gpu,") {
				n++
			}
		}
		return n
	}
	if n := count(); n != 8 {
		t.Fatalf("%d GPUs, want 8", n)
	}
	if err := os.Remove(filepath.Join(sys, "bus/pci/devices/0000:bf:00.0")); err != nil {
		t.Fatal(err)
	}
	audio := "devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.1"
	for f, v := range map[string]string{"vendor": "0x10de", "class": "0x040300", "numa_node": "0"} {
		os.MkdirAll(filepath.Join(sys, audio), 0o755)
		if err := os.WriteFile(filepath.Join(sys, audio, f), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../../../"+audio, filepath.Join(sys, "bus/pci/devices/0000:19:00.1")); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 7 {
		t.Errorf("after removing GPU7 and adding an audio function: %d GPUs, want 7", n)
	}
}

func TestTopologyAbsent(t *testing.T) {
	c, _ := newTestTopology(t, t.TempDir())
	var b exposition.Batch
	if err := c.Update(t.Context(), &b); !errors.Is(err, ErrNoData) || b.Len() != 0 {
		t.Errorf("empty sysfs: %v, %d samples; want ErrNoData", err, b.Len())
	}
	// A host with PCI devices but no GPU, RDMA device or PCI NIC.
	sys := t.TempDir()
	os.MkdirAll(filepath.Join(sys, "bus/pci/devices"), 0o755)
	os.MkdirAll(filepath.Join(sys, "class/net/lo"), 0o755)
	c, _ = newTestTopology(t, sys)
	if err := c.Update(t.Context(), &b); !errors.Is(err, ErrNoData) {
		t.Errorf("no devices of interest: %v, want ErrNoData", err)
	}
}

func TestIsBDF(t *testing.T) {
	for s, want := range map[string]bool{"0000:18:00.0": true, "10000:e0:1d.7": true, "0000:18:00.8": false,
		"pci0000:15": false, "0000:18:00": false, "0000:1G:00.0": false, "mlx5_0": false, "0000:18:00.0x": false} {
		if isBDF(s) != want {
			t.Errorf("isBDF(%q) = %v", s, !want)
		}
	}
}
