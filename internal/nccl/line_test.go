package nccl

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func isHostChar(c byte) bool { return hostChars[c] != 0 }

func TestParseNCCLLineHeaders(t *testing.T) {
	for _, tc := range []struct {
		line                string
		kind                lineKind
		host, pid, tag, msg string
	}{
		{"gpu1:4242:4300 [0] NCCL INFO Using network IB", lineInfo, "gpu1", "4242", "", "Using network IB"},
		{"[1,0]<stdout>:5873af64cf59:10158:10560 [0] NCCL INFO NET/IB : No device found.", lineInfo, "5873af64cf59", "10158", "[1,0]", "NET/IB : No device found."},
		{"[1,12]<stderr>:h:1:2 [3] NCCL WARN x", lineWarn, "h", "1", "[1,12]", "x"},
		{"(RayWorkerWrapper pid=4711, ip=10.0.0.2) gpu-1:4711:4800 [0] NCCL INFO m", lineInfo, "gpu-1", "4711", "pid=4711", "m"},
		{"\x1b[36m(RayWorker pid=9)\x1b[0m g:9:9 [0] NCCL INFO m [repeated 3x across cluster]", lineInfo, "g", "9", "pid=9", "m"},
		{"node07: node07:1234:1300 [3] NCCL INFO m", lineInfo, "node07", "1234", "", "m"},
		{"2025-06-01T10:00:00.123456789Z sglang-0:77:77 [0] NCCL INFO m", lineInfo, "sglang-0", "77", "", "m"},
		{"Jun 01 10:00:01 node3 python3[77]: sglang-0:77:90 [0] NCCL INFO m", lineInfo, "sglang-0", "77", "", "m"},
		{"> flow-matic:820398:820779 [0] NCCL INFO m", lineInfo, "flow-matic", "820398", "", "m"},
		{"[2026-03-13 22:26:02] host-01.example.com:XXXXXX [5] ibvwrap.c:262 NCCL WARN Call to ibv_modify_qp failed", lineWarn, "host-01.example.com", "XXXXXX", "", "Call to ibv_modify_qp failed"},
		{"[1,23]<stdout>:ip-172-32-45-165:72593:73427 [7] create_nccl_ofi_component:459 NCCL WARN NET/OFI Couldn't open AV.", lineWarn, "ip-172-32-45-165", "72593", "[1,23]", "NET/OFI Couldn't open AV."},
		{"h:1:2 [0] 12.345678 ncclProxyProgress:300 NCCL TRACE proxy", lineTrace, "h", "1", "", "proxy"},
		{"h:1:2 [0] NCCL INFO", lineInfo, "h", "1", "", ""},
		{"h:1:2 [0] NCCL INFO m \r", lineInfo, "h", "1", "", "m"},
		{"[1,0]<stdout>:NCCL version 2.5.6+cuda10.2", lineBareVersion, "", "", "[1,0]", "2.5.6+cuda10.2"},
		{"NCCL version 2.19.3+cuda12.3", lineBareVersion, "", "", "", "2.19.3+cuda12.3"},
		{"> NCCL version 2.20.5+cuda12.4", lineBareVersion, "", "", "", "2.20.5+cuda12.4"},
		{"NCCL version 2.19 is old", lineNotNCCL, "", "", "", ""},
		{"h:1:2 [0] NCCL INFOX m", lineNotNCCL, "", "", "", ""},
		{"h:1:2 [0] a b c NCCL INFO m", lineNotNCCL, "", "", "", ""},
		{"h:1:2 [0]  NCCL INFO two spaces", lineInfo, "h", "1", "", "two spaces"},
		{":1:2 [0] NCCL INFO no host", lineNotNCCL, "", "", "", ""},
		{"h: [0] NCCL INFO no pid", lineNotNCCL, "", "", "", ""},
		{"h:123456789012345678901234567890123 [0] NCCL INFO long pid", lineNotNCCL, "", "", "", ""},
	} {
		l := parseLine([]byte(tc.line))
		if l.kind != tc.kind || string(l.host) != tc.host || string(l.pid) != tc.pid || string(l.tag) != tc.tag || string(l.msg) != tc.msg {
			t.Errorf("%q:\n got kind %d host %q pid %q tag %q msg %q\nwant kind %d host %q pid %q tag %q msg %q",
				tc.line, l.kind, l.host, l.pid, l.tag, l.msg, tc.kind, tc.host, tc.pid, tc.tag, tc.msg)
		}
	}
}

