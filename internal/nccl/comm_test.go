package nccl

import (
	"path/filepath"
	"testing"
)

// commLines are communicator lines in every form NCCL's INFO logs have
// (format strings cited in comm.go), with the values a real log has:
// the ranks and nodes each must give (nodes 0: not in the line).
var commLines = []struct {
	msg          string
	ranks, nodes uint32
}{
	// 2.3 (init.cu:174,599@v2.3.7-1)
	{"comm 0x7f1d7c001d70 rank 0 nranks 2", 2, 0},
	{"comm 0x7f1d7c001d70 rank 1 nranks 2 - COMPLETE", 2, 0},
	// 2.4 (init.cc:956@v2.4.7-1); fixtures/nccl/versions/nccl-2.4.7-ib.log
	{"comm 0x5612e4a0 rank 0 nranks 4 cudaDev 0 nvmlDev 0 - Init COMPLETE", 4, 0},
	// 2.5-2.15 (init.cc:746@v2.5.7-1); real sample nccl-tests-166
	{"comm 0x55b1e2c0 rank 0 nranks 4 cudaDev 0 busId 1b000 - Init COMPLETE", 4, 0},
	{"comm 0x2af44350 rank 0 nranks 2 cudaDev 0 busId 60 - Destroy COMPLETE", 2, 0},
	// 2.16-2.18.1 (init.cc:1109@v2.16.5-1)
	{"comm 0x55d0c3a0 rank 3 nranks 8 cudaDev 3 busId 61000 commId 0x5e1a2c3b4d5e6f70 - Init COMPLETE", 8, 0},
	// 2.18.3-2.20 (init.cc:1356@v2.18.5-1)
	{"comm 0x5581a2b0 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x5e1a2c3b4d5e6f70 - Init START", 4, 0},
	// 2.20+ (init.cc:1123@v2.20.3-1); fixtures/nccl-drill/socket/vm.692.log
	{"comm 0x3674e350 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0", 2, 2},
	{"comm 0x3a22b130 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0", 16, 2},
	// 2.21-2.22 (init.cc:1544,1541@v2.21.5-1); real sample sglang-3398
	{"ncclCommInitRank comm 0xafd6da0 rank 10 nranks 16 cudaDev 2 nvmlDev 2 busId a2000 commId 0x898b6d578585998c - Init START", 16, 0},
	{"ncclCommSplit comm 0xafd7000 rank 2 nranks 8 cudaDev 2 nvmlDev 2 busId a2000 parent 0xafd6da0 color 1 key 2 commId 0x1 - Init COMPLETE", 8, 0},
	// 2.23+ (init.cc:1574@v2.28.9-1); fixtures/nccl-drill
	{"ncclCommInitRankConfig comm 0x3674e350 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId 0xa6ce86ab2388df92 - Init START", 2, 0},
	{"ncclCommSplit comm 0x55 rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId 1b000 parent 0x44 splitCount 1 color 0 key 1- Init START", 4, 0},
	// 2.28+ (init.cc:2416,2464@v2.28.9-1)
	{"CommRevokeAsync START comm 0x3674e350 rank 0 nRanks 16 nNodes 2 localRank 0 cudaDev 0", 16, 2},
	{"comm 0x3674e350 rank 0 nRanks 16 cudaDev 0 busId 60 - Revoke START", 16, 0},
	// 2.29+ (init.cc:1699@v2.29.7-1)
	{"[Rank 5] ncclCommInitRankConfig comm 0x3674e350 rank 5 nranks 16 cudaDev 5 nvmlDev 5 busId 60 commId 0x1 - Init START", 16, 0},

	// Not communicator lines.
	{"Init timings - ncclCommInitRankConfig: rank 0 nranks 2 total 0.40 (kernels 0.35)", 0, 0},
	{"PROFILER/Plugin: init commName:  commHash: 12019692525092134802 nranks: 2 rank: 0", 0, 0},
	{"comm 0x3674e350 rank 0 nranks 0 cudaDev 0 busId 60 - Init COMPLETE", 0, 0},
	{"comm 0x3674e350 rank 0 nranks 99999999999 cudaDev 0", 0, 0},
	{"comm 0x3674e350 rank 0 nranks 16x cudaDev 0", 0, 0},
	{"comm 0x3674e350 rank x nranks 16", 0, 0},
	{"comm 0xzz rank 0 nranks 16", 0, 0},
	{"comm rank 0 nranks 16", 0, 0},
	{"comm 0x3674e350 rank 0 nRanks 16 nNodes x localRanks 8", 16, 0},
	{"ncclCommInitRank failed: comm 0x1 rank 0 nranks 16", 0, 0},
	{"[Rank 5] no communicator here", 0, 0},
	{"Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA comm 0x1 rank 0 nranks 16", 0, 0},
}

func TestClassifyNCCLCommunicator(t *testing.T) {
	for _, tc := range commLines {
		ev := classify([]byte(tc.msg))
		if tc.ranks == 0 {
			if ev.kind == evComm {
				t.Errorf("%q: communicator %d ranks %d nodes, want none", tc.msg, ev.ranks, ev.nodes)
			}
			continue
		}
		if ev.kind != evComm || ev.ranks != tc.ranks || ev.nodes != tc.nodes {
			t.Errorf("%q: kind %d ranks %d nodes %d, want ranks %d nodes %d", tc.msg, ev.kind, ev.ranks, ev.nodes, tc.ranks, tc.nodes)
		}
	}
}

