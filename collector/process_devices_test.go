package collector

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// processOptionsSys is processOptions with rails resolved from sysDir.
func processOptionsSys(t testing.TB, procfs, sysDir string, rails ...string) *Options {
	o := processOptions(t, procfs)
	so := fixtureOptions(t, sysDir, rails...)
	o.SysfsPath, o.Rails = so.SysfsPath, so.Rails
	return o
}

// An RDMA device that disappears from the host (its rail goes down, see
// fabric_rail_up) is not the container's fault: the process collector
// reports visibility only for the rail devices the host has now, with a
// verbs node; a vanished device has no series at all, at once and after
// the next check; the other rail is still reported.
func TestProcessVanishedDeviceNotBlamedOnContainer(t *testing.T) {
	sysDir := copyTree(t, fixtureSys)
	c, _, clk := newTestProcess(t, processOptionsSys(t, fixtureProc, sysDir))
	out, err := processScrape(t, c)
	if err != nil {
		t.Fatal(err)
	}
	hasLine(t, out, `fabric_process_rdma_device_visible{comm="python3",device="mlx5_3",node="uverbs1",pid="4242"} 1`)

	// mlx5_3 is unbound (PCI error, driver reload): its class entries go.
	for _, p := range []string{"class/infiniband/mlx5_3", "class/infiniband_verbs/uverbs1"} {
		if err := os.Remove(filepath.Join(sysDir, p)); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []time.Duration{time.Second, time.Minute} {
		clk.advance(step)
		out, err = processScrape(t, c)
		if err != nil {
			t.Fatal(err)
		}
		if got := grepLines(out, "fabric_process_rdma_device_visible", `device="mlx5_3"`); len(got) > 0 {
			t.Errorf("after %v: series for the vanished device:\n%s", step, strings.Join(got, "\n"))
		}
		hasLine(t, out, `fabric_process_rdma_device_visible{comm="python3",device="mlx5_0",node="uverbs0",pid="4242"} 1`)
		hasLine(t, out, `fabric_process_rdma_device_visible{comm="python3",device="mlx5_0",node="rdma_cm",pid="4242"} 1`)
		hasLine(t, out, `fabric_process_rdma_device_visible{comm="sglang::schedul",device="mlx5_0",node="uverbs0",pid="4310"} 0`)
	}
}

// A rail device without a verbs node on the host (ib_uverbs not loaded) has
// no visibility series: the container could not open what the host does not
// have.
func TestProcessNoVerbsNodeNoSeries(t *testing.T) {
	sysDir := copyTree(t, fixtureSys)
	if err := os.Remove(filepath.Join(sysDir, "class/infiniband_verbs/uverbs1")); err != nil {
		t.Fatal(err)
	}
	c, _, _ := newTestProcess(t, processOptionsSys(t, fixtureProc, sysDir, "r0=mlx5_0", "r1=mlx5_3"))
	out, err := processScrape(t, c)
	if err != nil {
		t.Fatal(err)
	}
	got := grepLines(out, "fabric_process_rdma_device_visible")
	for _, l := range got {
		if !strings.Contains(l, `device="mlx5_0"`) {
			t.Errorf("series for a device without a verbs node: %s", l)
		}
	}
	if len(got) != 6 { // uverbs0 and rdma_cm of 3 processes
		t.Errorf("%d series, want 6:\n%s", len(got), strings.Join(got, "\n"))
	}
}
