package collector

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/nccl"
	"github.com/fabric-exporter/fabric_exporter/internal/proc"
)

// The nccl collector reads NCCL's INFO logs (NCCL_DEBUG=INFO, usually one
// file per process with NCCL_DEBUG_FILE=/var/log/nccl/%h.%p.log) and
// reports, per NCCL process (host, pid), the network NCCL chose, the
// transports of its channel connections with GPU Direct RDMA, the RDMA
// devices and socket interfaces it uses, its version and its warnings.
// NCCL does not fail when RDMA is unavailable: it falls back to TCP sockets
// and the job runs many times slower; these lines are the direct evidence.
//
// A background goroutine follows the files and parses the lines into
// per-process state (internal/nccl: Follower and Tracker); Update only
// turns that state into series, so a scrape never waits for a backlog.

// NCCLOptions configures the nccl collector. Zero PollInterval and
// MaxProcesses (Options built in code) mean the flags' defaults.
type NCCLOptions struct {
	LogPaths     []string      // --collector.nccl.log-path (globs)
	PollInterval time.Duration // --collector.nccl.poll-interval
	MaxProcesses int           // --collector.nccl.max-processes
	Retention    time.Duration // --collector.nccl.retention (0: never by age)
	ExitedGrace  time.Duration // --collector.nccl.exited-grace (0: at once)
	Hostname     string        // --collector.nccl.hostname ("" = os.Hostname)
}

func ncclFlags(app *kingpin.Application, o *Options) {
	app.Flag("collector.nccl.log-path", "Glob of NCCL log files (NCCL_DEBUG=INFO output, e.g. NCCL_DEBUG_FILE=/var/log/nccl/%h.%p.log); repeatable. Files are read from their start and followed. Without it the collector reports no data.").PlaceHolder("GLOB").StringsVar(&o.NCCL.LogPaths)
	app.Flag("collector.nccl.poll-interval", "How often the NCCL log files are checked for new lines.").Default("1s").
		Action(atLeastDuration("collector.nccl.poll-interval", &o.NCCL.PollInterval, ncclMinPollInterval)).DurationVar(&o.NCCL.PollInterval)
	app.Flag("collector.nccl.max-processes", "Most NCCL processes (host, pid) tracked; beyond it the one whose log was written longest ago is dropped.").Default("256").
		Action(atLeastInt("collector.nccl.max-processes", &o.NCCL.MaxProcesses, 1)).IntVar(&o.NCCL.MaxProcesses)
	app.Flag("collector.nccl.retention", "Forget an NCCL process whose log got no line for this long, unless it runs on this host and its PID is alive. 0 keeps processes until max-processes pushes them out.").Default("24h").DurationVar(&o.NCCL.Retention)
	app.Flag("collector.nccl.exited-grace", "Drop an NCCL process of this host this long after its PID is found gone from --path.procfs (exited, a zombie, or reused by a newer process); 0 drops it at once. Processes of other host names are left to the retention.").Default("30s").
		Action(atLeastDuration("collector.nccl.exited-grace", &o.NCCL.ExitedGrace, 0)).DurationVar(&o.NCCL.ExitedGrace)
	app.Flag("collector.nccl.hostname", "The host name NCCL writes for processes of this machine (default: the exporter's host name); their PIDs are checked under --path.procfs.").PlaceHolder("NAME").StringVar(&o.NCCL.Hostname)
}

const ncclMinPollInterval = 10 * time.Millisecond

type ncclCollector struct {
	opts NCCLOptions

	// follower goroutine
	tracker  *nccl.Tracker
	follower *nccl.Follower
	poller

	mu      sync.Mutex // guards what the last poll saw
	files   float64
	polled  bool // the files were listed at least once
	noDir   bool // no file matched and no directory of a glob exists
	backlog float64

	// the series of each process, rebuilt when its Gen changes (Update
	// only, under the Tracker's lock)
	series map[*nccl.Process]*ncclSeries
	scrape uint64

	netInfo, conns, devInfo, ifInfo, info, warnings, lastLog, envInfo, gdrOff *exposition.Family
	initFail, commRanks, commNodes, causeFam                                  *exposition.Family
	peerInfo, netGDR, gdrPath, dmaBuf, gdrOn, p2pOff                          *exposition.Family
	failoverF                                                                 ncclFailoverFamilies

	causes                                                          ncclCauses // the fallback cause (nccl_cause.go)
	linesS, unparsedS, trackedS, bytesS, evictedS, filesS, backlogS *exposition.Series
}

