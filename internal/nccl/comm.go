package nccl

import "bytes"

// Communicator size. Every release logs a communicator's rank count at
// INFO when it creates one, and from 2.20 its node count (NCCL counts the
// hosts of its ranks by host hash). The forms, as file:line@tag of
// github.com/NVIDIA/nccl:
//
//	2.3         "comm %p rank %d nranks %d" (init.cu:174@v2.3.7-1) and "… - COMPLETE" (init.cu:599)
//	2.4.2       "comm %p rank %d nranks %d cudaDev %d nvmlDev %d" (init.cu:245@v2.4.2-1) and "… - Init COMPLETE" (init.cu:921)
//	2.4.6-2.4.8 "comm %p rank %d nranks %d cudaDev %d nvmlDev %d - Init COMPLETE" (init.cc:956@v2.4.7-1)
//	2.5-2.15    "comm %p rank %d nranks %d cudaDev %d busId %x - Init COMPLETE" (init.cc:746@v2.5.7-1, %lx from
//	            init.cc:881@v2.8.4-1); from 2.12 "… busId %lx - Destroy COMPLETE" and "- Abort COMPLETE" (init.cc:1047,1065@v2.12.12-1)
//	2.16-2.18.1 "comm %p rank %d nranks %d cudaDev %d busId %lx commId 0x%llx - Init COMPLETE" (init.cc:1109@v2.16.5-1)
//	2.18.3-2.20 "comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init START" and "- Init
//	            COMPLETE" (init.cc:1356,1375@v2.18.5-1; init.cc:1499,1523@v2.20.5-1)
//	2.20+       "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d" (init.cc:1123@v2.20.3-1,
//	            init.cc:1160@v2.21.5-1, init.cc:1044@v2.23.4-1, init.cc:1170@v2.28.9-1, init.cc:1422@v2.30.7-1)
//	2.21-2.22   "ncclCommInitRank comm %p rank %d nranks %d … - Init START|COMPLETE", "ncclCommSplit comm …"
//	            (init.cc:1541-1573@v2.21.5-1, init.cc:1401-1434@v2.22.3-1); "comm %p rank %d nranks %d cudaDev %d
//	            busId %lx - %s COMPLETE" (Destroy|Abort, init.cc:250@v2.22.3-1)
//	2.23+       "%s comm %p rank %d nranks %d …" with the init function's name (init.cc:1454,1482@v2.23.4-1,
//	            init.cc:1574,1598@v2.28.9-1)
//	2.28+       "CommRevokeAsync START comm %p rank %d nRanks %d nNodes %d localRank %d cudaDev %d",
//	            "comm %p rank %d nRanks %d … - Revoke|Abort START" (init.cc:2416,2464,2510@v2.28.9-1)
//	2.29+       "[Rank %d] %s comm %p rank %d nranks %d … - Init START" (init.cc:1699@v2.29.7-1)
//
// parseComm reads them all: "comm <pointer> rank <n> nranks|nRanks <n>",
// then " nNodes <n>" when it follows. The TRACE lines of the same form are
// not INFO and never reach it.
var (
	msgComm      = []byte("comm ")
	msgSpaceComm = []byte(" comm ")
	msgNcclComm  = []byte("ncclComm")
	msgRankTag   = []byte("[Rank ")
	msgRevoke    = []byte("CommRevokeAsync START comm ")
	msgRank      = []byte(" rank ")
	msgNranks    = []byte(" nranks ")
	msgNRanks    = []byte(" nRanks ")
	msgNNodes    = []byte(" nNodes ")
)

// maxCommSize bounds the rank and node counts taken from a line.
const maxCommSize = 1 << 30

// parseCommLine reads a communicator line in any of the forms above.
func parseCommLine(msg []byte, ev *event) {
	switch {
	case bytes.HasPrefix(msg, msgComm):
		parseComm(msg, ev)
	case bytes.HasPrefix(msg, msgRevoke):
		parseComm(msg[len(msgRevoke)-len(msgComm):], ev)
	case bytes.HasPrefix(msg, msgNcclComm):
		// "ncclCommInitRank comm %p rank %d nranks %d …" (2.21-2.22), the
		// init function's name in front from 2.23 (ncclCommInitRankConfig,
		// ncclCommSplit, …)
		if i := bytes.Index(msg, msgSpaceComm); i > 0 && bytes.IndexByte(msg[:i], ' ') < 0 {
			parseComm(msg[i+1:], ev)
		}
	case bytes.HasPrefix(msg, msgRankTag):
		// 2.29+: "[Rank %d] %s comm %p rank %d nranks %d … - Init START"
		if i := bytes.Index(msg, msgSpaceComm); i > 0 {
			parseComm(msg[i+1:], ev)
		}
	}
}

// parseComm reads "comm 0x55d0c3a0 rank 0 nranks 4 …" or "comm 0x… rank 0
// nRanks 16 nNodes 2 …" (msg starts at "comm ").
func parseComm(msg []byte, ev *event) {
	rest := msg[len(msgComm):]
	sp := bytes.IndexByte(rest, ' ')
	if sp <= 0 || !isPointer(rest[:sp]) {
		return
	}
	rest = rest[sp:]
	if !bytes.HasPrefix(rest, msgRank) {
		return
	}
	_, rest, ok := leadingNumber(rest[len(msgRank):])
	if !ok || !bytes.HasPrefix(rest, msgNranks) && !bytes.HasPrefix(rest, msgNRanks) {
		return
	}
	ranks, rest, ok := leadingNumber(rest[len(msgNranks):])
	if !ok || ranks < 1 {
		return
	}
	*ev = event{kind: evComm, ranks: ranks}
	if bytes.HasPrefix(rest, msgNNodes) {
		if nodes, _, ok := leadingNumber(rest[len(msgNNodes):]); ok && nodes >= 1 {
			ev.nodes = nodes
		}
	}
}

// leadingNumber reads the decimal number b starts with (at most
// maxCommSize) and returns what follows it; it must be followed by a space
// or the end.
func leadingNumber(b []byte) (uint32, []byte, bool) {
	var n uint64
	i := 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		n = n*10 + uint64(b[i]-'0')
		if n > maxCommSize {
			return 0, nil, false
		}
	}
	if i == 0 || i < len(b) && b[i] != ' ' {
		return 0, nil, false
	}
	return uint32(n), b[i:], true
}

// isPointer reports whether p is how printf's %p writes a pointer:
// "0x55d0c3a0", or "(nil)".
func isPointer(p []byte) bool {
	if string(p) == "(nil)" {
		return true
	}
	if len(p) < 3 || p[0] != '0' || p[1] != 'x' {
		return false
	}
	for _, c := range p[2:] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}
