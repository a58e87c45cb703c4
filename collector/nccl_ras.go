package collector

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/ncclras"
	"github.com/fabric-exporter/fabric_exporter/internal/netnsdial"
)

// The nccl-ras collector asks NCCL's RAS service (every NCCL ≥ 2.24
// process runs it; the processes of one network namespace share
// NCCL_RAS_ADDR, localhost:28028 by default) for the state of the job's
// communicators: JSON where NCCL offers it (2.28.7+), text before.
// Protocol, formats, versions and what each state means in NCCL's source:
// internal/ncclras. It works without NCCL_DEBUG logs.
//
// Queries run in a goroutine every interval (one per RAS service, at once),
// each bounded by the timeout and a 4 MiB answer; Update copies the last
// answers. One query answers for the whole job (the RAS network spans it),
// so:
//
//   - communicator series (size, nodes, missing and NOCOMM ranks, RAS's
//     mismatch judgement) are reported by every host's exporter;
//   - rank series (info, state, errors, collective counts, and the host
//     process each rank is joined to) only for the ranks of this node —
//     whose RAS address is one of the exporter's interfaces or of the
//     network namespaces its serving processes live in — at most max-ranks;
//   - missing ranks wherever they run (a dead host has no exporter to
//     report its own); the host process a rank was joined to is
//     remembered, so that a dead rank is still named by its node's
//     exporter (nccl_ras_ranks.go).
//
// Services (RASTarget): the flag's addresses in the exporter's own network
// namespace, always; and those of the serving processes
// (Env.Processes.RASTargets, process_ras.go), at most
// maxProcessRASAddrs: their local NCCL_RAS_ADDR, a pod's wildcard listener
// at the pod's address, a pod's loopback listener from inside the pod's
// network namespace (--collector.nccl-ras.enter-netns: CAP_SYS_ADMIN). A
// remote address is never asked: that host's own exporter does.
//
// States: nothing listens anywhere → no_hardware (quiet); a service that
// answers but fails the protocol, times out or answers garbage → failed
// (the other services' series are kept).

// NCCLRASOptions configures the nccl-ras collector.
type NCCLRASOptions struct {
	Addresses []string // --collector.nccl-ras.address (repeatable, comma lists)
	// FixtureNetNS: flag addresses whose answers speak for the given
	// network namespace (fixtures only: a fixture's namespaces cannot be
	// entered; --collector.nccl-ras.fixture-netns ADDR=INODE, hidden).
	FixtureNetNS     []string
	Interval         time.Duration // --collector.nccl-ras.interval
	Timeout          time.Duration // --collector.nccl-ras.timeout
	RASTimeout       time.Duration // --collector.nccl-ras.ras-timeout (0: NCCL's own)
	MaxCommunicators int           // --collector.nccl-ras.max-communicators
	MaxRanks         int           // --collector.nccl-ras.max-ranks
	ScrapeWait       time.Duration // --collector.nccl-ras.scrape-wait: 0, no query at scrape time
	// EnterNetNS: ask a pod's loopback listener from inside the pod's
	// network namespace (--collector.nccl-ras.enter-netns, on by default).
	EnterNetNS bool
}

