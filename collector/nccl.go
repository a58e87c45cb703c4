package collector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
)

// The nccl collector reads NCCL's INFO logs (NCCL_DEBUG=INFO, usually one
// file per process with NCCL_DEBUG_FILE=/var/log/nccl/%h.%p.log) and
// reports, per NCCL process (host, pid), the network NCCL chose, the
// transports of its channel connections with GPU Direct RDMA, the RDMA
// devices and socket interfaces it uses, its version and its warnings.
// NCCL does not fail when RDMA is unavailable: it falls back to TCP sockets
// and the job runs many times slower; these lines are the direct evidence.
//
// A background goroutine follows the files (nccl_tail.go) and parses the
// lines (nccl_parse.go) into per-process state; Update only copies that
// state into the batch, so a scrape never waits for a backlog.

// NCCLOptions configures the nccl collector. Zero PollInterval and
// MaxProcesses (Options built in code) mean the flags' defaults.
type NCCLOptions struct {
	LogPaths     []string      // --collector.nccl.log-path (globs)
	PollInterval time.Duration // --collector.nccl.poll-interval
	MaxProcesses int           // --collector.nccl.max-processes
	Retention    time.Duration // --collector.nccl.retention (0: never by age)
	Hostname     string        // --collector.nccl.hostname ("" = os.Hostname)
}

func ncclFlags(app *kingpin.Application, o *Options) {
	app.Flag("collector.nccl.log-path", "Glob of NCCL log files (NCCL_DEBUG=INFO output, e.g. NCCL_DEBUG_FILE=/var/log/nccl/%h.%p.log); repeatable. Files are read from their start and followed. Without it the collector reports no data.").PlaceHolder("GLOB").StringsVar(&o.NCCL.LogPaths)
	app.Flag("collector.nccl.poll-interval", "How often the NCCL log files are checked for new lines.").Default("1s").
		Action(func(*kingpin.ParseContext) error {
			if o.NCCL.PollInterval < ncclMinPollInterval {
				return fmt.Errorf("--collector.nccl.poll-interval %s: must be at least %s", o.NCCL.PollInterval, ncclMinPollInterval)
			}
			return nil
		}).DurationVar(&o.NCCL.PollInterval)
	app.Flag("collector.nccl.max-processes", "Most NCCL processes (host, pid) tracked; beyond it the one whose log was written longest ago is dropped.").Default("256").
		Action(func(*kingpin.ParseContext) error {
			if o.NCCL.MaxProcesses < 1 {
				return fmt.Errorf("--collector.nccl.max-processes %d: must be at least 1", o.NCCL.MaxProcesses)
			}
			return nil
		}).IntVar(&o.NCCL.MaxProcesses)
	app.Flag("collector.nccl.retention", "Forget an NCCL process whose log got no line for this long, unless it runs on this host and its PID is alive. 0 keeps processes until max-processes pushes them out.").Default("24h").DurationVar(&o.NCCL.Retention)
	app.Flag("collector.nccl.hostname", "The host name NCCL writes for processes of this machine (default: the exporter's host name); their PIDs are checked under --path.procfs.").PlaceHolder("NAME").StringVar(&o.NCCL.Hostname)
}

// Bounds on what one process or one label may hold (hostile or corrupt logs).
const (
	maxNCCLLabel        = 128 // bytes of a label value
	maxNCCLConnKinds    = 32  // (transport, gdr) pairs per process
	maxNCCLListItems    = 64  // devices, interfaces per process
	maxNCCLEnv          = 64  // environment variables per process
	maxNCCLGDRDisabled  = 64  // GDR-disabled lines per process
	ncclMinPollInterval = 10 * time.Millisecond
	ncclCacheBits       = 8
)

type ncclConn struct {
	transport string
	gdr       bool
	n         float64
	s         *exposition.Series
}

type ncclKV struct {
	k, v string
	s    *exposition.Series
}

