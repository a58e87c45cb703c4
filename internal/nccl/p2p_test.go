package nccl

import (
	"reflect"
	"testing"
)

// processOf feeds lines to a Tracker and returns its only process.
func processOf(t *testing.T, lines ...string) *Process {
	t.Helper()
	tr := NewTracker(TrackerOptions{MaxProcesses: 8})
	f := &File{}
	tr.Begin(f)
	for _, l := range lines {
		tr.Line(f, []byte(l))
	}
	tr.End(f, 0)
	var out *Process
	tr.View(func(procs []*Process, _ Stats) {
		if len(procs) != 1 {
			t.Fatalf("%d processes", len(procs))
		}
		out = procs[0]
	})
	return out
}

// "P2P is disabled between connected GPUs X and Y" (INFO, 2.12+) and
// "… between NVLINK connected GPUs X and Y" (WARN), exactly as
// graph/paths.cc prints them (:324 and :321@v2.12.7-1, the same text
// through 2.30); the numbers are NVML indices.
func TestP2PDisabledLines(t *testing.T) {
	p := processOf(t,
		"node0:4242:4310 [0] NCCL INFO P2P is disabled between connected GPUs 0 and 1. You can repress this message with NCCL_IGNORE_DISABLED_P2P=1.",
		"node0:4242:4310 [0] NCCL INFO P2P is disabled between connected GPUs 0 and 1. You can repress this message with NCCL_IGNORE_DISABLED_P2P=1.",
		"node0:4242:4311 [1] NCCL INFO P2P is disabled between connected GPUs 1 and 0. You can repress this message with NCCL_IGNORE_DISABLED_P2P=1.",
		// 2.30 wraps the string in the source; the log line is one line.
		"node0:4242:4312 [2] NCCL INFO P2P is disabled between connected GPUs 12 and 13. You can repress this message with NCCL_IGNORE_DISABLED_P2P=1.",
		"node0:4242:4313 [3] paths.cc:323 NCCL WARN P2P is disabled between NVLINK connected GPUs 3 and 2. This should not be the case given their connectivity, and is probably due to a hardware issue. If you still want to proceed, you can set NCCL_IGNORE_DISABLED_P2P=1.",
		// not these
		"node0:4242:4313 [3] NCCL INFO P2P is disabled between connected GPUs x and 2.",
		"node0:4242:4313 [3] NCCL INFO P2P is disabled between connected GPUs 4 and 5x",
		"node0:4242:4313 [3] NCCL INFO P2P is disabled between NVLINK connected GPUs 6 and 7. (an INFO: not NCCL's wording)",
		"node0:4242:4313 [3] NCCL INFO P2P is disabled between connected GPUs 12345 and 1.",
	)
	want := []P2PDisabled{{"0", "1", false}, {"1", "0", false}, {"12", "13", false}, {"3", "2", true}}
	if !reflect.DeepEqual(p.P2PDisabled, want) {
		t.Errorf("P2PDisabled %+v, want %+v", p.P2PDisabled, want)
	}
}

