package nccl

import "bytes"

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
// So the Tracker takes, highest evidence first (EvidenceDecision …):
// a decision line; else the net of a connection; else a device list that
// names at least one device (withdrawn for good when a socket list follows
// it: 2.13-2.27 with NCCL_NET); else Socket only with proof that NCCL got
// past the plugin and IB: a socket list plus "NET/IB : No device found."
// (IB is initialised only when no plugin was taken), or plus
// NCCL_IB_DISABLE=1 and a "no plugin" line. A socket list alone is never
// taken: 2.4.2-2.4.7 print it before they pick IB. Each change of a
// process's network is logged at debug level with the deciding line, its
// file and byte offset. docs/nccl-classification.md has the long version.

// eventKind is what an INFO message tells about its process.
type eventKind uint8

const (
	evNone            eventKind = iota
	evNet                       // the network: name, level
	evConnection                // a channel connection: transport, gdr
	evNetDevices                // "NET/IB : Using [0]mlx5_0:1/RoCE …": list
	evSocketIfs                 // "NET/Socket : Using [0]eth0:10.0.0.1<0> …": list
	evVersion                   // "NCCL version 2.19.3+cuda12.3": name = version
	evEnv                       // "NCCL_X set by environment to V": name, value
	evGDRDisabled               // "NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1' (no module)": net, name, value; gdr for "Enabled" (2.13+)
	evNetNoDevice               // "NET/IB : No device found.": name = the net
	evPluginNone                // "NET/Plugin : No plugin found …": no external net plugin is in use
	evComm                      // "comm 0x… rank 10 nranks 16 …": ranks (and nodes when logged)
	evVerbsLibMissing           // "Failed to open libibverbs.so[.1]": NCCL could not load libibverbs
	evGDRPath                   // "GPU Direct RDMA Enabled for GPU 1a000 / HCA 0 (distance 4 <= 5), read 0" (gdr.go)
	evDMABuf                    // "DMA-BUF is available on GPU device 0": name = CUDA device
	evP2PDisabled               // "P2P is disabled between connected GPUs 0 and 1": name, value (p2p.go)
)

// Evidence says how sure a line is about the network a process uses; a
// higher level replaces a lower one (the version table above says why).
type Evidence int8

const (
	EvidenceNone Evidence = iota // no network known
	// "NET/Socket : Using [0]eth0:…" together with proof that NCCL did not
	// get a network before it in its order (an external plugin, then IB):
	// "NET/IB : No device found.", or NCCL_IB_DISABLE set and no plugin.
	EvidenceSocketFallback
	EvidenceDeviceList // "NET/IB : Using [0]…" (a plugin may print it for its own net)
	EvidenceConnection // "… via NET/IBext/0": the net a channel runs on
	EvidenceDecision   // "Using network IB", "Assigned NET plugin IB to comm", 2.3's "Using internal Network IB"
)

// String names a level as the debug log and docs/nccl-classification.md do.
func (e Evidence) String() string {
	switch e {
	case EvidenceSocketFallback:
		return "socket-fallback"
	case EvidenceDeviceList:
		return "device-list"
	case EvidenceConnection:
		return "connection"
	case EvidenceDecision:
		return "decision"
	}
	return "none"
}

// event is the fact one message carries. Byte fields are subslices of
// the message.
type event struct {
	kind        eventKind
	level       Evidence
	gdr         bool
	name, value []byte // net name, transport, version, variable, device
	net         []byte // evGDRDisabled: the net that printed it
	list        []byte // evNetDevices, evSocketIfs: the "[0]…" list
	ranks       uint32 // evComm: the communicator's ranks…
	nodes       uint32 // …and nodes (0: not in the line)
	// evGDRPath (gdr.go): name the GPU, value the HCA as written, form how
	rank, dist, maxDist, read int32
	mode                      []byte
	form                      uint8
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
	msgGDREnabled   = []byte("GPU Direct RDMA Enabled for HCA ")
	msgGDRDMA       = []byte("/GDRDMA")
	msgDirectShm    = []byte("direct shared memory")
	msgP2P          = []byte("P2P/")
	msgOOB          = []byte("; OOB")
	msgNCCLPrefix   = []byte("NCCL_")
	transportSHM    = []byte("SHM")
)

