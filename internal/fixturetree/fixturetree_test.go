package fixturetree

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHCAs(t *testing.T) {
	dst := t.TempDir()
	if err := HCAs("../../collector/fixtures/sys", dst, 8); err != nil {
		t.Fatal(err)
	}
	devs, _ := os.ReadDir(filepath.Join(dst, "class", "infiniband"))
	if len(devs) != 8 {
		t.Fatalf("devices = %d, want 8", len(devs))
	}
	b, err := os.ReadFile(filepath.Join(dst, "class", "infiniband", "mlx5_7", "ports", "1", "gid_attrs", "ndevs", "0"))
	if err != nil || string(b) != "eth7\n" {
		t.Errorf("mlx5_7 netdev = %q, %v", b, err)
	}
	if l, _ := os.Readlink(filepath.Join(dst, "class", "net", "eth7", "device", "driver")); filepath.Base(l) != "mlx5_core" {
		t.Errorf("eth7 driver link = %q", l)
	}
	files, err := Files(dst)
	if err != nil || len(files) != 8*(3+1+21+32) {
		t.Errorf("files = %d, %v", len(files), err)
	}
}

func TestProcs(t *testing.T) {
	dst := t.TempDir()
	pids, err := Procs("../../collector/fixtures/proc", dst, 3, 100)
	if err != nil || len(pids) != 3 {
		t.Fatalf("Procs: %v %v", pids, err)
	}
	b, _ := os.ReadFile(filepath.Join(dst, "10002", "numa_maps"))
	if n := len(strings.Split(strings.TrimSpace(string(b)), "\n")); n != 100 {
		t.Errorf("numa_maps lines = %d", n)
	}
	st, _ := os.ReadFile(filepath.Join(dst, "10001", "stat"))
	if !strings.HasPrefix(string(st), "10001 (") {
		t.Errorf("stat = %.20q", st)
	}
}
