package nccl

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
)

// TrackerOptions bounds a Tracker and says which processes are local.
type TrackerOptions struct {
	// MaxProcesses bounds the processes tracked; beyond it the one whose
	// log was written longest ago is dropped. Less than 1: 256.
	MaxProcesses int
	// Retention forgets a process whose log got no line for this long,
	// unless it is local and its PID is alive. 0: never by age.
	Retention time.Duration
	// ExitedGrace is how long a local process whose PID exited is kept
	// (exited.go); 0: dropped at the first check that finds it gone.
	ExitedGrace time.Duration
	// Hostname is the host name NCCL writes for processes of this machine;
	// Procfs (default /proc) is where their PIDs are checked.
	Hostname, Procfs string
	// Logger gets, at debug level, every change of a process's network
	// with the line that decided it (bounded per process). nil: none.
	Logger log.Logger
	// Now is the clock of Retention and ExitedGrace (nil: time.Now).
	Now func() time.Time
}

// Stats counts what a Tracker read.
type Stats struct {
	Lines    uint64 // lines read, including unparsed and dropped ones
	Unparsed uint64 // lines that are no NCCL log lines, and lines over 64 KiB
	Bytes    uint64 // bytes read
	Evicted  uint64 // processes dropped because MaxProcesses were tracked
	Exited   uint64 // local processes dropped because their PID exited
}

// Tracker is a Sink that parses NCCL log lines into Processes. The
// Follower's goroutine feeds it; View reads it from any goroutine.
// Known processes cost no allocation per line.
type Tracker struct {
	opts TrackerOptions

	mu       sync.Mutex // held from Begin to End, in Expire and View
	procs    map[string]*Process
	sorted   []*Process // by key; nil when it must be rebuilt
	keyBuf   []byte
	cache    [1 << cacheBits]*Process // by pid number (lookup)
	pl       logLine                  // the line being parsed
	ev       event                    // its event
	curFile  *File                    // the file and text of the line being parsed, for
	curLine  []byte                   // the evidence log (valid only inside Line)
	chunkMod int64                    // mtime of the file being read
	chunkNow int64                    // Now when its reading began, Unix nanoseconds
	stats    Stats

	// the PID checks (exited.go)
	locals         int // local processes tracked
	pidCheckAt     int64
	btime, btimeAt int64 // boot time (s) from Procfs/stat, and when it was read
	btimeOK        bool
	statBuf        [1024]byte
}

const (
	cacheBits  = 8
	maxNetLogs = 16 // evidence debug lines per process (a log that flips between networks)
)

