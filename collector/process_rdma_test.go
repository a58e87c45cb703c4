package collector

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-kit/log"

	"github.com/fabric-exporter/fabric_exporter/internal/procwatch"
	"github.com/fabric-exporter/fabric_exporter/internal/rdmanl"
)

// fakeQPs is an RDMA netlink source.
type fakeQPs struct {
	l     rdmanl.Listing
	err   error
	calls int
}

func (f *fakeQPs) QueuePairs(context.Context) (rdmanl.Listing, error) {
	f.calls++
	return f.l, f.err
}

func userQPs(dev string, pid uint32, n int) []rdmanl.QP {
	var out []rdmanl.QP
	for i := range n {
		out = append(out, rdmanl.QP{Device: dev, Port: 1, LQPN: uint32(0x100 + i), Type: 2, State: 3, PID: pid, HasPID: true})
	}
	return out
}

// healthyQPs: 4242 (an NCCL rank) with RC QPs on its rails mlx5_0 and
// mlx5_3, the kernel's GSI QPs (no pid), a process not selected on
// mlx5_1, a device of no rail.
func healthyQPs() rdmanl.Listing {
	l := rdmanl.Listing{Devices: []rdmanl.Device{{Index: 0, Name: "mlx5_0"}, {Index: 1, Name: "mlx5_1"}, {Index: 3, Name: "mlx5_3"}}}
	l.QPs = append(l.QPs, rdmanl.QP{Device: "mlx5_0", LQPN: 1, Type: 1, State: 3, KernName: "ib_core"})
	l.QPs = append(l.QPs, userQPs("mlx5_0", 4242, 2)...)
	l.QPs = append(l.QPs, userQPs("mlx5_3", 4242, 1)...)
	l.QPs = append(l.QPs, userQPs("mlx5_1", 9999, 5)...)
	return l
}

// newRDMATestProcess is the process collector on the fixture /proc with a
// fake netlink source, in the PID namespace of the fixture (its self is
// 3907).
func newRDMATestProcess(t *testing.T, src rdmanl.Source) (*processCollector, *fakeClock) {
	c, _, clk := newTestProcess(t, processOptions(t, fixtureProc))
	c.w.SetQPSource(src)
	c.w.IO.Getpid = func() int { return 3907 }
	return c, clk
}