// ncclProc is the state of one NCCL process.
type ncclProc struct {
	host, pid string
	pidNum    uint64
	key       string
	local     bool // host is this machine and pid is numeric
	gone      bool // expired or evicted: caches must not use it
	lastSeen  int64

	net      string
	netLevel int8
	netS     *exposition.Series
	version  string
	cuda     string
	infoS    *exposition.Series
	warnings float64
	warnS    *exposition.Series
	lastS    *exposition.Series
	conns    []ncclConn
	via      [64]byte // the text after " via " of the latest connection line…
	viaLen   int      //
	viaConn  int      // …and its entry in conns (-1: none)
	devices  []*exposition.Series
	devKey   string // the device list as logged, to skip repeats
	ifaces   []*exposition.Series
	ifKey    string
	env      []ncclKV
	gdrOff   []ncclKV

	// What the init lines said, for the socket fallback (see
	// ncclNetFromSocketFallback): a socket interface list was logged, IB
	// found no device, NCCL_IB_DISABLE is set, no external plugin is used.
	sockList, ibAbsent, ibDisabled, pluginNone bool
	// listsVoid: a socket list followed a device list, so device lists
	// name no network for this process.
	listsVoid bool
	netLogs   uint8 // evidence debug lines logged
	// initFail is the WARN that said NCCL's init found no network ("" when
	// none, or when a later communicator completed its init); while set,
	// the process reports fabric_nccl_init_failure_info and no network.
	initFail  string
	initFailS *exposition.Series
}

type ncclCollector struct {
	env      Env
	opts     NCCLOptions
	procfs   string
	hostname string
	now      func() time.Time // the clock of expiry (tests replace it)

	// follower goroutine
	tailer *ncclTailer
	poller

	mu       sync.Mutex // guards everything below
	procs    map[string]*ncclProc
	sorted   []*ncclProc // by key; nil when it must be rebuilt
	keyBuf   []byte
	cache    [1 << ncclCacheBits]*ncclProc // by pid number (lookup)
	pl       ncclLine                      // the line being parsed
	ev       ncclEvent                     // its event
	curFile  *ncclFile                     // the file and text of the line being parsed, for
	curLine  []byte                        // the evidence log (valid only inside line)
	lines    float64
	unparsed float64
	bytes    float64
	evicted  float64
	files    float64
	polled   bool // the files were listed at least once
	backlog  float64
	chunkMod int64 // mtime of the file being read

	netInfo, conns, devInfo, ifInfo, info, warnings, lastLog, envInfo, gdrOff *exposition.Family
	initFail                                                                  *exposition.Family
	linesS, unparsedS, trackedS, bytesS, evictedS, filesS, backlogS           *exposition.Series
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
		env: env, opts: no, procfs: procfs, hostname: host, now: time.Now,
		procs: map[string]*ncclProc{},
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
	}
	c.linesS = env.Families.NewFamily("fabric_nccl_log_lines_total", "Lines read from NCCL log files.", counter).With()
	c.unparsedS = env.Families.NewFamily("fabric_nccl_log_unparsed_lines_total",
		"Lines read that are not NCCL log lines (application output, garbage, lines over 64 KiB).", counter).With()
	c.trackedS = env.Families.NewFamily("fabric_nccl_tracked_processes", "NCCL processes tracked now.", gauge).With()
	c.bytesS = env.Families.NewFamily("fabric_nccl_log_read_bytes_total", "Bytes read from NCCL log files.", counter).With()
	c.evictedS = env.Families.NewFamily("fabric_nccl_evicted_processes_total",
		"NCCL processes dropped because --collector.nccl.max-processes were tracked.", counter).With()
	c.filesS = env.Families.NewFamily("fabric_nccl_log_files", "NCCL log files matched by the globs at the last poll.", gauge).With()
	c.backlogS = env.Families.NewFamily("fabric_nccl_log_backlog_bytes", "Bytes of the NCCL log files not read yet at the end of the last poll.", gauge).With()
	c.tailer = newNCCLTailer(no.LogPaths, c)
	c.tailer.readErr = func(path string, err error) {
		env.ReadErrors.Inc()
		env.Once.Debug("nccl:"+path, "msg", "cannot read NCCL log", "path", path, "err", err)
	}
	return c, nil
}

