package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/nccl"
	"github.com/fabric-exporter/fabric_exporter/internal/nccl/inspector"
)

// The nccl-inspector collector follows the output directory of the NCCL
// Inspector profiler plugin (NCCL_INSPECTOR_DUMP_DIR) and reports the bus
// bandwidth and operations of each NCCL communicator, live. Formats and
// their parsers: internal/nccl/inspector.
//
//   - JSON mode: <host>-pid<pid>.log files grow by one line per operation;
//     they are followed like NCCL logs (internal/nccl's Follower: read from their start,
//     rotation and truncation safe, partial lines kept until complete) and
//     summed per (host, pid, communicator, operation, size bucket) into
//     counters: operations, bytes, seconds and bus bytes (bus bandwidth ×
//     time), so rate(bus bytes)/rate(seconds) is the time-weighted bus
//     bandwidth over any window.
//   - Prometheus mode: nccl_inspector_metrics_<GPU UUID>.prom files are
//     rewritten whole every dump interval and deleted at teardown; each poll
//     re-reads a file that changed and its series are the file's last
//     complete lines (gauges: bandwidth and time of the last interval). A
//     deleted file's series go with it.
//
// A goroutine polls the directory; Update copies the state, so a scrape
// never waits for a backlog. Cardinality: at most max-communicators
// communicators (JSON) and as many .prom files, operations from NCCL's
// fixed list, six size buckets.

// NCCLInspectorOptions configures the nccl-inspector collector.
type NCCLInspectorOptions struct {
	DumpDir          string        // --collector.nccl-inspector.dump-dir
	PollInterval     time.Duration // --collector.nccl-inspector.poll-interval
	MaxCommunicators int           // --collector.nccl-inspector.max-communicators
	Retention        time.Duration // --collector.nccl-inspector.retention (0: never)
}

func ncclInspectorFlags(app *kingpin.Application, o *Options) {
	app.Flag("collector.nccl-inspector.dump-dir", "The NCCL Inspector's output directory (NCCL_INSPECTOR_DUMP_DIR of the NCCL processes; JSON or NCCL_INSPECTOR_PROM_DUMP=1 mode). Without it the collector is not configured.").PlaceHolder("DIR").StringVar(&o.NCCLInspector.DumpDir)
	app.Flag("collector.nccl-inspector.poll-interval", "How often the Inspector's directory is checked for new output.").Default("1s").
		Action(atLeastDuration("collector.nccl-inspector.poll-interval", &o.NCCLInspector.PollInterval, ncclMinPollInterval)).DurationVar(&o.NCCLInspector.PollInterval)
	app.Flag("collector.nccl-inspector.max-communicators", "Most communicators (host, pid, comm) tracked from JSON files, and most .prom files read; beyond it the one updated longest ago is dropped.").Default("64").
		Action(atLeastInt("collector.nccl-inspector.max-communicators", &o.NCCLInspector.MaxCommunicators, 1)).IntVar(&o.NCCLInspector.MaxCommunicators)
	app.Flag("collector.nccl-inspector.retention", "Forget a communicator with no new operation, and ignore a .prom file not rewritten, for this long (the plugin leaves both behind when a process dies). 0 keeps them.").Default("1h").DurationVar(&o.NCCLInspector.Retention)
}

type inspStat struct {
	ops, bytes, seconds, busBytes float64
	opsS, bytesS, secondsS, busS  *exposition.Series
}

type inspComm struct {
	key      string
	lastSeen int64 // poll time of its latest operation, Unix nanoseconds
	infoS    *exposition.Series
	info     string // the info labels, to rebind when they change
	stats    map[string]*inspStat
	sorted   []*inspStat
	host     string
	pid      string
	comm     string
}

type inspPromFile struct {
	id          nccl.FileID
	size, mtime int64
	series      []inspPromSeries
}

type inspPromSeries struct {
	bw, t *exposition.Series
	bwV   float64
	tV    float64
}

type ncclInspectorCollector struct {
	env  Env
	opts NCCLInspectorOptions
	now  func() time.Time

	poller
	follower *nccl.Follower

	mu        sync.Mutex
	comms     map[string]*inspComm
	sorted    []*inspComm // nil when comms changed
	prom      map[string]*inspPromFile
	promKeys  []string
	lines     float64
	unparsed  float64
	evicted   float64
	jsonFiles float64
	dirErr    error
	polled    bool
	pollNow   int64

	infoF, opsF, bytesF, secondsF, busF, promBW, promTime       *exposition.Family
	linesS, unparsedS, commsS, evictedS, jsonFilesS, promFilesS *exposition.Series
}

func newNCCLInspectorCollector(env Env, o *Options) (Collector, error) {
	c, err := newNCCLInspectorState(env, o)
	if err != nil {
		return nil, err
	}
	if c.opts.DumpDir != "" {
		c.poller.start(c.opts.PollInterval, c.pollOnce)
	}
	return c, nil
}

