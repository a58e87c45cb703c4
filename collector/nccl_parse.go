package collector

import "bytes"

// NCCL log line parser. Pure functions over one line: no allocation, no
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

// Which network a process uses: the version table.
//
// NCCL picks its network once per process (2.4-2.12) or per communicator
// (2.13 on) by trying, in order, an external plugin (libnccl-net.so), IB,
// then sockets; the first that initialises and has a device is taken (from
// 2.10 NCCL_NET filters by name). Initialising a net prints its device
// list, so a "NET/X : Using" line says a net was tried, not taken. Cited as
// file:line@tag of github.com/NVIDIA/nccl.
//
//	release     lines printed while picking, in order            the decision
//	2.3         "Using internal|external Network %s"              that line (init.cu:74,77@v2.3.7-1)
//	2.4.2-2.4.7 "NET/Socket : Using%s" FIRST for every process    "Ring .. via NET/%s/%d" only
//	            (sockets are initialised for bootstrap before      (net.cc:306,331@v2.4.7-1); IB
//	            anything else, init.cc:128@v2.4.7-1), "NET/Plugin   device list = IB taken
//	            : No plugin found (libnccl-net.so).", then
//	            "NET/IB : Using%s ; OOB %s:%s" or "NET/IB : No
//	            device found." (net_ib.cc:158,168@v2.4.7-1)
//	2.4.8-2.5   "Bootstrap : Using%s" (bootstrap.cc:48@v2.4.8-1),  "Ring .. via NET/%s/%d" only;
//	            plugin line, IB list, "NET/Socket : Using%s" only  socket list after "No device
//	            when IB failed (init.cc:126-138@v2.4.8-1)          found" = Socket taken
//	2.6-2.7     same, then "Using network %s"                     "Using network %s"
//	            (init.cc:120@v2.6.4-1, init.cc:124@v2.7.8-1)      (channel lines "Channel %02d :
//	                                                               .. via NET/%s/%d%s" from 2.7.3)
//	2.8-2.12    same (init.cc:124@v2.8.4-1, net.cc:160-199 and    "Using network %s"
//	            init.cc:78@v2.12.12-1); NCCL_NET checked before
//	            a net is initialised (init.cc:108@v2.10.3-1)
//	2.13-2.18   every net is initialised up to the one NCCL_NET   "Using network %s"
//	            names (netGetState before the name check,         (init.cc:310@v2.18.5-1)
//	            net.cc:273-275@v2.13.4-1): NCCL_NET=Socket logs
//	            "NET/IB : Using" THEN "NET/Socket : Using"
//	2.19-2.26   as 2.13; plugin lines "NET/Plugin: Could not      "Using network %s"
//	            find: .. Using internal network plugin."          (init.cc:335@v2.19.3-1,
//	            (net.cc:439@v2.23.4-1); from 2.24 "NET/IB :       init.cc:342@v2.23.4-1)
//	            Using [RO]; OOB .." even with no device
//	            (net_ib.cc:672@v2.24.3-1)
//	2.27        "Initialized NET plugin %s" per net initialised   "Assigned NET plugin %s to
//	            (plugin/net.cc:147@v2.27.7-1), name checked after  comm" (plugin/net.cc:175),
//	            init (plugin/net.cc:166)                           "Using network %s" (init.cc:346)
//	2.28+       name checked before init (plugin/net.cc:          "Assigned NET plugin %s to
//	            359-360@v2.28.9-1); "Failed to initialize NET      comm" (plugin/net.cc:244),
//	            plugin %s" (plugin/net.cc:225)                     "Using network %s" (init.cc:428)
//
// In every release "via NET/%s/%d[(%d)][/GDRDMA[(PCI)]][/Shared]" names the
// net of that connection (comm->ncclNet->name), and on failure 2.10-2.26
// WARN "Error: network %s not found." and 2.27+ WARN "Failed to initialize
// any NET plugin" (after which no net is in use).
//
// So the collector takes, highest level first (ncclNetFromUsing ...):
// a decision line; else the net of a connection; else a device list that
// names at least one device (withdrawn for good when a socket list follows
// it: 2.13-2.27 with NCCL_NET); else Socket only with proof that NCCL got
// past the plugin and IB: a socket list plus "NET/IB : No device found."
// (IB is initialised only when no plugin was taken), or plus
// NCCL_IB_DISABLE=1 and a "no plugin" line. A socket list alone is never
// taken: 2.4.2-2.4.7 print it before they pick IB. Each change of a
// process's network is logged at debug level with the deciding line, its
// file and byte offset. docs/nccl-classification.md has the long version.

