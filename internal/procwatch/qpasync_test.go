package procwatch

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/rdmanl"
)

// blockingQPs answers each listing once release gets a value (a device
// whose firmware does not answer).
type blockingQPs struct {
	l       rdmanl.Listing
	release chan struct{}
	calls   chan struct{}
}

func (b *blockingQPs) QueuePairs(ctx context.Context) (rdmanl.Listing, error) {
	b.calls <- struct{}{}
	select {
	case <-b.release:
		return b.l, nil
	case <-ctx.Done():
		return rdmanl.Listing{}, ctx.Err()
	}
}

// A queue-pair listing held up by a device does not hold up the process
// table: the refresh publishes the processes within AsyncQPs.Wait, the
// queue pairs stay unknown (not 0) until the listing ends, and the refresh
// after it (woken by Done) has them.
func TestAsyncQPsDoNotStallTheTable(t *testing.T) {
	tr := newTree(t)
	tr.proc(100, 100, "serve")
	os.Symlink("200", filepath.Join(tr.dir, "self"))
	tr.proc(200, 200, "exporter")
	src := &blockingQPs{release: make(chan struct{}), calls: make(chan struct{}, 8),
		l: rdmanl.Listing{Devices: []rdmanl.Device{{Name: "mlx5_0"}}, QPs: []rdmanl.QP{{Device: "mlx5_0", Type: 2, State: 3, PID: 100, HasPID: true}}}}
	woken := make(chan struct{}, 1)
	a := &AsyncQPs{Src: src, Wait: 50 * time.Millisecond, Done: func() { woken <- struct{}{} }}
	w := New(Options{Procfs: tr.dir, Cmdline: regexp.MustCompile(`^serve`), Max: 8, Slow: time.Hour}, Sources{QPs: a})
	w.IO.Getpid = func() int { return 200 }
	defer w.Close()
	t0 := time.Now()
	w.Refresh(context.Background())
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("the refresh waited %s for the listing", d)
	}
	s := w.Snapshot()
	if s.Process(100, 0) == nil {
		t.Fatal("process 100 not published while the listing runs")
	}
	if s.QP.Tried || s.QP.OK || len(s.Process(100, 0).QPs) != 0 {
		t.Fatalf("queue pairs known before any listing ended: %+v %v", s.QP, s.Process(100, 0).QPs)
	}
	// Another refresh while it still runs starts no second listing.
	w.Refresh(context.Background())
	if n := len(src.calls); n != 1 {
		t.Fatalf("%d listings started, want 1", n)
	}
	src.release <- struct{}{}
	select {
	case <-woken:
	case <-time.After(5 * time.Second):
		t.Fatal("Done not called after the listing")
	}
	w.Refresh(context.Background())
	s = w.Snapshot()
	if p := s.Process(100, 0); !s.QP.OK || p == nil || len(p.QPs) != 1 || p.QPs[0] != (DevCount{"mlx5_0", 1}) {
		t.Fatalf("after the listing: %+v, process %+v", s.QP, p)
	}
	// The next listing is due only after Slow; a nudge asks at once, and
	// a listing that answers within Wait is taken by the same refresh.
	a.Wait = 5 * time.Second // a loaded machine schedules the release late
	go func() { src.release <- struct{}{} }()
	w.Nudge(100)
	w.Refresh(context.Background())
	if s := w.Snapshot(); !s.QP.OK || len(src.calls) != 2 {
		t.Fatalf("nudged listing: %+v, %d listings", s.QP, len(src.calls))
	}
}

// Close cancels a listing in flight.
func TestAsyncQPsClose(t *testing.T) {
	src := &blockingQPs{release: make(chan struct{}), calls: make(chan struct{}, 8)}
	a := &AsyncQPs{Src: src, Wait: time.Millisecond}
	if _, err := a.QueuePairs(context.Background()); err != ErrQPPending {
		t.Fatalf("err %v, want ErrQPPending", err)
	}
	done := make(chan struct{})
	go func() { a.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
}

// countingQPs answers every listing at once and counts them.
type countingQPs struct{ n int }

func (c *countingQPs) QueuePairs(context.Context) (rdmanl.Listing, error) {
	c.n++
	return rdmanl.Listing{Devices: []rdmanl.Device{{Name: "mlx5_0"}}}, nil
}

// Queue pairs are listed every QPInterval, not every Slow: a rail a rank
// stops using is seen within it while numa_maps keeps its slow pace; with
// QPInterval 0 the listing follows Slow.
func TestQPIntervalApartFromSlow(t *testing.T) {
	for _, tc := range []struct {
		qp   time.Duration
		want int
	}{{15 * time.Second, 3}, {0, 1}} {
		tr := newTree(t)
		tr.proc(100, 100, "serve")
		os.Symlink("200", filepath.Join(tr.dir, "self"))
		tr.proc(200, 200, "exporter")
		src := &countingQPs{}
		w := New(Options{Procfs: tr.dir, Cmdline: regexp.MustCompile(`^serve`), Max: 8, Slow: time.Hour, QPInterval: tc.qp}, Sources{QPs: src})
		w.IO.Getpid = func() int { return 200 }
		now := time.Unix(1_800_000_000, 0)
		w.now = func() time.Time { return now }
		for i := 0; i < 3; i++ {
			w.Refresh(context.Background())
			now = now.Add(16 * time.Second)
		}
		w.Close()
		if src.n != tc.want {
			t.Errorf("QPInterval %s, Slow 1h, 3 refreshes 16 s apart: %d listings, want %d", tc.qp, src.n, tc.want)
		}
	}
}