func TestClassifyNCCLMessage(t *testing.T) {
	for _, tc := range []struct {
		msg       string
		kind      eventKind
		name, val string
		gdr       bool
		net, list string
		level     Evidence
	}{
		{"Using network IB", evNet, "IB", "", false, "", "", EvidenceDecision},
		{"Using network AWS Libfabric", evNet, "AWS Libfabric", "", false, "", "", EvidenceDecision},
		{"Assigned NET plugin IBext_v8 to comm", evNet, "IBext_v8", "", false, "", "", EvidenceDecision},
		{"Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA", evConnection, "NET/IB", "", true, "IB", "", 0},
		{"Channel 00/1 : 0[0] -> 9[1] [send] via NET/IB/1(1)/GDRDMA(PCI)/Shared", evConnection, "NET/IB", "", true, "IB", "", 0},
		{"Ring 00 : 7 -> 8 [send] via NET/AWS Libfabric/0", evConnection, "NET/AWS Libfabric", "", false, "AWS Libfabric", "", 0},
		{"Ring 00 : 2[0] -> 3[0] via direct shared memory", evConnection, "SHM", "", false, "", "", 0},
		{"Channel 19 : 10[2] -> 11[3] via SHM/direct/direct", evConnection, "SHM", "", false, "", "", 0},
		{"Channel 00/0 : 6[2] -> 5[1] via P2P/IPC/read", evConnection, "P2P/IPC", "", false, "", "", 0},
		{"Channel 00 :    0   1   2   3", evNone, "", "", false, "", "", 0},
		{"Channel 00/0 : 0[0] -> 1[1] via ", evNone, "", "", false, "", "", 0},
		{"Channel 00/0 : 0[0] -> 1[1] via NET//0", evNone, "", "", false, "", "", 0},
		{"NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:1.2.3.4<0>", evNetDevices, "IB", "", false, "", " [0]mlx5_0:1/RoCE [RO]", 0},
		{"NET/Socket : Using [0]lo:127.0.0.1<0>", evSocketIfs, "Socket", "", false, "", " [0]lo:127.0.0.1<0>", 0},
		{"NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1' (no module)", evGDRDisabled, "mlx5_1", "no module", false, "IB", "", 0},
		{"NET/Socket : GPU Direct RDMA Disabled for HCA 0 'lo'", evGDRDisabled, "lo", "", false, "Socket", "", 0},
		{"NET/OFI No NIC info for dev 0", evNone, "", "", false, "", "", 0},
		{"NET/IB : No device found.", evNetNoDevice, "IB", "", false, "", "", 0},
		{"Using internal Network Socket", evNet, "Socket", "", false, "", "", EvidenceDecision},
		{"Using external Network AWS Libfabric", evNet, "AWS Libfabric", "", false, "", "", EvidenceDecision},
		{"Using non-device net plugin version 0", evNone, "", "", false, "", "", 0},
		{"Using network ", evNone, "", "", false, "", "", 0},
		{"NET/Plugin : No plugin found (libnccl-net.so).", evPluginNone, "Plugin", "", false, "", "", 0},
		{"NET/Plugin : No plugin found (libnccl-net.so), using internal implementation", evPluginNone, "Plugin", "", false, "", "", 0},
		{"NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No such file or directory No plugin found (libnccl-net.so), using internal implementation", evPluginNone, "Plugin", "", false, "", "", 0},
		{"NET/Plugin : Plugin load returned 2 : libnccl-net.so: cannot open shared object file.", evPluginNone, "Plugin", "", false, "", "", 0},
		{"NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.", evPluginNone, "Plugin", "", false, "", "", 0},
		{"NET/Plugin: Using internal network plugin.", evPluginNone, "Plugin", "", false, "", "", 0},
		{"NET/Plugin: Could not find: libnccl-net-ofi.so libnccl-net.so", evPluginNone, "Plugin", "", false, "", "", 0},
		{"NET/Plugin: Loaded net plugin IBext_v8 (v8)", evNone, "", "", false, "", "", 0},
		{"NET/Plugin: Failed to find ncclNetPlugin_v8 symbol.", evNone, "", "", false, "", "", 0},
		{"Initialized NET plugin IB", evNone, "", "", false, "", "", 0},
		{"NCCL version 2.19.3+cuda12.3", evVersion, "2.19.3+cuda12.3", "", false, "", "", 0},
		{"NCCL_IB_DISABLE set by environment to 1.", evEnv, "NCCL_IB_DISABLE", "1", false, "", "", 0},
		{"NCCL_SOCKET_IFNAME set by environment to lo", evEnv, "NCCL_SOCKET_IFNAME", "lo", false, "", "", 0},
		{"NCCL_SOCKET_IFNAME set to lo", evNone, "", "", false, "", "", 0},
		{"NCCL_ set by environment to x", evNone, "", "", false, "", "", 0},
	} {
		ev := classify([]byte(tc.msg))
		if ev.kind != tc.kind || string(ev.name) != tc.name || string(ev.value) != tc.val || ev.gdr != tc.gdr ||
			(tc.net != "" && string(ev.net) != tc.net) || string(ev.list) != tc.list || ev.level != tc.level {
			t.Errorf("%q: got %+v", tc.msg, ev)
		}
	}
}