// ncclLineKind says what a line is.
type ncclLineKind uint8

const (
	ncclNotNCCL     ncclLineKind = iota // not an NCCL log line (application output, garbage)
	ncclInfo                            // host:pid:tid [dev] NCCL INFO …
	ncclWarn                            // … NCCL WARN …
	ncclTrace                           // … NCCL TRACE …
	ncclBareVersion                     // "NCCL version 2.19.3+cuda12.3" without header (printed to stdout)
)

// ncclLine is one parsed line. host and pid are empty for ncclBareVersion.
type ncclLine struct {
	kind      ncclLineKind
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
	maxNCCLPidLen    = 32 // longer "pids" are not NCCL headers
	maxNCCLPidNumLen = 18 // digits of a pid that fit in a uint64
	maxNCCLDevLen    = 16 // "[cudaDev]" token
	maxNCCLSkipTok   = 2  // tokens between "[cudaDev]" and "NCCL WARN|TRACE"
)

var (
	ncclMarker       = []byte("NCCL ")
	ncclVersionWord  = []byte("version ")
	rayRepeated      = []byte(" across cluster]")
	mpiStream        = []byte("]<std")
	rayPid           = []byte("pid=")
	rayRepeatedStart = []byte(" [repeated ")
	cudaWord         = []byte("cuda")
)

// parseNCCLLine classifies one line (without its '\n').
func parseNCCLLine(line []byte) ncclLine {
	var l ncclLine
	parseNCCLLineTo(line, &l)
	return l
}

// parseNCCLLineTo is parseNCCLLine writing into l.
func parseNCCLLineTo(line []byte, l *ncclLine) {
	line = trimRightSpace(line)
	if parseNCCLPlain(line, l) {
		return
	}
	// Two common prefixes without the general search: Open MPI's
	// "[1,0]<stdout>:" and a quote "> ".
	if len(line) > 2 && line[0] == '[' {
		if k := bytes.Index(line[:min(len(line), 40)], mpiStream); k > 0 {
			if c := bytes.IndexByte(line[k:], ':'); c > 0 && c < 10 && parseNCCLPlain(line[k+c+1:], l) {
				l.tag = line[:k+1]
				return
			}
		}
	} else if len(line) > 2 && line[0] == '>' && line[1] == ' ' && parseNCCLPlain(line[2:], l) {
		return
	}
	*l = parseNCCLGeneral(line)
	l.pidNum, l.pidNumOK = pidNumber(l.pid)
}