func newNCCLInspectorState(env Env, o *Options) (*ncclInspectorCollector, error) {
	no := o.NCCLInspector
	if no.PollInterval == 0 {
		no.PollInterval = time.Second
	}
	if no.PollInterval < ncclMinPollInterval {
		return nil, fmt.Errorf("--collector.nccl-inspector.poll-interval %s: must be at least %s", no.PollInterval, ncclMinPollInterval)
	}
	if no.MaxCommunicators == 0 {
		no.MaxCommunicators = 64
	}
	if no.MaxCommunicators < 1 {
		return nil, fmt.Errorf("--collector.nccl-inspector.max-communicators %d: must be at least 1", no.MaxCommunicators)
	}
	if no.Retention < 0 {
		return nil, fmt.Errorf("--collector.nccl-inspector.retention %s: must not be negative", no.Retention)
	}
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	jl := []string{"host", "pid", "comm", "op", "size"}
	pl := []string{"host", "uuid", "comm_name", "nodes", "ranks", "op", "size", "algo_proto"}
	c := &ncclInspectorCollector{
		env: env, opts: no, now: time.Now,
		comms: map[string]*inspComm{}, prom: map[string]*inspPromFile{},
		infoF: env.Families.NewFamily("fabric_nccl_inspector_comm_info",
			"A communicator of an NCCL process, from the Inspector's JSON output: comm is its hash (NCCL's commId), rank the process's rank in it, ranks and nodes its size.",
			gauge, "host", "pid", "comm", "comm_name", "rank", "ranks", "nodes"),
		opsF: env.Families.NewFamily("fabric_nccl_inspector_operations_total",
			"Completed NCCL operations (collectives and point-to-point) the Inspector recorded (JSON mode; at least NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES, 8192 by default), by operation and message-size bucket.",
			counter, jl...),
		bytesF: env.Families.NewFamily("fabric_nccl_inspector_operation_bytes_total",
			"Message bytes of the completed NCCL operations (JSON mode).", counter, jl...),
		secondsF: env.Families.NewFamily("fabric_nccl_inspector_operation_seconds_total",
			"Execution time of the completed NCCL operations (JSON mode; GPU kernel time by default).", counter, jl...),
		busF: env.Families.NewFamily("fabric_nccl_inspector_bus_bytes_total",
			"Bus bandwidth × execution time of the completed NCCL operations (JSON mode): rate() of it over rate() of fabric_nccl_inspector_operation_seconds_total is the time-weighted bus bandwidth in bytes per second.",
			counter, jl...),
		promBW: env.Families.NewFamily("fabric_nccl_inspector_bus_bandwidth_bytes_per_second",
			"Bus bandwidth of the NCCL operations of the Inspector's last dump interval (Prometheus mode: geometric mean; averaged over the plugin's message-size ranges that fall into one size bucket). No pid: the file is per GPU (uuid) and shared by its processes.",
			gauge, pl...),
		promTime: env.Families.NewFamily("fabric_nccl_inspector_exec_time_seconds",
			"Mean execution time of the NCCL operations of the Inspector's last dump interval (Prometheus mode).",
			gauge, pl...),
	}
	c.linesS = env.Families.NewFamily("fabric_nccl_inspector_lines_total", "Lines read from the Inspector's JSON files.", counter).With()
	c.unparsedS = env.Families.NewFamily("fabric_nccl_inspector_unparsed_lines_total",
		"Lines of the Inspector's files that are not operations it writes (JSON lines and .prom lines: garbage, truncated, over 64 KiB).", counter).With()
	c.commsS = env.Families.NewFamily("fabric_nccl_inspector_communicators", "Communicators tracked from the Inspector's JSON files now.", gauge).With()
	c.evictedS = env.Families.NewFamily("fabric_nccl_inspector_evicted_communicators_total",
		"Communicators dropped because --collector.nccl-inspector.max-communicators were tracked.", counter).With()
	files := env.Families.NewFamily("fabric_nccl_inspector_files", "Inspector output files in the dump directory at the last poll, by format (json, prom).", gauge, "format")
	c.jsonFilesS, c.promFilesS = files.With("json"), files.With("prom")
	if no.DumpDir != "" {
		c.follower = nccl.NewFollower([]string{filepath.Join(globEscape(no.DumpDir), "*.log")}, inspectorSink{c})
		c.follower.ReadErr = func(path string, err error) {
			env.ReadErrors.Inc()
			env.Once.Debug("nccl-inspector:"+path, "msg", "cannot read NCCL Inspector file", "path", path, "err", err)
		}
	}
	return c, nil
}

