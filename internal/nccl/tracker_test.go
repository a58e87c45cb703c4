package nccl

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// The fixtures are the collector's (the demo and the end-to-end test
// read them too).
const (
	fixtureNCCL     = "../../collector/fixtures/nccl"
	fixtureNCCLH200 = "../../collector/fixtures/nccl-h200"
)

// testOpts configures a test Tracker and its Follower.
type testOpts struct {
	LogPaths     []string
	MaxProcesses int
	Retention    time.Duration
	ExitedGrace  time.Duration
	Hostname     string
	Procfs       string
	Now          func() time.Time
	Logger       log.Logger
}

// testNCCL is a Tracker fed by a Follower, polled by the test (the
// collector's poll goroutine does this in the exporter).
type testNCCL struct {
	*Tracker
	tailer *Follower
}

func newTestNCCL(t testing.TB, o testOpts) *testNCCL {
	t.Helper()
	if o.Hostname == "" {
		o.Hostname = "exporter-host"
	}
	if o.Procfs == "" {
		o.Procfs = "/nonexistent/proc"
	}
	tr := NewTracker(TrackerOptions{MaxProcesses: o.MaxProcesses, Retention: o.Retention, ExitedGrace: o.ExitedGrace, Hostname: o.Hostname, Procfs: o.Procfs, Now: o.Now, Logger: o.Logger})
	c := &testNCCL{Tracker: tr, tailer: NewFollower(o.LogPaths, tr)}
	c.tailer.Yield = func() {}
	return c
}

// poll reads the files once and expires processes, as the collector does.
func (c *testNCCL) poll() {
	c.tailer.Poll(func() bool { return false })
	c.Expire()
}

func (c *testNCCL) stats() (st Stats, procs int) {
	c.View(func(p []*Process, s Stats) { st, procs = s, len(p) })
	return st, procs
}

func (c *testNCCL) lines() float64    { st, _ := c.stats(); return float64(st.Lines) }
func (c *testNCCL) unparsed() float64 { st, _ := c.stats(); return float64(st.Unparsed) }
func (c *testNCCL) bytes() float64    { st, _ := c.stats(); return float64(st.Bytes) }
func (c *testNCCL) evicted() float64  { st, _ := c.stats(); return float64(st.Evicted) }
func (c *testNCCL) nprocs() int       { _, n := c.stats(); return n }
func (c *testNCCL) files() float64    { _, n := c.tailer.Backlog(); return float64(n) }
func (c *testNCCL) backlog() float64  { b, _ := c.tailer.Backlog(); return float64(b) }

// ncclProcSummary is what a test expects of one process.
type ncclProcSummary struct {
	Net      string
	Conns    map[string]float64 // "NET/IB gdr" or "P2P/IPC" → connections
	Devices  []string           // "mlx5_0:1/RoCE"
	Ifaces   []string
	Version  string // "2.19.3+cuda12.3"
	Warnings float64
	Env      map[string]string
	GDROff   []string // "IB mlx5_1 (no module)"
	Ranks    uint32   // largest communicator logged (0: none)
	Nodes    uint32   // its largest node count (0: none logged)
}

// summary returns the state by "host/pid".
func (c *testNCCL) summary() map[string]ncclProcSummary {
	out := map[string]ncclProcSummary{}
	c.View(func(procs []*Process, _ Stats) {
		for _, p := range procs {
			out[p.Host+"/"+p.PID] = summarize(p)
		}
	})
	return out
}

func summarize(p *Process) ncclProcSummary {
	s := ncclProcSummary{Net: p.Net, Warnings: float64(p.Warnings), Ranks: p.Ranks, Nodes: p.Nodes}
	if (p.Net == "") != (p.NetEvidence == EvidenceNone) {
		panic("net without evidence")
	}
	for _, e := range p.Conns {
		if s.Conns == nil {
			s.Conns = map[string]float64{}
		}
		k := e.Transport
		if e.GDR {
			k += " gdr"
		}
		s.Conns[k] = float64(e.N)
	}
	for _, d := range p.Devices {
		s.Devices = append(s.Devices, d.Name+":"+d.Port+"/"+d.Link)
	}
	s.Ifaces = append(s.Ifaces, p.Interfaces...)
	if p.HasVersion {
		s.Version = p.Version
		if p.CUDA != "" {
			s.Version += "+cuda" + p.CUDA
		}
	}
	for _, e := range p.Env {
		if s.Env == nil {
			s.Env = map[string]string{}
		}
		s.Env[e.Name] = e.Value
	}
	for _, g := range p.GDRDisabled {
		s.GDROff = append(s.GDROff, fmt.Sprintf("%s %s (%s)", g.Net, g.Device, g.Reason))
	}
	return s
}