func TestProcessRDMAQueuePairs(t *testing.T) {
	src := &fakeQPs{l: healthyQPs()}
	c, clk := newRDMATestProcess(t, src)
	out, err := processScrape(t, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{
		`fabric_process_rdma_queue_pairs{comm="python3",device="mlx5_0",pid="4242"} 2`,
		`fabric_process_rdma_queue_pairs{comm="python3",device="mlx5_1",pid="4242"} 0`,
		`fabric_process_rdma_queue_pairs{comm="python3",device="mlx5_3",pid="4242"} 1`,
		`fabric_process_rdma_queue_pairs{comm="sglang::schedul",device="mlx5_0",pid="4310"} 0`,
		`fabric_process_rdma_queue_pairs{comm="sglang::schedul",device="mlx5_3",pid="4311"} 0`,
		`fabric_process_rdma_netlink_available 1`,
	} {
		hasLine(t, out, l)
	}
	if got := grepLines(out, "fabric_process_rdma_queue_pairs{"); len(got) != 9 {
		t.Errorf("%d queue-pair series, want 3 processes x 3 devices:\n%s", len(got), strings.Join(got, "\n"))
	}
	if got := grepLines(out, `pid="9999"`); len(got) > 0 {
		t.Errorf("a process not selected is reported:\n%s", strings.Join(got, "\n"))
	}
	// One listing per interval, the last counts in between.
	src.l = rdmanl.Listing{Devices: healthyQPs().Devices, QPs: userQPs("mlx5_0", 4242, 7)}
	clk.advance(30 * time.Second)
	out, _ = processScrape(t, c)
	hasLine(t, out, `fabric_process_rdma_queue_pairs{comm="python3",device="mlx5_0",pid="4242"} 2`)
	if src.calls != 1 {
		t.Errorf("%d listings before the interval, want 1", src.calls)
	}
	clk.advance(30 * time.Second)
	out, _ = processScrape(t, c)
	hasLine(t, out, `fabric_process_rdma_queue_pairs{comm="python3",device="mlx5_0",pid="4242"} 7`)
	hasLine(t, out, `fabric_process_rdma_queue_pairs{comm="python3",device="mlx5_3",pid="4242"} 0`)
	if src.calls != 2 {
		t.Errorf("%d listings, want 2", src.calls)
	}
}

// Refused (no privilege) or not available: no queue-pair series, the
// available gauge 0, the collector ok and its other RDMA evidence there;
// a later listing that works brings them back.
func TestProcessRDMANetlinkUnavailable(t *testing.T) {
	for _, e := range []error{
		fmt.Errorf("%w: %w", rdmanl.ErrNoPrivilege, syscall.EPERM),
		fmt.Errorf("%w: %w", rdmanl.ErrNotAvailable, syscall.EPROTONOSUPPORT),
		syscall.EIO,
	} {
		src := &fakeQPs{err: e}
		c, clk := newRDMATestProcess(t, src)
		out, err := processScrape(t, c)
		if err != nil {
			t.Fatalf("%v: the collector failed: %v", e, err)
		}
		if got := grepLines(out, "fabric_process_rdma_queue_pairs"); len(got) > 0 {
			t.Errorf("%v: queue pairs without a listing:\n%s", e, strings.Join(got, "\n"))
		}
		hasLine(t, out, `fabric_process_rdma_netlink_available 0`)
		hasLine(t, out, `fabric_process_rdma_verbs_fds{comm="python3",pid="4242"} 3`)
		src.err, src.l = nil, healthyQPs()
		clk.advance(time.Minute)
		out, _ = processScrape(t, c)
		hasLine(t, out, `fabric_process_rdma_netlink_available 1`)
		hasLine(t, out, `fabric_process_rdma_queue_pairs{comm="python3",device="mlx5_0",pid="4242"} 2`)
	}
}

// The exporter in a PID namespace other than that of --path.procfs: the
// kernel would answer with that namespace's PIDs, so there is no listing.
func TestProcessRDMAOtherPIDNamespace(t *testing.T) {
	src := &fakeQPs{l: healthyQPs()}
	c, clk := newRDMATestProcess(t, src)
	var logs strings.Builder
	c.env.Once = NewOnceLogger(log.NewLogfmtLogger(&logs), 16)
	c.w.IO.Getpid = func() int { return 1 } // PID 1 of a container; procfs/self says 3907
	processScrape(t, c)
	clk.advance(time.Minute)
	out, _ := processScrape(t, c)
	if n := strings.Count(logs.String(), "not in the PID namespace of --path.procfs"); n != 1 {
		t.Errorf("the reason logged %d times, want once:\n%s", n, logs.String())
	}
	if src.calls != 0 {
		t.Errorf("%d listings across PID namespaces", src.calls)
	}
	hasLine(t, out, `fabric_process_rdma_netlink_available 0`)
	if got := grepLines(out, "fabric_process_rdma_queue_pairs"); len(got) > 0 {
		t.Errorf("queue pairs across PID namespaces:\n%s", strings.Join(got, "\n"))
	}
}

// Open verbs fds of any device are reported without rails too (a host
// whose rails are not configured or whose devices are gone).
func TestProcessVerbsFDsWithoutRails(t *testing.T) {
	o := processOptions(t, fixtureProc)
	o.Rails = nil
	c, _, _ := newTestProcess(t, o)
	out, err := processScrape(t, c)
	if err != nil {
		t.Fatal(err)
	}
	hasLine(t, out, `fabric_process_rdma_verbs_fds{comm="python3",pid="4242"} 3`)
	hasLine(t, out, `fabric_process_rdma_verbs_fds{comm="sglang::schedul",pid="4310"} 0`)
	hasLine(t, out, `fabric_process_rdma_verbs_fds{comm="sglang::schedul",pid="4311"} 1`) // not uverbs1x
	if got := grepLines(out, "fabric_process_rdma_verbs_open"); len(got) > 0 {
		t.Errorf("rail-device series without rails:\n%s", strings.Join(got, "\n"))
	}
}

func TestIsUverbs(t *testing.T) {
	for n, want := range map[string]bool{"uverbs0": true, "uverbs12": true, "uverbs": false, "uverbs1x": false, "issm0": false, "rdma_cm": false} {
		if procwatch.IsUverbs([]byte(n)) != want {
			t.Errorf("%s: %v", n, !want)
		}
	}
}

// A process whose comm changes (setproctitle) has its RDMA series under
// the new name only.
func TestProcessRDMARenamed(t *testing.T) {
	procDir := copyTree(t, fixtureProc)
	c, _, clk := newTestProcess(t, processOptions(t, procDir))
	c.w.SetQPSource(&fakeQPs{l: healthyQPs()})
	c.w.IO.Getpid = func() int { return 3907 }
	processScrape(t, c)
	statPath := filepath.Join(procDir, "4242", "stat")
	raw, _ := os.ReadFile(statPath)
	os.WriteFile(statPath, bytes.Replace(raw, []byte("(python3)"), []byte("(sglang::main)"), 1), 0o644)
	clk.advance(time.Second)
	out, _ := processScrape(t, c)
	hasLine(t, out, `fabric_process_rdma_verbs_fds{comm="sglang::main",pid="4242"} 3`)
	hasLine(t, out, `fabric_process_rdma_queue_pairs{comm="sglang::main",device="mlx5_0",pid="4242"} 2`)
	hasLine(t, out, `fabric_process_host_pid_namespace{comm="sglang::main",pid="4242"} 0`)
	if got := grepLines(out, `comm="python3"`, `pid="4242"`); len(got) > 0 {
		t.Errorf("series under the old comm:\n%s", strings.Join(got, "\n"))
	}
}

// One device whose queue-pair dump failed (mlx5 in internal error fails
// QUERY_QP): its queue-pair series are left out (unknown, not 0) and it
// reads failed; the other devices keep theirs.
func TestProcessRDMAOneDeviceFailed(t *testing.T) {
	l := healthyQPs()
	var kept []rdmanl.QP
	for _, q := range l.QPs {
		if q.Device != "mlx5_3" {
			kept = append(kept, q)
		}
	}
	l.QPs, l.Failed = kept, []rdmanl.DeviceError{{Device: "mlx5_3", Err: syscall.EIO}}
	c, _ := newRDMATestProcess(t, &fakeQPs{l: l})
	out, err := processScrape(t, c)
	if err != nil {
		t.Fatal(err)
	}
	hasLine(t, out, `fabric_process_rdma_queue_pairs{comm="python3",device="mlx5_0",pid="4242"} 2`)
	hasLine(t, out, `fabric_process_rdma_queue_pairs_listed{device="mlx5_3"} 0`)
	hasLine(t, out, `fabric_process_rdma_queue_pairs_listed{device="mlx5_0"} 1`)
	if got := grepLines(out, `fabric_process_rdma_queue_pairs{`, `device="mlx5_3"`); len(got) != 0 {
		t.Errorf("the failed device's queue pairs reported:\n%s", strings.Join(got, "\n"))
	}
}