// globEscape escapes the glob metacharacters of a directory name.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// pollOnce reads the JSON files' new lines and the changed .prom files.
func (c *ncclInspectorCollector) pollOnce(ctx context.Context) {
	now := c.now().UnixNano()
	c.mu.Lock()
	c.pollNow = now
	c.mu.Unlock()
	fi, err := os.Stat(c.opts.DumpDir)
	if err == nil && !fi.IsDir() {
		err = fmt.Errorf("%s is not a directory", c.opts.DumpDir)
	}
	if err != nil {
		c.mu.Lock()
		c.dirErr, c.polled = err, true
		c.mu.Unlock()
		return
	}
	c.follower.Poll(func() bool { return ctx.Err() != nil })
	_, jsonFiles := c.follower.Backlog()
	prom := c.readProm(now)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dirErr, c.polled = nil, true
	c.jsonFiles = float64(jsonFiles)
	c.prom = prom
	c.promKeys = c.promKeys[:0]
	for k := range prom {
		c.promKeys = append(c.promKeys, k)
	}
	sort.Strings(c.promKeys)
	c.expire(now)
}

// expire forgets communicators past the retention, then the oldest beyond
// the maximum.
func (c *ncclInspectorCollector) expire(now int64) {
	if r := c.opts.Retention; r > 0 {
		for k, cm := range c.comms {
			if now-cm.lastSeen > int64(r) {
				delete(c.comms, k)
				c.sorted = nil
			}
		}
	}
	for len(c.comms) > c.opts.MaxCommunicators {
		var old *inspComm
		for _, cm := range c.comms {
			if old == nil || cm.lastSeen < old.lastSeen || (cm.lastSeen == old.lastSeen && cm.key < old.key) {
				old = cm
			}
		}
		delete(c.comms, old.key)
		c.sorted = nil
		c.evicted++
	}
}

// readProm reads the .prom files that changed since the last poll; the
// others keep their series. It runs without the lock (only the poll
// goroutine writes c.prom).
func (c *ncclInspectorCollector) readProm(now int64) map[string]*inspPromFile {
	ents, err := os.ReadDir(c.opts.DumpDir)
	if err != nil {
		c.env.ReadErrors.Inc()
		c.env.Once.Debug("nccl-inspector:dir", "msg", "cannot list the NCCL Inspector directory", "err", err)
		return c.prom
	}
	type cand struct {
		name        string
		id          nccl.FileID
		size, mtime int64
	}
	var cands []cand
	for _, e := range ents {
		name := e.Name()
		if !inspector.IsPromFile(name) {
			continue
		}
		fi, err := os.Stat(filepath.Join(c.opts.DumpDir, name))
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		mt := fi.ModTime().UnixNano()
		if r := c.opts.Retention; r > 0 && now-mt > int64(r) {
			continue // left behind by a process that died
		}
		cands = append(cands, cand{name, nccl.StatID(fi), fi.Size(), mt})
	}
	if len(cands) > c.opts.MaxCommunicators { // keep the newest
		sort.Slice(cands, func(i, j int) bool {
			if cands[i].mtime != cands[j].mtime {
				return cands[i].mtime > cands[j].mtime
			}
			return cands[i].name < cands[j].name
		})
		cands = cands[:c.opts.MaxCommunicators]
	}
	out := make(map[string]*inspPromFile, len(cands))
	var unparsed float64
	for _, cd := range cands {
		old := c.prom[cd.name]
		if old != nil && old.id == cd.id && old.size == cd.size && old.mtime == cd.mtime {
			out[cd.name] = old
			continue
		}
		f, bad, err := c.readPromFile(cd.name)
		unparsed += bad
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				c.env.ReadErrors.Inc()
				c.env.Once.Debug("nccl-inspector:"+cd.name, "msg", "cannot read NCCL Inspector file", "file", cd.name, "err", err)
			}
			if old != nil {
				out[cd.name] = old
			}
			continue
		}
		f.id, f.size, f.mtime = cd.id, cd.size, cd.mtime
		if len(f.series) == 0 && old != nil {
			// Caught between the plugin's truncate and its write: keep the
			// last complete dump (stat again next poll).
			old.size = -1
			f = old
		}
		out[cd.name] = f
	}
	if unparsed > 0 {
		c.mu.Lock()
		c.unparsed += unparsed
		c.mu.Unlock()
	}
	return out
}

// readPromFile reads one .prom file into series (inspector.ParseProm) and
// counts its lines that are none of the plugin's.
func (c *ncclInspectorCollector) readPromFile(name string) (*inspPromFile, float64, error) {
	fh, err := os.Open(filepath.Join(c.opts.DumpDir, name))
	if err != nil {
		return nil, 0, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, inspector.MaxPromFile))
	if err != nil {
		return nil, 0, err
	}
	parsed, bad := inspector.ParseProm(name, data)
	f := &inspPromFile{}
	for _, p := range parsed {
		ps := inspPromSeries{}
		if p.HasBusBandwidth {
			ps.bw, ps.bwV = c.promBW.With(p.Labels[:]...), p.BusBandwidth
		}
		if p.HasExecTime {
			ps.t, ps.tV = c.promTime.With(p.Labels[:]...), p.ExecTime
		}
		f.series = append(f.series, ps)
	}
	return f, float64(bad), nil
}

