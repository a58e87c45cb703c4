package collector

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/ncclras"
)

// The nccl-ras collector asks NCCL's RAS service (every NCCL ≥ 2.24
// process runs it; the processes of a host share NCCL_RAS_ADDR,
// localhost:28028 by default) for the state of the job's communicators:
// JSON where NCCL offers it (2.28.7+), text before. Protocol, formats and
// versions: internal/ncclras. It works without NCCL_DEBUG logs.
//
// Queries run in a goroutine every interval, each bounded by the timeout
// and a 4 MiB answer; Update copies the last answers. One query answers
// for the whole job (the RAS network spans it), so:
//
//   - communicator series (size, nodes, missing ranks, RAS's mismatch
//     judgement) are reported by every host's exporter;
//   - rank series (info, status, collective counts) only for the ranks
//     whose RAS address is one of this host's (so a job's ranks are not
//     reported twice), at most max-ranks of them;
//   - missing ranks wherever they run (a dead host has no exporter to
//     report its own).
//
// Addresses: the flag's, always, and those of the serving processes
// (Env.Processes: NCCL_RAS_ADDR of the process collector's processes whose
// RAS is on) that are this host's (loopback or an address of one of its
// interfaces), at most maxProcessRASAddrs of them, each address once. A
// remote address is not queried: that would be scraping another host's
// RAS from this exporter (its own exporter does). The list is made again
// for every poll, so the address of a process that exited goes with it.
//
// States: nothing listens on any address → no_hardware (quiet); an
// address that answers but fails the protocol, times out or answers
// garbage → failed (the other addresses' series are kept).

// NCCLRASOptions configures the nccl-ras collector.
type NCCLRASOptions struct {
	Addresses        []string      // --collector.nccl-ras.address (repeatable, comma lists)
	Interval         time.Duration // --collector.nccl-ras.interval
	Timeout          time.Duration // --collector.nccl-ras.timeout
	MaxCommunicators int           // --collector.nccl-ras.max-communicators
	MaxRanks         int           // --collector.nccl-ras.max-ranks
}

func ncclRASFlags(app *kingpin.Application, o *Options) {
	app.Flag("collector.nccl-ras.address", "NCCL RAS client address (NCCL_RAS_ADDR of the NCCL processes) to query; repeatable or a comma-separated list.").Default(ncclras.DefaultAddr).StringsVar(&o.NCCLRAS.Addresses)
	app.Flag("collector.nccl-ras.interval", "How often RAS is queried (in the background; a scrape reports the last answer).").Default("15s").
		Action(atLeastDuration("collector.nccl-ras.interval", &o.NCCLRAS.Interval, time.Second)).DurationVar(&o.NCCLRAS.Interval)
	app.Flag("collector.nccl-ras.timeout", "Deadline of one RAS query, from dial to the end of the answer (RAS is told half of it as its own TIMEOUT).").Default("5s").
		Action(atLeastDuration("collector.nccl-ras.timeout", &o.NCCLRAS.Timeout, 100*time.Millisecond)).DurationVar(&o.NCCLRAS.Timeout)
	app.Flag("collector.nccl-ras.max-communicators", "Most communicators reported (those RAS flags first, then by hash).").Default("64").
		Action(atLeastInt("collector.nccl-ras.max-communicators", &o.NCCLRAS.MaxCommunicators, 1)).IntVar(&o.NCCLRAS.MaxCommunicators)
	app.Flag("collector.nccl-ras.max-ranks", "Most ranks of this host reported with rank series, and most missing ranks, over all communicators.").Default("512").
		Action(atLeastInt("collector.nccl-ras.max-ranks", &o.NCCLRAS.MaxRanks, 1)).IntVar(&o.NCCLRAS.MaxRanks)
}

// maxProcessRASAddrs bounds the addresses taken from the processes'
// environments, on top of the flag's.
const maxProcessRASAddrs = 16

// rasAnswer is the last query of one address.
type rasAnswer struct {
	addr     string
	status   *ncclras.Status
	err      error
	duration float64
}

type ncclRASCollector struct {
	env   Env
	opts  NCCLRASOptions
	query func(ctx context.Context, addr string, o ncclras.Options) (*ncclras.Status, error)
	local func() map[string]bool // this host's addresses

	poller
	mu      sync.Mutex
	answers []rasAnswer
	addrs   []string // the addresses of the last poll
	localIP map[string]bool
	first   chan struct{} // closed after the first poll

	upF, durF, infoF, commsF                                          *exposition.Family
	commRanksF, commNodesF, commMissingF, commMismatchF               *exposition.Family
	rankInfoF, rankMissingF, rankAsyncF, rankAbortF, rankInitF, collF *exposition.Family
}

func newNCCLRASCollector(env Env, o *Options) (Collector, error) {
	c, err := newNCCLRASState(env, o)
	if err != nil {
		return nil, err
	}
	c.poller.start(c.opts.Interval, c.pollOnce)
	return c, nil
}