// ncclSeries are the series of one process as of its generation gen.
type ncclSeries struct {
	gen, scrape                      uint64
	net, info, warn, last, initFail  *exposition.Series
	ranks, nodes                     *exposition.Series
	cause                            causeCache // the fallback cause of causeS (nccl_cause.go)
	causeS                           *exposition.Series
	conns, devices, ifaces, env, gdr []*exposition.Series
	peers, netUses, gdrPaths, dmaBuf []*exposition.Series
	failover                         ncclFailoverSeries // nccl_failover.go
}

func newNCCLCollector(env Env, o *Options) (Collector, error) {
	c, err := newNCCLState(env, o)
	if err != nil {
		return nil, err
	}
	if len(c.opts.LogPaths) > 0 {
		c.poller.start(c.opts.PollInterval, c.pollOnce)
	}
	return c, nil
}

// newNCCLState builds the collector without starting its follower.
func newNCCLState(env Env, o *Options) (*ncclCollector, error) {
	no := o.NCCL
	for _, g := range no.LogPaths {
		if _, err := filepath.Match(g, ""); err != nil {
			return nil, fmt.Errorf("--collector.nccl.log-path %q: %w", g, err)
		}
	}
	if no.PollInterval == 0 {
		no.PollInterval = time.Second
	}
	if no.PollInterval < ncclMinPollInterval {
		return nil, fmt.Errorf("--collector.nccl.poll-interval %s: must be at least %s", no.PollInterval, ncclMinPollInterval)
	}
	if no.MaxProcesses == 0 {
		no.MaxProcesses = 256
	}
	if no.MaxProcesses < 1 {
		return nil, fmt.Errorf("--collector.nccl.max-processes %d: must be at least 1", no.MaxProcesses)
	}
	if no.Retention < 0 {
		return nil, fmt.Errorf("--collector.nccl.retention %s: must not be negative", no.Retention)
	}
	if no.ExitedGrace < 0 {
		return nil, fmt.Errorf("--collector.nccl.exited-grace %s: must not be negative", no.ExitedGrace)
	}
	host := no.Hostname
	if host == "" {
		host, _ = os.Hostname()
	}
	procfs := o.ProcfsPath
	if procfs == "" {
		procfs = "/proc"
	}
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	c := &ncclCollector{
		opts:   no,
		series: map[*nccl.Process]*ncclSeries{},
		netInfo: env.Families.NewFamily("fabric_nccl_net_info",
			"The network NCCL chose, as NCCL names it (IB, Socket, IBext_v8, AWS Libfabric, …): from \"Using network X\" or \"Assigned NET plugin X to comm\", else the net of its channel connections, else a \"NET/X : Using [0]…\" device line, else Socket when the init lines prove IB was not taken (docs/nccl-classification.md).",
			gauge, "host", "pid", "net"),
		conns: env.Families.NewFamily("fabric_nccl_connections",
			"Channel connections the NCCL process logged, by transport as logged (NET/IB, NET/Socket, P2P/IPC, P2P/CUMEM, SHM, …; \"direct shared memory\" of NCCL < 2.7 is SHM) and gdr=\"true\" for NET connections with /GDRDMA.",
			gauge, "host", "pid", "transport", "gdr"),
		devInfo: env.Families.NewFamily("fabric_nccl_net_device_info",
			"An RDMA device port NCCL uses, from \"NET/IB : Using [0]mlx5_0:1/RoCE …\"; link is RoCE or IB.",
			gauge, "host", "pid", "device", "port", "link"),
		ifInfo: env.Families.NewFamily("fabric_nccl_socket_interface_info",
			"A network interface NCCL's socket transport uses, from \"NET/Socket : Using [0]eth0:…\".",
			gauge, "host", "pid", "interface"),
		info: env.Families.NewFamily("fabric_nccl_info",
			"The NCCL version of the process, from \"NCCL version 2.19.3+cuda12.3\" (cuda is the CUDA version it was built for).",
			gauge, "host", "pid", "version", "cuda"),
		warnings: env.Families.NewFamily("fabric_nccl_warnings_total",
			"NCCL WARN lines of the process.", counter, "host", "pid"),
		lastLog: env.Families.NewFamily("fabric_nccl_last_log_timestamp_seconds",
			"Modification time of the log file the process's latest line was read from (NCCL lines carry no time of their own).",
			gauge, "host", "pid"),
		envInfo: env.Families.NewFamily("fabric_nccl_env_info",
			"An NCCL environment variable the process reported as set (\"NCCL_SOCKET_IFNAME set by environment to eth0\").",
			gauge, "host", "pid", "name", "value"),
		gdrOff: env.Families.NewFamily("fabric_nccl_gdr_disabled_info",
			"GPU Direct RDMA disabled for a device (\"NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1' (no module)\"); reason is the text in parentheses (no module: nvidia-peermem is not loaded).",
			gauge, "host", "pid", "net", "device", "reason"),
		initFail: env.Families.NewFamily("fabric_nccl_init_failure_info",
			"NCCL init of the process found no usable network (\"Failed to initialize any NET plugin\", \"Error: network IB not found.\"); reason is that WARN message. Such a process has no fabric_nccl_net_info.",
			gauge, "host", "pid", "reason"),
		peerInfo: env.Families.NewFamily("fabric_nccl_peer_transport_info",
			"NCCL's transport between a GPU of the process and a peer GPU of the same host, from its channel lines (\"Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\"): P2P/IPC, P2P/CUMEM, P2P/direct pointer (the fast path) or SHM (through host memory). gpu and peer_gpu are the devices in brackets: the NVML index (the exporter's gpu label) from NCCL 2.18.3, the PCI address for the bus id of NCCL 2.5-2.18.1 (the logged version decides) (\"0[1a000]\"). At most 64 per process.",
			gauge, "host", "pid", "gpu", "peer_gpu", "transport"),
		netGDR: env.Families.NewFamily("fabric_nccl_net_gdr_info",
			"NET connections of a GPU of the process through one NET device, from \"… [send] via NET/IB/0/GDRDMA\" (the local GPU is the left device of [send], the right one of [receive]): device is the entry of that index in the latest \"NET/IB : Using [0]mlx5_0:1/RoCE …\" list (\"\" when none was logged), gdr=\"true\" with /GDRDMA (GPUDirect RDMA), \"false\" when the bytes are staged through host memory. gpu as in fabric_nccl_peer_transport_info. At most 64 per process.",
			gauge, "host", "pid", "gpu", "net", "index", "device", "gdr"),
		gdrPath: env.Families.NewFamily("fabric_nccl_gdr_path_info",
			"NCCL's own GPUDirect RDMA decision for a GPU and a NET device, from \"GPU Direct RDMA Enabled|Disabled for GPU … / HCA … (distance D <= M)\" (NCCL 2.4-2.29; 2.30 logs it at TRACE only): gdr=\"enabled\" or \"disabled\", distance NCCL's path type between them, max_distance the job's NCCL_NET_GDR_LEVEL as NCCL resolved it (numbers of that NCCL release), mode Default or PCI (2.26+, \"\" before). NCCL prints it only for a NET device that can do GDR (nvidia-peermem or DMA-BUF). gpu as in fabric_nccl_peer_transport_info (a bus id as its PCI address); for 2.24-2.28, which print the rank, the device of that rank in the process's channel lines, \"\" when none names it (rank is set when the line printed one). device is the entry of index in the latest \"NET/IB : Using\" list. At most 64 per process.",
			gauge, "host", "pid", "gpu", "rank", "index", "device", "gdr", "distance", "max_distance", "mode"),
		gdrOn: env.Families.NewFamily("fabric_nccl_gdr_enabled_info",
			"GPU Direct RDMA enabled for a NET device (\"NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'\", NCCL 2.13+): NCCL can register GPU memory with it, through a peer-memory module or DMA-BUF. The counterpart of fabric_nccl_gdr_disabled_info.",
			gauge, "host", "pid", "net", "device"),
		p2pOff: env.Families.NewFamily("fabric_nccl_p2p_disabled_info",
			"NCCL's \"P2P is disabled between connected GPUs X and Y\" (NCCL 2.12+; nvlink=\"true\" for the WARN \"… between NVLINK connected GPUs …\", which fails the init): the pair's path is within NCCL's P2P level but NVML's P2P read or write status is not OK. gpu and peer_gpu are X and Y, NVML indices. At most 64 per process.",
			gauge, "host", "pid", "gpu", "peer_gpu", "nvlink"),
		dmaBuf: env.Families.NewFamily("fabric_nccl_dmabuf_info",
			"\"DMA-BUF is available on GPU device N\" (NCCL 2.13+): the CUDA device (CUDA's index, as the process sees it) can register GPU memory with the HCA through DMA-BUF, without a peer-memory module. NCCL prints nothing when it is not available. At most 16 per process.",
			gauge, "host", "pid", "cuda_device"),
		commRanks: env.Families.NewFamily("fabric_nccl_communicator_ranks",
			"The largest communicator (ranks) the NCCL process logged, from \"comm 0x… rank 10 nranks 16 … - Init START|COMPLETE\" and the like (every NCCL version); absent until such a line was read.",
			gauge, "host", "pid"),
		commNodes: env.Families.NewFamily("fabric_nccl_communicator_nodes",
			"The largest node count of a communicator of the NCCL process, from \"comm 0x… rank 0 nRanks 16 nNodes 2 …\" (NCCL 2.20 and later); absent until such a line was read. 1: the process's communicators stay on one host.",
			gauge, "host", "pid"),
	}
	c.failoverF = newNCCLFailoverFamilies(env.Families)
	c.causeFam = env.Families.NewFamily("fabric_nccl_fallback_cause_info",
		"Why an NCCL process runs on sockets: one series per process whose network is Socket, that has NET/Socket connections, or whose init failed; cause lists, most specific first, every one that applies: no_verbs_devices_in_container (a process of this host whose root has no uverbs node of a rail device the host has), nccl_ib_disable, nccl_net_socket, nccl_ib_hca_matches_no_rail (from the log's \"set by environment\" lines, else the process's environment), ib_no_device_found, libibverbs_missing (from the log), socket_ifname_not_a_rail (its socket interfaces include no rail netdev), rail_down (every rail down or gone); unknown when none does.",
		gauge, "host", "pid", "cause")
	c.causes = ncclCauses{rails: o.Rails, sysfs: o.SysfsPath, procfs: procfs, open: proc.Open, openRoot: proc.OpenRoot,
		now: time.Now, facts: map[*nccl.Process]*procFacts{},
		readErr: func(path string, err error) {
			env.ReadErrors.Inc()
			env.Once.Debug("nccl-cause:"+path, "msg", "cannot read a process's root or environment for the NCCL fallback cause", "path", path, "err", err)
		}}
	c.linesS = env.Families.NewFamily("fabric_nccl_log_lines_total", "Lines read from NCCL log files.", counter).With()
	c.unparsedS = env.Families.NewFamily("fabric_nccl_log_unparsed_lines_total",
		"Lines read that are not NCCL log lines (application output, garbage, lines over 64 KiB).", counter).With()
	c.trackedS = env.Families.NewFamily("fabric_nccl_tracked_processes", "NCCL processes tracked now.", gauge).With()
	c.bytesS = env.Families.NewFamily("fabric_nccl_log_read_bytes_total", "Bytes read from NCCL log files.", counter).With()
	c.evictedS = env.Families.NewFamily("fabric_nccl_evicted_processes_total",
		"NCCL processes dropped because --collector.nccl.max-processes were tracked.", counter).With()
	c.filesS = env.Families.NewFamily("fabric_nccl_log_files", "NCCL log files matched by the globs at the last poll.", gauge).With()
	c.backlogS = env.Families.NewFamily("fabric_nccl_log_backlog_bytes", "Bytes of the NCCL log files not read yet at the end of the last poll.", gauge).With()
	c.tracker = nccl.NewTracker(nccl.TrackerOptions{MaxProcesses: no.MaxProcesses, Retention: no.Retention,
		ExitedGrace: no.ExitedGrace, Hostname: host, Procfs: procfs, Logger: env.Logger})
	c.follower = nccl.NewFollower(no.LogPaths, c.tracker)
	c.follower.ReadErr = func(path string, err error) {
		env.ReadErrors.Inc()
		env.Once.Debug("nccl:"+path, "msg", "cannot read NCCL log", "path", path, "err", err)
	}
	return c, nil
}

