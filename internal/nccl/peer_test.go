package nccl

import (
	"fmt"
	"reflect"
	"testing"
)

// peersOf feeds lines to a Tracker and returns the Peers and NetUses of
// each process ("host/pid"), counts included.
func peersOf(t *testing.T, lines ...string) (map[string][]Peer, map[string][]NetUse) {
	t.Helper()
	tr := NewTracker(TrackerOptions{MaxProcesses: 8})
	f := &File{}
	tr.Begin(f)
	for _, l := range lines {
		tr.Line(f, []byte(l))
	}
	tr.End(f, 0)
	peers, nets := map[string][]Peer{}, map[string][]NetUse{}
	tr.View(func(procs []*Process, _ Stats) {
		for _, p := range procs {
			k := p.Host + "/" + p.PID
			for _, e := range p.Peers {
				e.gpuRaw, e.peerRaw = "", ""
				peers[k] = append(peers[k], e)
			}
			for _, e := range p.NetUses {
				e.gpuRaw = ""
				nets[k] = append(nets[k], e)
			}
		}
	})
	return peers, nets
}

// wantPeers checks the peers and network uses that lines give (every
// process's in one list: the tables have one process).
func wantPeers(t *testing.T, lines []string, peers []Peer, nets []NetUse) {
	t.Helper()
	byProc, netsByProc := peersOf(t, lines...)
	var gotP []Peer
	var gotN []NetUse
	for _, v := range byProc {
		gotP = append(gotP, v...)
	}
	for _, v := range netsByProc {
		gotN = append(gotN, v...)
	}
	if !reflect.DeepEqual(gotP, peers) {
		t.Errorf("peers %+v\nwant  %+v", gotP, peers)
	}
	if !reflect.DeepEqual(gotN, nets) {
		t.Errorf("net uses %+v\nwant %+v", gotN, nets)
	}
}

