package nccl

import "bytes"

// The NCCL log line parser. Pure functions over one line: no allocation, no
// state; every field returned is a subslice of the input line.
//
// An NCCL log line is `host:pid:tid [cudaDev] NCCL INFO|WARN|TRACE message`
// (src/debug.cc). WARN lines carry a `file:line` (or `function:line`) token
// before `NCCL WARN`, TRACE lines a time and a `function:line`, and recent
// versions start WARN lines with a `[YYYY-MM-DD HH:MM:SS] ` timestamp.
// Real collection adds more in front: Open MPI's `[1,0]<stdout>:`, Ray's
// `(RayWorker pid=N)` (sometimes ANSI-coloured, with `[repeated 3x across
// cluster]` at the end), pdsh's `host: `, kubectl or journald timestamps, a
// markdown quote `> `. Instead of knowing every prefix, the parser finds the
// level marker and reads the header backwards from it: the `[cudaDev]`
// token, then the `host:pid[:tid]` token, whose host ends at the first
// character that cannot be part of a host name. Whatever stands before the
// host is the prefix.

// lineKind says what a line is.
type lineKind uint8

const (
	lineNotNCCL     lineKind = iota // not an NCCL log line (application output, garbage)
	lineInfo                        // host:pid:tid [dev] NCCL INFO …
	lineWarn                        // … NCCL WARN …
	lineTrace                       // … NCCL TRACE …
	lineBareVersion                 // "NCCL version 2.19.3+cuda12.3" without header (printed to stdout)
)

// logLine is one parsed line. host and pid are empty for lineBareVersion.
type logLine struct {
	kind      lineKind
	host, pid []byte
	// tag identifies the stream of a merged capture: "[1,0]" for an Open MPI
	// rank prefix, "pid=123" for a Ray worker prefix; nil otherwise.
	tag []byte
	// msg is the message after the level, or the version of a bare
	// version line.
	msg []byte
	// pidNum is the value of pid when pidNumOK (a numeric pid).
	pidNum   uint64
	pidNumOK bool
}

const (
	maxPidLen    = 32 // longer "pids" are not NCCL headers
	maxPidNumLen = 18 // digits of a pid that fit in a uint64
	maxDevLen    = 16 // "[cudaDev]" token
	maxSkipTok   = 2  // tokens between "[cudaDev]" and "NCCL WARN|TRACE"
)

var (
	levelMarker      = []byte("NCCL ")
	ncclVersionWord  = []byte("version ")
	rayRepeated      = []byte(" across cluster]")
	mpiStream        = []byte("]<std")
	rayPid           = []byte("pid=")
	rayRepeatedStart = []byte(" [repeated ")
	cudaWord         = []byte("cuda")
)

// parseLineTo classifies one line (without its '\n') into l.
func parseLineTo(line []byte, l *logLine) {
	line = trimRightSpace(line)
	if parsePlain(line, l) {
		return
	}
	// Two common prefixes without the general search: Open MPI's
	// "[1,0]<stdout>:" and a quote "> ".
	if len(line) > 2 && line[0] == '[' {
		if k := bytes.Index(line[:min(len(line), 40)], mpiStream); k > 0 {
			if c := bytes.IndexByte(line[k:], ':'); c > 0 && c < 10 && parsePlain(line[k+c+1:], l) {
				l.tag = line[:k+1]
				return
			}
		}
	} else if len(line) > 2 && line[0] == '>' && line[1] == ' ' && parsePlain(line[2:], l) {
		return
	}
	*l = parseGeneral(line)
	l.pidNum, l.pidNumOK = pidNumber(l.pid)
}

