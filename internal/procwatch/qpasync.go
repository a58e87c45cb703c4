package procwatch

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/rdmanl"
)

// ErrQPPending is what an AsyncQPs answers while its listing runs on: the
// process table goes on with the last listing's queue pairs and asks again
// at its next refresh.
var ErrQPPending = errors.New("RDMA netlink queue-pair listing still running")

// AsyncQPs takes a queue-pair source off the process table's refresh. A
// listing asks every RDMA device's driver (mlx5: a firmware QUERY_QP per
// queue pair); a device whose firmware no longer answers holds the
// listing for its command timeout (mlx5: 60 s), and RDMA netlink gives
// each device 2 s (internal/rdmanl), so a wedged HCA, or several, would
// otherwise stall the table, and every RAS join and socket-fallback cause
// that reads it, for as long. Here a listing runs in a goroutine of its
// own: QueuePairs waits for it up to Wait (a healthy node lists in well
// under a millisecond per device, so the table sees the listing it asked
// for), and past that answers ErrQPPending and hands the listing over at
// the first call after it finished, calling Done then (the collector
// wakes its poller). One listing at a time; Close cancels it.
type AsyncQPs struct {
	Src  rdmanl.Source
	Wait time.Duration
	Done func()

	once    sync.Once
	ctx     context.Context
	cancel  context.CancelFunc
	mu      sync.Mutex
	running chan struct{} // closed when the listing in flight ends
	ready   *asyncListing // a finished listing not yet handed over
}

type asyncListing struct {
	l   rdmanl.Listing
	err error
}

// QueuePairs hands over a finished listing, or starts one and waits up to
// Wait for it.
func (a *AsyncQPs) QueuePairs(ctx context.Context) (rdmanl.Listing, error) {
	a.once.Do(func() { a.ctx, a.cancel = context.WithCancel(context.Background()) })
	a.mu.Lock()
	if r := a.ready; r != nil {
		a.ready = nil
		a.mu.Unlock()
		return r.l, r.err
	}
	run := a.running
	if run == nil {
		run = make(chan struct{})
		a.running = run
		go a.list(run)
	}
	a.mu.Unlock()
	t := time.NewTimer(a.Wait)
	defer t.Stop()
	select {
	case <-run:
		a.mu.Lock()
		defer a.mu.Unlock()
		if r := a.ready; r != nil {
			a.ready = nil
			return r.l, r.err
		}
		return rdmanl.Listing{}, ErrQPPending // handed to a caller beside this one
	case <-t.C:
	case <-ctx.Done():
	}
	return rdmanl.Listing{}, ErrQPPending
}

func (a *AsyncQPs) list(done chan struct{}) {
	l, err := a.Src.QueuePairs(a.ctx)
	a.mu.Lock()
	a.ready, a.running = &asyncListing{l, err}, nil
	a.mu.Unlock()
	close(done)
	if a.Done != nil {
		a.Done()
	}
}

// Close cancels a listing in flight and closes the source.
func (a *AsyncQPs) Close() error {
	a.once.Do(func() { a.ctx, a.cancel = context.WithCancel(context.Background()) })
	a.cancel()
	a.mu.Lock()
	run := a.running
	a.mu.Unlock()
	if run != nil {
		select { // the source is not closed under a listing
		case <-run:
		case <-time.After(5 * time.Second):
			return nil
		}
	}
	if cl, ok := a.Src.(interface{ Close() error }); ok {
		return cl.Close()
	}
	return nil
}

// PIDsOfProcfs passes the source's declaration on (procfsPIDs).
func (a *AsyncQPs) PIDsOfProcfs() bool { return pidsOfProcfs(a.Src) }