func newNCCLRASState(env Env, o *Options) (*ncclRASCollector, error) {
	no := o.NCCLRAS
	var addrs []string
	seen := map[string]bool{}
	for _, a := range no.Addresses {
		for _, s := range strings.Split(a, ",") {
			s = strings.TrimSpace(s)
			if s == "" || seen[s] {
				continue
			}
			if _, _, err := net.SplitHostPort(s); err != nil {
				return nil, fmt.Errorf("--collector.nccl-ras.address %q: %v", s, err)
			}
			seen[s] = true
			addrs = append(addrs, s)
		}
	}
	if len(addrs) == 0 {
		addrs = []string{ncclras.DefaultAddr}
	}
	no.Addresses = addrs
	if no.Interval == 0 {
		no.Interval = 15 * time.Second
	}
	if no.Timeout == 0 {
		no.Timeout = 5 * time.Second
	}
	if no.MaxCommunicators == 0 {
		no.MaxCommunicators = 64
	}
	if no.MaxRanks == 0 {
		no.MaxRanks = 512
	}
	if no.Interval < time.Second || no.Timeout < 100*time.Millisecond || no.MaxCommunicators < 1 || no.MaxRanks < 1 {
		return nil, fmt.Errorf("--collector.nccl-ras.*: interval at least 1s, timeout at least 100ms, maxima at least 1")
	}
	g, ctr := prometheus.GaugeValue, prometheus.CounterValue
	rl := []string{"comm", "rank", "host", "pid"}
	f := env.Families
	c := &ncclRASCollector{
		env: env, opts: no, query: ncclras.Query, local: localAddresses, first: make(chan struct{}),
		upF:   f.NewFamily("fabric_nccl_ras_up", "1 if the last query of NCCL's RAS service at this address succeeded, 0 if it answered but failed (protocol, timeout, garbage). Absent while nothing listens.", g, "address"),
		durF:  f.NewFamily("fabric_nccl_ras_query_duration_seconds", "Duration of the last RAS query (dial to the end of the answer).", g, "address"),
		infoF: f.NewFamily("fabric_nccl_ras_info", "The RAS service that answered: NCCL version of the answering process and the answer's format (json from NCCL 2.28.7, text before).", g, "address", "version", "format"),
		commsF: f.NewFamily("fabric_nccl_ras_communicators", "Communicators in the last answer (JSON: all; text: those RAS names in an error or warning), before --collector.nccl-ras.max-communicators.",
			g, "address"),
		commRanksF:    f.NewFamily("fabric_nccl_ras_communicator_ranks", "Ranks of a communicator (its size), as RAS reports it. comm is the communicator's hash (0x…, as the NCCL Inspector prints it).", g, "comm"),
		commNodesF:    f.NewFamily("fabric_nccl_ras_communicator_nodes", "Nodes of a communicator: distinct RAS addresses of its ranks, missing ones included.", g, "comm"),
		commMissingF:  f.NewFamily("fabric_nccl_ras_communicator_missing_ranks", "Ranks of a communicator RAS has no data from (dead, hung or unreachable processes).", g, "comm"),
		commMismatchF: f.NewFamily("fabric_nccl_ras_communicator_mismatch", "1 if the ranks of a communicator disagree on their collective counts or status (RAS's MISMATCH; brief during traffic, lasting in a hang).", g, "comm"),
		rankInfoF:     f.NewFamily("fabric_nccl_ras_rank_info", "A rank of this host in a communicator: pid is its process's pid as RAS reports it (the process's own PID namespace), host its RAS address, cuda_dev its CUDA device.", g, "comm", "rank", "host", "pid", "cuda_dev"),
		rankMissingF:  f.NewFamily("fabric_nccl_ras_rank_missing", "1 for each rank RAS reports missing: its process did not answer or is considered dead. host and pid are empty when RAS cannot name them.", g, rl...),
		rankAsyncF:    f.NewFamily("fabric_nccl_ras_rank_async_error", "The rank's asynchronous error (ncclCommGetAsyncError, a ncclResult_t): 0 none, 6 remote process error, 1-5 CUDA, system, internal, argument, usage errors, -1 an error text NCCL prints without a code.", g, rl...),
		rankAbortF:    f.NewFamily("fabric_nccl_ras_rank_aborted", "1 if the rank's communicator was aborted (abort flag set), 0 if not.", g, rl...),
		rankInitF:     f.NewFamily("fabric_nccl_ras_rank_init_state", "The rank's communicator initialization result (a ncclResult_t): 0 success, 7 in progress, other values an initialization error.", g, rl...),
		collF:         f.NewFamily("fabric_nccl_ras_rank_collectives_total", "Collective operations the rank has launched, by operation (NCCL's count since the communicator's creation; JSON answers only).", ctr, append(rl, "op")...),
	}
	return c, nil
}

// localAddresses returns the IP addresses of this host's interfaces.
func localAddresses() map[string]bool {
	out := map[string]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			out[n.IP.String()] = true
		}
	}
	return out
}