func TestPeersAndNetUses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		peers []Peer
		nets  []NetUse
	}{{
		// nccl-1189 (H20, 2.2x): [receive] names this process's GPU on
		// the right, [send] on the left; nvmlDev indices.
		name: "nccl-1189 receive, send, P2P/CUMEM",
		lines: []string{
			"H20-GPU-06:4015540:4015653 [1] NCCL INFO Channel 00/0 : 1[1] -> 3[1] [receive] via NET/IB/2/GDRDMA",
			"H20-GPU-06:4015540:4015653 [1] NCCL INFO Channel 02/0 : 1[1] -> 3[1] [receive] via NET/IB/2/GDRDMA",
			"H20-GPU-06:4015540:4015653 [1] NCCL INFO Channel 01/0 : 3[1] -> 1[1] [send] via NET/IB/2/GDRDMA",
			"H20-GPU-06:4015540:4015653 [1] NCCL INFO Channel 00/0 : 3[1] -> 2[0] via P2P/CUMEM",
		},
		peers: []Peer{{GPU: "1", PeerGPU: "0", Transport: "P2P/CUMEM", N: 1}},
		nets:  []NetUse{{GPU: "1", Net: "IB", Index: 2, GDR: true, N: 3}},
	}, {
		// nccl-899 (2.7-2.18): bus ids "1a000", no /GDRDMA (no module).
		name: "nccl-899 bus ids without GDRDMA",
		lines: []string{
			"21346d5cefce:5325:5338 [0] NCCL INFO Channel 00 : 0[1a000] -> 1[1a000] [receive] via NET/IB/0",
			"21346d5cefce:5325:5338 [0] NCCL INFO Channel 00 : 1[1a000] -> 0[1a000] [send] via NET/IB/0",
		},
		nets: []NetUse{{GPU: "0000:1a:00.0", Net: "IB", Index: 0, N: 2}},
	}, {
		// nccl-tests-166: SHM between two processes of one host.
		name:  "nccl-tests-166 SHM",
		lines: []string{"ubuntu:9621:9687 [2] NCCL INFO Channel 19 : 10[2] -> 11[3] via SHM/direct/direct"},
		peers: []Peer{{GPU: "2", PeerGPU: "3", Transport: "SHM", N: 1}},
	}, {
		// deepspeed-4715: P2P/IPC/read and NET/IBext (plugin) without GDR.
		name: "deepspeed-4715 P2P/IPC/read, IBext",
		lines: []string{
			"g218a:37001:37084 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read",
			"g218a:37001:37084 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/IPC/read",
			"ravg1038:32092:32486 [1] NCCL INFO Channel 00/0 : 1[1] -> 4[0] [send] via NET/IBext/0",
		},
		peers: []Peer{{GPU: "0", PeerGPU: "1", Transport: "P2P/IPC", N: 2}},
		nets:  []NetUse{{GPU: "1", Net: "IBext", Index: 0, N: 1}},
	}, {
		// aws-ofi-nccl-24 (2.4): P2P with cudaDev; NET lines without
		// devices give no NetUse.
		name: "aws-ofi-nccl-24 Ring",
		lines: []string{
			"[1,26]<stdout>:ip-172-32-36-209:8716:9558 [2] NCCL INFO Ring 00 : 26[2] -> 30[6] via P2P/IPC",
			"[1,7]<stdout>:ip-172-32-38-1:21471:22316 [7] NCCL INFO Ring 00 : 7 -> 8 [send] via NET/AWS Libfabric/0",
		},
		peers: []Peer{{GPU: "2", PeerGPU: "6", Transport: "P2P/IPC", N: 1}},
	}, {
		// The proxy rank and the suffixes after the index (net.cc's
		// "via NET/%s/%d(%d)%s%s").
		name:  "proxy rank, GDRDMA(PCI), Shared",
		lines: []string{"h:1:3 [0] NCCL INFO Channel 00/1 : 0[0] -> 9[1] [send] via NET/IB/1(1)/GDRDMA(PCI)/Shared"},
		nets:  []NetUse{{GPU: "0", Net: "IB", Index: 1, GDR: true, N: 1}},
	}, {
		// p2p.cc's "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/direct
		// pointer%s" (one process driving both GPUs).
		name:  "P2P/direct pointer",
		lines: []string{"h:1:3 [0] NCCL INFO Channel 00/0 : 0[4] -> 1[5] via P2P/direct pointer/read"},
		peers: []Peer{{GPU: "4", PeerGPU: "5", Transport: "P2P/direct pointer", N: 1}},
	}, {
		// One "via" text for two peers: each counted.
		name: "same transport, two peers",
		lines: []string{
			"g218a:37001:37084 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read",
			"g218a:37001:37084 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[2] via P2P/IPC/read",
		},
		peers: []Peer{{GPU: "0", PeerGPU: "1", Transport: "P2P/IPC", N: 1}, {GPU: "0", PeerGPU: "2", Transport: "P2P/IPC", N: 1}},
	}} {
		t.Run(tc.name, func(t *testing.T) { wantPeers(t, tc.lines, tc.peers, tc.nets) })
	}
}

func TestPeersBounded(t *testing.T) {
	var lines []string
	for i := range 200 {
		lines = append(lines,
			fmt.Sprintf("h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> %d[%d] via P2P/IPC", i, i),
			fmt.Sprintf("h:1:1 [0] NCCL INFO Channel 00/0 : 0[%d] -> 9[0] [send] via NET/IB/%d/GDRDMA", i, i%8))
	}
	peers, nets := peersOf(t, lines...)
	if len(peers["h/1"]) != maxPeers || len(nets["h/1"]) != maxNetUses {
		t.Fatalf("%d peers, %d net uses; want %d, %d", len(peers["h/1"]), len(nets["h/1"]), maxPeers, maxNetUses)
	}
}

func TestDeviceLabel(t *testing.T) {
	for in, want := range map[string]string{
		"0": "0", "7": "7", "12": "12",
		"1a000": "0000:1a:00.0", "3d000": "0000:3d:00.0", "bc000": "0000:bc:00.0",
		"100010": "0001:00:01.0", "a": "0000:00:00.a",
		"1000": "0000:01:00.0", "60": "60", // bus 0: taken for an index
	} {
		if got := deviceLabel([]byte(in)); got != want {
			t.Errorf("deviceLabel(%q) = %q, want %q", in, got, want)
		}
	}
}