// pollOnce reads new lines of every file, then expires processes.
func (c *ncclCollector) pollOnce(ctx context.Context) {
	c.tailer.poll(func() bool { return ctx.Err() != nil })
	backlog, files := c.tailer.backlog()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.backlog, c.files = float64(backlog), float64(files)
	c.polled = true
	c.expire()
}

// lineSink, called by the tailer with chunks of one file.

func (c *ncclCollector) begin(f *ncclFile) {
	c.mu.Lock()
	c.chunkMod = f.mtime
}

func (c *ncclCollector) end(f *ncclFile, n int) {
	c.bytes += float64(n)
	c.mu.Unlock()
}

func (c *ncclCollector) dropped(f *ncclFile) {
	c.lines++
	c.unparsed++
}

func (c *ncclCollector) line(f *ncclFile, line []byte) {
	c.lines++
	c.curFile, c.curLine = f, line
	l := &c.pl
	parseNCCLLineTo(line, l)
	var p *ncclProc
	switch l.kind {
	case ncclNotNCCL:
		c.unparsed++
		return
	case ncclBareVersion:
		if p = f.procForTag(l.tag); p != nil {
			c.setVersion(p, l.msg)
			c.touch(p)
		}
		return
	}
	p = c.lookup(l)
	if p == nil {
		return
	}
	f.remember(l.tag, p)
	c.touch(p)
	switch l.kind {
	case ncclWarn:
		p.warnings++
		if isNCCLInitFailure(l.msg) {
			c.setInitFailure(p, l.msg)
		}
	case ncclInfo:
		if m := l.msg; len(m) > 0 && (m[0] == 'C' && bytes.HasPrefix(m, msgChannel) || m[0] == 'R' && bytes.HasPrefix(m, msgRing)) {
			c.connection(p, m)
			return
		}
		if p.initFailS != nil && isNCCLInitComplete(l.msg) {
			p.initFail, p.initFailS = "", nil
			return
		}
		classifyNCCLMessageTo(l.msg, &c.ev)
		c.apply(p, &c.ev)
	}
}

func (c *ncclCollector) touch(p *ncclProc) {
	if c.chunkMod > p.lastSeen {
		p.lastSeen = c.chunkMod
	}
}

// procForTag is the process a bare version line of stream tag belongs to.
func (f *ncclFile) procForTag(tag []byte) *ncclProc {
	p := f.last
	if len(tag) > 0 && f.byTag != nil {
		p = f.byTag[string(tag)]
	}
	if p == nil || p.gone {
		return nil
	}
	return p
}

const maxNCCLTags = 256

func (f *ncclFile) remember(tag []byte, p *ncclProc) {
	f.last = p
	if len(tag) == 0 || p == f.tagProc && string(tag) == string(f.tag[:f.tagLen]) {
		return
	}
	f.tagProc, f.tagLen = nil, 0
	if len(tag) <= len(f.tag) {
		f.tagProc, f.tagLen = p, copy(f.tag[:], tag)
	}
	if f.byTag == nil {
		f.byTag = map[string]*ncclProc{}
	}
	if f.byTag[string(tag)] == p {
		return
	}
	if len(f.byTag) >= maxNCCLTags {
		clear(f.byTag)
	}
	f.byTag[string(tag)] = p
}

// lookup returns the process of a header line, creating it (and evicting
// the least recently logged one when the table is full).
func (c *ncclCollector) lookup(l *ncclLine) *ncclProc {
	host, pid := l.host, l.pid
	// A direct-mapped cache by numeric pid spares hashing the key.
	n, numeric := l.pidNum, l.pidNumOK
	slot := &c.cache[(n*0x9E3779B97F4A7C15)>>(64-ncclCacheBits)]
	if p := *slot; numeric && p != nil && p.pidNum == n && !p.gone && string(host) == p.host {
		return p
	}
	p := c.lookupMap(host, pid)
	if numeric {
		*slot = p
	}
	return p
}