// ncclFixtureLines returns every line of the fixtures plus synthetic ones.
func ncclFixtureLines(t testing.TB) [][]byte {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(fixtureNCCL, "*.log"))
	versions, _ := filepath.Glob(filepath.Join(fixtureNCCLVersions, "*.log"))
	files = append(files, versions...)
	gdr, _ := filepath.Glob(filepath.Join(fixtureNCCLGDR, "*.log"))
	files = append(files, gdr...)
	var out [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, bytes.Split(b, []byte("\n"))...)
	}
	for _, s := range []string{
		"h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 1[1] / HCA 0 (distance 4 >= 4)",
		"h:1:2 [0] NCCL INFO GPU Direct RDMA Disabled for GPU ca000 / HCA c (distance 7 > 5)",
		"h:1:2 [5] NCCL INFO GPU Direct RDMA Enabled for GPU 8 / HCA 0 (distance 4 <= 4), read 0 mode Default",
		"h:1:2 [0] NCCL INFO GPU Direct RDMA Disabled for GPU/0-106496 (rank 2) - NET/0-3 ( using PXN via GPU/0-110592, distance 7 > 5)",
		"h:1:2 [0] NCCL INFO GPU Direct RDMA Enabled for GPU/0-106496 (rank 2) - NET/0-1 (distance 4 <= 5, read 1, mode PCI)",
		"(RayWorkerWrapper pid=4711) g:4711:4800 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA [repeated 7x across cluster]",
		"h:5:5 [0] NCCL INFO NET/IB : Using [0]={[0] mlx5_0:1/RoCE, [1] mlx5_1:1/RoCE} [1]mlx5_2:1/IB/SHARP [RO]; OOB eth0:10.0.0.1<0>",
		"h:6:6 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:fe80::1%eth1<0>",
		"h:1:3 [0] NCCL INFO Channel 00/1 : 0[0] -> 9[1] [send] via NET/IB/1(1)/GDRDMA(PCI)/Shared",
		"h:1:3 [0] NCCL INFO Channel 00/0 : 0[4] -> 1[5] via P2P/direct pointer/read",
		"h:1:3 [0] NCCL INFO Channel 00 : 0[ffffffffffffffff] -> 1[1a000] [receive] via NET/IB/9999/GDRDMA",
		"h:1:2 [0] NCCL INFO Assigned NET plugin IB to comm",
		"h23:1:1 [0] NCCL INFO Using internal Network IB",
		"h:7:7 [0] NCCL INFO NET/Plugin: Using internal network plugin.",
		"g24c:32002:32002 [1] NCCL WARN Failed to open libibverbs.so[.1]",
		"vm:462:462 [0] NCCL INFO Failed to open libibverbs.so[.1]",
		"vm:7:7 [0] NCCL INFO Count not open libibverbs.so.1",
		"vm:692:692 [0] NCCL INFO comm 0x3674e350 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
		"vm:692:692 [0] NCCL INFO ncclCommInitRankConfig comm 0x3674e350 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId 0xa6ce86ab2388df92 - Init START",
		"h:8:8 [5] NCCL INFO [Rank 5] ncclCommInitRankConfig comm 0x3674e350 rank 5 nranks 16 cudaDev 5 nvmlDev 5 busId 60 commId 0x1 - Init START",
		"h:8:8 [5] NCCL INFO CommRevokeAsync START comm 0x3674e350 rank 0 nRanks 16 nNodes 2 localRank 0 cudaDev 0",
		"h23:9:9 [0] NCCL INFO comm 0x7f1d7c001d70 rank 1 nranks 2 - COMPLETE",
	} {
		out = append(out, []byte(s))
	}
	return out
}

