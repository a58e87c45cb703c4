package collector

import (
	"strings"
	"testing"
	"time"
)

// A scrape asks RAS again and reports the answer it gets within
// --collector.nccl-ras.scrape-wait, whatever the phase of the background
// poll (here: an hour); RAS's unresponsive and dead judgements are series
// of their own.
func TestRASScrapeTimeAnswer(t *testing.T) {
	f := newFakeRAS(t, true, "2.28.9-json-healthy.txt", "")
	c := newTestRAS(t, NCCLRASOptions{Addresses: []string{f.Addr()}, Interval: time.Hour, ScrapeWait: 2 * time.Second}, "127.0.0.1")
	c.poller.start(c.opts.Interval, c.pollOnce)
	defer c.Close()
	rank1 := `{comm="0xf8e68da1f581fed5",host="127.0.0.1",pid="659",rank="1"}`
	if got := rasSamples(t, c); strings.Contains(got, "fabric_nccl_ras_rank_missing") || strings.Contains(got, "fabric_nccl_ras_rank_unresponsive") {
		t.Fatalf("healthy job: missing or unresponsive ranks:\n%s", got)
	}
	f.Set("2.28.9-json-killed.txt", "") // rank 1 stopped answering
	at := time.Now()
	got := rasSamples(t, c)
	if took := time.Since(at); took > 2*time.Second {
		t.Errorf("the scrape took %s, more than the scrape wait", took)
	}
	for _, s := range []string{"fabric_nccl_ras_rank_missing" + rank1 + " 1", "fabric_nccl_ras_rank_unresponsive" + rank1 + " 1", "fabric_nccl_ras_rank_dead" + rank1 + " 0"} {
		if !strings.Contains(got, s+"\n") {
			t.Errorf("the scrape after the change lacks %s (its poll ran an hour ago):\n%s", s, got)
		}
	}
	f.Set("2.28.9-json-killed-dead.txt", "") // another job's answer: its rank 1 considered dead
	dead := `{comm="0x10ee41e5abc55cb8",host="127.0.0.1",pid="731",rank="1"}`
	if got := rasSamples(t, c); !strings.Contains(got, "fabric_nccl_ras_rank_dead"+dead+" 1\n") {
		t.Errorf("considered dead: no fabric_nccl_ras_rank_dead 1:\n%s", got)
	}
	// Without the scrape wait the scrape reports the last poll's answer.
	c.opts.ScrapeWait = 0
	f.Set("2.28.9-json-healthy.txt", "")
	if got := rasSamples(t, c); !strings.Contains(got, "fabric_nccl_ras_rank_dead"+dead+" 1\n") {
		t.Errorf("scrape-wait 0 asked RAS at scrape time:\n%s", got)
	}
}

// A RAS service that hangs holds the scrape for the scrape wait at most,
// and the scrape reports the last answer.
func TestRASScrapeWaitBounded(t *testing.T) {
	f := newFakeRAS(t, true, "2.28.9-json-healthy.txt", "")
	c := newTestRAS(t, NCCLRASOptions{Addresses: []string{f.Addr()}, Interval: time.Hour, ScrapeWait: 300 * time.Millisecond, Timeout: 5 * time.Second}, "127.0.0.1")
	c.poller.start(c.opts.Interval, c.pollOnce)
	defer c.Close()
	rasSamples(t, c)
	f.Hang.Store(true)
	start := time.Now()
	got := rasSamples(t, c)
	if d := time.Since(start); d < 250*time.Millisecond || d > 2*time.Second {
		t.Errorf("scrape with RAS hanging took %s, want the 300ms scrape wait", d)
	}
	if !strings.Contains(got, "fabric_nccl_ras_rank_collectives_total") {
		t.Errorf("the scrape lost the last answer:\n%s", got)
	}
	f.Hang.Store(false)
}