func (c *ncclCollector) lookupMap(host, pid []byte) *ncclProc {
	c.keyBuf = append(append(append(c.keyBuf[:0], host...), 0), pid...)
	if p, ok := c.procs[string(c.keyBuf)]; ok {
		return p
	}
	if len(host) > maxNCCLLabel || len(pid) > maxNCCLLabel {
		host, pid = boundBytes(host), boundBytes(pid)
		c.keyBuf = append(append(append(c.keyBuf[:0], host...), 0), pid...)
		if p, ok := c.procs[string(c.keyBuf)]; ok {
			return p
		}
	}
	if len(c.procs) >= c.opts.MaxProcesses {
		c.evictOldest()
	}
	p := &ncclProc{host: string(host), pid: string(pid), key: string(c.keyBuf), viaConn: -1}
	p.pidNum, _ = pidNumber(pid)
	p.local = isDigits(pid) && sameHost(p.host, c.hostname)
	p.warnS = c.warnings.With(p.host, p.pid)
	p.lastS = c.lastLog.With(p.host, p.pid)
	c.procs[p.key] = p
	c.sorted = nil
	return p
}

func (c *ncclCollector) evictOldest() {
	var old *ncclProc
	for _, p := range c.procs {
		if old == nil || p.lastSeen < old.lastSeen || p.lastSeen == old.lastSeen && p.key < old.key {
			old = p
		}
	}
	if old != nil {
		c.drop(old)
		c.evicted++
	}
}

func (c *ncclCollector) drop(p *ncclProc) {
	p.gone = true
	delete(c.procs, p.key)
	c.sorted = nil
}

// expire drops processes without a line for the retention period, except
// those of this host whose PID is alive.
func (c *ncclCollector) expire() {
	if c.opts.Retention <= 0 {
		return
	}
	limit := c.now().Add(-c.opts.Retention).UnixNano()
	for _, p := range c.procs {
		if p.lastSeen >= limit {
			continue
		}
		if p.local {
			if _, err := os.Stat(filepath.Join(c.procfs, p.pid)); err == nil {
				continue
			}
		}
		c.drop(p)
	}
}

// sameHost compares host names as NCCL writes them (older versions cut the
// name at the first dot; 2.27 logs show full names) with this machine's.
func sameHost(a, b string) bool {
	if strings.EqualFold(a, b) {
		return true
	}
	short := func(s string) string {
		if i := strings.IndexByte(s, '.'); i >= 0 {
			return s[:i]
		}
		return s
	}
	return a != "" && strings.EqualFold(short(a), short(b))
}

// apply records what one INFO message says about p.
func (c *ncclCollector) apply(p *ncclProc, ev *ncclEvent) {
	switch ev.kind {
	case ncclEvNet:
		c.setNet(p, ev.name, ev.level)
	case ncclEvConnection:
		if ev.net != nil {
			c.setNet(p, ev.net, ncclNetFromConnection)
		}
		c.addConn(p, ev.name, ev.gdr)
	case ncclEvNetDevices:
		if c.setDevices(p, ev.list) && !p.listsVoid {
			c.setNet(p, ev.name, ncclNetFromDeviceList)
		}
	case ncclEvSocketIfs:
		if c.setInterfaces(p, ev.list) {
			p.sockList = true
			if p.netLevel == ncclNetFromDeviceList {
				// NCCL initialises sockets after a net listed its devices
				// only when it did not take that net (2.13-2.27 init
				// every net up to the one NCCL_NET names): the device
				// lists of this process decide nothing.
				p.listsVoid = true
				c.clearNet(p)
			}
			c.socketFallback(p)
		}
	case ncclEvNetNoDevice:
		if string(ev.name) == "IB" {
			p.ibAbsent = true
			c.socketFallback(p)
		}
	case ncclEvPluginNone:
		p.pluginNone = true
		c.socketFallback(p)
	case ncclEvVersion:
		c.setVersion(p, ev.name)
	case ncclEvEnv:
		p.env = c.setKV(p, p.env, maxNCCLEnv, ev.name, ev.value, func(k, v string) *exposition.Series {
			return c.envInfo.With(p.host, p.pid, k, v)
		})
		if string(ev.name) == "NCCL_IB_DISABLE" {
			p.ibDisabled = string(ev.value) != "0"
			c.socketFallback(p)
		}
	case ncclEvGDRDisabled:
		k := boundLabel(ev.net) + "\x00" + boundLabel(ev.name)
		p.gdrOff = c.setKV(p, p.gdrOff, maxNCCLGDRDisabled, []byte(k), ev.value, func(k, v string) *exposition.Series {
			net, dev, _ := strings.Cut(k, "\x00")
			return c.gdrOff.With(p.host, p.pid, net, dev, v)
		})
	}
}