func ib(n float64) map[string]float64 { return map[string]float64{"NET/IB gdr": n} }

func diffSummaries(t *testing.T, name string, got, want map[string]ncclProcSummary) {
	t.Helper()
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		g, gok := got[k]
		w, wok := want[k]
		switch {
		case !gok:
			t.Errorf("%s: process %s missing; want %+v", name, k, w)
		case !wok:
			t.Errorf("%s: unexpected process %s: %+v", name, k, g)
		case !reflect.DeepEqual(g, w):
			t.Errorf("%s: process %s\n got %+v\nwant %+v", name, k, g, w)
		}
	}
}

var rocE8 = []string{"mlx5_0:1/RoCE", "mlx5_1:1/RoCE", "mlx5_2:1/RoCE", "mlx5_3:1/RoCE", "mlx5_4:1/RoCE", "mlx5_5:1/RoCE", "mlx5_6:1/RoCE", "mlx5_7:1/RoCE"}

// TestNCCLRealSamples classifies every real log in fixtures/nccl (copies
// of ../shared/reference/real-samples/nccl-logs; their first three lines
// say where each came from). The expectations were written by hand from
// reading each log.
func TestNCCLRealSamples(t *testing.T) {
	const k1538 = "job-3bb823c0-6d27-4312-8094-1c5910bf9b51-worker-0/"
	const sglangHost = "llm-bm-infer-service-prod-17389809006090t9a-1100014361"
	ipc := func(n float64) map[string]float64 { return map[string]float64{"P2P/IPC": n} }
	libfabric := map[string]float64{"NET/AWS Libfabric": 1}
	shm := func(n float64) map[string]float64 { return map[string]float64{"SHM": n} }
	for _, tc := range []struct {
		file            string
		lines, unparsed float64
		procs           map[string]ncclProcSummary
	}{
		{
			// MPI prefix on every line, a network name with a space, a
			// WARN with function:line, an empty prefixed line and "...".
			file: "aws-ofi-nccl-24-mpi-prefix-net-aws-libfabric-warn.log", lines: 17, unparsed: 5,
			procs: map[string]ncclProcSummary{
				"ip-172-32-36-209/8715":  {Conns: ipc(1)},
				"ip-172-32-36-209/8716":  {Conns: ipc(1)},
				"ip-172-32-36-209/8717":  {Conns: ipc(1)},
				"ip-172-32-36-209/8718":  {Conns: ipc(1)},
				"ip-172-32-36-209/8719":  {Conns: ipc(1)},
				"ip-172-32-36-209/8720":  {Conns: ipc(1)},
				"ip-172-32-36-209/8800":  {}, // "NET/OFI No NIC info", "include/net.h:24 -> 2"
				"ip-172-32-38-1/21471":   {Net: "AWS Libfabric", Conns: libfabric},
				"ip-172-32-34-121/70560": {Net: "AWS Libfabric", Conns: libfabric},
				"ip-172-32-45-165/72593": {Net: "AWS Libfabric", Conns: libfabric, Warnings: 1},
			},
		},
		{
			// HPC-X plugin without GDRDMA, P2P/IPC/read.
			file: "deepspeed-4715-ibext-p2p-ipc-read.log", lines: 20, unparsed: 3,
			procs: map[string]ncclProcSummary{
				"ravg1038/32091": {Conns: ipc(1)},
				"ravg1038/32092": {Net: "IBext", Conns: map[string]float64{"NET/IBext": 2}},
				"ravg1038/32093": {Conns: ipc(1)},
				"ravg1038/32094": {Conns: ipc(2)},
				"ravg1040/41357": {Net: "IBext", Conns: map[string]float64{"NET/IBext": 2, "P2P/IPC": 2}},
				"ravg1040/41358": {Net: "IBext", Conns: map[string]float64{"NET/IBext": 1}},
				"ravg1040/41359": {Conns: ipc(2)},
				"ravg1040/41360": {Conns: ipc(2)},
			},
		},
		{
			// IB disabled by environment, socket on lo, topology dump.
			file: "nccl-1053-socket-lo-gdr-disabled-topology.log", lines: 21, unparsed: 3,
			procs: map[string]ncclProcSummary{
				"axa/3048391": {Net: "Socket", Ifaces: []string{"lo"},
					Env:    map[string]string{"NCCL_IBEXT_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "lo"},
					GDROff: []string{"Socket lo ()"}},
			},
		},
		{
			// NET/IB/<dev>/GDRDMA both directions, P2P/CUMEM, two hosts.
			file: "nccl-1189-h20-gdrdma-send-receive-p2p-cumem.log", lines: 17, unparsed: 3,
			procs: map[string]ncclProcSummary{
				"H20-GPU-06/4015539": {Net: "IB", Conns: ib(1)},
				"H20-GPU-06/4015540": {Net: "IB", Conns: map[string]float64{"NET/IB gdr": 8, "P2P/CUMEM": 1}},
				"H20-GPU-05/1789225": {Conns: map[string]float64{"P2P/CUMEM": 4}},
			},
		},
		{
			// "Using network IBext_v8" wins over the plugin's "NET/IB : Using" line.
			file: "nccl-1538-roce-8nic-ibext_v8-2.22.3.log", lines: 12, unparsed: 3,
			procs: map[string]ncclProcSummary{
				k1538 + "5664": {Net: "IBext_v8", Devices: rocE8},
				k1538 + "5665": {Net: "IBext_v8"},
				k1538 + "5666": {Net: "IBext_v8"},
				k1538 + "5667": {Net: "IBext_v8", Devices: rocE8},
				k1538 + "5669": {Net: "IBext_v8", Devices: rocE8},
				k1538 + "5670": {},
			},
		},
		{
			// "[date time] host:pid [dev] file:line NCCL WARN" with a redacted pid.
			file: "nccl-2013-2.27-timestamped-modify-qp-timeout-anonymized.log", lines: 4, unparsed: 3,
			procs: map[string]ncclProcSummary{
				"host-01.example.com/XXXXXX": {Warnings: 1},
			},
		},
		{
			// NCCL 2.5.6 under "[1,N]<stdout>:": no "Using network" yet; the
			// bare version line belongs to rank [1,0].
			file: "nccl-300-mpi-stdout-prefix-2.5.6-lo-socket.log", lines: 17, unparsed: 3,
			procs: map[string]ncclProcSummary{
				"5873af64cf59/10158": {Net: "Socket", Ifaces: []string{"lo"}, Version: "2.5.6+cuda10.2"},
				"5873af64cf59/10159": {},
				"5873af64cf59/10160": {Net: "Socket", Ifaces: []string{"lo"}},
				"5873af64cf59/10161": {Net: "Socket", Ifaces: []string{"lo"}},
			},
		},
		{
			// Pre-2.7 "Ring" lines, "via direct shared memory".
			file: "nccl-367-old-ring-net-socket-nsocks.log", lines: 18, unparsed: 3,
			procs: map[string]ncclProcSummary{
				"c6ad99331184/117277": {Net: "Socket", Conns: map[string]float64{"NET/Socket": 1}, Env: map[string]string{"NCCL_NSOCKS_PERTHREAD": "8"}},
				"c6ad99331184/117284": {Conns: shm(1)},
				"c6ad99331184/117291": {Conns: shm(1)},
				"c6ad99331184/117298": {},
				"c6ad99331184/117305": {},
				"c6ad99331184/117326": {},
			},
		},
		{
			// GDR disabled (no module): NET/IB without /GDRDMA.
			file: "nccl-899-gdr-disabled-no-module-net-ib.log", lines: 17, unparsed: 3,
			procs: map[string]ncclProcSummary{
				"21346d5cefce/5325": {Net: "IB", Conns: map[string]float64{"NET/IB": 6},
					GDROff: []string{"IB mlx5_1 (no module)", "IB mlx5_2 (no module)", "IB mlx5_3 (no module)"}},
				"6a5a91752e39/74352": {Net: "IB", Conns: map[string]float64{"NET/IB": 5}},
			},
		},
		{
			file: "nccl-tests-166-shm-direct-two-procs.log", lines: 19, unparsed: 3,
			procs: map[string]ncclProcSummary{
				"ubuntu/9621":  {Conns: shm(9)},
				"ubuntu/39964": {Conns: shm(7)},
			},
		},
		{
			// Two RoCE HCAs with [RO]; bare version line after rank 0's
			// lines; an nccl-tests "#" banner line.
			file: "nccl-tests-185-roce-2.19.3-dgxh100-init.log", lines: 17, unparsed: 4,
			procs: map[string]ncclProcSummary{
				"dgxh100-4/460770":  {Net: "IB", Devices: []string{"mlx5_10:1/RoCE", "mlx5_11:1/RoCE"}, Version: "2.19.3+cuda12.3"},
				"dgxh100-3/2152176": {Net: "IB", Devices: []string{"mlx5_10:1/RoCE", "mlx5_11:1/RoCE"}},
			},
		},
		{
			// SGLang falling back to sockets on eth0.
			file: "sglang-3398-h20-socket-fallback-mnnvl-cumem-env.log", lines: 12, unparsed: 3,
			procs: map[string]ncclProcSummary{
				// "ncclCommInitRank comm 0xafd6da0 rank 10 nranks 16 … - Init
				// START"; the excerpt has no nNodes line.
				sglangHost + "/88008": {Net: "Socket", Ifaces: []string{"eth0"},
					Env:   map[string]string{"NCCL_SOCKET_IFNAME": "eth0", "NCCL_CUMEM_ENABLE": "0", "NCCL_NVLS_ENABLE": "0"},
					Ranks: 16},
			},
		},
		{
			// "> " quoted lines, torchrun output, three socket interfaces.
			file: "vllm-6370-quoted-socket-multi-interface-2.20.5.log", lines: 15, unparsed: 7,
			procs: map[string]ncclProcSummary{
				"flow-matic/820398": {Net: "Socket", Ifaces: []string{"eno3", "lxcbr0", "tailscale0"}, Version: "2.20.5+cuda12.4"},
			},
		},
	} {
		t.Run(tc.file, func(t *testing.T) {
			c := newTestNCCL(t, testOpts{LogPaths: []string{filepath.Join(fixtureNCCL, tc.file)}})
			c.poll()
			if c.files() != 1 {
				t.Fatalf("files = %v", c.files())
			}
			if c.lines() != tc.lines || c.unparsed() != tc.unparsed {
				t.Errorf("lines %v unparsed %v, want %v %v", c.lines(), c.unparsed(), tc.lines, tc.unparsed)
			}
			diffSummaries(t, tc.file, c.summary(), tc.procs)
		})
	}
	// Every sample is in the table.
	samples, _ := filepath.Glob(filepath.Join(fixtureNCCL, "*.log"))
	if len(samples) != 13 {
		t.Errorf("%d sample logs in %s, the table has 13", len(samples), fixtureNCCL)
	}
}

// TestNCCLFixturesMatchSamples: the fixtures are unmodified copies.
func TestNCCLFixturesMatchSamples(t *testing.T) {
	var orig []string
	// next to the checkout, or next to the directory of a worktree
	for _, dir := range []string{"../../../shared/reference/real-samples/nccl-logs", "../../../../shared/reference/real-samples/nccl-logs"} {
		if orig, _ = filepath.Glob(filepath.Join(dir, "*.log")); len(orig) > 0 {
			break
		}
	}
	if len(orig) == 0 {
		t.Skip("no ../shared/reference next to the checkout")
	}
	for _, o := range orig {
		a, _ := os.ReadFile(o)
		b, err := os.ReadFile(filepath.Join(fixtureNCCL, filepath.Base(o)))
		if err != nil || string(a) != string(b) {
			t.Errorf("%s: fixture missing or different from the sample", filepath.Base(o))
		}
	}
}

// scanText feeds text as one log file and returns the summary.
func scanText(t *testing.T, text string) (*testNCCL, map[string]ncclProcSummary) {
	t.Helper()
	dir := t.TempDir()
	testenv.WriteFile(t, filepath.Join(dir, "a.log"), text)
	c := newTestNCCL(t, testOpts{LogPaths: []string{filepath.Join(dir, "*.log")}})
	c.poll()
	return c, c.summary()
}

// TestNCCLSyntheticLines covers prefixes, versions and messages the real
// samples lack. Line formats follow NCCL's source (debug.cc, init.cc,
// transport/net.cc, net_ib) across 2.4 to 2.30.
func TestNCCLSyntheticLines(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       map[string]ncclProcSummary
	}{
		{"ray prefix with colours and dedup suffix",
			"\x1b[36m(RayWorkerWrapper pid=4711, ip=10.0.0.2)\x1b[0m gpu-node-1:4711:4800 [0] NCCL INFO Using network IB\n" +
				"(RayWorkerWrapper pid=4711) gpu-node-1:4711:4800 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA [repeated 7x across cluster]\n" +
				"(RayWorkerWrapper pid=4711) NCCL version 2.21.5+cuda12.4\n",
			map[string]ncclProcSummary{"gpu-node-1/4711": {Net: "IB", Conns: ib(1), Version: "2.21.5+cuda12.4"}}},
		{"pdsh prefix",
			"node07: node07:1234:1300 [3] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_3:1/RoCE ; OOB eth0:10.1.0.7<0>\n" +
				"node07: node07:1234:1300 [3] NCCL INFO Using network IB\n",
			map[string]ncclProcSummary{"node07/1234": {Net: "IB", Devices: []string{"mlx5_0:1/RoCE", "mlx5_3:1/RoCE"}}}},
		{"kubectl --timestamps and journald",
			"2025-06-01T10:00:00.123456789Z sglang-0:77:77 [0] NCCL INFO NCCL version 2.27.3+cuda12.9\n" +
				"Jun 01 10:00:01 node3 python3[77]: sglang-0:77:90 [0] NCCL INFO Using network Socket\n" +
				"Jun 01 10:00:01 node3 python3[77]: sglang-0:77:90 [0] NCCL INFO NET/Socket : Using [0]bond0:10.2.0.3<0>\n",
			map[string]ncclProcSummary{"sglang-0/77": {Net: "Socket", Ifaces: []string{"bond0"}, Version: "2.27.3+cuda12.9"}}},
		{"NCCL 2.4 old INFO and sideband line",
			"hostA:100:100 [0] NCCL INFO NET/IB : Using interface ib0 for sideband communication\n" +
				"hostA:100:100 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:192.168.0.1<0>\n" +
				"hostA:100:100 [0] NCCL INFO NCCL version 2.4.8+cuda10.1\n" +
				"hostA:100:120 [0] NCCL INFO Ring 00 : 0[0] -> 1[1] via P2P/IPC\n" +
				"hostA:100:120 [0] NCCL INFO Ring 00 : 3 -> 0 [receive] via NET/IB/0/GDRDMA\n",
			map[string]ncclProcSummary{"hostA/100": {Net: "IB", Devices: []string{"mlx5_0:1/IB"}, Version: "2.4.8+cuda10.1",
				Conns: map[string]float64{"P2P/IPC": 1, "NET/IB gdr": 1}}}},
		{"NCCL 2.27+ plugin lines, PXN, GDRDMA(PCI), Shared",
			"h:1:2 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so.\n" +
				"h:1:2 [0] NCCL INFO Initialized NET plugin IB\n" +
				"h:1:2 [0] NCCL INFO Assigned NET plugin IB to comm\n" +
				"h:1:3 [0] NCCL INFO Channel 00/1 : 0[0] -> 9[1] [send] via NET/IB/1(1)/GDRDMA\n" +
				"h:1:3 [0] NCCL INFO Channel 01/1 : 0[0] -> 9[1] [send] via NET/IB/1/GDRDMA(PCI)/Shared\n" +
				"h:1:3 [0] NCCL INFO Channel 02/0 : 0[0] -> 1[1] via P2P/CUMEM/CE\n" +
				"h:1:3 [0] NCCL INFO Channel 03/0 : 0[0] -> 1[1] via P2P/direct pointer/read\n" +
				"h:1:3 [0] NCCL INFO Channel 04/0 : 0[0] -> 1[1] via SHM/direct/direct\n",
			map[string]ncclProcSummary{"h/1": {Net: "IB", Conns: map[string]float64{"NET/IB gdr": 2, "P2P/CUMEM": 1, "P2P/direct pointer": 1, "SHM": 1}}}},
		{"NCCL 2.30 merged NICs, SHARP, GIN and RMA plugins, timestamped WARN",
			"h:5:5 [0] NCCL INFO NET/IB : Using [0]={[0] mlx5_0:1/RoCE, [1] mlx5_1:1/RoCE} [1]mlx5_2:1/IB/SHARP [RO]; OOB eth0:10.0.0.1<0>\n" +
				"h:5:5 [0] NCCL INFO Initialized NET plugin IB\n" +
				"h:5:5 [0] NCCL INFO Assigned GIN plugin GIN_XXXX to comm\n" +
				"h:5:5 [0] NCCL INFO Assigned RMA plugin RMA_XXXX to comm\n" +
				"[2026-05-05 06:16:47] h:5:5 [0] plugin/net.cc:334 NCCL WARN Failed to initialize any NET plugin\n",
			map[string]ncclProcSummary{"h/5": {Net: "IB", Devices: []string{"mlx5_0:1/RoCE", "mlx5_1:1/RoCE", "mlx5_2:1/IB"}, Warnings: 1}}},
		{"no IB device: empty NET/IB list is not the network",
			"h:6:6 [0] NCCL INFO NET/IB : No device found.\n" +
				"h:6:6 [0] NCCL INFO NET/IB : Using [RO]; OOB eth0:10.0.0.1<0>\n" +
				"h:6:6 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:fe80::1%eth1<0>\n" +
				"h:6:7 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/1\n",
			map[string]ncclProcSummary{"h/6": {Net: "Socket", Ifaces: []string{"eth0", "eth1"}, Conns: map[string]float64{"NET/Socket": 1}}}},
		{"plugin nets: NET/OFI, Libfabric, IBext_v8 connection beats the plugin's NET/IB list",
			"a:1:1 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)\n" +
				"a:1:1 [0] NCCL INFO Using network Libfabric\n" +
				"b:2:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:10.0.0.2<0>\n" +
				"b:2:3 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IBext_v8/0/GDRDMA\n",
			map[string]ncclProcSummary{
				"a/1": {Net: "Libfabric"},
				"b/2": {Net: "IBext_v8", Devices: []string{"mlx5_0:1/RoCE"}, Conns: map[string]float64{"NET/IBext_v8 gdr": 1}}}},
		{"the latest Using network wins, inferred nets never replace it",
			"h:8:8 [0] NCCL INFO Using network Socket\n" +
				"h:8:8 [0] NCCL INFO Using network IB\n" +
				"h:8:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n",
			map[string]ncclProcSummary{"h/8": {Net: "IB", Conns: map[string]float64{"NET/Socket": 1}}}},
		{"environment and GDR lines",
			"h:9:9 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ^docker0,lo\n" +
				"h:9:9 [0] NCCL INFO NCCL_IB_HCA set by environment to mlx5_0:1,mlx5_3:1\n" +
				"h:9:9 [0] NCCL INFO NCCL_IB_GID_INDEX set by environment to 3.\n" +
				"h:9:9 [0] NCCL INFO NCCL_NET_GDR_LEVEL set by environment to -1.\n" +
				"h:9:9 [0] NCCL INFO NCCL_IB_HCA set by environment to mlx5_0:1\n" +
				"h:9:9 [0] NCCL INFO NCCL_SOCKET_IFNAME set to eth0\n" +
				"h:9:9 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)\n" +
				"h:9:9 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 1a000 / HCA 0 (distance 5 > 4)\n" +
				"h:9:9 [0] NCCL INFO GPU Direct RDMA Enabled for GPU 1a000 / HCA 0 (distance 4 <= 5), read 1 mode Default\n",
			map[string]ncclProcSummary{"h/9": {
				Env:    map[string]string{"NCCL_SOCKET_IFNAME": "^docker0,lo", "NCCL_IB_HCA": "mlx5_0:1", "NCCL_IB_GID_INDEX": "3", "NCCL_NET_GDR_LEVEL": "-1"},
				GDROff: []string{"IB mlx5_0 (no module)"}}}},
		{"WARN formats",
			"h:10:11 [0] NCCL WARN Cuda failure 'out of memory'\n" +
				"h:10:11 [0] include/socket.h:390 NCCL WARN Connect to 10.0.0.1<1234> failed : Connection refused\n" +
				"[2025-01-01 00:00:00] h:10:11 [0] misc/ibvwrap.cc:187 NCCL WARN Call to ibv_modify_qp failed with error Network is unreachable\n" +
				"h:10:11 [0] 12.345678 ncclProxyProgress:300 NCCL TRACE proxy\n",
			map[string]ncclProcSummary{"h/10": {Warnings: 3}}},
		{"Windows line endings",
			"h:12:12 [0] NCCL INFO Using network IB\r\nh:12:12 [0] NCCL INFO NCCL version 2.18.1+cuda12.1\r\n",
			map[string]ncclProcSummary{"h/12": {Net: "IB", Version: "2.18.1+cuda12.1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, got := scanText(t, tc.text)
			diffSummaries(t, tc.name, got, tc.want)
		})
	}
}

// TestNCCLVersions: version lines from 2.4 to 2.30.
func TestNCCLVersions(t *testing.T) {
	for _, v := range []string{"2.4.8+cuda10.1", "2.5.6+cuda10.2", "2.7.8+cuda11.0", "2.10.3+cuda11.4", "2.14.3+cuda11.7", "2.18.5+cuda12.2",
		"2.19.3+cuda12.3", "2.21.5+cuda12.4", "2.23.4+cuda12.6", "2.26.2+cuda12.8", "2.27.3+cuda12.9", "2.28.3+cuda13.0", "2.30.7+cuda13.1"} {
		_, got := scanText(t, "h:1:1 [0] NCCL INFO NCCL version "+v+"\n")
		if got["h/1"].Version != v {
			t.Errorf("%s: got %q", v, got["h/1"].Version)
		}
	}
}

func TestNCCLUnparsedLines(t *testing.T) {
	for _, l := range []string{
		"", "garbage", "\x00\x01\x02\xff\xfe", "NCCL INFO without header",
		"[0] NCCL INFO no host", "host [0] NCCL INFO no pid",
		"h:1:1 NCCL INFO no device token", "h:1:1 [0]NCCL INFO glued",
		"the NCCL version 2.19 is old, please update",
		"NCCL version x.y",
	} {
		c, got := scanText(t, l+"\n")
		if c.unparsed() != 1 || len(got) != 0 {
			t.Errorf("%q: unparsed %v, processes %v", l, c.unparsed(), got)
		}
	}
}

// TestNCCLLabelBounds: hostile label values are cut to 128 bytes at a
// UTF-8 boundary and per-process lists are bounded.
func TestNCCLLabelBounds(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	var b strings.Builder
	fmt.Fprintf(&b, "h:1:1 [0] NCCL INFO Using network %s\n", long)
	for i := range 100 {
		fmt.Fprintf(&b, "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] via T%d\n", i)
		fmt.Fprintf(&b, "h:1:1 [0] NCCL INFO NCCL_X%d set by environment to %s\n", i, long)
	}
	b.WriteString("h:1:1 [0] NCCL INFO NET/IB : Using")
	for i := range 100 {
		fmt.Fprintf(&b, " [%d]mlx5_%d:1/RoCE", i, i)
	}
	b.WriteString("\n")
	c, got := scanText(t, b.String())
	p := got["h/1"]
	if len(p.Net) > maxLabel || !strings.HasPrefix(long, p.Net) || len(p.Net) < maxLabel-1 {
		t.Errorf("net %q (%d bytes)", p.Net, len(p.Net))
	}
	if len(p.Conns) != maxConnKinds || len(p.Env) != maxEnv || len(p.Devices) != maxListItems {
		t.Errorf("bounds: %d connection kinds, %d env, %d devices", len(p.Conns), len(p.Env), len(p.Devices))
	}
	for _, v := range p.Env {
		if len(v) > maxLabel || !strings.HasPrefix(long, v) {
			t.Errorf("env value %q", v)
		}
	}
	if c.unparsed() != 0 {
		t.Errorf("unparsed %v", c.unparsed())
	}
}

// TestNCCLMaxProcesses: beyond the bound the process whose file was
// written longest ago goes.
func TestNCCLMaxProcesses(t *testing.T) {
	dir := t.TempDir()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 5 {
		p := filepath.Join(dir, fmt.Sprintf("h.%d.log", i))
		testenv.WriteFile(t, p, fmt.Sprintf("h:%d:1 [0] NCCL INFO Using network IB\n", 100+i))
		os.Chtimes(p, base, base.Add(time.Duration(i)*time.Hour))
	}
	c := newTestNCCL(t, testOpts{LogPaths: []string{filepath.Join(dir, "*.log")}, MaxProcesses: 3})
	c.poll()
	got := c.summary()
	if len(got) != 3 || c.evicted() != 2 {
		t.Fatalf("tracked %d evicted %v: %v", len(got), c.evicted(), got)
	}
	for _, k := range []string{"h/102", "h/103", "h/104"} {
		if _, ok := got[k]; !ok {
			t.Errorf("%s evicted, want the oldest two gone: %v", k, got)
		}
	}
	// A new line of an evicted process brings it back, evicting the oldest.
	testenv.AppendFile(t, filepath.Join(dir, "h.0.log"), "h:100:1 [0] NCCL INFO Using network Socket\n")
	os.Chtimes(filepath.Join(dir, "h.0.log"), base, base.Add(10*time.Hour))
	c.poll()
	got = c.summary()
	if _, ok := got["h/100"]; !ok || len(got) != 3 {
		t.Errorf("after new line: %v", got)
	}
	if _, ok := got["h/102"]; ok {
		t.Errorf("h/102 should have been evicted: %v", got)
	}
}

// TestNCCLRetention: a process expires after the retention without a new
// line, unless it is on this host and its PID lives.
func TestNCCLRetention(t *testing.T) {
	dir := t.TempDir()
	procfs := t.TempDir()
	os.Mkdir(filepath.Join(procfs, "200"), 0o755) // alive
	old := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := old.Add(48 * time.Hour)
	lines := map[string]string{
		"local-live":  "exporter-host:200:1 [0] NCCL INFO Using network IB\n",
		"local-dead":  "exporter-host.example.com:201:1 [0] NCCL INFO Using network IB\n",
		"remote":      "other-host:200:1 [0] NCCL INFO Using network IB\n",
		"local-fresh": "exporter-host:202:1 [0] NCCL INFO Using network IB\n",
	}
	for name, l := range lines {
		p := filepath.Join(dir, name+".log")
		testenv.WriteFile(t, p, l)
		mt := old
		if name == "local-fresh" {
			mt = now.Add(-time.Hour)
		}
		os.Chtimes(p, mt, mt)
	}
	c := newTestNCCL(t, testOpts{LogPaths: []string{filepath.Join(dir, "*.log")}, Procfs: procfs,
		Retention: 24 * time.Hour, Hostname: "exporter-host", Now: func() time.Time { return now }})
	c.poll()
	got := c.summary()
	want := []string{"exporter-host/200", "exporter-host/202"}
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("tracked %v, want %v", keys, want)
	}
	// The live process dies: it goes at the next poll.
	os.Remove(filepath.Join(procfs, "200"))
	c.poll()
	if _, ok := c.summary()["exporter-host/200"]; ok {
		t.Error("dead process kept")
	}
	// Retention 0 keeps everything.
	c2 := newTestNCCL(t, testOpts{LogPaths: []string{filepath.Join(dir, "*.log")}, Now: func() time.Time { return now.Add(1000 * time.Hour) }})
	c2.poll()
	if n := len(c2.summary()); n != 4 {
		t.Errorf("retention 0: %d processes, want 4", n)
	}
}

