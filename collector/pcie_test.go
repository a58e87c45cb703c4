package collector

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

func newTestPCIe(t testing.TB, sysfs string) (*pcieCollector, *exposition.Counter) {
	t.Helper()
	env, errs := testEnv()
	c, err := newPCIeCollector(env, &Options{SysfsPath: sysfs})
	if err != nil {
		t.Fatal(err)
	}
	return c.(*pcieCollector), errs
}

func mustPCIe(t testing.TB, sysfs string) *pcieCollector {
	c, _ := newTestPCIe(t, sysfs)
	return c
}

// writeInPlace rewrites a fixture file the way sysfs changes: same inode.
func writeInPlace(path, content string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(content)
	return err
}

func TestParseLinkSpeed(t *testing.T) {
	for in, want := range map[string]float64{
		"32.0 GT/s PCIe": 32e9, "8 GT/s": 8e9, "8.0 GT/s": 8e9, "2.5 GT/s PCIe\n": 2.5e9, "64.0 GT/s PCIe": 64e9, "5.0 GT/s": 5e9,
	} {
		got, err := parseLinkSpeed([]byte(in))
		if err != nil || got != want {
			t.Errorf("parseLinkSpeed(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"Unknown", "Unknown speed", ""} {
		if _, err := parseLinkSpeed([]byte(in)); !errors.Is(err, sysfs.ErrNotAvailable) {
			t.Errorf("parseLinkSpeed(%q) err = %v, want not available", in, err)
		}
	}
	for _, in := range []string{"fast", "32.0 Gb/s", "-8 GT/s", "NaN GT/s", "1e9 GT/s"} {
		if _, err := parseLinkSpeed([]byte(in)); !errors.Is(err, sysfs.ErrGarbage) {
			t.Errorf("parseLinkSpeed(%q) err = %v, want garbage", in, err)
		}
	}
	for _, w := range []string{"255", "0"} {
		if _, err := parseLinkWidth([]byte(w)); !errors.Is(err, sysfs.ErrNotAvailable) {
			t.Errorf("width %s: %v", w, err)
		}
	}
}

func TestParseAER(t *testing.T) {
	got := map[string]uint64{}
	total, err := parseAER([]byte("Receiver Error 2\nBad TLP 0\nRELAY_NUM Rollover 1\nTOTAL_ERR_COR 4\n"), func(n string, v uint64) { got[n] = v })
	if err != nil || len(got) != 3 || got["Receiver Error"] != 2 || got["RELAY_NUM Rollover"] != 1 || got["Bad TLP"] != 0 {
		t.Errorf("old format: %v, %v", got, err)
	}
	if total != 4 { // the kernel's count of reported errors, not the sum of the types
		t.Errorf("total %d, want the TOTAL_ERR_COR line's 4", total)
	}
	if total, err := parseAER([]byte("RxErr 3\nBadTLP 2\n"), func(string, uint64) {}); err != nil || total != 5 {
		t.Errorf("no total line: total %d, %v; want the sum 5", total, err)
	}
	got = map[string]uint64{}
	_, err = parseAER([]byte("RxErr 7\nBadTLP x\n\nlonely\nTimeout 1\n"), func(n string, v uint64) { got[n] = v })
	if err == nil || got["RxErr"] != 7 || got["Timeout"] != 1 || len(got) != 2 {
		t.Errorf("bad lines: %v, %v", got, err)
	}
}

func FuzzParseAER(f *testing.F) {
	for _, s := range []string{"RxErr 3\nTOTAL_ERR_COR 3\n", "Receiver Error 2\nBad TLP 0\n", "", " 1", "a\tb 2"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		parseAER(b, func(n string, v uint64) {
			if n == "" || strings.HasPrefix(n, "TOTAL_ERR_") || strings.ContainsAny(n, "\n") {
				t.Fatalf("name %q", n)
			}
		})
		if v, err := parseLinkSpeed(b); err == nil && !(v > 0) {
			t.Fatalf("speed %v from %q", v, b)
		}
	})
}

// The fixture: everything at Gen5 x16, mlx4_0 (Gen3 x8 in an x16 root
// port) idling at 2.5 GT/s, i40iw0 with an "Unknown" speed; AER files on
// mlx5_0, its root port, GPU0 and GPU3. The test trains mlx5_3 at x8 (both
// ends of its link read 8) and idles GPU1 at 2.5 GT/s.
func TestPCIeFixture(t *testing.T) {
	dir := copyTree(t, fixtureSys)
	for p, v := range map[string]string{
		"bus/pci/devices/0000:9a:00.0/current_link_width": "8",
		"bus/pci/devices/0000:99:00.0/current_link_width": "8",
		"bus/pci/devices/0000:1a:00.0/current_link_speed": "2.5 GT/s PCIe",
	} {
		if err := writeInPlace(filepath.Join(dir, p), v+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	c, errs := newTestPCIe(t, dir)
	v := updateValues(t, c)
	want := map[string]float64{
		// mlx5_0 and the bridges above it
		"fabric_pcie_link_speed_transfers_per_second{0000:18:00.0}":                             32e9,
		"fabric_pcie_link_supported_speed_transfers_per_second{0000:18:00.0}":                   32e9,
		"fabric_pcie_link_width{0000:18:00.0}":                                                  16,
		"fabric_pcie_link_info{0000:18:00.0,endpoint,0000:17:00.0,0x15b3,0x1021}":               1,
		"fabric_pcie_link_info{0000:17:00.0,switch_downstream_port,0000:16:00.0,0x1000,0xc030}": 1,
		"fabric_pcie_link_info{0000:16:00.0,switch_upstream_port,0000:15:01.0,0x1000,0xc030}":   1,
		"fabric_pcie_link_supported_width{0000:16:00.0}":                                        16,
		"fabric_pcie_link_info{0000:15:01.0,root_port,,0x8086,0x347a}":                          1,
		"fabric_pcie_path_info{0000:15:01.0,hca,mlx5_0}":                                        1,
		"fabric_pcie_path_info{0000:15:01.0,gpu,0}":                                             1,
		"fabric_pcie_path_info{0000:15:01.0,gpu,1}":                                             1,
		"fabric_pcie_path_info{0000:18:00.0,hca,mlx5_0}":                                        1,
		"fabric_pcie_aer_errors_total{0000:18:00.0,correctable,RxErr}":                          3,
		"fabric_pcie_aer_errors_total{0000:18:00.0,fatal,MalfTLP}":                              0,
		"fabric_pcie_aer_rootport_errors_total{0000:15:01.0,correctable}":                       3,
		"fabric_pcie_aer_errors_total{0000:3d:00.0,correctable,Receiver Error}":                 0,
		// mlx5_3: x8 on an x16 link
		"fabric_pcie_link_width{0000:9a:00.0}":           8,
		"fabric_pcie_link_supported_width{0000:9a:00.0}": 16,
		// GPU1 idles at 2.5 GT/s
		"fabric_pcie_link_speed_transfers_per_second{0000:1a:00.0}":           2.5e9,
		"fabric_pcie_link_supported_speed_transfers_per_second{0000:1a:00.0}": 32e9,
		// mlx4_0: a Gen3 x8 card, idle at 2.5 GT/s ("2.5 GT/s", an old kernel's
		// format); the link can do no more than the card
		"fabric_pcie_link_speed_transfers_per_second{0000:04:00.0}":           2.5e9,
		"fabric_pcie_link_speed_transfers_per_second{0000:00:02.0}":           2.5e9,
		"fabric_pcie_link_max_speed_transfers_per_second{0000:00:02.0}":       8e9,
		"fabric_pcie_link_supported_speed_transfers_per_second{0000:04:00.0}": 8e9,
		"fabric_pcie_link_supported_width{0000:04:00.0}":                      8,
		"fabric_pcie_link_max_width{0000:00:02.0}":                            16,
		// i40iw0: "Unknown" speed is absent, the maximum is there
		"fabric_pcie_link_max_speed_transfers_per_second{0000:09:00.0}": 8e9,
	}
	for k, w := range want {
		if got, ok := v[k]; !ok || got != w {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, w)
		}
	}
	for _, k := range []string{
		"fabric_pcie_link_speed_transfers_per_second{0000:09:00.0}",           // Unknown
		"fabric_pcie_link_width{0000:09:00.0}",                                // 0: no link
		"fabric_pcie_link_supported_speed_transfers_per_second{0000:15:01.0}", // root port
		"fabric_pcie_link_supported_width{0000:99:00.0}",                      // downstream port (x8 below it)
		"fabric_pcie_aer_errors_total{0000:18:00.0,correctable,TOTAL_ERR_COR}",
		"fabric_pcie_aer_rootport_errors_total{0000:17:00.0,correctable}",
	} {
		if _, ok := v[k]; ok {
			t.Errorf("%s present", k)
		}
	}
	if v, _ := updateValues(t, mustPCIe(t, fixtureSys))["fabric_pcie_link_width{0000:9a:00.0}"]; v != 16 {
		t.Errorf("committed fixture: mlx5_3 width %v, want 16", v)
	}
	// A bridge shared by mlx5_0 and GPU0/1 has one link series.
	n := 0
	for k := range v {
		if strings.HasPrefix(k, "fabric_pcie_link_info{0000:16:00.0,") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d link_info series for 0000:16:00.0", n)
	}
	if errs.Value() != 0 {
		t.Errorf("read errors = %v, want 0 (absent files are quiet)", errs.Value())
	}
}

// A tree without any link, AER or config file (a VM exposing none) gives the info
// series and nothing else, without read errors; a garbage value is one
// read error and the rest stays.
func TestPCIeQuietAndBadValues(t *testing.T) {
	dir := copyTree(t, fixtureSys)
	devs := filepath.Join(dir, "devices")
	filepath.Walk(devs, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && (strings.Contains(fi.Name(), "link_") || strings.HasPrefix(fi.Name(), "aer_") || fi.Name() == "config") {
			os.Remove(p)
		}
		return nil
	})
	c, errs := newTestPCIe(t, dir)
	v := updateValues(t, c)
	for k := range v {
		if strings.HasPrefix(k, "fabric_pcie_gpu_p2p_acs_info{") || strings.HasPrefix(k, "fabric_pcie_gpu_rdma_acs_info{") {
			if !strings.Contains(k, ",unknown,") && !strings.Contains(k, ",root_complex,") {
				t.Errorf("ACS judged without configuration space: %s", k)
			}
			continue
		}
		if !strings.HasPrefix(k, "fabric_pcie_link_info{") && !strings.HasPrefix(k, "fabric_pcie_path_info{") {
			t.Errorf("unexpected %s", k)
		}
	}
	if len(v) == 0 || errs.Value() != 0 {
		t.Errorf("%d series, %v read errors", len(v), errs.Value())
	}

	dir = copyTree(t, fixtureSys)
	p := filepath.Join(dir, "bus/pci/devices/0000:19:00.0/current_link_width")
	if err := os.WriteFile(p, []byte("wide\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, errs = newTestPCIe(t, dir)
	v = updateValues(t, c)
	if _, ok := v["fabric_pcie_link_width{0000:19:00.0}"]; ok || errs.Value() != 1 {
		t.Errorf("garbage width: present %v, read errors %v", ok, errs.Value())
	}
	if v["fabric_pcie_link_speed_transfers_per_second{0000:19:00.0}"] != 32e9 {
		t.Error("the other values of the function are gone")
	}
}

func TestPCIeStates(t *testing.T) {
	c, _ := newTestPCIe(t, filepath.Join(t.TempDir(), "nosys"))
	var b exposition.Batch
	if st, _ := classify(c.Update(t.Context(), &b)); st != StateSourceMissing {
		t.Errorf("missing root: %s", st)
	}
	empty := t.TempDir()
	for _, d := range []string{"bus/pci/devices", "class", "devices"} {
		os.MkdirAll(filepath.Join(empty, d), 0o755)
	}
	c, _ = newTestPCIe(t, empty)
	if st, _ := classify(c.Update(t.Context(), &b)); st != StateNoHardware {
		t.Errorf("no devices: %s", st)
	}
}

// BenchmarkPCIeUpdate: one scrape of the fixture's 8 GPUs, 4 HCAs and the
// bridges above them (46 functions). `go test ./collector -run '^$'
// -bench PCIeUpdate -benchmem`; results in docs/benchmarks.md.
func BenchmarkPCIeUpdate(b *testing.B) {
	c, _ := newTestPCIe(b, fixtureSys)
	var batch exposition.Batch
	for b.Loop() {
		batch.Reset()
		if err := c.Update(b.Context(), &batch); err != nil {
			b.Fatal(err)
		}
	}
}