// inspectorSink takes the lines of the JSON files (a nccl.Sink; the
// collector's own methods stay unexported).
type inspectorSink struct{ c *ncclInspectorCollector }

func (s inspectorSink) Begin(*nccl.File) { s.c.mu.Lock() }
func (s inspectorSink) End(*nccl.File, int) {
	s.c.mu.Unlock()
}
func (s inspectorSink) Dropped(*nccl.File) {
	s.c.lines++
	s.c.unparsed++
}
func (s inspectorSink) Line(_ *nccl.File, line []byte) { s.c.line(line) }

// line adds one JSON line's operation to its communicator.
func (c *ncclInspectorCollector) line(line []byte) {
	c.lines++
	op, err := inspector.ParseJSON(line)
	if err != nil {
		c.unparsed++
		return
	}
	key := op.Host + "\x00" + op.PID + "\x00" + op.Comm
	cm := c.comms[key]
	if cm == nil {
		cm = &inspComm{key: key, stats: map[string]*inspStat{}, host: op.Host, pid: op.PID, comm: op.Comm}
		c.comms[key] = cm
		c.sorted = nil
	}
	rank, ranks, nodes := strconv.FormatInt(op.Rank, 10), strconv.FormatInt(op.Ranks, 10), strconv.FormatInt(op.Nodes, 10)
	info := op.CommName + "\x00" + rank + "\x00" + ranks + "\x00" + nodes
	if info != cm.info {
		cm.info = info
		cm.infoS = c.infoF.With(op.Host, op.PID, op.Comm, op.CommName, rank, ranks, nodes)
	}
	cm.lastSeen = c.pollNow
	size := inspector.SizeBucket(op.Bytes)
	sk := op.Name + "\x00" + size
	st := cm.stats[sk]
	if st == nil {
		l := []string{op.Host, op.PID, op.Comm, op.Name, size}
		st = &inspStat{opsS: c.opsF.With(l...), bytesS: c.bytesF.With(l...),
			secondsS: c.secondsF.With(l...), busS: c.busF.With(l...)}
		cm.stats[sk] = st
		cm.sorted = nil
	}
	st.ops++
	st.bytes += op.Bytes
	st.seconds += op.Seconds
	st.busBytes += op.BusBytesPerSecond * op.Seconds
}

// Update copies the state into the batch.
func (c *ncclInspectorCollector) Update(ctx context.Context, b *exposition.Batch) error {
	if c.opts.DumpDir == "" {
		return notConfigured("no --collector.nccl-inspector.dump-dir")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sorted == nil {
		c.sorted = make([]*inspComm, 0, len(c.comms))
		for _, cm := range c.comms {
			c.sorted = append(c.sorted, cm)
		}
		sort.Slice(c.sorted, func(i, j int) bool { return c.sorted[i].key < c.sorted[j].key })
	}
	for _, cm := range c.sorted {
		b.Add(cm.infoS, 1)
		if cm.sorted == nil {
			keys := make([]string, 0, len(cm.stats))
			for k := range cm.stats {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				cm.sorted = append(cm.sorted, cm.stats[k])
			}
		}
		for _, st := range cm.sorted {
			b.Add(st.opsS, st.ops)
			b.Add(st.bytesS, st.bytes)
			b.Add(st.secondsS, st.seconds)
			b.Add(st.busS, st.busBytes)
		}
	}
	for _, k := range c.promKeys {
		for _, s := range c.prom[k].series {
			if s.bw != nil {
				b.Add(s.bw, s.bwV)
			}
			if s.t != nil {
				b.Add(s.t, s.tV)
			}
		}
	}
	b.Add(c.linesS, c.lines)
	b.Add(c.unparsedS, c.unparsed)
	b.Add(c.commsS, float64(len(c.comms)))
	b.Add(c.evictedS, c.evicted)
	if c.polled && c.dirErr == nil {
		b.Add(c.jsonFilesS, c.jsonFiles)
		b.Add(c.promFilesS, float64(len(c.prom)))
	}
	if c.dirErr != nil {
		return sourceMissing(c.opts.DumpDir, inspectorFix, "--collector.nccl-inspector.dump-dir %s: %v", c.opts.DumpDir, c.dirErr)
	}
	return nil
}

const inspectorFix = "create the directory the NCCL processes get as NCCL_INSPECTOR_DUMP_DIR and mount it into the exporter (-v /var/lib/nccl-inspector:/var/lib/nccl-inspector:ro)"
