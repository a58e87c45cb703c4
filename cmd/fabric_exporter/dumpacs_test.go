package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dump-acs writes the ACS file and exits; the serving exporter started
// with --collector.pcie.acs-file reads it (the opt-in reader of
// deploy/kubernetes/components/pcie-acs-reader: an init container, then the
// exporter).
func TestDumpACSCommand(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pcie-acs")
	out, code := runBinary(t, "--path.sysfs="+fixtureSys, "dump-acs", "--output="+file)
	if code != 0 {
		t.Fatalf("dump-acs: exit %d\n%s", code, out)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "# fabric_exporter dump-acs v1\ntime ") || !strings.Contains(string(b), "\n0000:17:01.0 4096 cap=007f ctl=001d\n") {
		t.Errorf("dump:\n%s", b)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, %v; want 0644 (the exporter runs as another user)", fi.Mode(), err)
	}
	addr, _ := startExporter(t, "--path.sysfs="+fixtureSys, "--collector.disable-defaults", "--collector.pcie", "--collector.pcie.acs-file="+file)
	if m := get(t, "http://"+addr+"/metrics"); !strings.Contains(m, "\nfabric_pcie_acs_file_timestamp_seconds ") {
		t.Errorf("no fabric_pcie_acs_file_timestamp_seconds:\n%s", grep(m, "acs"))
	}
	if out, code := runBinary(t, "--path.sysfs="+fixtureSys, "dump-acs", "--output="+filepath.Join(t.TempDir(), "no", "such", "dir")); code != 1 {
		t.Errorf("dump-acs into a missing directory: exit %d\n%s", code, out)
	}
}
