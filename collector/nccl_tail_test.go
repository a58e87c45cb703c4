package collector

import (
	"context"
	"errors"
	"fmt"
	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

const (
	lineIB     = "h:1:1 [0] NCCL INFO Using network IB\n"
	lineSocket = "h:2:2 [0] NCCL INFO Using network Socket\n"
)

func followDir(t *testing.T, globs ...string) (string, *ncclCollector) {
	t.Helper()
	dir := t.TempDir()
	for i := range globs {
		globs[i] = filepath.Join(dir, globs[i])
	}
	return dir, newTestNCCL(t, NCCLOptions{LogPaths: globs})
}

func wantCounts(t *testing.T, c *ncclCollector, lines, unparsed float64, procs int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lines != lines || c.unparsed != unparsed || len(c.procs) != procs {
		t.Errorf("lines %v unparsed %v processes %d, want %v %v %d", c.lines, c.unparsed, len(c.procs), lines, unparsed, procs)
	}
}

func TestNCCLFollowPartialLine(t *testing.T) {
	dir, c := followDir(t, "*.log")
	p := filepath.Join(dir, "a.log")
	writeFile(t, p, "h:1:1 [0] NCCL INFO Using net")
	c.poll()
	wantCounts(t, c, 0, 0, 0)
	appendFile(t, p, "work IB\nh:1:1 [0] NCCL INFO NCCL ver")
	c.poll()
	wantCounts(t, c, 1, 0, 1)
	appendFile(t, p, "sion 2.21.5+cuda12.4\n")
	c.poll()
	wantCounts(t, c, 2, 0, 1)
	if s := c.summary()["h/1"]; s.Net != "IB" || s.Version != "2.21.5+cuda12.4" {
		t.Errorf("%+v", s)
	}
	// Appending nothing reads nothing.
	c.poll()
	wantCounts(t, c, 2, 0, 1)
}

func TestNCCLFollowTruncation(t *testing.T) {
	dir, c := followDir(t, "*.log")
	p := filepath.Join(dir, "a.log")
	writeFile(t, p, lineIB+lineIB+lineIB)
	c.poll()
	wantCounts(t, c, 3, 0, 1)
	// copytruncate: the file is emptied and written again, shorter.
	writeFile(t, p, lineSocket)
	c.poll()
	wantCounts(t, c, 4, 0, 2)
	// Truncated and grown past the old offset between two polls: the
	// changed first bytes tell.
	writeFile(t, p, "h:3:3 [0] NCCL INFO Using network IB\n"+strings.Repeat(lineIB, 3))
	c.poll()
	wantCounts(t, c, 8, 0, 3)
}

func TestNCCLFollowRenameRotation(t *testing.T) {
	dir, c := followDir(t, "*.log*")
	p := filepath.Join(dir, "a.log")
	writeFile(t, p, lineIB+lineIB)
	c.poll()
	wantCounts(t, c, 2, 0, 1)
	// logrotate renames; the writer keeps its descriptor and writes on.
	if err := os.Rename(p, p+".1"); err != nil {
		t.Fatal(err)
	}
	appendFile(t, p+".1", lineIB)
	writeFile(t, p, lineSocket) // a new file at the old name
	c.poll()
	wantCounts(t, c, 4, 0, 2) // the renamed file is not read again from its start
	if c.files != 2 {
		t.Errorf("files %v", c.files)
	}
	// Renamed out of the globs: forgotten.
	if err := os.Rename(p+".1", filepath.Join(dir, "old")); err != nil {
		t.Fatal(err)
	}
	c.poll()
	if c.files != 1 || len(c.tailer.files) != 1 {
		t.Errorf("files %v, followed %d", c.files, len(c.tailer.files))
	}
}

func TestNCCLFollowDeletion(t *testing.T) {
	dir, c := followDir(t, "*.log")
	p := filepath.Join(dir, "a.log")
	writeFile(t, p, lineIB+"h:1:1 [0] NCCL INFO Using")
	c.poll()
	os.Remove(p)
	c.poll()
	if c.files != 0 || len(c.tailer.files) != 0 {
		t.Errorf("deleted file still followed: %v", c.files)
	}
	// The process stays until it expires.
	wantCounts(t, c, 1, 0, 1)
	// A new file of the same name is read from its start, without the old
	// partial line.
	writeFile(t, p, " network Socket\n"+lineSocket)
	c.poll()
	wantCounts(t, c, 3, 1, 2)
}

func TestNCCLFollowLongLines(t *testing.T) {
	dir, c := followDir(t, "*.log")
	p := filepath.Join(dir, "a.log")
	long := strings.Repeat("x", maxNCCLLine+1)
	// a long line in one piece, one exactly at the limit, one that ends
	// in a later chunk and a later poll, one spanning several read buffers
	writeFile(t, p, long+"\n"+lineIB+strings.Repeat("y", maxNCCLLine)+"\n"+lineIB)
	c.poll()
	wantCounts(t, c, 4, 2, 1)
	appendFile(t, p, strings.Repeat("z", maxNCCLLine-10))
	c.poll()
	appendFile(t, p, strings.Repeat("z", 20))
	c.poll()
	appendFile(t, p, "\n"+lineSocket+strings.Repeat("w", 3*ncclReadBuf)+"\n"+lineIB)
	c.poll()
	wantCounts(t, c, 8, 4, 2)
	for _, f := range c.tailer.files {
		if cap(f.partial) > keptPartialCap {
			t.Errorf("partial buffer of %d bytes kept", cap(f.partial))
		}
	}
}

func TestNCCLFollowGarbage(t *testing.T) {
	dir, c := followDir(t, "*")
	r := rand.New(rand.NewSource(1))
	b := make([]byte, 2<<20)
	r.Read(b)
	writeFile(t, filepath.Join(dir, "random"), string(b))
	// garbage with NCCL-looking fragments
	var sb strings.Builder
	frags := []string{"NCCL ", "INFO ", "WARN ", "[0] ", ":", "h:1:2 ", " via ", "NET/", "Using network ", "\n", "\x00", "\xff", "[", "]", "Channel ", " -> "}
	for range 200000 {
		sb.WriteString(frags[r.Intn(len(frags))])
	}
	writeFile(t, filepath.Join(dir, "frags"), sb.String())
	writeFile(t, filepath.Join(dir, "empty"), "")
	c.poll()
	if c.lines == 0 || c.unparsed == 0 {
		t.Errorf("lines %v unparsed %v", c.lines, c.unparsed)
	}
	var out exposition.Batch
	if err := c.Update(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
}

func TestNCCLFollowManyFiles(t *testing.T) {
	dir := t.TempDir()
	for i := range 300 {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("h.%d.log", i)), fmt.Sprintf("h:%d:1 [0] NCCL INFO Using network IB\n", i+1))
	}
	fds := openFDs(t)
	c := newTestNCCL(t, NCCLOptions{LogPaths: []string{filepath.Join(dir, "*.log")}, MaxProcesses: 1000})
	c.poll()
	wantCounts(t, c, 300, 0, 300)
	for i := range 300 {
		appendFile(t, filepath.Join(dir, fmt.Sprintf("h.%d.log", i)), fmt.Sprintf("h:%d:1 [0] NCCL WARN x\n", i+1))
	}
	c.poll()
	wantCounts(t, c, 600, 0, 300)
	if after := openFDs(t); after > fds {
		t.Errorf("%d descriptors open after polling, %d before", after, fds)
	}
	if c.files != 300 {
		t.Errorf("files %v", c.files)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// TestNCCLFollowSameFileTwice: two globs (or a hard link) naming one file
// read it once.
func TestNCCLFollowSameFileTwice(t *testing.T) {
	dir, c := followDir(t, "*.log", "a.*")
	p := filepath.Join(dir, "a.log")
	writeFile(t, p, lineIB)
	if err := os.Link(p, filepath.Join(dir, "b.log")); err != nil {
		t.Fatal(err)
	}
	c.poll()
	wantCounts(t, c, 1, 0, 1)
}

// TestNCCLFollowLargeFile streams a file many times the read buffer.
func TestNCCLFollowLargeFile(t *testing.T) {
	dir, c := followDir(t, "*.log")
	body := ncclSampleBody(t)
	var sb strings.Builder
	n := 0
	for sb.Len() < 8<<20 {
		sb.WriteString(body)
		n += strings.Count(body, "\n")
	}
	writeFile(t, filepath.Join(dir, "big.log"), sb.String())
	c.poll()
	if c.lines != float64(n) || c.bytes != float64(sb.Len()) || c.backlog != 0 {
		t.Errorf("lines %v bytes %v backlog %v, want %d %d 0", c.lines, c.bytes, c.backlog, n, sb.Len())
	}
}

// ncclSampleBody returns the lines of every real sample without their
// three provenance lines.
func ncclSampleBody(t testing.TB) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(fixtureNCCL, "*.log"))
	var sb strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitAfter(string(b), "\n")
		for _, l := range lines[3:] {
			sb.WriteString(l)
		}
	}
	return sb.String()
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
	writeFile(t, big, sb.String())
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
	appendFile(t, big, "late:9:9 [0] NCCL INFO Using network IB\n")
	for time.Now().Before(deadline) {
		if _, ok := c.summary()["late/9"]; ok {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, ok := c.summary()["late/9"]; !ok {
		t.Error("appended line not read")
	}
	c.Close()
	c.Close() // idempotent
}

func sampleValue(b *exposition.Batch, name string) float64 {
	for _, s := range samplesOf(b) {
		if s.s.Family().Name() == name {
			return s.v
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
	writeFile(t, p, `gpu1:4242:4242 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
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
# HELP fabric_nccl_net_info The network NCCL chose, as NCCL names it (IB, Socket, IBext_v8, AWS Libfabric, …): from "Using network X" or "Assigned NET plugin X to comm", else the net of its channel connections, else a "NET/X : Using [0]…" device line, else Socket when the init lines prove IB was not taken (docs/nccl-classification.md).
# TYPE fabric_nccl_net_info gauge
fabric_nccl_net_info{host="gpu1",net="IB",pid="4242"} 1
fabric_nccl_net_info{host="gpu2",net="Socket",pid="77"} 1
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
		"fabric_nccl_socket_interface_info", "fabric_nccl_tracked_processes", "fabric_nccl_warnings_total")
}

// TestNCCLReadError: an unreadable file is counted and skipped.
func TestNCCLReadError(t *testing.T) {
	if os.Geteuid() == 0 {
		// root reads mode-000 files; use a directory named like a log instead
		dir, c := followDir(t, "*.log")
		if err := os.Mkdir(filepath.Join(dir, "x.log"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "a.log"), lineIB)
		c.poll()
		wantCounts(t, c, 1, 0, 1)
		return
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.log"), lineIB)
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

// BenchmarkNCCLParse: splitting, parsing and recording the real sample
// lines, in memory (no file system).
func BenchmarkNCCLParse(b *testing.B) {
	body := ncclSampleBody(b)
	var sb strings.Builder
	for sb.Len() < 4<<20 {
		sb.WriteString(body)
	}
	data := []byte(sb.String())
	c := newTestNCCL(b, NCCLOptions{LogPaths: []string{"unused"}})
	f := &ncclFile{}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		for off := 0; off < len(data); off += ncclReadBuf {
			chunk := data[off:min(off+ncclReadBuf, len(data))]
			c.begin(f)
			c.tailer.feed(f, chunk)
			c.end(f, len(chunk))
		}
	}
}

// BenchmarkNCCLFollowFile: the follower reading a 64 MiB log from the page
// cache (tools/ncclbench measures 1 GB against grep).
func BenchmarkNCCLFollowFile(b *testing.B) {
	body := ncclSampleBody(b)
	var sb strings.Builder
	for sb.Len() < 64<<20 {
		sb.WriteString(body)
	}
	path := filepath.Join(b.TempDir(), "nccl.log")
	writeFile(b, path, sb.String())
	b.SetBytes(int64(sb.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ScanNCCLLog(path); err != nil {
			b.Fatal(err)
		}
	}
}

// A log flooded with 1 GiB of garbage next to a healthy log: the garbage is
// read through once with bounded memory, counted as unparsed, and the
// healthy process keeps its state. (Skipped with -short.)
func TestNCCLGarbageFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: writes 1 GiB")
	}
	dir, c := followDir(t, "*.log")
	writeFile(t, filepath.Join(dir, "good.log"), "node1:42:42 [0] NCCL INFO Using network IB\nnode1:42:50 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA\n")
	f, err := os.Create(filepath.Join(dir, "flood.log"))
	if err != nil {
		t.Fatal(err)
	}
	block := make([]byte, 1<<20)
	rand.New(rand.NewSource(7)).Read(block)
	for i := range block { // some line structure, some NCCL-looking text
		if i%997 == 0 {
			block[i] = '\n'
		}
	}
	copy(block[1000:], "x:1:1 [0] NCCL INFO Using network ")
	for range 1024 {
		if _, err := f.Write(block); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	defer os.Remove(filepath.Join(dir, "flood.log"))

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; ; i++ {
		c.poll()
		c.mu.Lock()
		backlog := c.backlog
		c.mu.Unlock()
		if backlog == 0 {
			break
		}
		if i > 10000 {
			t.Fatalf("backlog never drained: %v bytes", backlog)
		}
	}
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapInuse) - int64(before.HeapInuse); grown > 64<<20 {
		t.Errorf("heap grew by %d MiB reading 1 GiB", grown>>20)
	}
	c.mu.Lock()
	unparsed, lines := c.unparsed, c.lines
	c.mu.Unlock()
	if unparsed < 1000 || lines < unparsed {
		t.Errorf("lines %v, unparsed %v", lines, unparsed)
	}
	if s := c.summary()["node1/42"]; s.Net != "IB" || s.Conns["NET/IB gdr"] != 1 {
		t.Errorf("the healthy process lost its state: %+v", s)
	}
	t.Logf("1 GiB read: %v lines, %v unparsed, heap %+d MiB", lines, unparsed, (int64(after.HeapInuse)-int64(before.HeapInuse))>>20)
}
