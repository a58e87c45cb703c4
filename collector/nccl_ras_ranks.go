package collector

import (
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/ncclras"
	"github.com/fabric-exporter/fabric_exporter/internal/procwatch"
)

// Ranks and their processes. Each poll joins the ranks of this node to the
// host processes of the process table (procwatch.Snapshot.JoinRank: the
// rank's own pid and its RAS address against each process's NSpid and
// network namespace; unique or none). A join is kept, and reported, while
// RAS lists the rank, alive or missing, and joinKeep after (also when the
// node's own RAS went with the rank), so that a dead rank is still named by
// the node it ran on. A new join nudges the process table to
// re-read the process's fds and queue pairs: the verbs-fd count of a rank
// is exported only when it was read after this exporter first saw the rank
// in its communicator (NCCL opens its RDMA devices before it registers the
// communicator with RAS, init.cc commAlloc before bootstrapInit), never an
// older one.

// joinKeep is how long a join is kept after RAS last listed its rank.
const joinKeep = 10 * time.Minute

// renudge is how long a scrape waits for a nudged re-read before nudging
// again.
const renudge = 5 * time.Second

type rankKey struct {
	comm string
	rank int
}

// rankJoin is a rank of this node joined to its host process.
type rankJoin struct {
	host          string // RAS's host and pid of the rank
	pid           int
	hostPID       int    // the process in --path.procfs
	start         uint64 // its start time (PID reuse)
	by            string
	container     string // its container's ID and pod UID ("" outside one)
	podUID        string
	firstSeen     time.Time // the poll that joined it
	lastSeen      time.Time // the last poll that listed the rank
	nudged        time.Time
	missingListed bool // the last poll listed it missing
}

// rankUnjoined is a rank of this node the last poll could not join.
type rankUnjoined struct {
	comm         string
	rank         int
	host, reason string
	pid          int
}

// updateJoins joins the last answers' ranks of this node; c.mu is held.
func (c *ncclRASCollector) updateJoins(now time.Time) {
	c.unjoin = c.unjoin[:0]
	if c.env.Processes == nil {
		clear(c.joins)
		return
	}
	table := c.env.Processes.Table()
	var nudge []int
	seen := map[rankKey]bool{}
	elsewhere := map[rankKey]rankUnjoined{}
	for _, a := range c.answers {
		if a.err != nil || a.status == nil {
			continue
		}
		for ci := range a.status.Communicators {
			cm := &a.status.Communicators[ci]
			for _, r := range cm.Ranks {
				k := rankKey{cm.Hash, r.Rank}
				if !c.localIP[r.Host] || seen[k] {
					continue
				}
				if table != nil && !table.NSHasAddr(a.t.NetNS, r.Host) {
					// Another namespace's rank: its own pod's answer
					// joins it, or it stays unjoined.
					elsewhere[k] = rankUnjoined{comm: cm.Hash, rank: r.Rank, host: r.Host, pid: r.PID, reason: procwatch.UnjoinedOtherNS}
					continue
				}
				seen[k] = true
				j := c.joins[k]
				if j != nil && (j.host != r.Host || j.pid != r.PID || table == nil || table.Process(j.hostPID, j.start) == nil) {
					j = nil // another process now, or it left the table
				}
				if j == nil {
					delete(c.joins, k)
					if table == nil {
						continue
					}
					p, by, reason := table.JoinRank(r.Host, r.PID, a.t.NetNS)
					if p == nil {
						c.unjoin = append(c.unjoin, rankUnjoined{comm: cm.Hash, rank: r.Rank, host: r.Host, pid: r.PID, reason: reason})
						continue
					}
					j = &rankJoin{host: r.Host, pid: r.PID, hostPID: p.PID, start: p.Start, by: by, firstSeen: now, nudged: now}
					if p.InContainer {
						j.container, j.podUID = p.Container.ID, p.Container.PodUID
					}
					c.joins[k] = j
					nudge = append(nudge, p.PID)
				}
				j.lastSeen, j.missingListed = now, false
			}
			for _, m := range cm.Missing {
				k := rankKey{cm.Hash, m.Rank}
				if j := c.joins[k]; j != nil && !seen[k] && j.host == m.Host && j.pid == m.PID {
					seen[k] = true
					j.lastSeen, j.missingListed = now, true
				}
			}
		}
	}
	var others []rankUnjoined
	for k, u := range elsewhere {
		if !seen[k] {
			others = append(others, u)
		}
	}
	sort.Slice(others, func(i, j int) bool {
		if others[i].comm != others[j].comm {
			return others[i].comm < others[j].comm
		}
		return others[i].rank < others[j].rank
	})
	c.unjoin = append(c.unjoin, others...)
	for k, j := range c.joins {
		if now.Sub(j.lastSeen) > joinKeep {
			delete(c.joins, k)
		}
	}
	c.polledAt = now
	if len(nudge) > 0 {
		c.nudgedAt = now
		c.env.Processes.Nudge(nudge...)
	}
}