// socketFallback names Socket the network of p when its init lines prove
// it: NCCL logged its socket interfaces, and the networks NCCL tries
// before sockets were not taken. IB tried and found no device (NCCL tries
// IB only when no external plugin was taken), or IB was disabled by
// NCCL_IB_DISABLE and no external plugin was found. A socket interface
// list alone proves nothing: NCCL 2.4.2-2.4.7 logs it for every process,
// before it picks IB.
func (c *ncclCollector) socketFallback(p *ncclProc) {
	if p.sockList && (p.ibAbsent || p.ibDisabled && p.pluginNone) {
		c.setNet(p, socketNet, ncclNetFromSocketFallback)
	}
}

var socketNet = []byte("Socket")

// maxNCCLNetLogs bounds the evidence debug lines of one process (a log
// that flips between networks would otherwise log every line).
const maxNCCLNetLogs = 16

// setInitFailure records that the process's NCCL init found no network.
func (c *ncclCollector) setInitFailure(p *ncclProc, msg []byte) {
	if p.initFailS != nil && string(msg) == p.initFail {
		return
	}
	p.initFail = boundLabel(msg)
	p.initFailS = c.initFail.With(p.host, p.pid, p.initFail)
}

// setNet records the network; a more certain source replaces a less
// certain one, and the latest "Using network" wins. A change is logged at
// debug level with the line that decided it.
func (c *ncclCollector) setNet(p *ncclProc, name []byte, lvl int8) {
	if lvl < p.netLevel || lvl == p.netLevel && (lvl != ncclNetFromUsing || string(name) == p.net) {
		return
	}
	if lvl == p.netLevel && len(name) > maxNCCLLabel && boundLabel(name) == p.net {
		return
	}
	p.net, p.netLevel = boundLabel(name), lvl
	p.netS = c.netInfo.With(p.host, p.pid, p.net)
	c.logEvidence(p)
}

// clearNet forgets a network named by a device list (logged like a
// classification, evidence "none").
func (c *ncclCollector) clearNet(p *ncclProc) {
	p.net, p.netLevel, p.netS = "", 0, nil
	c.logEvidence(p)
}

// logEvidence logs, at debug level, the line that set p's network, with
// its file and byte offset.
func (c *ncclCollector) logEvidence(p *ncclProc) {
	if p.netLogs > maxNCCLNetLogs || c.env.Logger == nil {
		return
	}
	p.netLogs++
	msg := "NCCL network classified"
	if p.net == "" {
		msg = "NCCL network unknown again: the line shows the device list was no decision"
	}
	kv := []any{"msg", msg, "host", p.host, "pid", p.pid, "net", p.net,
		"evidence", ncclEvidenceName(p.netLevel)}
	if f := c.curFile; f != nil {
		kv = append(kv, "file", f.path, "offset", f.lineOff)
	}
	kv = append(kv, "line", boundEvidence(c.curLine))
	if p.netLogs > maxNCCLNetLogs {
		kv = append(kv, "note", "further changes of this process are not logged")
	}
	level.Debug(c.env.Logger).Log(kv...)
}

// boundEvidence copies a log line for the debug log: at most 512 bytes,
// cut at a UTF-8 character boundary.
func boundEvidence(b []byte) string {
	const max = 512
	if len(b) <= max {
		return string(b)
	}
	cut := max
	for cut > max-utf8.UTFMax && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return string(b[:cut]) + "…"
}

