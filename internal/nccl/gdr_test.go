package nccl

import (
	"path/filepath"
	"reflect"
	"testing"
)

const fixtureNCCLGDR = "../../collector/fixtures/nccl-gdr"

// The GDR path lines of every release form. Real lines where a public log
// has them (said so); the others are built from the format strings of
// github.com/NVIDIA/nccl (gdr.go cites them).
func TestGDRPathLines(t *testing.T) {
	for _, c := range []struct {
		version, msg string
		want         GDRPath
	}{
		// 2.4: built from transport/net.cc:271,280@v2.4.8-1.
		{"2.4.8", "NET/IB : GPU Direct RDMA Disabled for GPU 1[1] / HCA 0 (distance 4 >= 4)",
			GDRPath{GPU: "1", Rank: -1, Index: 0, Distance: 4, MaxDistance: 4, Read: -1}},
		{"2.4.8", "NET/IB : GPU Direct RDMA Enabled for GPU 0[0] / HCA 1 (distance 2 < 4), read 0",
			GDRPath{GPU: "0", Rank: -1, Index: 1, Enabled: true, Distance: 2, MaxDistance: 4, Read: 0}},
		// 2.5: built from transport/net.cc@v2.5.6-1.
		{"2.5.6", "NET/IB : GPU Direct RDMA Disabled for GPU 1a000 / HCA 3 (distance 5 >= 4)",
			GDRPath{GPU: "0000:1a:00.0", Rank: -1, Index: 3, Distance: 5, MaxDistance: 4, Read: -1}},
		// 2.16.5: real, NVIDIA/nccl-tests#350 (collector/fixtures/nccl-gdr).
		{"2.16.5", "GPU Direct RDMA Enabled for GPU 81000 / HCA 1 (distance 6 <= 7), read 0",
			GDRPath{GPU: "0000:81:00.0", Rank: -1, Index: 1, Enabled: true, Distance: 6, MaxDistance: 7, Read: 0}},
		// 2.19: built from graph/paths.cc:395@v2.19.3-1; no version line (a non-zero rank).
		{"", "GPU Direct RDMA Disabled for GPU 1a000 / HCA 12 (distance 7 > 5)",
			GDRPath{GPU: "0000:1a:00.0", Rank: -1, Index: 12, Distance: 7, MaxDistance: 5, Read: -1}},
		// 2.21-2.23: "HCA %lx", built from graph/paths.cc:414@v2.21.5-1.
		{"2.22.3", "GPU Direct RDMA Disabled for GPU ca000 / HCA c (distance 7 > 5)",
			GDRPath{GPU: "0000:ca:00.0", Rank: -1, Index: 12, Distance: 7, MaxDistance: 5, Read: -1}},
		// 2.24-2.28: the rank; real (a Ray-on-GKE README's job output, NCCL
		// with " mode %s": 2.26+).
		{"", "GPU Direct RDMA Enabled for GPU 8 / HCA 0 (distance 4 <= 4), read 0 mode Default",
			GDRPath{Rank: 8, Index: 0, Enabled: true, Distance: 4, MaxDistance: 4, Read: 0, Mode: "Default"}},
		{"2.27.3", "GPU Direct RDMA Disabled for GPU 3 / HCA 1 (distance 7 > 5)",
			GDRPath{Rank: 3, Index: 1, Distance: 7, MaxDistance: 5, Read: -1}},
		{"2.27.3", "GPU Direct RDMA Disabled for GPU 1234 / HCA 1 (distance 7 > 5)",
			GDRPath{Rank: 1234, Index: 1, Distance: 7, MaxDistance: 5, Read: -1}},
		// 2.29: built from graph/paths.cc:428,472,483@v2.29.2-1 (bus id 0x1a000 = 106496).
		{"2.29.2", "GPU Direct RDMA Enabled for GPU/0-106496 (rank 2) - NET/0-1 (distance 4 <= 5, read 1, mode PCI)",
			GDRPath{GPU: "0000:1a:00.0", Rank: 2, Index: 1, Enabled: true, Distance: 4, MaxDistance: 5, Read: 1, Mode: "PCI"}},
		{"2.29.2", "GPU Direct RDMA Disabled for GPU/0-106496 (rank 2) - NET/0-3 ( using PXN via GPU/0-110592, distance 7 > 5)",
			GDRPath{GPU: "0000:1a:00.0", Rank: 2, Index: 3, Distance: 7, MaxDistance: 5, Read: -1}},
	} {
		tr := NewTracker(TrackerOptions{})
		f := &File{}
		tr.Begin(f)
		if c.version != "" {
			tr.Line(f, []byte("h:1:1 [0] NCCL INFO NCCL version "+c.version+"+cuda12.4"))
		}
		tr.Line(f, []byte("h:1:2 [0] NCCL INFO "+c.msg))
		tr.End(f, 0)
		tr.View(func(procs []*Process, _ Stats) {
			if len(procs) != 1 || len(procs[0].GDRPaths) != 1 {
				t.Fatalf("%q: %d processes, want one with a GDR path", c.msg, len(procs))
			}
			got := procs[0].GDRPaths[0]
			got.gpuRaw, got.hcaRaw = "", ""
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("%q:\n got %+v\nwant %+v", c.msg, got, c.want)
			}
		})
	}
	for _, msg := range []string{
		"GPU Direct RDMA Enabled for GPU 81000 / HCA 1",                        // no distance
		"GPU Direct RDMA Enabled for GPU zz / HCA 1 (distance 6 <= 7), read 0", // not a device
		"GPU Direct RDMA Disabled for HCA 1 'mlx5_1' (no module)",              // NET/…'s line, without NET/
		"GPU Direct RDMA Enabled for GPU/0-x (rank 2) - NET/0-1 (distance 4 <= 5)",
		"DMA-BUF is available on GPU device ",
	} {
		if ev := classify([]byte(msg)); ev.kind != evNone {
			t.Errorf("%q: kind %d, want none", msg, ev.kind)
		}
	}
}