// rasExport adds one scrape's answers; c.mu is held.
type rasExport struct {
	c              *ncclRASCollector
	b              *exposition.Batch
	comms          map[string]bool
	ranks, missing int
	table          *procwatch.Snapshot
	// owner is, per communicator, the answer that holds most of its ranks
	// joined from its own namespace (rasOwners); absent: the first answer.
	owner map[string]int
}

// rasOwners picks, for each communicator, the answer that speaks for it:
// the one with the most of its ranks that live in the answering service's
// own network namespace and are joined to a process there. A pod's fake
// answer that names another pod's communicator holds none of that
// communicator's ranks, so it can neither shadow nor hide the real one.
func (c *ncclRASCollector) rasOwners() map[string]int {
	owner := map[string]int{}
	if c.env.Processes == nil {
		return owner
	}
	table := c.env.Processes.Table()
	if table == nil {
		return owner
	}
	best := map[string]int{}
	for i, a := range c.answers {
		if a.err != nil || a.status == nil {
			continue
		}
		for ci := range a.status.Communicators {
			cm := &a.status.Communicators[ci]
			n := 0
			for _, r := range cm.Ranks {
				j := c.joins[rankKey{cm.Hash, r.Rank}]
				if j != nil && j.host == r.Host && j.pid == r.PID && table.NSHasAddr(a.t.NetNS, r.Host) {
					n++
				}
			}
			if n > best[cm.Hash] {
				best[cm.Hash], owner[cm.Hash] = n, i
			}
		}
	}
	return owner
}