func ncclRASFlags(app *kingpin.Application, o *Options) {
	app.Flag("collector.nccl-ras.fixture-netns", "Fixtures only: ADDR=INODE makes the answers of the --collector.nccl-ras.address ADDR speak for the fixture network namespace INODE (a fixture's namespaces cannot be entered). Repeatable.").Hidden().StringsVar(&o.NCCLRAS.FixtureNetNS)
	app.Flag("collector.nccl-ras.address", "NCCL RAS client address (NCCL_RAS_ADDR of the NCCL processes) to query in the exporter's own network namespace; repeatable or a comma-separated list. The serving processes' own addresses are queried too (see --collector.nccl-ras.enter-netns).").Default(ncclras.DefaultAddr).StringsVar(&o.NCCLRAS.Addresses)
	app.Flag("collector.nccl-ras.interval", "How often RAS is queried (in the background; a scrape reports the last answer).").Default("15s").
		Action(atLeastDuration("collector.nccl-ras.interval", &o.NCCLRAS.Interval, time.Second)).DurationVar(&o.NCCLRAS.Interval)
	app.Flag("collector.nccl-ras.scrape-wait", "A scrape asks RAS again and waits up to this long for the answer (a query of a healthy job takes about a millisecond), so that what it reports is at most this old whatever the phase of the background poll; past it, the scrape reports the last answer. 0: only the background poll's answers.").Default("2s").
		DurationVar(&o.NCCLRAS.ScrapeWait)
	app.Flag("collector.nccl-ras.timeout", "Deadline of one RAS query, from dial to the end of the answer. A STATUS runs two RAS collectives, each up to RAS's leg timeout plus as much again when peers are slow (5 + 5 s by NCCL's defaults), so the default leaves room for both.").Default("30s").
		Action(atLeastDuration("collector.nccl-ras.timeout", &o.NCCLRAS.Timeout, 100*time.Millisecond)).DurationVar(&o.NCCLRAS.Timeout)
	app.Flag("collector.nccl-ras.ras-timeout", "RAS's own collective leg timeout, sent with TIMEOUT (whole seconds). 0: none sent, RAS keeps NCCL's default (5 s times NCCL_RAS_TIMEOUT_FACTOR), as NCCL's ncclras client does.").Default("0s").
		DurationVar(&o.NCCLRAS.RASTimeout)
	app.Flag("collector.nccl-ras.enter-netns", "Ask the RAS service of a serving process in another network namespace (a pod without hostNetwork) from inside that namespace, at an address of that namespace where the process itself listens (NCCL's default localhost:28028, a wildcard, or the pod's own address): the connection is made on a locked thread that enters /proc/PID/ns/net (needs CAP_SYS_ADMIN and ptrace read access). A pod's RAS is never dialled from the exporter's namespace (docs/hardening.md, \"Tenants\"). Without it, or without the privilege, such a service is not asked (fabric_nccl_ras_targets{reach=\"unreachable\"}).").
		Default("true").BoolVar(&o.NCCLRAS.EnterNetNS)
	app.Flag("collector.nccl-ras.max-communicators", "Most communicators reported (those RAS flags first, then by hash).").Default("64").
		Action(atLeastInt("collector.nccl-ras.max-communicators", &o.NCCLRAS.MaxCommunicators, 1)).IntVar(&o.NCCLRAS.MaxCommunicators)
	app.Flag("collector.nccl-ras.max-ranks", "Most ranks of this host reported with rank series, and most missing ranks, over all communicators.").Default("512").
		Action(atLeastInt("collector.nccl-ras.max-ranks", &o.NCCLRAS.MaxRanks, 1)).IntVar(&o.NCCLRAS.MaxRanks)
}

// maxProcessRASAddrs bounds the services taken from the processes, on top
// of the flag's.
const maxProcessRASAddrs = 16

// Reach of a RAS service (fabric_nccl_ras_targets{reach}).
const (
	reachOwn         = "own"         // the exporter's network namespace
	reachPodAddress  = "pod_address" // another namespace, dialled at its address
	reachEnter       = "enter"       // another namespace, from inside it
	reachUnreachable = "unreachable" // another namespace's loopback, entering off or denied
)

// rasAnswer is the last query of one service.
type rasAnswer struct {
	t        RASTarget
	status   *ncclras.Status
	err      error
	duration float64
}