// connection counts a "Channel …"/"Ring …" line. Runs of lines with the
// same text after " via " (every channel of one peer) skip the transport
// parsing.
func (c *ncclCollector) connection(p *ncclProc, msg []byte) {
	via := connectionVia(msg)
	if via == nil {
		return
	}
	if p.viaConn >= 0 && p.viaLen > 0 && string(via) == string(p.via[:p.viaLen]) {
		p.conns[p.viaConn].n++
		return
	}
	ev := &c.ev
	parseTransport(via, ev)
	if ev.kind != ncclEvConnection {
		return
	}
	if ev.net != nil {
		c.setNet(p, ev.net, ncclNetFromConnection)
	}
	p.viaConn, p.viaLen = c.addConn(p, ev.name, ev.gdr), 0
	if p.viaConn >= 0 && len(via) <= len(p.via) {
		p.viaLen = copy(p.via[:], via)
	}
}

// addConn counts a connection and returns the index of its entry (-1 when
// the process has maxNCCLConnKinds already).
func (c *ncclCollector) addConn(p *ncclProc, transport []byte, gdr bool) int {
	for i := range p.conns {
		if e := &p.conns[i]; e.gdr == gdr && string(transport) == e.transport {
			e.n++
			return i
		}
	}
	t := boundLabel(transport)
	for i := range p.conns {
		if e := &p.conns[i]; e.gdr == gdr && t == e.transport {
			e.n++
			return i
		}
	}
	if len(p.conns) >= maxNCCLConnKinds {
		return -1
	}
	g := "false"
	if gdr {
		g = "true"
	}
	p.conns = append(p.conns, ncclConn{transport: t, gdr: gdr, n: 1, s: c.conns.With(p.host, p.pid, t, g)})
	return len(p.conns) - 1
}

// setDevices replaces the device list when it changed; false when the list
// names no device ("NET/IB : Using [RO]; OOB …" after "No device found").
func (c *ncclCollector) setDevices(p *ncclProc, list []byte) bool {
	return setNCCLList(&p.devices, &p.devKey, list, func(item []byte) *exposition.Series {
		if dev, port, link, ok := splitNCCLDevice(item); ok {
			return c.devInfo.With(p.host, p.pid, boundLabel(dev), boundLabel(port), boundLabel(link))
		}
		return nil
	})
}

// setInterfaces is setDevices for the socket transport's interface list.
func (c *ncclCollector) setInterfaces(p *ncclProc, list []byte) bool {
	return setNCCLList(&p.ifaces, &p.ifKey, list, func(item []byte) *exposition.Series {
		if ifc, ok := splitNCCLInterface(item); ok {
			return c.ifInfo.With(p.host, p.pid, boundLabel(ifc))
		}
		return nil
	})
}

// setNCCLList rebuilds *series from a logged list unless the list is the
// one seen last (*key), keeping at most maxNCCLListItems items that item
// turns into a series (nil: not an item). The previous list stays when the
// new one has no item; false then.
func setNCCLList(series *[]*exposition.Series, key *string, list []byte, item func([]byte) *exposition.Series) bool {
	if string(list) == *key {
		return len(*series) > 0
	}
	var out []*exposition.Series
	forEachNCCLListItem(list, func(b []byte) {
		if len(out) >= maxNCCLListItems {
			return
		}
		if s := item(b); s != nil {
			out = append(out, s)
		}
	})
	if len(out) == 0 {
		return false
	}
	*series, *key = out, boundKey(list)
	return true
}

// boundKey keeps a list as logged for comparison, unless it is too long to
// be worth keeping (then every repeat rebuilds the list; still bounded).
func boundKey(list []byte) string {
	if len(list) > 4*maxNCCLLabel*maxNCCLListItems {
		return ""
	}
	return string(list)
}

func (c *ncclCollector) setVersion(p *ncclProc, v []byte) {
	version, cuda := splitNCCLVersion(v)
	if string(version) == p.version && string(cuda) == p.cuda && p.infoS != nil {
		return
	}
	p.version, p.cuda = boundLabel(version), boundLabel(cuda)
	p.infoS = c.info.With(p.host, p.pid, p.version, p.cuda)
}

func (c *ncclCollector) setKV(p *ncclProc, kvs []ncclKV, max int, k, v []byte, series func(k, v string) *exposition.Series) []ncclKV {
	for i := range kvs {
		if kvs[i].k == string(k) || kvs[i].k == boundLabel(k) {
			if kvs[i].v != string(v) {
				kvs[i].v = boundLabel(v)
				kvs[i].s = series(kvs[i].k, kvs[i].v)
			}
			return kvs
		}
	}
	if len(kvs) >= max {
		return kvs
	}
	ks, vs := boundLabel(k), boundLabel(v)
	return append(kvs, ncclKV{k: ks, v: vs, s: series(ks, vs)})
}