// TestNCCLParseNoAllocs: parsing a line, its message and its lists
// allocates nothing.
func TestNCCLParseNoAllocs(t *testing.T) {
	lines := ncclFixtureLines(t)
	n := 0
	allocs := testing.AllocsPerRun(5, func() {
		for _, l := range lines {
			parseNCCLScratch(l, &n)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per pass over %d lines", allocs, len(lines))
	}
}

func parseNCCLScratch(l []byte, n *int) {
	pl := parseLine(l)
	ev := classify(pl.msg)
	forEachListItem(ev.list, func(item []byte) {
		if _, _, _, ok := splitDevice(item); ok {
			*n++
		}
		if _, ok := splitInterface(item); ok {
			*n++
		}
	})
	splitVersion(ev.name)
}

func isSubslice(b, of []byte) bool {
	if len(b) == 0 {
		return true
	}
	bb, oo := b[:cap(b)], of[:cap(of)]
	return len(oo) > 0 && len(bb) <= len(oo) && &oo[len(oo)-1] == &bb[len(bb)-1]
}

// FuzzParseNCCLLine: arbitrary lines never panic, every field is a piece
// of the line, a header has a host and a short pid, and the state the
// collector builds stays within its bounds.
func FuzzParseNCCLLine(f *testing.F) {
	for _, l := range ncclFixtureLines(f) {
		f.Add(l)
	}
	for _, l := range []string{ // p2p.go's lines
		"n:1:1 [0] NCCL INFO P2P is disabled between connected GPUs 0 and 1. You can repress this message with NCCL_IGNORE_DISABLED_P2P=1.",
		"n:1:1 [0] paths.cc:323 NCCL WARN P2P is disabled between NVLINK connected GPUs 3 and 2. This should not be the case",
		"n:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 3 'mlx5_3'",
		"n:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 0[0] / HCA 0 'mlx5_0' (no module or not supported by GPU)",
	} {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if bytes.IndexByte(line, '\n') >= 0 {
			return // the follower splits lines
		}
		pl := parseLine(line)
		for _, b := range [][]byte{pl.host, pl.pid, pl.tag, pl.msg} {
			if !isSubslice(b, line) {
				t.Fatalf("%q: field %q is not part of the line", line, b)
			}
		}
		switch pl.kind {
		case lineInfo, lineWarn, lineTrace:
			if len(pl.host) == 0 || len(pl.pid) == 0 || len(pl.pid) > maxPidLen {
				t.Fatalf("%q: host %q pid %q", line, pl.host, pl.pid)
			}
			for _, c := range pl.host {
				if !isHostChar(c) {
					t.Fatalf("%q: host %q", line, pl.host)
				}
			}
		case lineBareVersion:
			if len(pl.msg) == 0 {
				t.Fatalf("%q: empty version", line)
			}
		}
		ev := classify(pl.msg)
		for _, b := range [][]byte{ev.name, ev.value, ev.net, ev.list} {
			if !isSubslice(b, line) && string(b) != "SHM" {
				t.Fatalf("%q: event field %q is not part of the line", line, b)
			}
		}
		n := 0
		parseNCCLScratch(line, &n)

		tr := NewTracker(TrackerOptions{MaxProcesses: 2})
		fl := &File{}
		tr.Begin(fl)
		for range 3 {
			tr.Line(fl, line)
			tr.Line(fl, append([]byte("x"), line...))
		}
		tr.End(fl, 0)
		tr.View(func(procs []*Process, _ Stats) {
			if len(procs) > 2 {
				t.Fatalf("%d processes", len(procs))
			}
			for _, p := range procs {
				if len(p.Conns) > maxConnKinds || len(p.Devices) > maxListItems || len(p.Interfaces) > maxListItems ||
					len(p.Env) > maxEnv || len(p.GDRDisabled) > maxGDRDisabled || len(p.GDREnabled) > maxGDRDisabled ||
					len(p.P2PDisabled) > maxP2PDisabled ||
					len(p.Peers) > maxPeers || len(p.NetUses) > maxNetUses ||
					len(p.GDRPaths) > maxGDRPaths || len(p.DMABuf) > maxDMABuf || len(p.rankDev) > maxRankDevs {
					t.Fatalf("%q: unbounded state", line)
				}
				strs := []string{p.Host, p.PID, p.Net, p.Version, p.CUDA, p.InitFailure}
				for _, e := range p.Conns {
					strs = append(strs, e.Transport)
				}
				for _, d := range p.Devices {
					strs = append(strs, d.Name, d.Port, d.Link)
				}
				strs = append(strs, p.Interfaces...)
				for _, e := range p.Env {
					strs = append(strs, e.Name, e.Value)
				}
				for _, g := range p.GDRDisabled {
					strs = append(strs, g.Net, g.Device, g.Reason)
				}
				for _, g := range p.GDREnabled {
					strs = append(strs, g.Net, g.Device)
				}
				for _, e := range p.P2PDisabled {
					strs = append(strs, e.GPU, e.PeerGPU)
				}
				for _, e := range p.Peers {
					strs = append(strs, e.GPU, e.PeerGPU, e.Transport)
				}
				for _, g := range p.GDRPaths {
					strs = append(strs, g.GPU, g.Mode)
					if g.Index < 0 || g.Index > 9999 {
						t.Fatalf("%q: GDR NET index %d", line, g.Index)
					}
				}
				strs = append(strs, p.DMABuf...)
				for _, e := range p.NetUses {
					strs = append(strs, e.GPU, e.Net)
					if e.Index < 0 || e.Index > 9999 {
						t.Fatalf("%q: NET device index %d", line, e.Index)
					}
				}
				for _, s := range strs {
					if len(s) > maxLabel {
						t.Fatalf("%q: label %q over %d bytes", line, s, maxLabel)
					}
				}
				if p.Ranks > maxCommSize || p.Nodes > maxCommSize {
					t.Fatalf("%q: ranks %d nodes %d", line, p.Ranks, p.Nodes)
				}
				if strings.ContainsRune(p.Net, '\n') {
					t.Fatalf("%q: net %q", line, p.Net)
				}
			}
		})
	})
}

func TestIsNCCLInitFailure(t *testing.T) {
	for msg, want := range map[string]bool{
		"Failed to initialize any NET plugin":     true,
		"Error: network IB not found.":            true,
		"Error: network  not found.":              true,
		"NET/Socket : no interface found":         true,
		"Bootstrap : no socket interface found":   true,
		"Failed to initialize NET plugin IB":      false,
		"Error: network is unreachable":           false,
		"NET/IB : No device found.":               false,
		"NET/Socket : Using [0]lo:127.0.0.1<0>":   false,
		"Bootstrap: Using eth0:192.0.2.2<0>":      false,
		"Cuda failure 'out of memory'":            false,
		"":                                        false,
		"Error: network ":                         false,
		"Failed to initialize any NET plugin now": true,
	} {
		if got := isInitFailure([]byte(msg)); got != want {
			t.Errorf("isInitFailure(%q) = %v, want %v", msg, got, want)
		}
	}
}