type ncclRASCollector struct {
	env   Env
	opts  NCCLRASOptions
	query func(ctx context.Context, addr string, o ncclras.Options) (*ncclras.Status, error)
	local func() map[string]bool // this host's interface addresses
	now   func() time.Time

	poller
	mu       sync.Mutex
	answers  []rasAnswer
	addrs    []string        // the addresses of the last poll
	reach    map[string]int  // services of the last poll by reach
	localIP  map[string]bool // this node's addresses at the last poll
	joins    map[rankKey]*rankJoin
	polledAt time.Time      // the last poll
	unjoin   []rankUnjoined // ranks of this node the last poll could not join
	first    chan struct{}  // closed after the first poll

	upF, durF, infoF, commsF, targetsF                               *exposition.Family
	ageF                                                             *exposition.Series
	commRanksF, commNodesF, commMissingF, commNoCommF, commMismatchF *exposition.Family
	rankInfoF, rankMissingF, rankNoCommF, rankAsyncF, rankAbortF     *exposition.Family
	rankInitF, rankStateF, collF, rankProcF, rankUnjoinedF, rankFDsF *exposition.Family
	rankUnrespF, rankDeadF                                           *exposition.Family

	// pollStart is when the last finished poll began; polled is closed
	// and replaced when a poll finishes (Update's fresh answer).
	pollStart time.Time
	polled    chan struct{}
	// nudgedAt: when a poll last joined new ranks and asked the process
	// table to re-read their evidence (a scrape waits for that re-read).
	nudgedAt time.Time
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
		no.Timeout = 30 * time.Second
	}
	if no.MaxCommunicators == 0 {
		no.MaxCommunicators = 64
	}
	if no.MaxRanks == 0 {
		no.MaxRanks = 512
	}
	if no.Interval < time.Second || no.Timeout < 100*time.Millisecond || no.MaxCommunicators < 1 || no.MaxRanks < 1 || no.RASTimeout < 0 {
		return nil, fmt.Errorf("--collector.nccl-ras.*: interval at least 1s, timeout at least 100ms, ras-timeout not negative, maxima at least 1")
	}
	g, ctr := prometheus.GaugeValue, prometheus.CounterValue
	rl := []string{"comm", "rank", "host", "pid"}
	al := []string{"address", "netns"}
	f := env.Families
	c := &ncclRASCollector{
		env: env, opts: no, query: ncclras.Query, local: localAddresses, now: time.Now,
		first: make(chan struct{}), joins: map[rankKey]*rankJoin{},
		upF:           f.NewFamily("fabric_nccl_ras_up", "1 if the last query of NCCL's RAS service at this address succeeded, 0 if it answered but failed (protocol, timeout, garbage). netns is the network namespace it listens in when not the exporter's (the inode of /proc/PID/ns/net of its processes), else empty. Absent while nothing listens.", g, al...),
		durF:          f.NewFamily("fabric_nccl_ras_query_duration_seconds", "Duration of the last RAS query (dial to the end of the answer).", g, al...),
		infoF:         f.NewFamily("fabric_nccl_ras_info", "The RAS service that answered: NCCL version of the answering process and the answer's format (json from NCCL 2.28.7, text before).", g, append(al, "version", "format")...),
		commsF:        f.NewFamily("fabric_nccl_ras_communicators", "Communicators in the last answer (JSON: all; text: those RAS names in an error or warning), before --collector.nccl-ras.max-communicators.", g, al...),
		ageF:          f.NewFamily("fabric_nccl_ras_answer_age_seconds", "Age of the RAS answers this scrape reports: since the last finished poll began. A scrape asks again and waits up to --collector.nccl-ras.scrape-wait; a poll that waits on a service that does not answer (a stopped or wedged process holding the RAS port) leaves older answers, up to --collector.nccl-ras.timeout: read the rank series with this age in mind. Absent before the first poll.", g).With(),
		targetsF:      f.NewFamily("fabric_nccl_ras_targets", "RAS services asked in the last poll by how they are reached: own (the exporter's network namespace), pod_address (no longer used: a pod is asked only from inside its namespace), enter (another namespace, from inside it), unreachable (another namespace with --no-collector.nccl-ras.enter-netns or without CAP_SYS_ADMIN: not asked).", g, "reach"),
		commRanksF:    f.NewFamily("fabric_nccl_ras_communicator_ranks", "Ranks of a communicator (its size), as RAS reports it. comm is the communicator's hash (0x…, as the NCCL Inspector prints it).", g, "comm"),
		commNodesF:    f.NewFamily("fabric_nccl_ras_communicator_nodes", "Nodes of a communicator: distinct RAS addresses of its ranks, missing ones included.", g, "comm"),
		commMissingF:  f.NewFamily("fabric_nccl_ras_communicator_missing_ranks", "Ranks of a communicator RAS has no data from because their process did not answer or RAS considers it dead (RAS's INCOMPLETE). Ranks whose process answered without the communicator are fabric_nccl_ras_communicator_nocomm_ranks.", g, "comm"),
		commNoCommF:   f.NewFamily("fabric_nccl_ras_communicator_nocomm_ranks", "Ranks of a communicator whose process answered RAS but without the communicator (RAS's NOCOMM status: not created there yet, or already destroyed or aborted there). JSON answers count them all; text answers name only outliers.", g, "comm"),
		commMismatchF: f.NewFamily("fabric_nccl_ras_communicator_mismatch", "1 if the ranks of a communicator disagree on their collective counts or status, NOCOMM included (RAS's MISMATCH; brief during traffic, lasting in a hang).", g, "comm"),
		rankInfoF:     f.NewFamily("fabric_nccl_ras_rank_info", "A rank of this node in a communicator: pid is its process's pid as RAS reports it (getpid() in the process's own PID namespace: 1, say, in a container; fabric_nccl_ras_rank_process_info gives the host's), host its RAS address, cuda_dev its CUDA device.", g, "comm", "rank", "host", "pid", "cuda_dev"),
		rankMissingF:  f.NewFamily("fabric_nccl_ras_rank_missing", "1 for each rank RAS reports missing by its own judgement: its process did not answer or RAS considers it dead. host and pid are empty when RAS cannot name them. A rank whose process answered without the communicator is fabric_nccl_ras_rank_nocomm instead.", g, rl...),
		rankUnrespF:   f.NewFamily("fabric_nccl_ras_rank_unresponsive", "1 for a missing rank whose process did not answer this query (RAS's own judgement within one query: a stopped, wedged or overloaded process, or one that died less than RAS's dead timeout ago), 0 for a missing rank that RAS has no status for or that answered late. Present with fabric_nccl_ras_rank_missing (JSON answers; text answers name the unresponsive ranks of an INCOMPLETE entry from 2.26).", g, rl...),
		rankDeadF:     f.NewFamily("fabric_nccl_ras_rank_dead", "1 for a missing rank RAS considers dead (unreachable over RAS's network for NCCL_RAS_TIMEOUT_FACTOR×60 s, or its peers saw its connections close), 0 while it is only unresponsive.", g, rl...),
		rankNoCommF:   f.NewFamily("fabric_nccl_ras_rank_nocomm", "1 for each rank whose process answered RAS without this communicator (NOCOMM: not yet created there, or destroyed or aborted there while others keep it).", g, rl...),
		rankAsyncF:    f.NewFamily("fabric_nccl_ras_rank_async_error", "The rank's asynchronous error (ncclCommGetAsyncError, a ncclResult_t): 0 none, 7 in progress (a non-blocking communicator during init or a group call: not an error, as NCCL's RAS judges it), 6 remote process error, 1-5 CUDA, system, internal, argument, usage errors, -1 an error text NCCL prints without a code.", g, rl...),
		rankAbortF:    f.NewFamily("fabric_nccl_ras_rank_aborted", "1 if the rank's communicator was aborted (abort flag set), 0 if not.", g, rl...),
		rankInitF:     f.NewFamily("fabric_nccl_ras_rank_init_state", "The rank's communicator initialization result (a ncclResult_t): 0 success, 7 in progress, other values an initialization error.", g, rl...),
		rankStateF:    f.NewFamily("fabric_nccl_ras_rank_state_info", "The rank's status as NCCL's RAS names it: abort (abort flag), finalize (ncclCommFinalize or ncclCommDestroy called: shutting down), running (initialized), init (initializing). JSON answers only.", g, append(rl, "state")...),
		collF:         f.NewFamily("fabric_nccl_ras_rank_collectives_total", "Collective operations the rank has launched, by operation (NCCL's count since the communicator's creation; JSON answers only).", ctr, append(rl, "op")...),
		rankProcF:     f.NewFamily("fabric_nccl_ras_rank_process_info", "The process of --path.procfs a rank of this node is: host_pid is its pid there (the pid of every fabric_process_* series), joined_by pid (it lives in the procfs's PID namespace: RAS's pid is that pid) or nspid (a container: RAS's pid is the innermost of its NSpid, and its network namespace has the rank's RAS address); container_id and pod_uid its container and pod as fabric_process_container_info had them at the join (empty outside one). Kept for a rank RAS then reports missing, while RAS lists it and 10 minutes after (also when this node's RAS went with the rank), so that a dead rank is named.", g, append(rl, "host_pid", "joined_by", "container_id", "pod_uid")...),
		rankUnjoinedF: f.NewFamily("fabric_nccl_ras_rank_unjoined", "1 for a rank of this node that no serving process could be joined to, and why: no_process (no selected process knows itself by that pid in a network namespace with that address: check --collector.process.cmdline), ambiguous (more than one: containers sharing the node's network with the same own pid), addresses_unread (a candidate's network namespace could not be read), unknown_host. The verdicts that need the process (the no-log transport judgement) stay unknown.", g, append(rl, "reason")...),
		rankFDsF:      f.NewFamily("fabric_nccl_ras_rank_verbs_fds", "Open verbs file descriptors (/dev/infiniband/uverbsN) of the host process of a rank of this node, read after this exporter first saw the rank in the communicator (NCCL opens its RDMA devices before RAS knows the communicator, so an older count says nothing). 0: the rank holds no RDMA device and sends its inter-node traffic over sockets. Absent while no such read exists or /proc/PID/fd is unreadable.", g, append(rl, "host_pid")...),
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

// targets returns the services to ask: the flag's, then the processes'
// (see the top of this file), and counts them by reach.
func (c *ncclRASCollector) targets(local map[string]bool, reach map[string]int) []RASTarget {
	var out []RASTarget
	for _, a := range c.opts.Addresses {
		t := RASTarget{Addr: a}
		for _, f := range c.opts.FixtureNetNS {
			if i := strings.LastIndexByte(f, '='); i > 0 && f[:i] == a {
				t.NetNS, _ = strconv.ParseUint(f[i+1:], 10, 64)
			}
		}
		out = append(out, t)
		reach[reachOwn]++
	}
	if c.env.Processes == nil {
		return out
	}
	n := 0
	for _, t := range c.env.Processes.RASTargets() {
		if slices.ContainsFunc(out, func(o RASTarget) bool { return o.Addr == t.Addr && o.NetNS == t.NetNS }) {
			continue
		}
		if t.NetNS == 0 && !localRASAddr(t.Addr, local) {
			c.env.Once.Debug("nccl-ras-remote", "msg", "not querying a process's NCCL_RAS_ADDR that is not an address of this host", "address", t.Addr)
			continue
		}
		if t.Shared {
			c.env.Once.Warn("nccl-ras-shared:"+t.Addr, "msg", "listening sockets of several containers share this RAS address and port (NCCL binds it with SO_REUSEPORT): each query reaches one of them at random, so their communicators come and go between scrapes; give each job its own port (NCCL_RAS_ADDR=localhost:PORT)", "address", t.Addr)
		}
		if t.Enter > 0 && !c.opts.EnterNetNS {
			reach[reachUnreachable]++
			continue
		}
		if n == maxProcessRASAddrs {
			c.env.Once.Warn("nccl-ras-max", "msg", "more distinct RAS services among the serving processes than the exporter queries; the rest are not queried", "max", maxProcessRASAddrs)
			return out
		}
		n++
		out = append(out, t)
		switch {
		case t.Enter > 0:
			reach[reachEnter]++
		case t.NetNS != 0:
			reach[reachPodAddress]++
		default:
			reach[reachOwn]++
		}
	}
	c.env.Once.Clear("nccl-ras-max")
	return out
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

// ask queries one service; a service of another namespace's loopback is
// dialled from inside that namespace.
func (c *ncclRASCollector) ask(ctx context.Context, t RASTarget) rasAnswer {
	o := ncclras.Options{Timeout: c.opts.Timeout, RASTimeout: c.opts.RASTimeout}
	if t.Enter > 0 {
		ns := c.procfs() + "/" + strconv.Itoa(t.Enter) + "/ns/net"
		o.Dial = func(ctx context.Context, _, addr string) (net.Conn, error) { return netnsdial.Dial(ctx, ns, addr) }
	}
	start := time.Now()
	st, err := c.query(ctx, t.Addr, o)
	return rasAnswer{t: t, status: st, err: err, duration: time.Since(start).Seconds()}
}

// procfs is the process table's procfs (/proc without one).
func (c *ncclRASCollector) procfs() string {
	if c.env.Processes != nil {
		if s := c.env.Processes.Table(); s != nil && s.Procfs != "" {
			return s.Procfs
		}
	}
	return "/proc"
}

// pollOnce queries every service at once, then joins this node's ranks to
// their processes.
func (c *ncclRASCollector) pollOnce(ctx context.Context) {
	start := c.now()
	local := c.local()
	if c.env.Processes != nil {
		if s := c.env.Processes.Table(); s != nil {
			for _, a := range s.NodeAddresses() {
				local[a.String()] = true
			}
		}
	}
	reach := map[string]int{}
	targets := c.targets(local, reach)
	answers := make([]rasAnswer, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() { answers[i] = c.ask(ctx, t) })
	}
	wg.Wait()
	addrs := make([]string, 0, len(targets))
	for i, a := range answers {
		t := targets[i]
		if t.NetNS != 0 {
			addrs = append(addrs, t.Addr+" (netns "+strconv.FormatUint(t.NetNS, 10)+")")
		} else {
			addrs = append(addrs, t.Addr)
		}
		if a.err != nil && a.t.Enter > 0 && gone(a.err) {
			continue // the process (or a fixture's namespace) is gone
		}
		if a.err != nil && denied(a.err) {
			reach[reachEnter]--
			reach[reachUnreachable]++
			c.env.Once.Warn("nccl-ras-enter", "msg", "cannot enter a serving process's network namespace to ask its RAS service (a pod's RAS is asked only from inside its own namespace); run the exporter with CAP_SYS_ADMIN, or the pod with hostNetwork", "err", a.err)
			continue
		}
		if a.err != nil && !ncclras.Refused(a.err) {
			c.env.Once.Debug("nccl-ras:"+a.t.Addr, "msg", "NCCL RAS query failed", "address", a.t.Addr, "netns", a.t.NetNS, "err", a.err)
		}
	}
	c.mu.Lock()
	c.answers, c.addrs, c.localIP, c.reach = answers, addrs, local, reach
	c.updateJoins(c.now())
	c.pollStart = start
	if c.polled != nil {
		close(c.polled)
	}
	c.polled = make(chan struct{})
	c.mu.Unlock()
	select {
	case <-c.first:
	default:
		close(c.first)
	}
}

// gone reports a namespace that is no longer there: its process exited
// between the refresh and the dial.
func gone(err error) bool {
	var e *netnsdial.EnterError
	return errors.As(err, &e) && (errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ESRCH))
}