// classifyTo extracts the fact an INFO message carries, if any, into ev
// (the Tracker reuses one event: no copies of the struct per line).
func classifyTo(msg []byte, ev *event) {
	ev.kind = evNone
	if len(msg) == 0 {
		return
	}
	switch msg[0] {
	case 'C':
		if bytes.HasPrefix(msg, msgChannel) {
			parseConnection(msg, ev)
			return
		}
		if isVerbsLibMissing(msg) { // 2.30's "Count not open libibverbs.so.1"
			ev.kind = evVerbsLibMissing
			return
		}
		parseCommLine(msg, ev) // "CommRevokeAsync START comm …"
	case 'F':
		if isVerbsLibMissing(msg) {
			ev.kind = evVerbsLibMissing
			return
		}
	case 'c', 'n', '[':
		parseCommLine(msg, ev) // comm.go
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
			*ev = event{kind: evNet, level: EvidenceDecision, name: name}
			return
		}
	case 'A':
		if bytes.HasPrefix(msg, msgAssigned) && bytes.HasSuffix(msg, msgToComm) {
			if name := msg[len(msgAssigned) : len(msg)-len(msgToComm)]; len(name) > 0 {
				*ev = event{kind: evNet, level: EvidenceDecision, name: name}
				return
			}
		}
	case 'G':
		parseGDRPath(msg, ev) // 2.6-2.29
	case 'D':
		parseDMABuf(msg, ev)
	case 'P':
		if b, ok := bytes.CutPrefix(msg, msgP2PDisabled); ok {
			if x, y, ok := parseP2PDisabled(b); ok {
				*ev = event{kind: evP2PDisabled, name: x, value: y}
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
				*ev = event{kind: evVersion, name: v}
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
			*ev = event{kind: evEnv, name: name, value: v}
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
func parseConnection(msg []byte, ev *event) {
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
func parseTransport(t []byte, ev *event) {
	ev.kind = evNone
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
	ev.kind = evConnection
}

// parseNETMessage reads the "NET/<name> : …" messages of the network
// transports: device lists, "No device found", GPU Direct RDMA status, and
// the "NET/Plugin" lines that say no external plugin is in use.
func parseNETMessage(msg []byte, ev *event) {
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
			*ev = event{kind: evPluginNone, name: net}
		}
	case bytes.HasPrefix(body, msgUsing) && (len(body) == len(msgUsing) || body[len(msgUsing)] == ' '):
		list := body[len(msgUsing):]
		if i := bytes.Index(list, msgOOB); i >= 0 {
			list = list[:i]
		}
		kind := evNetDevices
		if string(net) == "Socket" {
			kind = evSocketIfs
		}
		*ev = event{kind: kind, name: net, list: list}
	case bytes.HasPrefix(body, msgNoDevice):
		*ev = event{kind: evNetNoDevice, name: net}
	case bytes.HasPrefix(body, msgGDRPrefix) && bytes.Contains(body, msgHCA):
		parseGDRPath(body, ev) // 2.4-2.5: "NET/IB : GPU Direct RDMA Disabled for GPU 0[0] / HCA 0 (…)"
		if ev.kind == evNone && bytes.IndexByte(body, '\'') > 0 {
			// 2.4: "… Disabled for GPU 0[0] / HCA 0 'mlx5_0' (no module or not supported by GPU)"
			parseGDRHCA(net, body[bytes.Index(body, msgHCA):], false, ev)
		}
	case bytes.HasPrefix(body, msgGDRDisabled):
		// "… for HCA 1 'mlx5_1' (no module)", "… for HCA 0 'lo'"
		parseGDRHCA(net, body[len(msgGDRDisabled):], false, ev)
	case bytes.HasPrefix(body, msgGDREnabled):
		parseGDRHCA(net, body[len(msgGDREnabled):], true, ev) // 2.13+
	}
}

// parseGDRHCA reads "… 'mlx5_1' (no module)" of a GPU Direct RDMA line
// about a NET device (p2p.go has the versions).
func parseGDRHCA(net, d []byte, enabled bool, ev *event) {
	q := bytes.IndexByte(d, '\'')
	if q < 0 {
		return
	}
	e := bytes.IndexByte(d[q+1:], '\'')
	if e < 0 {
		return
	}
	*ev = event{kind: evGDRDisabled, net: net, name: d[q+1 : q+1+e], gdr: enabled}
	r := d[q+1+e+1:]
	if o := bytes.IndexByte(r, '('); o >= 0 {
		if c := bytes.LastIndexByte(r, ')'); c > o {
			ev.value = r[o+1 : c]
		}
	}
}

// forEachListItem calls fn for every "[i]item" of a "NET/… : Using"
// list: "[0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]", merged devices
// "[0]={[0] mlx5_0:1/RoCE, [1] mlx5_1:1/RoCE}", socket interfaces
// "[0]eth0:10.0.0.1<0> [1]ib0:fe80::1%ib0<0>". item has no index; entries
// that do not follow an index are skipped.
func forEachListItem(list []byte, fn func(item []byte)) {
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

// splitDevice splits "mlx5_0:1/RoCE" (or "mlx5_0:1/IB/SHARP") into
// device, port and link (the first element after the slash).
func splitDevice(item []byte) (dev, port, link []byte, ok bool) {
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

// splitInterface returns the interface of "eth0:10.0.0.1<0>".
func splitInterface(item []byte) ([]byte, bool) {
	c := bytes.IndexByte(item, ':')
	if c <= 0 {
		return nil, false
	}
	return item[:c], true
}

// splitVersion splits "2.19.3+cuda12.3" into "2.19.3" and "12.3".
func splitVersion(v []byte) (version, cuda []byte) {
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