func TestNCCLSameHost(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"gpu1", "gpu1", true}, {"GPU1", "gpu1", true}, {"gpu1", "gpu1.example.com", true},
		{"gpu1.example.com", "gpu1", true}, {"gpu1", "gpu10", false}, {"", "", true}, {"", "x", false},
	} {
		if got := sameHost(tc.a, tc.b); got != tc.want {
			t.Errorf("sameHost(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

// Logs of a real NCCL 2.28.9 captured on the lent H200 (one GPU, no RDMA
// device): with default settings NCCL fails to initialise the IB plugin and
// takes the socket network on eth0; forced, on lo. 2.28 reports this with
// "Initialized/Assigned NET plugin Socket" besides "Using network Socket".
func TestNCCLH200Capture(t *testing.T) {
	c := newTestNCCL(t, testOpts{LogPaths: []string{fixtureNCCLH200 + "/*.log"}})
	c.poll()
	want := map[string]ncclProcSummary{
		"vm/462": {Net: "Socket", Ifaces: []string{"eth0"}, Version: "2.28.9+cuda13.0"},
		"vm/518": {Net: "Socket", Ifaces: []string{"lo"}, Version: "2.28.9+cuda13.0"},
	}
	got := c.summary()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("process %s not found (have %v)", k, got)
			continue
		}
		if g.Net != w.Net || !reflect.DeepEqual(g.Ifaces, w.Ifaces) || g.Version != w.Version || len(g.Conns) != 0 {
			t.Errorf("%s = %+v, want net %s, interfaces %v, version %s, no connections", k, g, w.Net, w.Ifaces, w.Version)
		}
	}
}

// TestNCCLSteadyStateNoAllocs: lines of known processes cost no
// allocation once their state exists.
func TestNCCLSteadyStateNoAllocs(t *testing.T) {
	c := newTestNCCL(t, testOpts{LogPaths: []string{"unused"}})
	f := &File{}
	lines := ncclFixtureLines(t)
	c.Begin(f)
	for _, l := range lines {
		c.Line(f, l)
	}
	allocs := testing.AllocsPerRun(5, func() {
		for _, l := range lines {
			c.Line(f, l)
		}
	})
	c.End(f, 0)
	if allocs != 0 {
		t.Errorf("%v allocations per pass over %d known lines", allocs, len(lines))
	}
}

// TestScanLog: one pass over the real samples (the lines and processes of
// TestNCCLRealSamples' table), and the errors of a glob.
func TestScanLog(t *testing.T) {
	glob := filepath.Join(fixtureNCCL, "*.log")
	files, _ := filepath.Glob(glob)
	var size int64
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		size += fi.Size()
	}
	r, err := ScanLog(glob)
	want := ScanResult{Bytes: size, Lines: 206, Unparsed: 46, Processes: 47}
	if err != nil || r != want {
		t.Errorf("ScanLog = %+v, %v; want %+v", r, err, want)
	}
	for _, g := range []string{filepath.Join(t.TempDir(), "*.log"), "/var/log/[nccl"} {
		if _, err := ScanLog(g); err == nil {
			t.Errorf("%s: no error", g)
		}
	}
}
