package collector

import (
	"context"
	"time"
)

// What a scrape waits for so that it reports RAS as it is now, whatever
// the phase of the background poll (--collector.nccl-ras.scrape-wait).

// fresh wakes the poller and waits, up to ScrapeWait, until a poll that
// began at or after now has finished, and, when that poll joined new
// ranks, until the process table re-read their evidence: the scrape that
// first reports a rank reports its verbs fds too (else the socket
// fallback without logs waits for the next scrape, one scrape interval).
func (c *ncclRASCollector) fresh(ctx context.Context) {
	asked := c.now()
	c.Wake()
	timer := time.NewTimer(c.opts.ScrapeWait)
	defer timer.Stop()
	for {
		c.mu.Lock()
		done, ch, nudged := !c.pollStart.Before(asked), c.polled, c.nudgedAt
		c.mu.Unlock()
		if done && !nudged.Before(asked) && c.env.Processes != nil {
			c.waitTable(ctx, nudged, timer.C)
			return
		}
		if done || ch == nil {
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// waitTable waits until the process table has a refresh that began at
// or after t (the one the nudge asked for), or until stop.
func (c *ncclRASCollector) waitTable(ctx context.Context, t time.Time, stop <-chan time.Time) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if s := c.env.Processes.Table(); s != nil && !s.At.Before(t) {
			return
		}
		select {
		case <-tick.C:
		case <-stop:
			return
		case <-ctx.Done():
			return
		}
	}
}
