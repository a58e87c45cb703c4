// RAS's view of the two-node job: waiting until it reports the job, and
// the two trials about what RAS reports of a healthy job that the
// exporter must not page on:
//
//   - destroy: rank 1 destroys its communicator of a second process group
//     while rank 0 keeps it, both running the world all-reduce on; RAS
//     then reports rank 1 of that communicator missing but neither
//     unresponsive nor considered dead (NCCL's NOCOMM). NCCLRankMissing
//     and NCCLAsyncError must not page. RAS's answers are kept at each
//     phase (ras-healthy, ras-destroyed, ras-later).
//   - nonblocking: the job with TORCH_NCCL_USE_COMM_NONBLOCKING=1; RAS is
//     polled every 50 ms from the ranks' start until 30 s after it
//     reported the job, and every answer in which a rank shows init_state
//     or async_error 7 (ncclInProgress) is kept (ras-inprogress-N.json).
//     Nothing may page.

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/ncclras"
)

// ncclInProgress is ncclResult_t 7.
const ncclInProgress = 7

// rasRank is a rank as RAS names it: its node's RAS address and the pid
// it sees itself as.
type rasRank struct {
	Host string
	PID  int
}

// jobComms returns the communicators of st that hold the job complete on
// two nodes: two ranks, answering as want (in either order), initialized
// and without an asynchronous error (ncclInProgress allowed where
// inProgress: a nonblocking communicator's operations in flight).
func jobComms(st *ncclras.Status, want [2]rasRank, inProgress bool) []ncclras.Communicator {
	if st == nil || want[0] == want[1] {
		return nil
	}
	var out []ncclras.Communicator
	for _, c := range st.Communicators {
		if c.Size != 2 || c.Nodes != 2 || c.MissingCount != 0 || len(c.Ranks) != 2 {
			continue
		}
		got := map[rasRank]bool{}
		ok := true
		for _, r := range c.Ranks {
			got[rasRank{r.Host, r.PID}] = true
			ok = ok && r.InitState == 0 && (r.AsyncError == 0 || inProgress && r.AsyncError == ncclInProgress)
		}
		if ok && got[want[0]] && got[want[1]] {
			out = append(out, c)
		}
	}
	return out
}