// NewTracker returns an empty Tracker.
func NewTracker(o TrackerOptions) *Tracker {
	if o.MaxProcesses < 1 {
		o.MaxProcesses = 256
	}
	if o.Procfs == "" {
		o.Procfs = "/proc"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Tracker{opts: o, procs: map[string]*Process{}}
}

// View calls fn with the processes sorted by Key and the counts, under the
// Tracker's lock: fn must not keep procs or write to them.
func (t *Tracker) View(fn func(procs []*Process, st Stats)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sorted == nil {
		t.sorted = make([]*Process, 0, len(t.procs))
		for _, p := range t.procs {
			t.sorted = append(t.sorted, p)
		}
		sort.Slice(t.sorted, func(i, j int) bool { return t.sorted[i].Key < t.sorted[j].Key })
	}
	fn(t.sorted, t.stats)
}

// Begin starts a chunk of f (Sink): the Tracker is locked until End.
func (t *Tracker) Begin(f *File) {
	t.mu.Lock()
	t.chunkMod = f.mtime
	t.chunkNow = t.opts.Now().UnixNano()
}

// End ends a chunk of n bytes (Sink).
func (t *Tracker) End(f *File, n int) {
	t.stats.Bytes += uint64(n)
	t.mu.Unlock()
}

// Dropped counts a line over 64 KiB (Sink).
func (t *Tracker) Dropped(f *File) {
	t.stats.Lines++
	t.stats.Unparsed++
}

// Line parses one line of f into its process (Sink).
func (t *Tracker) Line(f *File, line []byte) {
	t.stats.Lines++
	t.curFile, t.curLine = f, line
	l := &t.pl
	parseLineTo(line, l)
	var p *Process
	switch l.kind {
	case lineNotNCCL:
		t.stats.Unparsed++
		return
	case lineBareVersion:
		if p = f.procForTag(l.tag); p != nil {
			p.setVersion(l.msg)
			t.touch(p)
		}
		return
	}
	p = t.lookup(l)
	if p == nil {
		return
	}
	f.remember(l.tag, p)
	t.touch(p)
	switch l.kind {
	case lineWarn:
		p.Warnings++
		if isInitFailure(l.msg) {
			p.setInitFailure(l.msg)
		}
		if isVerbsLibMissing(l.msg) { // a WARN up to 2.10
			p.setVerbsLibMissing()
		}
		p.warnP2PDisabled(l.msg)
		p.failoverWarn(l.msg)
	case lineInfo:
		if m := l.msg; len(m) > 0 && (m[0] == 'C' && bytes.HasPrefix(m, msgChannel) || m[0] == 'R' && bytes.HasPrefix(m, msgRing)) {
			t.connection(p, m)
			return
		}
		if p.InitFailure != "" && isInitComplete(l.msg) {
			p.InitFailure = ""
			p.Gen++
		}
		if m := l.msg; len(m) > 8 && m[0] == 'N' && m[6] == ':' {
			p.failoverInfo(m) // "NET/IB: …" (resiliency); "NET/IB : …" goes on
		}
		classifyTo(l.msg, &t.ev)
		t.apply(p, &t.ev)
	}
}

func (t *Tracker) touch(p *Process) {
	if t.chunkMod > p.LastSeen {
		p.LastSeen = t.chunkMod
	}
	p.readAt = t.chunkNow
}

// procForTag is the process a bare version line of stream tag belongs to.
func (f *File) procForTag(tag []byte) *Process {
	p := f.last
	if len(tag) > 0 && f.byTag != nil {
		p = f.byTag[string(tag)]
	}
	if p == nil || p.gone {
		return nil
	}
	return p
}

const maxTags = 256

func (f *File) remember(tag []byte, p *Process) {
	f.last = p
	if len(tag) == 0 || p == f.tagProc && string(tag) == string(f.tag[:f.tagLen]) {
		return
	}
	f.tagProc, f.tagLen = nil, 0
	if len(tag) <= len(f.tag) {
		f.tagProc, f.tagLen = p, copy(f.tag[:], tag)
	}
	if f.byTag == nil {
		f.byTag = map[string]*Process{}
	}
	if f.byTag[string(tag)] == p {
		return
	}
	if len(f.byTag) >= maxTags {
		clear(f.byTag)
	}
	f.byTag[string(tag)] = p
}

// lookup returns the process of a header line, creating it (and evicting
// the least recently logged one when the table is full).
func (t *Tracker) lookup(l *logLine) *Process {
	host, pid := l.host, l.pid
	// A direct-mapped cache by numeric pid spares hashing the key.
	n, numeric := l.pidNum, l.pidNumOK
	slot := &t.cache[(n*0x9E3779B97F4A7C15)>>(64-cacheBits)]
	if p := *slot; numeric && p != nil && p.pidNum == n && !p.gone && string(host) == p.Host {
		return p
	}
	p := t.lookupMap(host, pid)
	if numeric {
		*slot = p
	}
	return p
}

func (t *Tracker) lookupMap(host, pid []byte) *Process {
	t.keyBuf = append(append(append(t.keyBuf[:0], host...), 0), pid...)
	if p, ok := t.procs[string(t.keyBuf)]; ok {
		return p
	}
	if len(host) > maxLabel || len(pid) > maxLabel {
		host, pid = boundBytes(host), boundBytes(pid)
		t.keyBuf = append(append(append(t.keyBuf[:0], host...), 0), pid...)
		if p, ok := t.procs[string(t.keyBuf)]; ok {
			return p
		}
	}
	if len(t.procs) >= t.opts.MaxProcesses {
		t.evictOldest()
	}
	p := &Process{Host: string(host), PID: string(pid), Key: string(t.keyBuf), viaConn: -1}
	p.pidNum, _ = pidNumber(pid)
	p.local = isDigits(pid) && sameHost(p.Host, t.opts.Hostname)
	if p.local {
		t.locals++
	}
	p.firstSeen = t.chunkNow
	if p.firstSeen == 0 {
		p.firstSeen = t.opts.Now().UnixNano() // a Line outside Begin and End
	}
	t.procs[p.Key] = p
	t.sorted = nil
	return p
}

func (t *Tracker) evictOldest() {
	var old *Process
	for _, p := range t.procs {
		if old == nil || p.LastSeen < old.LastSeen || p.LastSeen == old.LastSeen && p.Key < old.Key {
			old = p
		}
	}
	if old != nil {
		t.drop(old)
		t.stats.Evicted++
	}
}

func (t *Tracker) drop(p *Process) {
	if p.local {
		t.locals--
	}
	p.gone = true
	delete(t.procs, p.Key)
	t.sorted = nil
}

// Expire drops the processes of this host whose PID exited, ExitedGrace
// after it was found gone (exited.go), and the processes without a line
// for the retention period, except those of this host whose PID is alive.
func (t *Tracker) Expire() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.opts.Now().UnixNano()
	check := t.pidChecks(now)
	limit := int64(math.MinInt64)
	if t.opts.Retention > 0 {
		limit = now - int64(t.opts.Retention)
	}
	for _, p := range t.procs {
		if p.local && check {
			switch t.pidState(p) {
			case pidExited:
				if p.exitedAt == 0 {
					p.exitedAt = now
				}
			case pidAlive:
				p.exitedAt = 0
			}
		}
		if p.exitedAt != 0 && now-max(p.exitedAt, p.readAt) >= int64(t.opts.ExitedGrace) {
			t.drop(p)
			t.stats.Exited++
			if t.opts.Logger != nil {
				level.Debug(t.opts.Logger).Log("msg", "NCCL process exited: dropped", "host", p.Host, "pid", p.PID)
			}
			continue
		}
		if p.LastSeen >= limit {
			continue
		}
		if p.local && p.exitedAt == 0 {
			if _, err := os.Stat(filepath.Join(t.opts.Procfs, p.PID)); err == nil {
				continue
			}
		}
		t.drop(p)
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

// logEvidence logs, at debug level, the line that set p's network, with
// its file and byte offset.
func (t *Tracker) logEvidence(p *Process) {
	if p.netLogs > maxNetLogs || t.opts.Logger == nil {
		return
	}
	p.netLogs++
	msg := "NCCL network classified"
	if p.Net == "" {
		msg = "NCCL network unknown again: the line shows the device list was no decision"
	}
	kv := []any{"msg", msg, "host", p.Host, "pid", p.PID, "net", p.Net,
		"evidence", p.NetEvidence.String()}
	if f := t.curFile; f != nil {
		kv = append(kv, "file", f.path, "offset", f.lineOff)
	}
	kv = append(kv, "line", boundEvidence(t.curLine))
	if p.netLogs > maxNetLogs {
		kv = append(kv, "note", "further changes of this process are not logged")
	}
	level.Debug(t.opts.Logger).Log(kv...)
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