// TestNCCLCommunicatorSize: a process's largest communicator and node
// count, from real captures and from a process with several communicators.
func TestNCCLCommunicatorSize(t *testing.T) {
	const drill = "../../collector/fixtures/nccl-drill"
	for _, tc := range []struct {
		name  string
		globs []string
		want  map[string][2]uint32 // host/pid → ranks, nodes
	}{
		// TP16 over two nodes on sockets: "rank 10 nranks 16", no nNodes line.
		{"sglang-3398", []string{filepath.Join(fixtureNCCL, "sglang-3398-*.log")},
			map[string][2]uint32{"llm-bm-infer-service-prod-17389809006090t9a-1100014361/88008": {16, 0}}},
		// One rank on one node (2.28.9 on the lent H200).
		{"h200", []string{filepath.Join(fixtureNCCLH200, "*.log")},
			map[string][2]uint32{"vm/462": {1, 1}, "vm/518": {1, 1}}},
		// Two ranks as two nodes (NCCL_HOSTID differs): "nRanks 2 nNodes 2".
		{"drill socket", []string{filepath.Join(drill, "socket", "*.log")},
			map[string][2]uint32{"vm/692": {2, 2}, "vm/693": {2, 2}}},
		// Init failed ("Failed to initialize any NET plugin") before any
		// communicator line: nothing known.
		{"drill forced IB", []string{filepath.Join(drill, "ib", "*.log")},
			map[string][2]uint32{"vm/1288": {0, 0}, "vm/1289": {0, 0}}},
		// 2.4.7: "… - Init COMPLETE" only.
		{"2.4.7", []string{filepath.Join(fixtureNCCLVersions, "nccl-2.4.7-ib.log")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestNCCL(t, testOpts{LogPaths: tc.globs})
			c.poll()
			got := map[string][2]uint32{}
			for k, s := range c.summary() {
				got[k] = [2]uint32{s.Ranks, s.Nodes}
			}
			if tc.want == nil {
				// every process that logged Init COMPLETE has its nranks
				for k, v := range got {
					if v[1] != 0 {
						t.Errorf("%s: nodes %d from a version that does not log them", k, v[1])
					}
				}
				if got["g24a/31001"] != [2]uint32{4, 0} {
					t.Errorf("g24a/31001: %v, want ranks 4 (all %v)", got["g24a/31001"], got)
				}
				return
			}
			for k, w := range tc.want {
				if g, ok := got[k]; !ok {
					t.Errorf("%s: not tracked (have %v)", k, got)
				} else if g != w {
					t.Errorf("%s: ranks, nodes %v, want %v", k, g, w)
				}
			}
		})
	}

	// The largest of several communicators wins; a smaller or failed one
	// later does not lower it, and an init failure cleared by a later
	// Init COMPLETE still counts that line.
	c := newTestNCCL(t, testOpts{LogPaths: []string{"unused"}})
	f := &File{}
	c.Begin(f)
	for _, l := range []string{
		"h:7:7 [0] NCCL INFO ncclCommInitRankConfig comm 0x1 rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 1b000 commId 0x1 - Init START",
		"h:7:7 [0] NCCL INFO comm 0x1 rank 3 nRanks 8 nNodes 1 localRanks 8 localRank 3 MNNVL 0",
		"h:7:7 [0] misc/net.cc:1 NCCL WARN Error: network IB not found.",
		"h:7:7 [0] NCCL INFO ncclCommInitRankConfig comm 0x2 rank 11 nranks 16 cudaDev 3 nvmlDev 3 busId 1b000 commId 0x2 - Init COMPLETE",
		"h:7:7 [0] NCCL INFO comm 0x3 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0",
		"h:7:7 [0] NCCL INFO ncclCommSplit comm 0x4 rank 1 nranks 2 cudaDev 3 nvmlDev 3 busId 1b000 parent 0x3 splitCount 1 color 0 key 1 - Init COMPLETE",
		"h:7:7 [0] NCCL INFO comm 0x4 rank 1 nRanks 2 nNodes 1 localRanks 2 localRank 1 MNNVL 0",
		// 2.16: Init COMPLETE is the only line with the size; after an
		// init failure it clears the failure and gives the size.
		"h:8:8 [0] misc/net.cc:1 NCCL WARN Error: network IB not found.",
		"h:8:8 [0] NCCL INFO comm 0x5 rank 11 nranks 16 cudaDev 3 busId 1b000 commId 0x5 - Init COMPLETE",
	} {
		c.Line(f, []byte(l))
	}
	c.End(f, 0)
	sum := c.summary()
	if s := sum["h/7"]; s.Ranks != 16 || s.Nodes != 2 {
		t.Errorf("h/7: ranks %d nodes %d, want 16 and 2", s.Ranks, s.Nodes)
	}
	if s := sum["h/8"]; s.Ranks != 16 || s.Nodes != 0 {
		t.Errorf("h/8: ranks %d nodes %d, want 16 and none", s.Ranks, s.Nodes)
	}
	c.View(func(procs []*Process, _ Stats) {
		for _, p := range procs {
			if p.InitFailure != "" {
				t.Errorf("%s: init failure %q not cleared by Init COMPLETE", p.Key, p.InitFailure)
			}
		}
	})
}
