package collector

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/fixturetree"
	"github.com/fabric-exporter/fabric_exporter/internal/nccl"
	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// The nccl collector's own tests: options, the background follower, the
// series Update makes of the Tracker's state, read errors. Parsing,
// following and classification are tested in internal/nccl.

const fixtureNCCL = "fixtures/nccl"

// newTestNCCL builds an nccl collector whose follower does not run: tests
// call poll to read.
func newTestNCCL(t testing.TB, o NCCLOptions) *ncclCollector {
	t.Helper()
	env, _ := testEnv()
	if o.Hostname == "" {
		o.Hostname = "exporter-host"
	}
	c, err := newNCCLState(env, &Options{ProcfsPath: "/nonexistent/proc", NCCL: o})
	if err != nil {
		t.Fatal(err)
	}
	c.follower.Yield = func() {}
	return c
}

func (c *ncclCollector) poll() { c.pollOnce(context.Background()) }

// eachProc calls fn for every tracked process, under the Tracker's lock.
func (c *ncclCollector) eachProc(fn func(key string, p *nccl.Process)) {
	c.tracker.View(func(procs []*nccl.Process, _ nccl.Stats) {
		for _, p := range procs {
			fn(p.Host+"/"+p.PID, p)
		}
	})
}

func (c *ncclCollector) tracked(key string) bool {
	found := false
	c.eachProc(func(k string, _ *nccl.Process) { found = found || k == key })
	return found
}

const lineIB = "h:1:1 [0] NCCL INFO Using network IB\n"

func followDir(t *testing.T, globs ...string) (string, *ncclCollector) {
	t.Helper()
	dir := t.TempDir()
	for i := range globs {
		globs[i] = filepath.Join(dir, globs[i])
	}
	return dir, newTestNCCL(t, NCCLOptions{LogPaths: globs})
}

// scanText feeds text as one log file and returns the collector.
func scanText(t *testing.T, text string) *ncclCollector {
	t.Helper()
	dir := t.TempDir()
	testenv.WriteFile(t, filepath.Join(dir, "a.log"), text)
	c := newTestNCCL(t, NCCLOptions{LogPaths: []string{filepath.Join(dir, "*.log")}})
	c.poll()
	return c
}

