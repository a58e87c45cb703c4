package collector

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// truncateConfigs leaves 64 bytes of every bridge's config in a copy of
// the fixture: what the exporter reads without CAP_SYS_ADMIN.
func truncateConfigs(t *testing.T, dir string) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "bus/pci/devices/*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		cls, _ := os.ReadFile(filepath.Join(n, "class"))
		if strings.HasPrefix(string(cls), "0x0604") {
			if err := os.Truncate(filepath.Join(n, "config"), 64); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// dump-acs on the fixture tree, as root would: one line per bridge with
// its registers; parsed back, the registers are the collector's own reads.
func TestDumpPCIACSFixture(t *testing.T) {
	b, err := DumpPCIACS(fixtureSys, time.Unix(1764745200, 0))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{acsFileHeader + "\ntime 1764745200\n", "\n0000:17:01.0 4096 cap=007f ctl=001d\n",
		"\n0000:16:00.0 4096 none\n", "\n0000:99:01.0 4096 cap=007f ctl=0000\n", "\n0000:00:02.0 256 -\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("dump lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "0000:18:00.0") {
		t.Error("an endpoint (GPU0) in the dump")
	}
	d, err := parseACSFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if e := d.bridges["0000:17:01.0"]; !e.extended || !e.found || e.ctl != 0x1d || e.cap != 0x7f || e.bytes != 4096 {
		t.Errorf("0000:17:01.0: %+v", e)
	}
	if e := d.bridges["0000:00:02.0"]; e.extended || e.bytes != 256 {
		t.Errorf("0000:00:02.0: %+v", e)
	}
	if !d.time.Equal(time.Unix(1764745200, 0)) {
		t.Errorf("time %v", d.time)
	}
}

func TestParseACSFileRejects(t *testing.T) {
	ok := acsFileHeader + "\ntime 1\n"
	for _, bad := range []string{
		"",
		"time 1\n0000:17:01.0 4096 none\n",
		acsFileHeader + "\n0000:17:01.0 4096 none\n", // no time
		ok + "time 2\n",                                               // two times
		ok + "0000:17:01.0 4096 cap=7f\n",                             // no ctl
		ok + "0000:17:01.0 64 cap=007f ctl=001d\n",                    // registers from 64 bytes
		ok + "0000:17:01.0 64 none\n",                                 // "none" from 64 bytes
		ok + "0000:17:01.0 4097 -\n",                                  // more than 4096
		ok + "0000:17:01.0 4096 cap=10000 ctl=0\n",                    // 17 bits
		ok + "17:01.0 4096 none\n",                                    // no domain
		ok + "0000:17:01.0 4096 none\n0000:17:01.0 4096 -\n",          // twice
		ok + "0000:17:01.0 4096 cap=007f ctl=001d extra\n",            // a field more
		ok + "0000:17:01.0 x -\n",                                     // bytes
		ok + "garbage\n",                                              //
		ok + strings.Repeat("0000:17:01.0 4096 -\n", maxACSFile/16+1), // too big
	} {
		if _, err := parseACSFile([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad[:min(len(bad), 80)])
		}
	}
	if d, err := parseACSFile([]byte(ok + "# a comment\n\n0000:17:01.0 64 -\n")); err != nil || len(d.bridges) != 1 {
		t.Errorf("%v %+v", err, d)
	}
}

// The exporter without CAP_SYS_ADMIN (64 bytes of every bridge) with the
// file a privileged dump-acs wrote: ACS as the privileged reader saw it,
// the same judgement per pair as with the privilege; readable bytes are the
// reader's; the dump's time is exported. A new dump is read when it
// changes; a bridge the dump lacks stays unknown; a missing or bad file
// makes every port unknown again.
func TestPCIeACSFromFile(t *testing.T) {
	dump, err := DumpPCIACS(fixtureSys, time.Unix(1764745200, 0))
	if err != nil {
		t.Fatal(err)
	}
	dir := copyTree(t, fixtureSys)
	truncateConfigs(t, dir)
	file := filepath.Join(t.TempDir(), "pcie-acs")

	env, errs := testEnv()
	cc, err := newPCIeCollector(env, &Options{SysfsPath: dir, PCIe: PCIeOptions{ACSFile: file}})
	if err != nil {
		t.Fatal(err)
	}
	c := cc.(*pcieCollector)

	// No file yet (the reader has not run): unknown, no timestamp, no error.
	v := updateValues(t, c)
	if v["fabric_pcie_gpu_p2p_acs_info{0,1,unknown,}"] != 1 || v["fabric_pcie_gpu_p2p_acs_info{4,5,unknown,}"] != 1 {
		t.Errorf("without the file: %v", keysWith(v, "p2p_acs_info{0,1,"))
	}
	if _, ok := v["fabric_pcie_acs_file_timestamp_seconds{}"]; ok {
		t.Error("timestamp without a file")
	}

	if err := WriteFileAtomic(file, dump); err != nil {
		t.Fatal(err)
	}
	v = updateValues(t, c)
	for _, k := range []string{
		"fabric_pcie_gpu_p2p_acs_info{0,1,redirect,0000:17:01.0}",
		"fabric_pcie_gpu_rdma_acs_info{1,mlx5_0,redirect,0000:17:02.0}",
		"fabric_pcie_gpu_p2p_acs_info{4,5,open,}",
		"fabric_pcie_gpu_p2p_acs_info{6,7,open,}",
	} {
		if v[k] != 1 {
			t.Errorf("%s missing: %v", k, keysWith(v, "acs_info{"+k[strings.Index(k, "{")+1:strings.Index(k, ",")]+","))
		}
	}
	if got := v["fabric_pcie_config_space_readable_bytes{0000:17:01.0}"]; got != 4096 {
		t.Errorf("readable bytes %v, want the reader's 4096", got)
	}
	if got, _ := acsBit(v, "control", "0000:17:01.0", "rr"); got != 1 {
		t.Error("control rr of 0000:17:01.0 not from the file")
	}
	if got := v["fabric_pcie_acs_file_timestamp_seconds{}"]; got != 1764745200 {
		t.Errorf("timestamp %v", got)
	}

	// ACS turned off at GPU0's port (setpci), seen by a sidecar's next dump.
	d2 := strings.Replace(string(dump), "0000:17:01.0 4096 cap=007f ctl=001d", "0000:17:01.0 4096 cap=007f ctl=0000", 1)
	d2 = strings.Replace(d2, "time 1764745200", "time 1764745260", 1)
	// and GPU5's port missing from it (hot-plugged after the dump)
	d2 = strings.Replace(d2, "0000:99:02.0 4096 cap=007f ctl=0000\n", "", 1)
	if err := WriteFileAtomic(file, []byte(d2)); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Minute) // a new modification time even on coarse clocks
	if err := os.Chtimes(file, future, future); err != nil {
		t.Fatal(err)
	}
	v = updateValues(t, c)
	if v["fabric_pcie_gpu_p2p_acs_info{0,1,redirect,0000:17:02.0}"] != 1 {
		t.Errorf("after the new dump: %v", keysWith(v, "p2p_acs_info{0,1,"))
	}
	if v["fabric_pcie_gpu_p2p_acs_info{4,5,unknown,}"] != 1 {
		t.Errorf("a bridge the dump lacks: %v", keysWith(v, "p2p_acs_info{4,5,"))
	}
	if got := v["fabric_pcie_acs_file_timestamp_seconds{}"]; got != 1764745260 {
		t.Errorf("timestamp %v", got)
	}

	// A bad file: unknown again, one read error, no timestamp.
	if err := os.WriteFile(file, []byte("not a dump\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := errs.Value()
	v = updateValues(t, c)
	if v["fabric_pcie_gpu_p2p_acs_info{0,1,unknown,}"] != 1 {
		t.Errorf("bad file: %v", keysWith(v, "p2p_acs_info{0,1,"))
	}
	if _, ok := v["fabric_pcie_acs_file_timestamp_seconds{}"]; ok {
		t.Error("timestamp of a bad file")
	}
	if errs.Value() != before+1 {
		t.Errorf("%v read errors for a bad file, want 1", errs.Value()-before)
	}
	updateValues(t, c)
	if errs.Value() != before+1 {
		t.Error("the bad file is counted again without a change")
	}
}

// The exporter's own 4096 bytes win over the file (it reads what is there
// now).
func TestPCIeACSOwnReadWins(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pcie-acs")
	stale := acsFileHeader + "\ntime 1\n0000:17:01.0 4096 cap=007f ctl=0000\n0000:17:02.0 4096 cap=007f ctl=0000\n"
	if err := os.WriteFile(file, []byte(stale), 0o644); err != nil {
		t.Fatal(err)
	}
	env, _ := testEnv()
	cc, err := newPCIeCollector(env, &Options{SysfsPath: fixtureSys, PCIe: PCIeOptions{ACSFile: file}})
	if err != nil {
		t.Fatal(err)
	}
	v := updateValues(t, cc)
	if v["fabric_pcie_gpu_p2p_acs_info{0,1,redirect,0000:17:01.0}"] != 1 {
		t.Errorf("%v", keysWith(v, "p2p_acs_info{0,1,"))
	}
}

// FuzzParseACSFile: any file is rejected or gives bridges with a PCI
// address and at most 4096 bytes; registers only from 4096 bytes.
func FuzzParseACSFile(f *testing.F) {
	if b, err := DumpPCIACS(fixtureSys, time.Unix(1, 0)); err == nil {
		f.Add(b)
	}
	f.Add([]byte(acsFileHeader + "\ntime 1\n0000:17:01.0 64 -\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := parseACSFile(b)
		if err != nil {
			if len(d.bridges) != 0 {
				t.Fatal("bridges with an error")
			}
			return
		}
		for bdf, e := range d.bridges {
			if !isBDF(bdf) || e.bytes < 0 || e.bytes > 4096 || (e.extended && e.bytes != 4096) || (e.found && !e.extended) {
				t.Fatalf("%q: %+v", bdf, e)
			}
		}
	})
}