// pidNumber returns the value of a numeric pid of at most
// maxPidNumLen digits.
func pidNumber(pid []byte) (uint64, bool) {
	if len(pid) == 0 || len(pid) > maxPidNumLen {
		return 0, false
	}
	var n uint64
	for _, c := range pid {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}

// parseGeneral finds the level marker anywhere and reads the header
// backwards from it.
func parseGeneral(line []byte) logLine {
	from := 0
	for {
		j := bytes.Index(line[from:], levelMarker)
		if j < 0 {
			return logLine{}
		}
		j += from
		rest := line[j+len(levelMarker):]
		var kind lineKind
		var lvl int
		switch {
		case hasWord(rest, "INFO"):
			kind, lvl = lineInfo, 4
		case hasWord(rest, "WARN"):
			kind, lvl = lineWarn, 4
		case hasWord(rest, "TRACE"):
			kind, lvl = lineTrace, 5
		case bytes.HasPrefix(rest, ncclVersionWord):
			return parseBareVersion(line, j, rest[len(ncclVersionWord):])
		default:
			from = j + len(levelMarker)
			continue
		}
		if j == 0 || line[j-1] != ' ' {
			return logLine{}
		}
		l, ok := parseHeader(line, j-1)
		if !ok {
			return logLine{}
		}
		l.kind = kind
		msg := rest[lvl:]
		if len(msg) > 0 && msg[0] == ' ' {
			msg = msg[1:]
		}
		l.msg = trimRayRepeated(msg)
		return l
	}
}

// parsePlain is the fast path for a line as NCCL writes it, without a
// prefix: "host:pid:tid [dev] NCCL INFO|WARN message". Anything else goes
// the general way.
func parsePlain(line []byte, l *logLine) bool {
	// One forward pass: host characters up to ':', digits up to ':',
	// digits up to ' ', then "[dev] NCCL INFO|WARN".
	i := bytes.IndexByte(line, ':')
	if i <= 0 || !allHostChars(line[:i]) {
		return false
	}
	host := line[:i]
	i++
	ps := i
	var n uint64
	for i < len(line) && line[i] >= '0' && line[i] <= '9' {
		n = n*10 + uint64(line[i]-'0')
		i++
	}
	if i == ps || i-ps > maxPidNumLen || i == len(line) || line[i] != ':' {
		return false
	}
	pid := line[ps:i]
	i++
	ts := i
	for i < len(line) && line[i] >= '0' && line[i] <= '9' {
		i++
	}
	if i == ts || i+2 >= len(line) || line[i] != ' ' || line[i+1] != '[' {
		return false
	}
	i += 2
	ds := i
	for i < len(line) && line[i] != ']' && i-ds < maxDevLen {
		i++
	}
	rest := line[i:]
	if len(rest) < 11 || rest[0] != ']' || string(rest[1:7]) != " NCCL " {
		return false
	}
	switch string(rest[7:11]) {
	case "INFO":
		l.kind = lineInfo
	case "WARN":
		l.kind = lineWarn
	default:
		return false
	}
	msg := rest[11:]
	if len(msg) > 0 {
		if msg[0] != ' ' {
			return false
		}
		msg = msg[1:]
	}
	l.host, l.pid, l.tag, l.msg = host, pid, nil, trimRayRepeated(msg)
	l.pidNum, l.pidNumOK = n, true
	return true
}

// hasWord reports whether b starts with w followed by a space or the end.
func hasWord(b []byte, w string) bool {
	return len(b) >= len(w) && string(b[:len(w)]) == w && (len(b) == len(w) || b[len(w)] == ' ')
}

// parseHeader reads "host:pid[:tid] [dev] [file:line …]" backwards from
// end, the index of the space before "NCCL".
func parseHeader(line []byte, end int) (logLine, bool) {
	var l logLine
	devStart := -1
	for k := 0; k <= maxSkipTok; k++ {
		e := end
		for e > 0 && line[e-1] == ' ' {
			e--
		}
		if e == 0 {
			return l, false
		}
		s := bytes.LastIndexByte(line[:e], ' ') + 1
		tok := line[s:e]
		if len(tok) >= 2 && len(tok) <= maxDevLen && tok[0] == '[' && tok[len(tok)-1] == ']' {
			devStart = s
			break
		}
		end = s
		if s == 0 {
			return l, false
		}
	}
	if devStart <= 0 || line[devStart-1] != ' ' {
		return l, false
	}
	e := devStart - 1
	for e > 0 && line[e-1] == ' ' {
		e--
	}
	hs := bytes.LastIndexByte(line[:e], ' ') + 1
	hdr := line[hs:e]
	c1 := bytes.LastIndexByte(hdr, ':')
	if c1 < 0 {
		return l, false
	}
	last, before := hdr[c1+1:], hdr[:c1]
	pid, hostField := last, before
	if c2 := bytes.LastIndexByte(before, ':'); c2 >= 0 && isDigits(last) && isDigits(before[c2+1:]) {
		pid, hostField = before[c2+1:], before[:c2]
	}
	if len(pid) == 0 || len(pid) > maxPidLen {
		return l, false
	}
	for _, c := range pid {
		if c <= ' ' || c >= 0x7f {
			return l, false
		}
	}
	k := len(hostField)
	for k > 0 && hostChars[hostField[k-1]] != 0 {
		k--
	}
	host := hostField[k:]
	if len(host) == 0 {
		return l, false
	}
	l.host, l.pid = host, pid
	// host is a subslice of line: its offset is where the prefix ends.
	l.tag = streamTag(line[:hs+k])
	return l, true
}

// parseBareVersion accepts "…NCCL version X" where X starts with a digit and
// nothing follows it: the version banner NCCL prints on stdout.
func parseBareVersion(line []byte, j int, v []byte) logLine {
	if len(v) == 0 || v[0] < '0' || v[0] > '9' || bytes.IndexByte(v, ' ') >= 0 {
		return logLine{}
	}
	return logLine{kind: lineBareVersion, msg: v, tag: streamTag(line[:j])}
}

// streamTag returns the stream tag of a prefix: the "[rank,n]" of Open MPI's
// "[1,0]<stdout>:" or the "pid=N" of Ray's "(RayWorker pid=N)".
func streamTag(prefix []byte) []byte {
	if len(prefix) == 0 {
		return nil
	}
	if i := bytes.Index(prefix, mpiStream); i >= 0 {
		if s := bytes.LastIndexByte(prefix[:i], '['); s >= 0 {
			return prefix[s : i+1]
		}
	}
	if i := bytes.Index(prefix, rayPid); i >= 0 {
		e := i + len(rayPid)
		for e < len(prefix) && prefix[e] >= '0' && prefix[e] <= '9' {
			e++
		}
		if e > i+len(rayPid) {
			return prefix[i:e]
		}
	}
	return nil
}

// trimRayRepeated drops Ray's log deduplication suffix
// " [repeated 3x across cluster]".
func trimRayRepeated(msg []byte) []byte {
	if len(msg) == 0 || msg[len(msg)-1] != ']' || !bytes.HasSuffix(msg, rayRepeated) {
		return msg
	}
	if i := bytes.LastIndex(msg, rayRepeatedStart); i >= 0 {
		return trimRightSpace(msg[:i])
	}
	return msg
}

func trimRightSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\r' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

func trimLeftSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

func isDigits(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// hostChars is 1 for the characters of a host name.
var hostChars = func() (t [256]uint8) {
	for c := range t {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' {
			t[c] = 1
		}
	}
	return t
}()

// allHostChars reports whether every byte of b is a host name character,
// eight bytes per branch (host names of Kubernetes pods are long).
func allHostChars(b []byte) bool {
	for len(b) >= 8 {
		if hostChars[b[0]]&hostChars[b[1]]&hostChars[b[2]]&hostChars[b[3]]&
			hostChars[b[4]]&hostChars[b[5]]&hostChars[b[6]]&hostChars[b[7]] == 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if hostChars[c] == 0 {
			return false
		}
	}
	return true
}