// boundLabel copies b into a label value of at most maxNCCLLabel bytes,
// cut at a UTF-8 character boundary.
func boundLabel(b []byte) string {
	return string(boundBytes(b))
}

func boundBytes(b []byte) []byte {
	if len(b) <= maxNCCLLabel {
		return b
	}
	cut := maxNCCLLabel
	for cut > maxNCCLLabel-utf8.UTFMax && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return b[:cut]
}

func (c *ncclCollector) Update(ctx context.Context, b *exposition.Batch) error {
	if len(c.opts.LogPaths) == 0 {
		return notConfigured("no --collector.nccl.log-path")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sorted == nil {
		c.sorted = make([]*ncclProc, 0, len(c.procs))
		for _, p := range c.procs {
			c.sorted = append(c.sorted, p)
		}
		sort.Slice(c.sorted, func(i, j int) bool { return c.sorted[i].key < c.sorted[j].key })
	}
	for _, p := range c.sorted {
		if p.initFailS != nil {
			// No network, devices or interfaces, whatever the log said
			// before the failure ("NET/IB : Using [RO]; OOB …").
			b.Add(p.initFailS, 1)
		} else {
			b.Add(p.netS, 1)
			for _, s := range p.devices {
				b.Add(s, 1)
			}
			for _, s := range p.ifaces {
				b.Add(s, 1)
			}
		}
		for _, e := range p.conns {
			b.Add(e.s, e.n)
		}
		b.Add(p.infoS, 1)
		for _, e := range p.env {
			b.Add(e.s, 1)
		}
		for _, e := range p.gdrOff {
			b.Add(e.s, 1)
		}
		b.Add(p.warnS, p.warnings)
		if p.lastSeen > 0 {
			b.Add(p.lastS, float64(p.lastSeen)/1e9)
		}
	}
	b.Add(c.linesS, c.lines)
	b.Add(c.unparsedS, c.unparsed)
	b.Add(c.bytesS, c.bytes)
	b.Add(c.trackedS, float64(len(c.procs)))
	b.Add(c.evictedS, c.evicted)
	b.Add(c.filesS, c.files)
	b.Add(c.backlogS, c.backlog)
	if c.polled && c.files == 0 {
		globs := strings.Join(c.opts.LogPaths, " ")
		return sourceMissing(globs, ncclFix, "--collector.nccl.log-path %s matches no file", globs)
	}
	return nil
}

// ncclFix is the likely fix of a log-path glob that matches nothing.
const ncclFix = "check the glob, that the serving processes run with NCCL_DEBUG=INFO and NCCL_DEBUG_FILE in that directory, and that the directory is mounted into the exporter (-v /var/log/nccl:/var/log/nccl:ro)"

// NCCLScanResult is what ScanNCCLLog read.
type NCCLScanResult struct {
	Bytes, Lines, Unparsed int64
	Processes              int
}

// ScanNCCLLog reads the files of one glob once through the collector's
// follower and parser (tools/ncclbench measures it).
func ScanNCCLLog(glob string) (NCCLScanResult, error) {
	o := &Options{NCCL: NCCLOptions{LogPaths: []string{glob}, Retention: 0}}
	l := log.NewNopLogger()
	env := Env{Logger: l, Families: exposition.NewRegistry(), ReadErrors: &exposition.Counter{}, Once: NewOnceLogger(l, 16)}
	c, err := newNCCLState(env, o)
	if err != nil {
		return NCCLScanResult{}, err
	}
	c.tailer.yield = func() {}
	c.pollOnce(context.Background())
	if c.files == 0 {
		return NCCLScanResult{}, errors.New("no file matches " + glob)
	}
	return NCCLScanResult{Bytes: int64(c.bytes), Lines: int64(c.lines), Unparsed: int64(c.unparsed), Processes: len(c.procs)}, nil
}