// The GPU Direct RDMA lines about a NET device, per release: 2.4's per
// GPU (transport/net_ib.cc:226@v2.4.8-1), 2.5-2.12's (net_ib.cc:211@v2.5.6-1,
// :290@v2.12.12-1), 2.13+'s Enabled or Disabled (graph/topo.cc:643@v2.13.4-1,
// :698@v2.19.3-1, :1357@v2.28.9-1). The RoCE report of issue 35: Disabled
// (2.19-2.21) while nvidia_peermem is loaded.
func TestGDRHCALines(t *testing.T) {
	tr := NewTracker(TrackerOptions{MaxProcesses: 8})
	f := &File{}
	tr.Begin(f)
	for _, l := range []string{
		"n:7:7 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 0[0] / HCA 0 'mlx5_0' (no module or not supported by GPU)",
		"n:7:7 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1' (no module)",
		"n:7:7 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 2 'mlx5_2'",
		"n:7:7 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 3 'mlx5_3'",
		"n:7:7 [0] NCCL INFO NET/IBext_v8 : GPU Direct RDMA Enabled for HCA 4 'mlx5_4'",
		"n:7:7 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 3 'mlx5_3'",
		"n:7:7 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 5",
	} {
		tr.Line(f, []byte(l))
	}
	tr.End(f, 0)
	tr.View(func(procs []*Process, _ Stats) {
		p := procs[0]
		wantOff := []GDRDisabled{{"IB", "mlx5_0", "no module or not supported by GPU"}, {"IB", "mlx5_1", "no module"}, {"IB", "mlx5_2", ""}}
		if !reflect.DeepEqual(p.GDRDisabled, wantOff) {
			t.Errorf("GDRDisabled %+v, want %+v", p.GDRDisabled, wantOff)
		}
		wantOn := []GDRDisabled{{Net: "IB", Device: "mlx5_3"}, {Net: "IBext_v8", Device: "mlx5_4"}}
		if !reflect.DeepEqual(p.GDREnabled, wantOn) {
			t.Errorf("GDREnabled %+v, want %+v", p.GDREnabled, wantOn)
		}
		if len(p.GDRPaths) != 0 {
			t.Errorf("2.4's per-GPU HCA line read as a GDR path: %+v", p.GDRPaths)
		}
	})
}

// GPUs named by bus id (2.5-2.18.1) and by index (2.4, 2.18.3+), in the
// wordings of each release (transport/shm.cc:78@v2.5.6-1, p2p.cc:140 and
// shm.cc:78@v2.6.4-1, shm.cc:73, p2p.cc:194, net.cc:184@v2.12.12-1,
// shm.cc:95@v2.18.3-1). Where the process logged its version, a bus id on
// bus 0 ("60": 0000:00:06.0, a VM's GPU) is a bus id; where it did not,
// it looks like an index and stays one.
func TestBusIDsPerVersion(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		peers []Peer
		nets  []NetUse
	}{{
		name: "2.5 Ring, direct shared memory",
		lines: []string{
			"NCCL version 2.5.6+cuda10.1",
			"g25:100:101 [0] NCCL INFO NCCL version 2.5.6+cuda10.1",
			"g25:100:101 [0] NCCL INFO Ring 00 : 0[1b000] -> 7[41000] via direct shared memory",
			"g25:100:101 [0] NCCL INFO Ring 00 : 0[1b000] -> 1[60] via P2P/IPC",
			"g25:100:101 [0] NCCL INFO Ring 00 : 0[0] -> 2[0] via P2P/common device",
		},
		peers: []Peer{{GPU: "0000:1b:00.0", PeerGPU: "0000:41:00.0", Transport: "SHM", N: 1},
			{GPU: "0000:1b:00.0", PeerGPU: "0000:00:06.0", Transport: "P2P/IPC", N: 1},
			{GPU: "0", PeerGPU: "0", Transport: "P2P/common device", N: 1}},
	}, {
		name: "2.6 Ring, P2P/IPC on bus 0",
		lines: []string{
			"g26:100:101 [0] NCCL INFO NCCL version 2.6.4+cuda10.2",
			"g26:100:101 [0] NCCL INFO Ring 00 : 0[60] -> 1[70] via P2P/IPC",
			"g26:100:101 [0] NCCL INFO Ring 00 : 0[60] -> 8[60] [send] via NET/IB/0/GDRDMA",
		},
		peers: []Peer{{GPU: "0000:00:06.0", PeerGPU: "0000:00:07.0", Transport: "P2P/IPC", N: 1}},
		nets:  []NetUse{{GPU: "0000:00:06.0", Net: "IB", Index: 0, GDR: true, N: 1}},
	}, {
		name: "2.12 Channel, shared memory, P2P/IPC, NET",
		lines: []string{
			"g212:100:101 [1] NCCL INFO NCCL version 2.12.12+cuda11.7",
			"g212:100:101 [1] NCCL INFO Channel 00 : 1[1c000] -> 2[1d000] via direct shared memory",
			"g212:100:101 [1] NCCL INFO Channel 01 : 1[1c000] -> 0[1b000] via P2P/IPC/read",
			"g212:100:101 [1] NCCL INFO Channel 00/0 : 1[1c000] -> 9[1c000] [send] via NET/IB/1/GDRDMA",
			"g212:100:101 [1] NCCL INFO Channel 00/0 : 9[1c000] -> 1[1c000] [receive] via NET/IB/1",
		},
		peers: []Peer{{GPU: "0000:1c:00.0", PeerGPU: "0000:1d:00.0", Transport: "SHM", N: 1},
			{GPU: "0000:1c:00.0", PeerGPU: "0000:1b:00.0", Transport: "P2P/IPC", N: 1}},
		nets: []NetUse{{GPU: "0000:1c:00.0", Net: "IB", Index: 1, GDR: true, N: 1},
			{GPU: "0000:1c:00.0", Net: "IB", Index: 1, N: 1}},
	}, {
		name: "2.18.3 nvmlDev",
		lines: []string{
			"g218:100:101 [1] NCCL INFO NCCL version 2.18.3+cuda12.2",
			"g218:100:101 [1] NCCL INFO Channel 00 : 1[1] -> 2[2] via SHM/direct/direct",
		},
		peers: []Peer{{GPU: "1", PeerGPU: "2", Transport: "SHM", N: 1}},
	}, {
		name: "2.4 cudaDev",
		lines: []string{
			"g24:100:101 [1] NCCL INFO NCCL version 2.4.8+cuda10.1",
			"g24:100:101 [1] NCCL INFO Ring 00 : 1[1] -> 2[2] via direct shared memory",
		},
		peers: []Peer{{GPU: "1", PeerGPU: "2", Transport: "SHM", N: 1}},
	}, {
		name:  "no version: by the look of it",
		lines: []string{"g:100:101 [1] NCCL INFO Channel 00 : 1[60] -> 2[1d000] via direct shared memory"},
		peers: []Peer{{GPU: "60", PeerGPU: "0000:1d:00.0", Transport: "SHM", N: 1}},
	}} {
		t.Run(tc.name, func(t *testing.T) { wantPeers(t, tc.lines, tc.peers, tc.nets) })
	}
}

