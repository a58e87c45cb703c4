package collector

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/procwatch"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// An fd directory that cannot be read (no CAP_SYS_PTRACE) leaves the
// process without fabric_process_rdma_verbs_open, counted as a read error;
// the other processes are reported.
func TestProcessVerbsFDsUnreadable(t *testing.T) {
	c, errs, _ := newTestProcess(t, processOptions(t, fixtureProc))
	c.w.IO.ScanDir = func(dir string, fn func([]byte)) error {
		if strings.HasSuffix(dir, "/4310/fd") {
			return &os.PathError{Op: "open", Path: dir, Err: syscall.EACCES}
		}
		return sysfs.ScanDir(dir, fn)
	}
	out, err := processScrape(t, c)
	if err != nil {
		t.Fatal(err)
	}
	if got := grepLines(out, "fabric_process_rdma_verbs_open", `pid="4310"`); len(got) > 0 {
		t.Errorf("series for an unreadable fd directory:\n%s", strings.Join(got, "\n"))
	}
	hasLine(t, out, `fabric_process_rdma_verbs_open{comm="python3",device="mlx5_0",pid="4242"} 2`)
	hasLine(t, out, `fabric_process_read_errors_total{file="fd"} 1`)
	hasLine(t, out, `fabric_process_rdma_device_visible{comm="sglang::schedul",device="mlx5_0",node="uverbs0",pid="4310"} 0`)
	if errs.Value() != 1 {
		t.Errorf("fabric_scrape_read_errors_total %v, want 1", errs.Value())
	}
}

// At most maxFDs links are read per process and interval, never on the
// scrapes in between; an fd closed between the listing and its readlink is
// not counted.
func TestProcessVerbsFDsBounded(t *testing.T) {
	procDir := copyTree(t, fixtureProc)
	c, errs, clk := newTestProcess(t, processOptions(t, procDir))
	c.w.IO.MaxFDs = 5
	calls := map[string]int{}
	c.w.IO.Readlink = func(path string, buf []byte) (int, error) {
		if strings.Contains(path, "/fd/") { // not ns/net
			calls[filepath.Base(filepath.Dir(filepath.Dir(path)))]++
		}
		return syscall.Readlink(path, buf)
	}
	processScrape(t, c)
	if calls["4242"] != 5 || calls["4310"] != 5 || calls["4311"] != 5 {
		t.Errorf("readlink calls %v, want 5 per process", calls)
	}
	// In between: no reads, the last counts.
	clear(calls)
	if err := os.Remove(filepath.Join(procDir, "4242", "fd", "12")); err != nil {
		t.Fatal(err)
	}
	c.w.IO.MaxFDs = procwatch.MaxVerbsFDs
	clk.advance(30 * time.Second)
	out, _ := processScrape(t, c)
	if len(calls) != 0 {
		t.Errorf("fds read before the interval: %v", calls)
	}
	// Then all of them (4242 closed one of its two mlx5_0 contexts).
	clk.advance(30 * time.Second)
	out, _ = processScrape(t, c)
	hasLine(t, out, `fabric_process_rdma_verbs_open{comm="python3",device="mlx5_0",pid="4242"} 1`)
	hasLine(t, out, `fabric_process_rdma_verbs_open{comm="python3",device="mlx5_3",pid="4242"} 1`)
	if calls["4242"] != 18 {
		t.Errorf("4242: %d readlink calls, want its 18 fds", calls["4242"])
	}
	// A link that vanishes between the listing and the readlink.
	c.w.IO.Readlink = func(path string, buf []byte) (int, error) {
		if strings.HasSuffix(path, "/4311/fd/12") {
			return 0, syscall.ENOENT
		}
		return syscall.Readlink(path, buf)
	}
	clk.advance(time.Minute)
	out, _ = processScrape(t, c)
	hasLine(t, out, `fabric_process_rdma_verbs_open{comm="sglang::schedul",device="mlx5_3",pid="4311"} 0`)
	if errs.Value() != 0 {
		t.Errorf("read errors %v", errs.Value())
	}
}

// No series for a rail device gone from the host.
func TestProcessVerbsFDsVanishedDevice(t *testing.T) {
	sysDir := copyTree(t, fixtureSys)
	c, _, clk := newTestProcess(t, processOptionsSys(t, fixtureProc, sysDir))
	processScrape(t, c)
	for _, p := range []string{"class/infiniband/mlx5_3", "class/infiniband_verbs/uverbs1"} {
		if err := os.Remove(filepath.Join(sysDir, p)); err != nil {
			t.Fatal(err)
		}
	}
	clk.advance(time.Second)
	out, _ := processScrape(t, c)
	if got := grepLines(out, "fabric_process_rdma_verbs_open", `device="mlx5_3"`); len(got) > 0 {
		t.Errorf("series for the vanished device:\n%s", strings.Join(got, "\n"))
	}
	hasLine(t, out, `fabric_process_rdma_verbs_open{comm="python3",device="mlx5_0",pid="4242"} 2`)
}