// addresses returns the addresses to query: the flag's, then the
// processes' that are local (see the top of this file).
func (c *ncclRASCollector) addresses(local map[string]bool) []string {
	addrs := c.opts.Addresses
	if c.env.Processes == nil {
		return addrs
	}
	extra := c.env.Processes.RASAddresses()
	if len(extra) == 0 {
		return addrs
	}
	addrs = slices.Clone(addrs)
	n := 0
	for _, a := range extra {
		if slices.Contains(addrs, a) {
			continue
		}
		if !localRASAddr(a, local) {
			c.env.Once.Debug("nccl-ras-remote", "msg", "not querying a process's NCCL_RAS_ADDR that is not an address of this host", "address", a)
			continue
		}
		if n == maxProcessRASAddrs {
			c.env.Once.Warn("nccl-ras-max", "msg", "more distinct NCCL_RAS_ADDR in the processes' environments than the exporter queries; the rest are not queried", "max", maxProcessRASAddrs)
			return addrs
		}
		n++
		addrs = append(addrs, a)
	}
	c.env.Once.Clear("nccl-ras-max")
	return addrs
}

// localRASAddr reports whether an address of ncclras.ParseAddr's form is
// this host's: localhost, a loopback address or one of local.
func localRASAddr(a string, local map[string]bool) bool {
	ip, ok := ncclras.AddrIP(a)
	if !ok {
		return strings.HasPrefix(a, "localhost:")
	}
	return ip.IsLoopback() || local[ip.String()]
}

// pollOnce queries every address.
func (c *ncclRASCollector) pollOnce(ctx context.Context) {
	local := c.local()
	addrs := c.addresses(local)
	answers := make([]rasAnswer, 0, len(addrs))
	for _, a := range addrs {
		start := time.Now()
		st, err := c.query(ctx, a, ncclras.Options{Timeout: c.opts.Timeout})
		answers = append(answers, rasAnswer{addr: a, status: st, err: err, duration: time.Since(start).Seconds()})
		if err != nil && !ncclras.Refused(err) {
			c.env.Once.Debug("nccl-ras:"+a, "msg", "NCCL RAS query failed", "address", a, "err", err)
		}
	}
	c.mu.Lock()
	c.answers, c.addrs, c.localIP = answers, addrs, local
	c.mu.Unlock()
	select {
	case <-c.first:
	default:
		close(c.first)
	}
}

// Update copies the last answers into the batch. Only the first scrape
// waits, for the first query (bounded by the scrape's deadline).
func (c *ncclRASCollector) Update(ctx context.Context, b *exposition.Batch) error {
	select {
	case <-c.first:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var failed []string
	listening := 0
	comms := map[string]bool{}
	ranks, missing := 0, 0
	for _, a := range c.answers {
		if a.err != nil && ncclras.Refused(a.err) {
			continue
		}
		listening++
		b.AddWith(c.durF, a.duration, a.addr)
		if a.err != nil {
			b.AddWith(c.upF, 0, a.addr)
			failed = append(failed, a.err.Error())
			continue
		}
		b.AddWith(c.upF, 1, a.addr)
		b.AddWith(c.infoF, 1, a.addr, a.status.Version, a.status.Format)
		b.AddWith(c.commsF, float64(len(a.status.Communicators)), a.addr)
		c.addComms(b, a.status, comms, &ranks, &missing)
	}
	switch {
	case len(failed) > 0:
		return errors.New("nccl-ras: " + strings.Join(failed, "; "))
	case listening == 0:
		return noHardware("nothing listens on %s (no NCCL process with RAS on this host)", strings.Join(c.addrs, ","))
	}
	return nil
}

// addComms adds one answer's communicators not yet added (an answer of a
// second address for the same job adds nothing), at most
// max-communicators, those RAS flags first.
func (c *ncclRASCollector) addComms(b *exposition.Batch, st *ncclras.Status, done map[string]bool, ranks, missing *int) {
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
		if done[cm.Hash] {
			continue
		}
		if len(done) >= c.opts.MaxCommunicators {
			return
		}
		done[cm.Hash] = true
		if cm.Size > 0 {
			b.AddWith(c.commRanksF, float64(cm.Size), cm.Hash)
		}
		if cm.Nodes > 0 {
			b.AddWith(c.commNodesF, float64(cm.Nodes), cm.Hash)
		}
		b.AddWith(c.commMissingF, float64(cm.MissingCount), cm.Hash)
		b.AddWith(c.commMismatchF, b2f(cm.Mismatch), cm.Hash)
		for _, m := range cm.Missing {
			if *missing >= c.opts.MaxRanks {
				break
			}
			*missing++
			b.AddWith(c.rankMissingF, 1, cm.Hash, strconv.Itoa(m.Rank), rasHost(m.Host), rasPID(m.PID))
		}
		for i := range cm.Ranks {
			r := &cm.Ranks[i]
			if !c.localIP[r.Host] {
				continue
			}
			if *ranks >= c.opts.MaxRanks {
				break
			}
			*ranks++
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
			}
			for _, oc := range r.Collectives {
				b.AddWith(c.collF, float64(oc.Count), append(l, oc.Op)...)
			}
		}
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