func TestNCCLBadOptions(t *testing.T) {
	env, _ := testEnv()
	for _, o := range []NCCLOptions{
		{LogPaths: []string{"/var/log/[nccl"}},
		{PollInterval: time.Microsecond},
		{MaxProcesses: -1},
		{Retention: -time.Hour},
		{ExitedGrace: -time.Second},
	} {
		if _, err := newNCCLCollector(env, &Options{NCCL: o}); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

// ncclSampleBody returns the lines of every real sample without their
// three provenance lines.
func ncclSampleBody(t testing.TB) string {
	t.Helper()
	body, err := fixturetree.NCCLSampleBody(fixtureNCCL)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// TestNCCLBackgroundFollower: the constructor starts the follower, Close
// stops it, and Update never waits for a backlog.
func TestNCCLBackgroundFollower(t *testing.T) {
	dir := t.TempDir()
	body := ncclSampleBody(t)
	var sb strings.Builder
	for sb.Len() < 32<<20 {
		sb.WriteString(body)
	}
	big := filepath.Join(dir, "big.log")
	testenv.WriteFile(t, big, sb.String())
	env, _ := testEnv()
	col, err := newNCCLCollector(env, &Options{ProcfsPath: t.TempDir(),
		NCCL: NCCLOptions{LogPaths: []string{filepath.Join(dir, "*.log")}, PollInterval: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	c := col.(*ncclCollector)
	t.Cleanup(c.Close)
	// Scrapes during the backlog return at once with what was read so far.
	sawPartial := false
	deadline := time.Now().Add(30 * time.Second)
	for {
		var b exposition.Batch
		if err := c.Update(context.Background(), &b); err != nil {
			t.Fatal(err)
		}
		read := sampleValue(&b, "fabric_nccl_log_read_bytes_total")
		if read > 0 && read < float64(sb.Len()) {
			sawPartial = true
		}
		if read == float64(sb.Len()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backlog not read: %v of %d bytes", read, sb.Len())
		}
		time.Sleep(time.Millisecond)
	}
	if !sawPartial {
		t.Log("the backlog was read before the first scrape (fast machine); non-blocking not observed")
	}
	// New lines are picked up by the next poll.
	testenv.AppendFile(t, big, "late:9:9 [0] NCCL INFO Using network IB\n")
	for time.Now().Before(deadline) {
		if c.tracked("late/9") {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !c.tracked("late/9") {
		t.Error("appended line not read")
	}
	c.Close()
	c.Close() // idempotent
}

func sampleValue(b *exposition.Batch, name string) float64 {
	for s, v := range b.All() {
		if s.Family().Name() == name {
			return v
		}
	}
	return -1
}

func TestNCCLNoLogPath(t *testing.T) {
	env, _ := testEnv()
	c, err := newNCCLCollector(env, &Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.(*ncclCollector).cancel != nil {
		t.Error("follower started without a log path")
	}
	var b exposition.Batch
	if err := c.Update(context.Background(), &b); !errors.Is(err, ErrNoData) || b.Len() != 0 {
		t.Errorf("err %v, %d samples", err, b.Len())
	}
}

// TestNCCLUpdateOutput checks the exported series of a small log.
func TestNCCLUpdateOutput(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "gpu1.4242.log")
	testenv.WriteFile(t, p, `gpu1:4242:4242 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
gpu1:4242:4242 [0] NCCL INFO NCCL_IB_HCA set by environment to mlx5_0,mlx5_3
gpu1:4242:4300 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_3:1/RoCE [RO]; OOB eth0:10.0.0.1<0>
gpu1:4242:4300 [0] NCCL INFO Using network IB
gpu1:4242:4301 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA
gpu1:4242:4301 [0] NCCL INFO Channel 01/0 : 8[0] -> 0[0] [receive] via NET/IB/1/GDRDMA
gpu1:4242:4301 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
gpu2:77:77 [1] NCCL INFO NET/IB : No device found.
gpu2:77:77 [1] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>
gpu2:77:77 [1] NCCL INFO Using network Socket
gpu2:77:78 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [send] via NET/Socket/0
gpu2:77:78 [1] misc/socket.cc:50 NCCL WARN socket closed
some application output
`)
	mt := time.Unix(1767323045, 0)
	os.Chtimes(p, mt, mt)
	c := newTestNCCL(t, NCCLOptions{LogPaths: []string{filepath.Join(dir, "*.log")}})
	c.poll()
	compare(t, c, `
# HELP fabric_nccl_connections Channel connections the NCCL process logged, by transport as logged (NET/IB, NET/Socket, P2P/IPC, P2P/CUMEM, SHM, …; "direct shared memory" of NCCL < 2.7 is SHM) and gdr="true" for NET connections with /GDRDMA.
# TYPE fabric_nccl_connections gauge
fabric_nccl_connections{gdr="false",host="gpu1",pid="4242",transport="P2P/CUMEM"} 1
fabric_nccl_connections{gdr="true",host="gpu1",pid="4242",transport="NET/IB"} 2
fabric_nccl_connections{gdr="false",host="gpu2",pid="77",transport="NET/Socket"} 1
# HELP fabric_nccl_env_info An NCCL environment variable the process reported as set ("NCCL_SOCKET_IFNAME set by environment to eth0").
# TYPE fabric_nccl_env_info gauge
fabric_nccl_env_info{host="gpu1",name="NCCL_IB_HCA",pid="4242",value="mlx5_0,mlx5_3"} 1
# HELP fabric_nccl_info The NCCL version of the process, from "NCCL version 2.19.3+cuda12.3" (cuda is the CUDA version it was built for).
# TYPE fabric_nccl_info gauge
fabric_nccl_info{cuda="12.4",host="gpu1",pid="4242",version="2.21.5"} 1
# HELP fabric_nccl_last_log_timestamp_seconds Modification time of the log file the process's latest line was read from (NCCL lines carry no time of their own).
# TYPE fabric_nccl_last_log_timestamp_seconds gauge
fabric_nccl_last_log_timestamp_seconds{host="gpu1",pid="4242"} 1.767323045e+09
fabric_nccl_last_log_timestamp_seconds{host="gpu2",pid="77"} 1.767323045e+09
# HELP fabric_nccl_log_lines_total Lines read from NCCL log files.
# TYPE fabric_nccl_log_lines_total counter
fabric_nccl_log_lines_total 13
# HELP fabric_nccl_log_unparsed_lines_total Lines read that are not NCCL log lines (application output, garbage, lines over 64 KiB).
# TYPE fabric_nccl_log_unparsed_lines_total counter
fabric_nccl_log_unparsed_lines_total 1
# HELP fabric_nccl_net_device_info An RDMA device port NCCL uses, from "NET/IB : Using [0]mlx5_0:1/RoCE …"; link is RoCE or IB.
# TYPE fabric_nccl_net_device_info gauge
fabric_nccl_net_device_info{device="mlx5_0",host="gpu1",link="RoCE",pid="4242",port="1"} 1
fabric_nccl_net_device_info{device="mlx5_3",host="gpu1",link="RoCE",pid="4242",port="1"} 1
# HELP fabric_nccl_net_gdr_info NET connections of a GPU of the process through one NET device, from "… [send] via NET/IB/0/GDRDMA" (the local GPU is the left device of [send], the right one of [receive]): device is the entry of that index in the latest "NET/IB : Using [0]mlx5_0:1/RoCE …" list ("" when none was logged), gdr="true" with /GDRDMA (GPUDirect RDMA), "false" when the bytes are staged through host memory. gpu as in fabric_nccl_peer_transport_info. At most 64 per process.
# TYPE fabric_nccl_net_gdr_info gauge
fabric_nccl_net_gdr_info{device="mlx5_0",gdr="true",gpu="0",host="gpu1",index="0",net="IB",pid="4242"} 1
fabric_nccl_net_gdr_info{device="mlx5_3",gdr="true",gpu="0",host="gpu1",index="1",net="IB",pid="4242"} 1
fabric_nccl_net_gdr_info{device="eth0",gdr="false",gpu="1",host="gpu2",index="0",net="Socket",pid="77"} 1
# HELP fabric_nccl_net_info The network NCCL chose, as NCCL names it (IB, Socket, IBext_v8, AWS Libfabric, …): from "Using network X" or "Assigned NET plugin X to comm", else the net of its channel connections, else a "NET/X : Using [0]…" device line, else Socket when the init lines prove IB was not taken (docs/nccl-classification.md).
# TYPE fabric_nccl_net_info gauge
fabric_nccl_net_info{host="gpu1",net="IB",pid="4242"} 1
fabric_nccl_net_info{host="gpu2",net="Socket",pid="77"} 1
# HELP fabric_nccl_peer_transport_info NCCL's transport between a GPU of the process and a peer GPU of the same host, from its channel lines ("Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"): P2P/IPC, P2P/CUMEM, P2P/direct pointer (the fast path) or SHM (through host memory). gpu and peer_gpu are the devices in brackets: the NVML index (the exporter's gpu label) from NCCL 2.18.3, the PCI address for the bus id of NCCL 2.5-2.18.1 (the logged version decides) ("0[1a000]"). At most 64 per process.
# TYPE fabric_nccl_peer_transport_info gauge
fabric_nccl_peer_transport_info{gpu="0",host="gpu1",peer_gpu="1",pid="4242",transport="P2P/CUMEM"} 1
# HELP fabric_nccl_socket_interface_info A network interface NCCL's socket transport uses, from "NET/Socket : Using [0]eth0:…".
# TYPE fabric_nccl_socket_interface_info gauge
fabric_nccl_socket_interface_info{host="gpu2",interface="eth0",pid="77"} 1
# HELP fabric_nccl_tracked_processes NCCL processes tracked now.
# TYPE fabric_nccl_tracked_processes gauge
fabric_nccl_tracked_processes 2
# HELP fabric_nccl_warnings_total NCCL WARN lines of the process.
# TYPE fabric_nccl_warnings_total counter
fabric_nccl_warnings_total{host="gpu1",pid="4242"} 0
fabric_nccl_warnings_total{host="gpu2",pid="77"} 1
`, "fabric_nccl_connections", "fabric_nccl_env_info", "fabric_nccl_info", "fabric_nccl_last_log_timestamp_seconds",
		"fabric_nccl_log_lines_total", "fabric_nccl_log_unparsed_lines_total", "fabric_nccl_net_device_info", "fabric_nccl_net_info",
		"fabric_nccl_net_gdr_info", "fabric_nccl_peer_transport_info", "fabric_nccl_socket_interface_info", "fabric_nccl_tracked_processes", "fabric_nccl_warnings_total")
}

// TestNCCLReadError: an unreadable file is counted and skipped.
func TestNCCLReadError(t *testing.T) {
	if os.Geteuid() == 0 {
		// root reads mode-000 files; use a directory named like a log instead
		dir, c := followDir(t, "*.log")
		if err := os.Mkdir(filepath.Join(dir, "x.log"), 0o755); err != nil {
			t.Fatal(err)
		}
		testenv.WriteFile(t, filepath.Join(dir, "a.log"), lineIB)
		c.poll()
		if got := ncclSamples(t, c, "fabric_nccl_log_lines_total", "fabric_nccl_log_unparsed_lines_total", "fabric_nccl_tracked_processes"); got != "fabric_nccl_log_lines_total 1\nfabric_nccl_log_unparsed_lines_total 0\nfabric_nccl_tracked_processes 1\n" {
			t.Errorf("got\n%s", got)
		}
		return
	}
	dir := t.TempDir()
	testenv.WriteFile(t, filepath.Join(dir, "a.log"), lineIB)
	os.Chmod(filepath.Join(dir, "a.log"), 0)
	env, errs := testEnv()
	c, err := newNCCLState(env, &Options{NCCL: NCCLOptions{LogPaths: []string{filepath.Join(dir, "*.log")}}})
	if err != nil {
		t.Fatal(err)
	}
	c.poll()
	if errs.Value() != 1 {
		t.Errorf("read errors %v", errs.Value())
	}
}

// TestNCCLSeriesFollowState: Update's series follow the Tracker's state
// across polls: a changed network or a new list rebinds the labels, counts
// change in place, and the series of an evicted process go.
func TestNCCLSeriesFollowState(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.log")
	testenv.WriteFile(t, p, "h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.1<0>\n"+
		"h:1:1 [0] NCCL INFO Using network IB\n"+
		"h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA\n")
	c := newTestNCCL(t, NCCLOptions{LogPaths: []string{filepath.Join(dir, "*.log")}, MaxProcesses: 1})
	names := []string{"fabric_nccl_net_info", "fabric_nccl_connections", "fabric_nccl_net_device_info",
		"fabric_nccl_socket_interface_info", "fabric_nccl_info", "fabric_nccl_tracked_processes"}
	check := func(step, want string) {
		t.Helper()
		c.poll()
		if got := ncclSamples(t, c, names...); got != want {
			t.Errorf("%s: got\n%swant\n%s", step, got, want)
		}
	}
	check("first poll", `fabric_nccl_connections{gdr="true",host="h",pid="1",transport="NET/IB"} 1
fabric_nccl_net_device_info{device="mlx5_0",host="h",link="RoCE",pid="1",port="1"} 1
fabric_nccl_net_info{host="h",net="IB",pid="1"} 1
fabric_nccl_tracked_processes 1
`)
	testenv.AppendFile(t, p, "h:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA\n"+
		"h:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n"+
		"h:1:1 [0] NCCL INFO Using network Socket\n"+
		"h:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n")
	check("changed network, new lists, more connections", `fabric_nccl_connections{gdr="true",host="h",pid="1",transport="NET/IB"} 2
fabric_nccl_info{cuda="12.4",host="h",pid="1",version="2.21.5"} 1
fabric_nccl_net_device_info{device="mlx5_0",host="h",link="RoCE",pid="1",port="1"} 1
fabric_nccl_net_info{host="h",net="Socket",pid="1"} 1
fabric_nccl_socket_interface_info{host="h",interface="eth0",pid="1"} 1
fabric_nccl_tracked_processes 1
`)
	testenv.AppendFile(t, p, "h:2:2 [0] NCCL INFO Using network IB\n")
	check("h/1 evicted by h/2", `fabric_nccl_net_info{host="h",net="IB",pid="2"} 1
fabric_nccl_tracked_processes 1
`)
	if len(c.series) != 1 {
		t.Errorf("%d processes with series, want 1", len(c.series))
	}
}

// TestNCCLUpdateNoAllocs: a scrape of unchanged state allocates nothing
// (the series of a process are built once per change of its state).
func TestNCCLUpdateNoAllocs(t *testing.T) {
	c := newTestNCCL(t, NCCLOptions{LogPaths: []string{filepath.Join(fixtureNCCL, "*.log")}})
	c.poll()
	var b exposition.Batch
	if err := c.Update(context.Background(), &b); err != nil || b.Len() < 100 {
		t.Fatalf("%d samples, %v", b.Len(), err)
	}
	allocs := testing.AllocsPerRun(10, func() {
		b.Reset()
		c.Update(context.Background(), &b)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per Update", allocs)
	}
}

// TestNCCLEmptyLogDirectory: a log directory without files (an idle node,
// or one after `find /var/log/nccl -name '*.log' -mtime +7 -delete`) is no
// failure; a directory that does not exist (a missing mount, a mistyped
// path) is source_missing.
func TestNCCLEmptyLogDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "jobs", "j1"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		globs []string
		want  State
	}{
		{"empty directory", []string{filepath.Join(dir, "*.log")}, StateOK},
		{"wildcard directory exists", []string{filepath.Join(dir, "jobs", "*", "*.log")}, StateOK},
		{"one of two directories exists", []string{filepath.Join(dir, "missing", "*.log"), filepath.Join(dir, "*.log")}, StateOK},
		{"directory missing", []string{filepath.Join(dir, "missing", "*.log")}, StateSourceMissing},
		{"wildcard directory matches nothing", []string{filepath.Join(dir, "nojobs", "*", "*.log")}, StateSourceMissing},
		{"a file is no directory", []string{filepath.Join(dir, "jobs", "j1", "*.log", "x.log")}, StateSourceMissing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestNCCL(t, NCCLOptions{LogPaths: tc.globs})
			c.poll()
			var b exposition.Batch
			err := c.Update(context.Background(), &b)
			if st, reason := classify(err); st != tc.want {
				t.Errorf("state %s (%s), want %s", st, reason, tc.want)
			}
			if got := sampleValue(&b, "fabric_nccl_log_files"); got != 0 {
				t.Errorf("fabric_nccl_log_files %v, want 0", got)
			}
		})
	}
	// A file written later makes the missing directory's state ok.
	glob := filepath.Join(dir, "later", "*.log")
	c := newTestNCCL(t, NCCLOptions{LogPaths: []string{glob}})
	c.poll()
	var b exposition.Batch
	if st, _ := classify(c.Update(context.Background(), &b)); st != StateSourceMissing {
		t.Fatalf("state %s before the directory exists", st)
	}
	if err := os.Mkdir(filepath.Join(dir, "later"), 0o755); err != nil {
		t.Fatal(err)
	}
	c.poll()
	b.Reset()
	if err := c.Update(context.Background(), &b); err != nil {
		t.Errorf("directory created, no file yet: %v", err)
	}
}

// TestNCCLCommunicatorSeries: the largest communicator and node count of
// each process, absent for a process that logged neither (real lines:
// sglang-3398, the 2.28.9 drill capture).
func TestNCCLCommunicatorSeries(t *testing.T) {
	const sglang = "llm-bm-infer-service-prod-17389809006090t9a-1100014361:88008:88008 [2] NCCL INFO "
	c := scanText(t, sglang+"Using network Socket\n"+
		sglang+"ncclCommInitRank comm 0xafd6da0 rank 10 nranks 16 cudaDev 2 nvmlDev 2 busId a2000 commId 0x898b6d578585998c - Init START\n"+
		"vm:692:692 [0] NCCL INFO Using network Socket\n"+
		"vm:692:692 [0] NCCL INFO ncclCommInitRankConfig comm 0x3674e350 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId 0xa6ce86ab2388df92 - Init START\n"+
		"vm:692:692 [0] NCCL INFO comm 0x3674e350 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0\n"+
		"vm:692:692 [0] NCCL INFO comm 0x3674e350 rank 0 nranks 2 cudaDev 0 busId 60 - Destroy COMPLETE\n"+
		"h:5:5 [0] NCCL INFO Using network IB\n")
	compare(t, c, `
# HELP fabric_nccl_communicator_nodes The largest node count of a communicator of the NCCL process, from "comm 0x… rank 0 nRanks 16 nNodes 2 …" (NCCL 2.20 and later); absent until such a line was read. 1: the process's communicators stay on one host.
# TYPE fabric_nccl_communicator_nodes gauge
fabric_nccl_communicator_nodes{host="vm",pid="692"} 2
# HELP fabric_nccl_communicator_ranks The largest communicator (ranks) the NCCL process logged, from "comm 0x… rank 10 nranks 16 … - Init START|COMPLETE" and the like (every NCCL version); absent until such a line was read.
# TYPE fabric_nccl_communicator_ranks gauge
fabric_nccl_communicator_ranks{host="llm-bm-infer-service-prod-17389809006090t9a-1100014361",pid="88008"} 16
fabric_nccl_communicator_ranks{host="vm",pid="692"} 2
`, "fabric_nccl_communicator_ranks", "fabric_nccl_communicator_nodes")
}

// TestNCCLExitedProcessSeries: the series of a process of this host go
// once its PID is gone from --path.procfs (here with exited-grace 0); a
// process of another host name stays (retention).
func TestNCCLExitedProcessSeries(t *testing.T) {
	procfs := t.TempDir()
	now := time.Now()
	btime := now.Add(-time.Hour)
	testenv.WriteFile(t, filepath.Join(procfs, "stat"), "cpu  1 2 3 4 5 6 7 0 0 0\nbtime "+strconv.FormatInt(btime.Unix(), 10)+"\n")
	// a real /proc/PID/stat line with starttime (field 22) a minute ago
	start := strconv.FormatInt(int64((time.Hour-time.Minute)/(10*time.Millisecond)), 10)
	os.Mkdir(filepath.Join(procfs, "4242"), 0o755)
	testenv.WriteFile(t, filepath.Join(procfs, "4242", "stat"), "4242 (pt_main_thread) S 4200 4242 4200 0 -1 4194560 99 0 0 0 0 0 0 0 20 0 1 0 "+start+" 3133440 413 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n")
	dir := t.TempDir()
	testenv.WriteFile(t, filepath.Join(dir, "gpu1.4242.log"), "gpu1:4242:4242 [0] NCCL INFO NET/IB : No device found.\n"+
		"gpu1:4242:4242 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n"+
		"gpu1:4242:4242 [0] NCCL INFO Using network Socket\n")
	testenv.WriteFile(t, filepath.Join(dir, "gpu2.77.log"), "gpu2:77:77 [0] NCCL INFO Using network Socket\n")
	env, _ := testEnv()
	c, err := newNCCLState(env, &Options{ProcfsPath: procfs, NCCL: NCCLOptions{LogPaths: []string{filepath.Join(dir, "*.log")},
		Hostname: "gpu1", Retention: 24 * time.Hour, ExitedGrace: 0}})
	if err != nil {
		t.Fatal(err)
	}
	c.follower.Yield = func() {}
	c.poll()
	want := `fabric_nccl_net_info{host="gpu1",net="Socket",pid="4242"} 1
fabric_nccl_net_info{host="gpu2",net="Socket",pid="77"} 1
fabric_nccl_tracked_processes 2
`
	if got := ncclSamples(t, c, "fabric_nccl_net_info", "fabric_nccl_tracked_processes"); got != want {
		t.Errorf("alive: got\n%swant\n%s", got, want)
	}
	os.RemoveAll(filepath.Join(procfs, "4242"))
	time.Sleep(pidCheckInterval)
	c.poll()
	want = `fabric_nccl_net_info{host="gpu2",net="Socket",pid="77"} 1
fabric_nccl_tracked_processes 1
`
	if got := ncclSamples(t, c, "fabric_nccl_net_info", "fabric_nccl_tracked_processes"); got != want {
		t.Errorf("exited: got\n%swant\n%s", got, want)
	}
}

// pidCheckInterval is the Tracker's least interval between PID checks.
const pidCheckInterval = 1100 * time.Millisecond

// TestNCCLExitedGraceFlag: --collector.nccl.exited-grace defaults to 30s,
// takes 0, and refuses a negative duration.
func TestNCCLExitedGraceFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
		ok   bool
	}{
		{nil, 30 * time.Second, true},
		{[]string{"--collector.nccl.exited-grace=0"}, 0, true},
		{[]string{"--collector.nccl.exited-grace=2m"}, 2 * time.Minute, true},
		{[]string{"--collector.nccl.exited-grace=-1s"}, 0, false},
	} {
		app := kingpin.New("t", "")
		var o Options
		ncclFlags(app, &o)
		_, err := app.Parse(tc.args)
		if (err == nil) != tc.ok || tc.ok && o.NCCL.ExitedGrace != tc.want {
			t.Errorf("%v: grace %s, err %v; want %s, ok %v", tc.args, o.NCCL.ExitedGrace, err, tc.want, tc.ok)
		}
	}
}

// TestNCCLNetGDRMergedDevices: with merged devices ("[0]={…}") a NET index
// is a virtual device, not a position in the list: no device name.
func TestNCCLNetGDRMergedDevices(t *testing.T) {
	c := scanText(t, "h:5:5 [0] NCCL INFO NET/IB : Using [0]={[0] mlx5_0:1/RoCE, [1] mlx5_1:1/RoCE} [1]mlx5_2:1/IB/SHARP [RO]; OOB eth0:10.0.0.1<0>\n"+
		"h:5:6 [0] NCCL INFO Channel 00/1 : 0[0] -> 9[1] [send] via NET/IB/1(1)/GDRDMA(PCI)/Shared\n"+
		"h:5:6 [0] NCCL INFO Channel 00/1 : 9[1] -> 0[0] [receive] via NET/IB/0\n")
	compare(t, c, `
# HELP fabric_nccl_net_gdr_info NET connections of a GPU of the process through one NET device, from "… [send] via NET/IB/0/GDRDMA" (the local GPU is the left device of [send], the right one of [receive]): device is the entry of that index in the latest "NET/IB : Using [0]mlx5_0:1/RoCE …" list ("" when none was logged), gdr="true" with /GDRDMA (GPUDirect RDMA), "false" when the bytes are staged through host memory. gpu as in fabric_nccl_peer_transport_info. At most 64 per process.
# TYPE fabric_nccl_net_gdr_info gauge
fabric_nccl_net_gdr_info{device="",gdr="true",gpu="0",host="h",index="1",net="IB",pid="5"} 1
fabric_nccl_net_gdr_info{device="",gdr="false",gpu="0",host="h",index="0",net="IB",pid="5"} 1
`, "fabric_nccl_net_gdr_info")
}

// TestNCCLGDRPathSeries: NCCL's own GPUDirect RDMA statement and DMA-BUF
// line of the real 2.16.5 log (NVIDIA/nccl-tests#350): HCA 1 is mlx5_2 of
// its device list; and a 2.26+ rank-only line resolved through the
// channel lines (the rank of another local GPU stays gpu="").
func TestNCCLGDRPathSeries(t *testing.T) {
	c := newTestNCCL(t, NCCLOptions{LogPaths: []string{"fixtures/nccl-gdr/*.log"}})
	c.poll()
	compare(t, c, `
# HELP fabric_nccl_dmabuf_info "DMA-BUF is available on GPU device N" (NCCL 2.13+): the CUDA device (CUDA's index, as the process sees it) can register GPU memory with the HCA through DMA-BUF, without a peer-memory module. NCCL prints nothing when it is not available. At most 16 per process.
# TYPE fabric_nccl_dmabuf_info gauge
fabric_nccl_dmabuf_info{cuda_device="0",host="n013",pid="101855"} 1
# HELP fabric_nccl_gdr_path_info NCCL's own GPUDirect RDMA decision for a GPU and a NET device, from "GPU Direct RDMA Enabled|Disabled for GPU … / HCA … (distance D <= M)" (NCCL 2.4-2.29; 2.30 logs it at TRACE only): gdr="enabled" or "disabled", distance NCCL's path type between them, max_distance the job's NCCL_NET_GDR_LEVEL as NCCL resolved it (numbers of that NCCL release), mode Default or PCI (2.26+, "" before). NCCL prints it only for a NET device that can do GDR (nvidia-peermem or DMA-BUF). gpu as in fabric_nccl_peer_transport_info (a bus id as its PCI address); for 2.24-2.28, which print the rank, the device of that rank in the process's channel lines, "" when none names it (rank is set when the line printed one). device is the entry of index in the latest "NET/IB : Using" list. At most 64 per process.
# TYPE fabric_nccl_gdr_path_info gauge
fabric_nccl_gdr_path_info{device="mlx5_2",distance="6",gdr="enabled",gpu="0000:81:00.0",host="n013",index="1",max_distance="7",mode="",pid="101855",rank=""} 1
fabric_nccl_gdr_path_info{device="mlx5_0",distance="7",gdr="enabled",gpu="0000:81:00.0",host="n013",index="0",max_distance="7",mode="",pid="101855",rank=""} 1
`, "fabric_nccl_gdr_path_info", "fabric_nccl_dmabuf_info")

	c = scanText(t, "h:7:7 [5] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_3:1/RoCE [RO]; OOB eth0:10.0.0.1<0>\n"+
		"h:7:8 [5] NCCL INFO GPU Direct RDMA Disabled for GPU 2 / HCA 1 (distance 9 > 5)\n"+
		"h:7:8 [5] NCCL INFO GPU Direct RDMA Enabled for GPU 9 / HCA 0 (distance 4 <= 5), read 0 mode Default\n"+
		"h:7:8 [5] NCCL INFO Channel 03/0 : 2[5] -> 11[3] [send] via NET/IB/1\n")
	compare(t, c, `
# HELP fabric_nccl_gdr_path_info NCCL's own GPUDirect RDMA decision for a GPU and a NET device, from "GPU Direct RDMA Enabled|Disabled for GPU … / HCA … (distance D <= M)" (NCCL 2.4-2.29; 2.30 logs it at TRACE only): gdr="enabled" or "disabled", distance NCCL's path type between them, max_distance the job's NCCL_NET_GDR_LEVEL as NCCL resolved it (numbers of that NCCL release), mode Default or PCI (2.26+, "" before). NCCL prints it only for a NET device that can do GDR (nvidia-peermem or DMA-BUF). gpu as in fabric_nccl_peer_transport_info (a bus id as its PCI address); for 2.24-2.28, which print the rank, the device of that rank in the process's channel lines, "" when none names it (rank is set when the line printed one). device is the entry of index in the latest "NET/IB : Using" list. At most 64 per process.
# TYPE fabric_nccl_gdr_path_info gauge
fabric_nccl_gdr_path_info{device="mlx5_3",distance="9",gdr="disabled",gpu="5",host="h",index="1",max_distance="5",mode="",pid="7",rank="2"} 1
fabric_nccl_gdr_path_info{device="mlx5_0",distance="4",gdr="enabled",gpu="",host="h",index="0",max_distance="5",mode="Default",pid="7",rank="9"} 1
`, "fabric_nccl_gdr_path_info")
}