// The GDR path line of 2.5 names the GPU by bus id ("GPU 86000",
// transport/net.cc:77,86@v2.5.6-1), as 2.6-2.23 do without "NET/IB : ".
func TestGDRPathBusIDs(t *testing.T) {
	p := processOf(t,
		"g25:1:1 [0] NCCL INFO NCCL version 2.5.6+cuda10.1",
		"g25:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 86000 / HCA 0 (distance 4 >= 2)",
		"g25:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for GPU 1b000 / HCA 1 (distance 0 < 2), read 1",
		"g25:1:1 [0] NCCL INFO GPU Direct RDMA Enabled for GPU 60 / HCA 2 (distance 1 <= 4), read 0",
	)
	var got []string
	for _, g := range p.GDRPaths {
		got = append(got, g.GPU)
	}
	if want := []string{"0000:86:00.0", "0000:1b:00.0", "0000:00:06.0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("GDR path GPUs %q, want %q", got, want)
	}
}

func TestMinorPatch(t *testing.T) {
	for v, want := range map[string][3]int{"2.18.3+cuda12.2": {18, 3, 1}, "2.5.6": {5, 6, 1}, "2.30": {30, 0, 1}, "3.0.1": {0, 0, 0}} {
		p := &Process{Version: v, HasVersion: true}
		m, pa, ok := p.minorPatch()
		if got := [3]int{m, pa, map[bool]int{true: 1}[ok]}; got != want {
			t.Errorf("%s: %v, want %v", v, got, want)
		}
	}
}
