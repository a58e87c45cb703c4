package collector

import (
	"context"
	"time"
)

// poller runs a source's poll function in a goroutine: once at start, then
// every interval and at once after Wake, until Close. Every source read off
// the scrape path uses it (the nccl and nccl-inspector followers, the
// nccl-ras queries, the process table), so that a scrape only copies what
// was read.
type poller struct {
	cancel context.CancelFunc
	done   chan struct{}
	wake   chan struct{}
}

// start runs poll in a new goroutine; ctx is cancelled by Close.
func (p *poller) start(every time.Duration, poll func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done, p.wake = cancel, make(chan struct{}), make(chan struct{}, 1)
	go func() {
		defer close(p.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			poll(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-p.wake:
			}
		}
	}()
}

// Wake makes the goroutine poll now (after the poll in progress, if any);
// it never blocks, and does nothing when the poller never started.
func (p *poller) Wake() {
	if p.wake == nil {
		return
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// started reports whether the goroutine runs.
func (p *poller) started() bool { return p.cancel != nil }

// Close stops the goroutine and waits for it; it does nothing when the
// poller never started or is already closed.
func (p *poller) Close() {
	if p.cancel != nil {
		p.cancel()
		<-p.done
		p.cancel = nil
	}
}
