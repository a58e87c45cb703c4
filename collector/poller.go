package collector

import (
	"context"
	"time"
)

// poller runs a follower's poll function in a goroutine: once at start,
// then every interval, until Close. The nccl and nccl-inspector collectors
// follow their files with it, so that a scrape only copies what was read.
type poller struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// start runs poll in a new goroutine; ctx is cancelled by Close.
func (p *poller) start(every time.Duration, poll func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan struct{})
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
			}
		}
	}()
}

// Close stops the goroutine and waits for it; it does nothing when the
// poller never started or is already closed.
func (p *poller) Close() {
	if p.cancel != nil {
		p.cancel()
		<-p.done
		p.cancel = nil
	}
}