// denied reports a refused setns or namespace open: no privilege, not a
// failure of RAS. An EPERM of connect(2) made inside the namespace (a
// netfilter rule that drops it) is a failed query, not this.
func denied(err error) bool {
	var e *netnsdial.EnterError
	return errors.As(err, &e) && (errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES))
}

// Update copies the last answers into the batch. The first scrape waits
// for the first query (bounded by the scrape's deadline); later ones ask
// again and wait up to ScrapeWait for a poll that began after them.
func (c *ncclRASCollector) Update(ctx context.Context, b *exposition.Batch) error {
	select {
	case <-c.first:
	case <-ctx.Done():
		return ctx.Err()
	}
	if c.opts.ScrapeWait > 0 && c.started() {
		c.fresh(ctx)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var failed []string
	listening := 0
	e := rasExport{c: c, b: b, comms: map[string]bool{}, owner: c.rasOwners()}
	if c.env.Processes != nil {
		e.table = c.env.Processes.Table()
	}
	for ai, a := range c.answers {
		if a.err != nil && (ncclras.Refused(a.err) || denied(a.err) || a.t.Enter > 0 && gone(a.err)) {
			continue
		}
		listening++
		ns := ""
		if a.t.NetNS != 0 {
			ns = strconv.FormatUint(a.t.NetNS, 10)
		}
		b.AddWith(c.durF, a.duration, a.t.Addr, ns)
		if a.err != nil {
			b.AddWith(c.upF, 0, a.t.Addr, ns)
			failed = append(failed, a.err.Error())
			continue
		}
		b.AddWith(c.upF, 1, a.t.Addr, ns)
		b.AddWith(c.infoF, 1, a.t.Addr, ns, a.status.Version, a.status.Format)
		b.AddWith(c.commsF, float64(len(a.status.Communicators)), a.t.Addr, ns)
		e.answer(ai, a.status, a.t.NetNS)
	}
	e.processes()
	if listening > 0 && !c.pollStart.IsZero() {
		b.Add(c.ageF, max(c.now().Sub(c.pollStart).Seconds(), 0))
	}
	if listening > 0 || c.reach[reachOwn] < len(c.answers)+c.reach[reachUnreachable] {
		// Services were asked, or serving processes have some: how many
		// and how reached (nothing at all on a host without NCCL).
		for _, r := range [...]string{reachOwn, reachPodAddress, reachEnter, reachUnreachable} {
			if n := c.reach[r]; n > 0 {
				b.AddWith(c.targetsF, float64(n), r)
			}
		}
	}
	switch {
	case len(failed) > 0:
		return errors.New("nccl-ras: " + strings.Join(failed, "; "))
	case listening == 0:
		return noHardware("nothing listens on %s (no NCCL process with RAS on this host)", strings.Join(c.addrs, ","))
	}
	return nil
}