// answer adds one answer's communicators not yet added (an answer of a
// second service for the same job adds nothing), at most
// max-communicators, those RAS flags first.
func (e *rasExport) answer(idx int, st *ncclras.Status, ns uint64) {
	c, b := e.c, e.b
	// A rank at an address of another network namespace of this node is
	// that namespace's own answer to report: a pod's answer cannot name
	// (or declare dead) a rank of another pod.
	foreign := func(host string) bool { return e.table != nil && e.table.OtherNSAddr(ns, host) }
	order := make([]*ncclras.Communicator, 0, len(st.Communicators))
	for i := range st.Communicators {
		order = append(order, &st.Communicators[i])
	}
	flagged := func(c *ncclras.Communicator) bool { return c.Incomplete || c.Error || c.Mismatch }
	sort.SliceStable(order, func(i, j int) bool {
		if fi, fj := flagged(order[i]), flagged(order[j]); fi != fj {
			return fi
		}
		return order[i].Hash < order[j].Hash
	})
	for _, cm := range order {
		if e.comms[cm.Hash] {
			continue
		}
		if o, ok := e.owner[cm.Hash]; ok && o != idx {
			continue // another answer speaks for it
		}
		if len(e.comms) >= c.opts.MaxCommunicators {
			return
		}
		e.comms[cm.Hash] = true
		if cm.Size > 0 {
			b.AddWith(c.commRanksF, float64(cm.Size), cm.Hash)
		}
		if cm.Nodes > 0 {
			b.AddWith(c.commNodesF, float64(cm.Nodes), cm.Hash)
		}
		b.AddWith(c.commMissingF, float64(cm.MissingCount), cm.Hash)
		b.AddWith(c.commNoCommF, float64(cm.NoCommCount), cm.Hash)
		b.AddWith(c.commMismatchF, b2f(cm.Mismatch), cm.Hash)
		for _, m := range cm.Missing {
			if e.missing >= c.opts.MaxRanks {
				break
			}
			if foreign(m.Host) {
				continue
			}
			e.missing++
			f := c.rankMissingF
			if m.NoComm {
				f = c.rankNoCommF
			}
			ml := []string{cm.Hash, strconv.Itoa(m.Rank), rasHost(m.Host), rasPID(m.PID)}
			b.AddWith(f, 1, ml...)
			if !m.NoComm {
				// RAS's two judgements apart: unresponsive within one
				// query (a stopped or wedged process), dead after
				// NCCL_RAS_TIMEOUT_FACTOR×60 s without an answer.
				b.AddWith(c.rankUnrespF, b2f(m.Unresponsive), ml...)
				b.AddWith(c.rankDeadF, b2f(m.Dead), ml...)
			}
		}
		for i := range cm.Ranks {
			r := &cm.Ranks[i]
			if !c.localIP[r.Host] || foreign(r.Host) {
				continue
			}
			if e.ranks >= c.opts.MaxRanks {
				break
			}
			e.ranks++
			l := []string{cm.Hash, strconv.Itoa(r.Rank), rasHost(r.Host), rasPID(r.PID)}
			dev := ""
			if r.CUDADev >= 0 {
				dev = strconv.Itoa(r.CUDADev)
			}
			b.AddWith(c.rankInfoF, 1, append(l, dev)...)
			if r.HasStatus || r.AsyncError != 0 {
				b.AddWith(c.rankAsyncF, float64(r.AsyncError), l...)
			}
			if r.HasStatus || r.InitState != 0 {
				b.AddWith(c.rankInitF, float64(r.InitState), l...)
			}
			if r.HasStatus {
				b.AddWith(c.rankAbortF, b2f(r.AbortFlag), l...)
				b.AddWith(c.rankStateF, 1, append(l, strings.ToLower(r.State()))...)
			}
			for _, oc := range r.Collectives {
				b.AddWith(c.collF, float64(oc.Count), append(l, oc.Op)...)
			}
		}
	}
}

// processes adds the host process of each rank of this node the last poll
// listed, its fresh verbs fds, and the ranks it could not join.
func (e *rasExport) processes() {
	c, b := e.c, e.b
	var table *procwatch.Snapshot
	if c.env.Processes != nil {
		table = c.env.Processes.Table()
	}
	now := c.now()
	var nudge []int
	for k, j := range c.joins {
		listed := j.lastSeen.Equal(c.polledAt)
		if listed && !e.comms[k.comm] {
			continue // a communicator over max-communicators
		}
		// A join whose rank this node's RAS no longer lists (its process
		// was the last of the communicator here: the node's RAS went with
		// it) is still reported until joinKeep: the other nodes report the
		// rank missing, and only this node knows which process it was.
		l := []string{k.comm, strconv.Itoa(k.rank), rasHost(j.host), rasPID(j.pid), strconv.Itoa(j.hostPID)}
		b.AddWith(c.rankProcF, 1, append(l, j.by, j.container, j.podUID)...)
		if !listed || j.missingListed || table == nil {
			continue
		}
		p := table.Process(j.hostPID, j.start)
		switch {
		case p == nil:
		case p.FDsRead && !p.EvidenceAt.Before(j.firstSeen):
			b.AddWith(c.rankFDsF, float64(p.VerbsFDs), l...)
		case now.Sub(j.nudged) >= renudge:
			j.nudged = now
			nudge = append(nudge, j.hostPID)
		}
	}
	for _, u := range c.unjoin {
		b.AddWith(c.rankUnjoinedF, 1, u.comm, strconv.Itoa(u.rank), rasHost(u.host), rasPID(u.pid), u.reason)
	}
	if len(nudge) > 0 {
		c.env.Processes.Nudge(nudge...)
	}
}

// rasHost and rasPID turn RAS's "unknown" and -1 into empty labels.
func rasHost(h string) string {
	if h == "unknown" {
		return ""
	}
	return h
}

func rasPID(p int) string {
	if p < 0 {
		return ""
	}
	return strconv.Itoa(p)
}