// pollOnce reads new lines of every file, then expires processes.
func (c *ncclCollector) pollOnce(ctx context.Context) {
	c.follower.Poll(func() bool { return ctx.Err() != nil })
	backlog, files := c.follower.Backlog()
	noDir := files == 0 && !anyGlobDir(c.opts.LogPaths)
	c.mu.Lock()
	c.backlog, c.files = float64(backlog), float64(files)
	c.noDir = noDir
	c.polled = true
	c.mu.Unlock()
	c.tracker.Expire()
	c.causes.refresh(ctx, c.tracker)
}

func (c *ncclCollector) Update(ctx context.Context, b *exposition.Batch) error {
	if len(c.opts.LogPaths) == 0 {
		return notConfigured("no --collector.nccl.log-path")
	}
	var cr causeRails // the rails, read for the first fallback process
	crRead := false
	c.tracker.View(func(procs []*nccl.Process, st nccl.Stats) {
		c.scrape++
		for _, p := range procs {
			s := c.seriesOf(p)
			if isFallback(p) {
				if !crRead {
					cr, crRead = c.causes.railsNow(ctx), true
				}
				if label, changed := c.causes.label(p, cr, &s.cause); changed || s.causeS == nil {
					s.causeS = c.causeFam.With(p.Host, p.PID, label)
				}
				b.Add(s.causeS, 1)
			}
			if p.InitFailure != "" {
				// No network, devices or interfaces, whatever the log said
				// before the failure ("NET/IB : Using [RO]; OOB …").
				b.Add(s.initFail, 1)
			} else {
				b.Add(s.net, 1)
				for _, d := range s.devices {
					b.Add(d, 1)
				}
				for _, i := range s.ifaces {
					b.Add(i, 1)
				}
			}
			for i, e := range p.Conns {
				b.Add(s.conns[i], float64(e.N))
			}
			b.Add(s.info, 1)
			for _, e := range s.env {
				b.Add(e, 1)
			}
			for _, g := range s.gdr {
				b.Add(g, 1)
			}
			for _, e := range s.peers {
				b.Add(e, 1)
			}
			for _, e := range s.netUses {
				b.Add(e, 1)
			}
			for _, e := range s.gdrPaths {
				b.Add(e, 1)
			}
			for _, e := range s.dmaBuf {
				b.Add(e, 1)
			}
			if p.Ranks > 0 {
				b.Add(s.ranks, float64(p.Ranks))
			}
			if p.Nodes > 0 {
				b.Add(s.nodes, float64(p.Nodes))
			}
			b.Add(s.warn, float64(p.Warnings))
			s.failover.add(b, p)
			if p.LastSeen > 0 {
				b.Add(s.last, float64(p.LastSeen)/1e9)
			}
		}
		for p, s := range c.series {
			if s.scrape != c.scrape {
				delete(c.series, p) // expired or evicted
			}
		}
		b.Add(c.linesS, float64(st.Lines))
		b.Add(c.unparsedS, float64(st.Unparsed))
		b.Add(c.bytesS, float64(st.Bytes))
		b.Add(c.trackedS, float64(len(procs)))
		b.Add(c.evictedS, float64(st.Evicted))
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	b.Add(c.filesS, c.files)
	b.Add(c.backlogS, c.backlog)
	if c.polled && c.files == 0 && c.noDir {
		// An existing directory without logs is an idle node (or one whose
		// old logs were cleaned up): nothing to report, nothing wrong.
		globs := strings.Join(c.opts.LogPaths, " ")
		return sourceMissing(globs, ncclFix, "--collector.nccl.log-path %s matches no file and no directory of it exists", globs)
	}
	return nil
}

// anyGlobDir reports whether the directory of at least one glob exists
// (a directory part with wildcards: whether it matches a directory).
func anyGlobDir(globs []string) bool {
	for _, g := range globs {
		d := filepath.Dir(g)
		dirs := []string{d}
		if hasGlobMeta(d) {
			dirs, _ = filepath.Glob(d) // patterns were checked at startup
		}
		for _, d := range dirs {
			if fi, err := os.Stat(d); err == nil && fi.IsDir() {
				return true
			}
		}
	}
	return false
}

// hasGlobMeta is filepath's unexported hasMeta: whether path has a wildcard.
func hasGlobMeta(path string) bool {
	return strings.ContainsAny(path, `*?[\`)
}

// seriesOf returns the series of p, built again when p changed since.
func (c *ncclCollector) seriesOf(p *nccl.Process) *ncclSeries {
	s := c.series[p]
	if s == nil {
		s = &ncclSeries{warn: c.warnings.With(p.Host, p.PID), last: c.lastLog.With(p.Host, p.PID),
			ranks: c.commRanks.With(p.Host, p.PID), nodes: c.commNodes.With(p.Host, p.PID)}
		s.gen = p.Gen + 1
		c.series[p] = s
	}
	s.scrape = c.scrape
	if s.gen == p.Gen {
		return s
	}
	s.gen = p.Gen
	h, pid := p.Host, p.PID
	s.net, s.info, s.initFail = nil, nil, nil
	if p.Net != "" {
		s.net = c.netInfo.With(h, pid, p.Net)
	}
	if p.HasVersion {
		s.info = c.info.With(h, pid, p.Version, p.CUDA)
	}
	if p.InitFailure != "" {
		s.initFail = c.initFail.With(h, pid, p.InitFailure)
	}
	s.conns = s.conns[:0]
	for _, e := range p.Conns {
		s.conns = append(s.conns, c.conns.With(h, pid, e.Transport, strconv.FormatBool(e.GDR)))
	}
	s.devices = s.devices[:0]
	for _, d := range p.Devices {
		s.devices = append(s.devices, c.devInfo.With(h, pid, d.Name, d.Port, d.Link))
	}
	s.ifaces = s.ifaces[:0]
	for _, i := range p.Interfaces {
		s.ifaces = append(s.ifaces, c.ifInfo.With(h, pid, i))
	}
	s.env = s.env[:0]
	for _, e := range p.Env {
		s.env = append(s.env, c.envInfo.With(h, pid, e.Name, e.Value))
	}
	s.gdr = s.gdr[:0]
	for _, g := range p.GDRDisabled {
		s.gdr = append(s.gdr, c.gdrOff.With(h, pid, g.Net, g.Device, g.Reason))
	}
	for _, g := range p.GDREnabled {
		s.gdr = append(s.gdr, c.gdrOn.With(h, pid, g.Net, g.Device))
	}
	s.peers = s.peers[:0]
	for _, e := range p.Peers {
		s.peers = append(s.peers, c.peerInfo.With(h, pid, e.GPU, e.PeerGPU, e.Transport))
	}
	for _, e := range p.P2PDisabled {
		s.peers = append(s.peers, c.p2pOff.With(h, pid, e.GPU, e.PeerGPU, strconv.FormatBool(e.NVLink)))
	}
	s.netUses = s.netUses[:0]
	for _, e := range p.NetUses {
		s.netUses = append(s.netUses, c.netGDR.With(h, pid, e.GPU, e.Net, strconv.Itoa(e.Index), netDeviceName(p, e), strconv.FormatBool(e.GDR)))
	}
	s.gdrPaths = s.gdrPaths[:0]
	for _, g := range p.GDRPaths {
		rank, state, dev := "", "disabled", ""
		if g.Rank >= 0 {
			rank = strconv.Itoa(g.Rank)
		}
		if g.Enabled {
			state = "enabled"
		}
		if g.Index < len(p.Devices) && !p.DevicesMerged {
			dev = p.Devices[g.Index].Name
		}
		s.gdrPaths = append(s.gdrPaths, c.gdrPath.With(h, pid, p.GDRPathGPU(g), rank, strconv.Itoa(g.Index), dev, state,
			strconv.Itoa(g.Distance), strconv.Itoa(g.MaxDistance), g.Mode))
	}
	s.dmaBuf = s.dmaBuf[:0]
	for _, d := range p.DMABuf {
		s.dmaBuf = append(s.dmaBuf, c.dmaBuf.With(h, pid, d))
	}
	c.failoverF.bind(p, &s.failover)
	return s
}

// ncclFix is the likely fix of a log-path glob that matches nothing.
const ncclFix = "check the glob, that the serving processes run with NCCL_DEBUG=INFO and NCCL_DEBUG_FILE in that directory, and that the directory is mounted into the exporter (-v /var/log/nccl:/var/log/nccl:ro)"

// netDeviceName is the device of a NET connection's index: the entry of
// the latest "NET/X : Using" list (the socket transport's interface list
// for NET/Socket), "" when that list has no such entry or merges devices.
func netDeviceName(p *nccl.Process, e nccl.NetUse) string {
	if e.Net == "Socket" {
		if e.Index < len(p.Interfaces) {
			return p.Interfaces[e.Index]
		}
		return ""
	}
	if e.Index < len(p.Devices) && !p.DevicesMerged {
		return p.Devices[e.Index].Name
	}
	return ""
}