// waitRAS polls RAS every 0.5 s until it reports n communicators of the
// job (jobComms) or timeout; it gives up early when alive says a rank
// exited.
func waitRAS(addr string, want [2]rasRank, n int, inProgress bool, alive func() error, timeout time.Duration) ([]ncclras.Communicator, time.Time, error) {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		st, err := ncclras.Query(context.Background(), addr, ncclras.Options{Timeout: 5 * time.Second})
		if cs := jobComms(st, want, inProgress); len(cs) >= n {
			return cs, time.Now(), nil
		}
		if err != nil {
			last = err
		} else {
			last = fmt.Errorf("%d communicators, %d with both ranks (%v) on two nodes", len(st.Communicators), len(jobComms(st, want, inProgress)), want)
		}
		if err := alive(); err != nil {
			return nil, time.Time{}, fmt.Errorf("%v before RAS reported the job", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	return nil, time.Time{}, fmt.Errorf("RAS at %s did not report both ranks on two nodes within %s: %v", addr, timeout, last)
}

func describeComm(c ncclras.Communicator) string {
	var rs []string
	for _, r := range c.Ranks {
		rs = append(rs, fmt.Sprintf("rank %d pid %d on %s", r.Rank, r.PID, r.Host))
	}
	for _, m := range c.Missing {
		rs = append(rs, fmt.Sprintf("rank %d pid %d on %s missing (unresponsive %v, considered dead %v)", m.Rank, m.PID, m.Host, m.Unresponsive, m.Dead))
	}
	return fmt.Sprintf("communicator %s, %d ranks on %d nodes (%s)", c.Hash, c.Size, c.Nodes, strings.Join(rs, ", "))
}

// quietWait is how long a trial waits for a page that must not come: RAS
// polled (15 s), the alert's for, two scrapes and evaluations, the page
// route's group wait and 10 s.
func (n *nodeRun) quietWait(alert string) time.Duration {
	return 15*time.Second + parseDur(n.sh.forOf(alert)) + 2*parseDur(n.cfg.ScrapeInterval) + 2*parseDur(n.cfg.EvalInterval) + parseDur(n.sh.pageGroupWait) + 10*time.Second
}

// noPages checks that nothing paged since from but the kernel-evidence
// socket fallback: none of names, then nothing else.
func (n *nodeRun) noPages(what string, from time.Time, names ...string) {
	all := n.st.hook.all()
	if len(names) > 0 {
		got := firstPages(all, names, func(map[string]string) bool { return true }, from)
		var ps []notification
		for _, p := range got {
			ps = append(ps, p)
		}
		n.check(strings.Join(names, " and ")+" do not page", len(got) == 0, "%.0f s %s: %d pages%s", time.Since(from).Seconds(), what, len(ps), listNotes(ps))
	}
	unexpected, _ := pagesBefore(all, time.Now())
	var other []notification
	for _, p := range unexpected {
		if !contains(names, p.labels["alertname"]) {
			other = append(other, p)
		}
	}
	n.check("nothing else pages", len(other) == 0, "%d other pages%s", len(other), listNotes(other))
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func (n *nodeRun) destroy() {
	saveRAS(n.ras, n.dir, "healthy")
	n.fallback() // the healthy phase: until the socket fallback paged
	at := time.Now()
	if err := os.WriteFile(filepath.Join(n.dir, "destroy"), nil, 0o644); err != nil {
		n.check("rank 1 destroys the second communicator", false, "%v", err)
		return
	}
	want := [2]rasRank{{nodeAddr[0], n.job.info[0].Own}, {nodeAddr[1], n.job.info[1].Own}}
	var gone, kept ncclras.Communicator
	found := false
	detail := "no communicator of the job lost rank 1 within 90 s of the destroy (see rank1.out, ras-destroyed.*)"
	for deadline := time.Now().Add(90 * time.Second); !found && time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if err := n.job.alive(); err != nil {
			detail = err.Error()
			break
		}
		st, err := ncclras.Query(context.Background(), n.ras, ncclras.Options{Timeout: 5 * time.Second})
		if err != nil {
			continue
		}
		complete := jobComms(st, want, false)
		for _, c := range st.Communicators {
			// Missing as RAS lists it (whether the parser counts a NOCOMM
			// rank as missing is its business).
			if len(c.Missing) == 1 && c.Missing[0].Rank == 1 && (c.Hash == n.comms[0].Hash || c.Hash == n.comms[1].Hash) && len(complete) == 1 {
				gone, kept, found = c, complete[0], true
			}
		}
	}
	saveRAS(n.ras, n.dir, "destroyed")
	var m ncclras.MissingRank
	if found {
		m = gone.Missing[0]
		detail = fmt.Sprintf("%.1f s after the destroy: %s; the world's: %s", time.Since(at).Seconds(), describeComm(gone), describeComm(kept))
	}
	n.check("RAS reports rank 1 of the destroyed communicator missing, responsive and alive (NOCOMM)", found && !m.Unresponsive && !m.Dead, "%s", detail)
	time.Sleep(max(n.quietWait("NCCLRankMissing"), n.quietWait("NCCLAsyncError")))
	saveRAS(n.ras, n.dir, "later")
	n.noPages("after the destroy", at, rankLoss...)
	exporterCost(n.cfg, n.res, n.t.Name, n.st, n.cpu0, n.seen)
}

func (n *nodeRun) nonblocking(p *fastPoll) {
	saveRAS(n.ras, n.dir, "healthy")
	time.Sleep(time.Until(n.ready.Add(30 * time.Second)))
	s := p.stop()
	n.res.printf("%s: RAS polled every 50 ms for %.0f s from the ranks' start: %d answers (%d queries failed: before RAS listened, or timed out); %d with ncclInProgress (init_state 7 in %d, async_error 7 in %d), kept as ras-inprogress-1..%d.json",
		n.t.Name, s.last.Sub(s.first).Seconds(), s.answers, s.failed, s.inProgress, s.init7, s.async7, s.saved)
	n.check("RAS answered the fast poll", s.answers > 0, "%d answers", s.answers)
	n.fallback()
	time.Sleep(time.Until(n.ready.Add(n.quietWait("NCCLAsyncError"))))
	n.noPages("from the ranks' start", n.start, rankLoss...)
	exporterCost(n.cfg, n.res, n.t.Name, n.st, n.cpu0, n.seen)
}

// fastPoll queries RAS (JSON) every interval and keeps the answers in
// which a rank shows ncclInProgress (the first 20).
type fastPoll struct {
	quit, done chan struct{}
	once       sync.Once
	pollStats
}

type pollStats struct {
	answers, failed, inProgress, init7, async7, saved int
	first, last                                       time.Time
}

func startFastPoll(addr, dir string, every time.Duration) *fastPoll {
	p := &fastPoll{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		p.first = time.Now()
		for {
			select {
			case <-p.quit:
				return
			case <-tick.C:
			}
			p.last = time.Now()
			b, err := rawRAS(addr, rasCmds(true), 2*time.Second)
			var st *ncclras.Status
			if err == nil {
				st, err = ncclras.ParseJSON(b)
			}
			if err != nil {
				p.failed++
				continue
			}
			p.answers++
			i7, a7 := inProgressIn(st)
			p.init7 += btoi(i7)
			p.async7 += btoi(a7)
			if i7 || a7 {
				p.inProgress++
				if p.saved < 20 {
					p.saved++
					os.WriteFile(filepath.Join(dir, fmt.Sprintf("ras-inprogress-%d.json", p.saved)), b, 0o644)
				}
			}
		}
	}()
	return p
}

// stop ends the polling (safe twice) and returns what it saw.
func (p *fastPoll) stop() pollStats {
	p.once.Do(func() { close(p.quit) })
	<-p.done
	return p.pollStats
}

// inProgressIn reports whether a rank of st shows ncclInProgress as its
// init state or asynchronous error.
func inProgressIn(st *ncclras.Status) (init7, async7 bool) {
	for _, c := range st.Communicators {
		for _, r := range c.Ranks {
			init7 = init7 || r.InitState == ncclInProgress
			async7 = async7 || r.AsyncError == ncclInProgress
		}
	}
	return init7, async7
}