// The real 2.16.5 log: every GDR line is Enabled, DMA-BUF is available on
// CUDA device 0, the HCA index names mlx5_2 through the device list.
func TestGDRPathFixture(t *testing.T) {
	tr := newTestNCCL(t, testOpts{LogPaths: []string{filepath.Join(fixtureNCCLGDR, "nccl-tests-350-2.16.5-gdr-enabled-dmabuf.log")}})
	tr.poll()
	tr.View(func(procs []*Process, _ Stats) {
		if len(procs) != 1 {
			t.Fatalf("%d processes", len(procs))
		}
		p := procs[0]
		if !reflect.DeepEqual(p.DMABuf, []string{"0"}) {
			t.Errorf("DMABuf %q", p.DMABuf)
		}
		want := []GDRPath{
			{GPU: "0000:81:00.0", Rank: -1, Index: 1, Enabled: true, Distance: 6, MaxDistance: 7, Read: 1},
			{GPU: "0000:81:00.0", Rank: -1, Index: 0, Enabled: true, Distance: 7, MaxDistance: 7, Read: 0},
		}
		got := append([]GDRPath(nil), p.GDRPaths...)
		for i := range got {
			got[i].gpuRaw, got[i].hcaRaw = "", ""
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("GDRPaths\n got %+v\nwant %+v", got, want)
		}
	})
}

// A rank-only line names the GPU of that rank in the process's connection
// lines; another local rank's stays unresolved.
func TestGDRPathRankResolved(t *testing.T) {
	tr := NewTracker(TrackerOptions{})
	f := &File{}
	tr.Begin(f)
	for _, l := range []string{
		"h:1:2 [5] NCCL INFO GPU Direct RDMA Enabled for GPU 2 / HCA 3 (distance 4 <= 4), read 0 mode Default",
		"h:1:2 [5] NCCL INFO GPU Direct RDMA Enabled for GPU 9 / HCA 0 (distance 4 <= 4), read 0 mode Default",
		// real shape: the Ray-on-GKE README's "Channel 03/0 : 2[2] -> 11[3] [send] via NET/gIB/3/GDRDMA"
		"h:1:2 [5] NCCL INFO Channel 03/0 : 2[5] -> 11[3] [send] via NET/gIB/3/GDRDMA",
	} {
		tr.Line(f, []byte(l))
	}
	tr.End(f, 0)
	tr.View(func(procs []*Process, _ Stats) {
		p := procs[0]
		if g := p.GDRPathGPU(p.GDRPaths[0]); g != "5" {
			t.Errorf("rank 2: GPU %q, want 5", g)
		}
		if g := p.GDRPathGPU(p.GDRPaths[1]); g != "" {
			t.Errorf("rank 9: GPU %q, want none", g)
		}
	})
}