// pidNumber returns the value of a numeric pid of at most
// maxNCCLPidNumLen digits.
func pidNumber(pid []byte) (uint64, bool) {
	if len(pid) == 0 || len(pid) > maxNCCLPidNumLen {
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

// parseNCCLGeneral finds the level marker anywhere and reads the header
// backwards from it.
func parseNCCLGeneral(line []byte) ncclLine {
	from := 0
	for {
		j := bytes.Index(line[from:], ncclMarker)
		if j < 0 {
			return ncclLine{}
		}
		j += from
		rest := line[j+len(ncclMarker):]
		var kind ncclLineKind
		var lvl int
		switch {
		case hasWord(rest, "INFO"):
			kind, lvl = ncclInfo, 4
		case hasWord(rest, "WARN"):
			kind, lvl = ncclWarn, 4
		case hasWord(rest, "TRACE"):
			kind, lvl = ncclTrace, 5
		case bytes.HasPrefix(rest, ncclVersionWord):
			return parseBareVersion(line, j, rest[len(ncclVersionWord):])
		default:
			from = j + len(ncclMarker)
			continue
		}
		if j == 0 || line[j-1] != ' ' {
			return ncclLine{}
		}
		l, ok := parseNCCLHeader(line, j-1)
		if !ok {
			return ncclLine{}
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

// parseNCCLPlain is the fast path for a line as NCCL writes it, without a
// prefix: "host:pid:tid [dev] NCCL INFO|WARN message". Anything else goes
// the general way.
func parseNCCLPlain(line []byte, l *ncclLine) bool {
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
	if i == ps || i-ps > maxNCCLPidNumLen || i == len(line) || line[i] != ':' {
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
	for i < len(line) && line[i] != ']' && i-ds < maxNCCLDevLen {
		i++
	}
	rest := line[i:]
	if len(rest) < 11 || rest[0] != ']' || string(rest[1:7]) != " NCCL " {
		return false
	}
	switch string(rest[7:11]) {
	case "INFO":
		l.kind = ncclInfo
	case "WARN":
		l.kind = ncclWarn
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

// parseNCCLHeader reads "host:pid[:tid] [dev] [file:line …]" backwards from
// end, the index of the space before "NCCL".
func parseNCCLHeader(line []byte, end int) (ncclLine, bool) {
	var l ncclLine
	devStart := -1
	for k := 0; k <= maxNCCLSkipTok; k++ {
		e := end
		for e > 0 && line[e-1] == ' ' {
			e--
		}
		if e == 0 {
			return l, false
		}
		s := bytes.LastIndexByte(line[:e], ' ') + 1
		tok := line[s:e]
		if len(tok) >= 2 && len(tok) <= maxNCCLDevLen && tok[0] == '[' && tok[len(tok)-1] == ']' {
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
	if len(pid) == 0 || len(pid) > maxNCCLPidLen {
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
	l.tag = ncclTag(line[:hs+k])
	return l, true
}

// parseBareVersion accepts "…NCCL version X" where X starts with a digit and
// nothing follows it: the version banner NCCL prints on stdout.
func parseBareVersion(line []byte, j int, v []byte) ncclLine {
	if len(v) == 0 || v[0] < '0' || v[0] > '9' || bytes.IndexByte(v, ' ') >= 0 {
		return ncclLine{}
	}
	return ncclLine{kind: ncclBareVersion, msg: v, tag: ncclTag(line[:j])}
}

// ncclTag returns the stream tag of a prefix: the "[rank,n]" of Open MPI's
// "[1,0]<stdout>:" or the "pid=N" of Ray's "(RayWorker pid=N)".
func ncclTag(prefix []byte) []byte {
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

func isHostChar(c byte) bool { return hostChars[c] != 0 }

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

// Messages.

// ncclEventKind is what an INFO message tells about its process.
type ncclEventKind uint8

const (
	ncclEvNone        ncclEventKind = iota
	ncclEvNet                       // the network: name, level
	ncclEvConnection                // a channel connection: transport, gdr
	ncclEvNetDevices                // "NET/IB : Using [0]mlx5_0:1/RoCE …": list
	ncclEvSocketIfs                 // "NET/Socket : Using [0]eth0:10.0.0.1<0> …": list
	ncclEvVersion                   // "NCCL version 2.19.3+cuda12.3": name = version
	ncclEvEnv                       // "NCCL_X set by environment to V": name, value
	ncclEvGDRDisabled               // "NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1' (no module)": net, name, value
	ncclEvNetNoDevice               // "NET/IB : No device found.": name = the net
	ncclEvPluginNone                // "NET/Plugin : No plugin found …": no external net plugin is in use
)

// How sure a line is about the network a process uses; a higher level
// replaces a lower one (the version table above says why).
const (
	// "NET/Socket : Using [0]eth0:…" together with proof that NCCL did not
	// get a network before it in its order (an external plugin, then IB):
	// "NET/IB : No device found.", or NCCL_IB_DISABLE set and no plugin.
	ncclNetFromSocketFallback = 1
	ncclNetFromDeviceList     = 2 // "NET/IB : Using [0]…" (a plugin may print it for its own net)
	ncclNetFromConnection     = 3 // "… via NET/IBext/0": the net a channel runs on
	ncclNetFromUsing          = 4 // "Using network IB", "Assigned NET plugin IB to comm", 2.3's "Using internal Network IB"
)

// ncclEvidenceName names a level in the debug log and the docs.
func ncclEvidenceName(level int8) string {
	switch level {
	case ncclNetFromSocketFallback:
		return "socket-fallback"
	case ncclNetFromDeviceList:
		return "device-list"
	case ncclNetFromConnection:
		return "connection"
	case ncclNetFromUsing:
		return "decision"
	}
	return "none"
}

// ncclEvent is the fact one message carries. Byte fields are subslices of
// the message.
type ncclEvent struct {
	kind        ncclEventKind
	level       int8
	gdr         bool
	name, value []byte // net name, transport, version, variable, device
	net         []byte // ncclEvGDRDisabled: the net that printed it
	list        []byte // ncclEvNetDevices, ncclEvSocketIfs: the "[0]…" list
}

var (
	msgUsingNetwork = []byte("Using network ")
	msgUsingIntNet  = []byte("Using internal Network ") // NCCL 2.3
	msgUsingExtNet  = []byte("Using external Network ") // NCCL 2.3
	msgNoDevice     = []byte("No device found")
	msgNoPlugin     = []byte("No plugin found")
	msgCouldNotFind = []byte("Could not find")
	msgPluginLoad   = []byte("Plugin load ")
	msgInternal     = []byte("nternal ") // "using internal implementation", "Using internal network plugin"
	msgAssigned     = []byte("Assigned NET plugin ")
	msgToComm       = []byte(" to comm")
	msgNET          = []byte("NET/")
	msgChannel      = []byte("Channel ")
	msgRing         = []byte("Ring ")
	msgVia          = []byte(" via ")
	msgSetByEnv     = []byte(" set by environment to ")
	msgNCCLVersion  = []byte("NCCL version ")
	msgUsing        = []byte("Using")
	msgGDRDisabled  = []byte("GPU Direct RDMA Disabled for HCA ")
	msgGDRDMA       = []byte("/GDRDMA")
	msgDirectShm    = []byte("direct shared memory")
	msgP2P          = []byte("P2P/")
	msgOOB          = []byte("; OOB")
	msgNCCLPrefix   = []byte("NCCL_")
	transportSHM    = []byte("SHM")
)

// classifyNCCLMessage extracts the fact an INFO message carries, if any.
func classifyNCCLMessage(msg []byte) ncclEvent {
	var ev ncclEvent
	classifyNCCLMessageTo(msg, &ev)
	return ev
}

// classifyNCCLMessageTo is classifyNCCLMessage writing into ev (the
// collector reuses one event: no copies of the struct per line).
func classifyNCCLMessageTo(msg []byte, ev *ncclEvent) {
	ev.kind = ncclEvNone
	if len(msg) == 0 {
		return
	}
	switch msg[0] {
	case 'C':
		if bytes.HasPrefix(msg, msgChannel) {
			parseConnection(msg, ev)
			return
		}
	case 'R':
		if bytes.HasPrefix(msg, msgRing) {
			parseConnection(msg, ev)
			return
		}
	case 'U':
		var name []byte
		switch {
		case bytes.HasPrefix(msg, msgUsingNetwork):
			name = msg[len(msgUsingNetwork):]
		case bytes.HasPrefix(msg, msgUsingIntNet):
			name = msg[len(msgUsingIntNet):]
		case bytes.HasPrefix(msg, msgUsingExtNet):
			name = msg[len(msgUsingExtNet):]
		}
		if name = trimLeftSpace(name); len(name) > 0 {
			*ev = ncclEvent{kind: ncclEvNet, level: ncclNetFromUsing, name: name}
			return
		}
	case 'A':
		if bytes.HasPrefix(msg, msgAssigned) && bytes.HasSuffix(msg, msgToComm) {
			if name := msg[len(msgAssigned) : len(msg)-len(msgToComm)]; len(name) > 0 {
				*ev = ncclEvent{kind: ncclEvNet, level: ncclNetFromUsing, name: name}
				return
			}
		}
	case 'N':
		if bytes.HasPrefix(msg, msgNET) {
			parseNETMessage(msg, ev)
			return
		}
		if bytes.HasPrefix(msg, msgNCCLVersion) {
			v := msg[len(msgNCCLVersion):]
			if i := bytes.IndexByte(v, ' '); i >= 0 {
				v = v[:i]
			}
			if len(v) > 0 && v[0] >= '0' && v[0] <= '9' {
				*ev = ncclEvent{kind: ncclEvVersion, name: v}
				return
			}
			return
		}
		if i := bytes.Index(msg, msgSetByEnv); i > len("NCCL_") && bytes.HasPrefix(msg, msgNCCLPrefix) {
			name := msg[:i]
			if bytes.IndexByte(name, ' ') >= 0 {
				return
			}
			v := msg[i+len(msgSetByEnv):]
			// Integer parameters end with a period ("… to 1."), strings do not.
			if len(v) > 1 && v[len(v)-1] == '.' && isInteger(v[:len(v)-1]) {
				v = v[:len(v)-1]
			}
			*ev = ncclEvent{kind: ncclEvEnv, name: name, value: v}
			return
		}
	}
}

func isInteger(b []byte) bool {
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	return isDigits(b)
}

// parseConnection reads "Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA"
// (and the older "Ring 00 : 15 -> 0 [receive] via NET/Socket/0").
func parseConnection(msg []byte, ev *ncclEvent) {
	if t := connectionVia(msg); t != nil {
		parseTransport(t, ev)
	}
}

// connectionVia returns what follows " via " in a "Channel …"/"Ring …"
// message with an "a -> b" before it, or nil.
func connectionVia(msg []byte) []byte {
	a := bytes.IndexByte(msg, '>')
	if a < 1 || msg[a-1] != '-' {
		return nil // not "a -> b"
	}
	i := bytes.Index(msg[a:], msgVia)
	if i < 0 {
		return nil
	}
	t := trimLeftSpace(msg[a+i+len(msgVia):])
	if len(t) == 0 {
		return nil
	}
	return t
}

// parseTransport reads the transport after " via ": "NET/IB/0/GDRDMA",
// "P2P/IPC/read", "SHM/direct/direct", "direct shared memory".
func parseTransport(t []byte, ev *ncclEvent) {
	ev.kind = ncclEvNone
	ev.gdr, ev.net = false, nil
	switch {
	case bytes.HasPrefix(t, msgNET):
		// NET/<name>/<dev>[(<proxy rank>)][/GDRDMA[(PCI)]][/Shared]
		name := t[len(msgNET):]
		if k := bytes.IndexByte(name, '/'); k >= 0 {
			name = name[:k]
		}
		if len(name) == 0 {
			return
		}
		ev.name = t[:len(msgNET)+len(name)]
		ev.gdr = bytes.Contains(t[len(ev.name):], msgGDRDMA)
		ev.net = name
	case bytes.HasPrefix(t, msgDirectShm):
		// NCCL before 2.7 named the shared-memory transport this way.
		ev.name = transportSHM
	case bytes.HasPrefix(t, msgP2P):
		// P2P/IPC, P2P/IPC/read, P2P/CUMEM/CE, P2P/direct pointer
		kind := t[len(msgP2P):]
		if k := bytes.IndexByte(kind, '/'); k >= 0 {
			kind = kind[:k]
		}
		ev.name = t[:len(msgP2P)+len(kind)]
	default:
		// SHM/direct/direct → SHM; anything else by its first element.
		if k := bytes.IndexByte(t, '/'); k >= 0 {
			t = t[:k]
		}
		ev.name = t
	}
	ev.kind = ncclEvConnection
}

// parseNETMessage reads the "NET/<name> : …" messages of the network
// transports: device lists, "No device found", GPU Direct RDMA status, and
// the "NET/Plugin" lines that say no external plugin is in use.
func parseNETMessage(msg []byte, ev *ncclEvent) {
	rest := msg[len(msgNET):]
	sep := bytes.IndexByte(rest, ':')
	if sep <= 0 {
		return
	}
	net := trimRightSpace(rest[:sep])
	if len(net) == 0 || bytes.IndexByte(net, ' ') >= 0 {
		return
	}
	body := trimLeftSpace(rest[sep+1:])
	switch {
	case string(net) == "Plugin":
		// "No plugin found (libnccl-net.so)." (2.4), "…, using internal
		// implementation" (2.5-2.22), "Using internal network plugin."
		// (2.23-2.25), "Could not find: libnccl-net.so" (2.23+), "Plugin
		// load returned 2 : …" (dlopen failed).
		if bytes.Contains(body, msgNoPlugin) || bytes.HasPrefix(body, msgCouldNotFind) ||
			bytes.HasPrefix(body, msgPluginLoad) || bytes.Contains(body, msgInternal) {
			*ev = ncclEvent{kind: ncclEvPluginNone, name: net}
		}
	case bytes.HasPrefix(body, msgUsing) && (len(body) == len(msgUsing) || body[len(msgUsing)] == ' '):
		list := body[len(msgUsing):]
		if i := bytes.Index(list, msgOOB); i >= 0 {
			list = list[:i]
		}
		kind := ncclEvNetDevices
		if string(net) == "Socket" {
			kind = ncclEvSocketIfs
		}
		*ev = ncclEvent{kind: kind, name: net, list: list}
	case bytes.HasPrefix(body, msgNoDevice):
		*ev = ncclEvent{kind: ncclEvNetNoDevice, name: net}
	case bytes.HasPrefix(body, msgGDRDisabled):
		// "… for HCA 1 'mlx5_1' (no module)", "… for HCA 0 'lo'"
		d := body[len(msgGDRDisabled):]
		q := bytes.IndexByte(d, '\'')
		if q < 0 {
			return
		}
		e := bytes.IndexByte(d[q+1:], '\'')
		if e < 0 {
			return
		}
		*ev = ncclEvent{kind: ncclEvGDRDisabled, net: net, name: d[q+1 : q+1+e]}
		r := d[q+1+e+1:]
		if o := bytes.IndexByte(r, '('); o >= 0 {
			if c := bytes.LastIndexByte(r, ')'); c > o {
				ev.value = r[o+1 : c]
			}
		}
	}
}

// forEachNCCLListItem calls fn for every "[i]item" of a "NET/… : Using"
// list: "[0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]", merged devices
// "[0]={[0] mlx5_0:1/RoCE, [1] mlx5_1:1/RoCE}", socket interfaces
// "[0]eth0:10.0.0.1<0> [1]ib0:fe80::1%ib0<0>". item has no index; entries
// that do not follow an index are skipped.
func forEachNCCLListItem(list []byte, fn func(item []byte)) {
	afterIndex := false
	for len(list) > 0 {
		// next token, separated by spaces, commas and braces
		i := 0
		for i < len(list) && isListSep(list[i]) {
			i++
		}
		list = list[i:]
		e := 0
		for e < len(list) && !isListSep(list[e]) {
			e++
		}
		tok := list[:e]
		list = list[e:]
		if len(tok) == 0 {
			continue
		}
		if tok[0] == '[' {
			c := bytes.IndexByte(tok, ']')
			if c < 0 || !isDigits(tok[1:c]) {
				afterIndex = false
				continue
			}
			tok = tok[c+1:]
			afterIndex = true
			if len(tok) == 0 {
				continue // "[0] mlx5_0:1/RoCE": the item is the next token
			}
		} else if !afterIndex {
			continue
		}
		afterIndex = false
		fn(tok)
	}
}

func isListSep(c byte) bool {
	return c == ' ' || c == ',' || c == '{' || c == '}' || c == '=' || c == '\t'
}

// splitNCCLDevice splits "mlx5_0:1/RoCE" (or "mlx5_0:1/IB/SHARP") into
// device, port and link (the first element after the slash).
func splitNCCLDevice(item []byte) (dev, port, link []byte, ok bool) {
	sl := bytes.IndexByte(item, '/')
	if sl < 0 {
		return nil, nil, nil, false
	}
	head := item[:sl]
	c := bytes.LastIndexByte(head, ':')
	if c <= 0 || !isDigits(head[c+1:]) {
		return nil, nil, nil, false
	}
	link = item[sl+1:]
	if k := bytes.IndexByte(link, '/'); k >= 0 {
		link = link[:k]
	}
	if len(link) == 0 {
		return nil, nil, nil, false
	}
	return head[:c], head[c+1:], link, true
}

// splitNCCLInterface returns the interface of "eth0:10.0.0.1<0>".
func splitNCCLInterface(item []byte) ([]byte, bool) {
	c := bytes.IndexByte(item, ':')
	if c <= 0 {
		return nil, false
	}
	return item[:c], true
}

// splitNCCLVersion splits "2.19.3+cuda12.3" into "2.19.3" and "12.3".
func splitNCCLVersion(v []byte) (version, cuda []byte) {
	p := bytes.IndexByte(v, '+')
	if p < 0 {
		return v, nil
	}
	version, rest := v[:p], v[p+1:]
	if bytes.HasPrefix(rest, cudaWord) {
		cuda = rest[len("cuda"):]
	}
	return version, cuda
}

// NCCL init failures. When NCCL finds no network at all, communicator init
// fails; these WARN messages (format strings from NCCL's source) say so:
//
//	2.27+       plugin/net.cc  "Failed to initialize any NET plugin"
//	2.12–2.26   net.cc         "Error: network %s not found."
//	2.4+        net_socket.cc  "NET/Socket : no interface found" (the socket
//	            transport is initialised only after every other net failed)
//	2.4+        bootstrap.cc   "Bootstrap : no socket interface found"
//
// The init then unwinds with "file:line -> 5" INFO lines (ncclInvalidUsage).
// Not failures: the INFO "Failed to initialize NET plugin IB" of 2.28 (NCCL
// goes on to the next plugin), and "NET/IB : Using [RO]; OOB …" after
// "NET/IB : No device found." (a device list without devices).
var (
	msgNoNetPlugin   = []byte("Failed to initialize any NET plugin")
	msgNetworkPrefix = []byte("Error: network ")
	msgNotFound      = []byte(" not found")
	msgNoSocketIf    = []byte("NET/Socket : no interface found")
	msgNoBootstrapIf = []byte("Bootstrap : no socket interface found")
	msgInitComplete  = []byte(" - Init COMPLETE")
)

// isNCCLInitFailure reports whether a WARN message says that NCCL's init
// found no usable network.
func isNCCLInitFailure(msg []byte) bool {
	switch {
	case bytes.HasPrefix(msg, msgNoNetPlugin), bytes.HasPrefix(msg, msgNoSocketIf), bytes.HasPrefix(msg, msgNoBootstrapIf):
		return true
	case bytes.HasPrefix(msg, msgNetworkPrefix):
		return bytes.Contains(msg[len(msgNetworkPrefix):], msgNotFound)
	}
	return false
}

// isNCCLInitComplete reports whether an INFO message is the line NCCL prints
// when a communicator's init succeeded ("comm 0x… rank 0 nranks 2 … - Init
// COMPLETE", every version since 2.4).
func isNCCLInitComplete(msg []byte) bool {
	return bytes.HasSuffix(msg, msgInitComplete)
}
