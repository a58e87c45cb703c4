package nccl

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/fabric-exporter/fabric_exporter/internal/fixturetree"
	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

const (
	lineIB     = "h:1:1 [0] NCCL INFO Using network IB\n"
	lineSocket = "h:2:2 [0] NCCL INFO Using network Socket\n"
)

func followDir(t *testing.T, globs ...string) (string, *testNCCL) {
	t.Helper()
	dir := t.TempDir()
	for i := range globs {
		globs[i] = filepath.Join(dir, globs[i])
	}
	return dir, newTestNCCL(t, testOpts{LogPaths: globs})
}

func wantCounts(t *testing.T, c *testNCCL, lines, unparsed float64, procs int) {
	t.Helper()
	st, n := c.stats()
	if float64(st.Lines) != lines || float64(st.Unparsed) != unparsed || n != procs {
		t.Errorf("lines %v unparsed %v processes %d, want %v %v %d", st.Lines, st.Unparsed, n, lines, unparsed, procs)
	}
}

func TestNCCLFollowPartialLine(t *testing.T) {
	dir, c := followDir(t, "*.log")
	p := filepath.Join(dir, "a.log")
	testenv.WriteFile(t, p, "h:1:1 [0] NCCL INFO Using net")
	c.poll()
	wantCounts(t, c, 0, 0, 0)
	testenv.AppendFile(t, p, "work IB\nh:1:1 [0] NCCL INFO NCCL ver")
	c.poll()
	wantCounts(t, c, 1, 0, 1)
	testenv.AppendFile(t, p, "sion 2.21.5+cuda12.4\n")
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
	testenv.WriteFile(t, p, lineIB+lineIB+lineIB)
	c.poll()
	wantCounts(t, c, 3, 0, 1)
	// copytruncate: the file is emptied and written again, shorter.
	testenv.WriteFile(t, p, lineSocket)
	c.poll()
	wantCounts(t, c, 4, 0, 2)
	// Truncated and grown past the old offset between two polls: the
	// changed first bytes tell.
	testenv.WriteFile(t, p, "h:3:3 [0] NCCL INFO Using network IB\n"+strings.Repeat(lineIB, 3))
	c.poll()
	wantCounts(t, c, 8, 0, 3)
}

func TestNCCLFollowRenameRotation(t *testing.T) {
	dir, c := followDir(t, "*.log*")
	p := filepath.Join(dir, "a.log")
	testenv.WriteFile(t, p, lineIB+lineIB)
	c.poll()
	wantCounts(t, c, 2, 0, 1)
	// logrotate renames; the writer keeps its descriptor and writes on.
	if err := os.Rename(p, p+".1"); err != nil {
		t.Fatal(err)
	}
	testenv.AppendFile(t, p+".1", lineIB)
	testenv.WriteFile(t, p, lineSocket) // a new file at the old name
	c.poll()
	wantCounts(t, c, 4, 0, 2) // the renamed file is not read again from its start
	if c.files() != 2 {
		t.Errorf("files %v", c.files())
	}
	// Renamed out of the globs: forgotten.
	if err := os.Rename(p+".1", filepath.Join(dir, "old")); err != nil {
		t.Fatal(err)
	}
	c.poll()
	if c.files() != 1 || len(c.tailer.files) != 1 {
		t.Errorf("files %v, followed %d", c.files(), len(c.tailer.files))
	}
}

func TestNCCLFollowDeletion(t *testing.T) {
	dir, c := followDir(t, "*.log")
	p := filepath.Join(dir, "a.log")
	testenv.WriteFile(t, p, lineIB+"h:1:1 [0] NCCL INFO Using")
	c.poll()
	os.Remove(p)
	c.poll()
	if c.files() != 0 || len(c.tailer.files) != 0 {
		t.Errorf("deleted file still followed: %v", c.files())
	}
	// The process stays until it expires.
	wantCounts(t, c, 1, 0, 1)
	// A new file of the same name is read from its start, without the old
	// partial line.
	testenv.WriteFile(t, p, " network Socket\n"+lineSocket)
	c.poll()
	wantCounts(t, c, 3, 1, 2)
}

func TestNCCLFollowLongLines(t *testing.T) {
	dir, c := followDir(t, "*.log")
	p := filepath.Join(dir, "a.log")
	long := strings.Repeat("x", maxLine+1)
	// a long line in one piece, one exactly at the limit, one that ends
	// in a later chunk and a later poll, one spanning several read buffers
	testenv.WriteFile(t, p, long+"\n"+lineIB+strings.Repeat("y", maxLine)+"\n"+lineIB)
	c.poll()
	wantCounts(t, c, 4, 2, 1)
	testenv.AppendFile(t, p, strings.Repeat("z", maxLine-10))
	c.poll()
	testenv.AppendFile(t, p, strings.Repeat("z", 20))
	c.poll()
	testenv.AppendFile(t, p, "\n"+lineSocket+strings.Repeat("w", 3*readBuf)+"\n"+lineIB)
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
	testenv.WriteFile(t, filepath.Join(dir, "random"), string(b))
	// garbage with NCCL-looking fragments
	var sb strings.Builder
	frags := []string{"NCCL ", "INFO ", "WARN ", "[0] ", ":", "h:1:2 ", " via ", "NET/", "Using network ", "\n", "\x00", "\xff", "[", "]", "Channel ", " -> "}
	for range 200000 {
		sb.WriteString(frags[r.Intn(len(frags))])
	}
	testenv.WriteFile(t, filepath.Join(dir, "frags"), sb.String())
	testenv.WriteFile(t, filepath.Join(dir, "empty"), "")
	c.poll()
	if c.lines() == 0 || c.unparsed() == 0 {
		t.Errorf("lines %v unparsed %v", c.lines(), c.unparsed())
	}
}

func TestNCCLFollowManyFiles(t *testing.T) {
	dir := t.TempDir()
	for i := range 300 {
		testenv.WriteFile(t, filepath.Join(dir, fmt.Sprintf("h.%d.log", i)), fmt.Sprintf("h:%d:1 [0] NCCL INFO Using network IB\n", i+1))
	}
	fds := openFDs(t)
	c := newTestNCCL(t, testOpts{LogPaths: []string{filepath.Join(dir, "*.log")}, MaxProcesses: 1000})
	c.poll()
	wantCounts(t, c, 300, 0, 300)
	for i := range 300 {
		testenv.AppendFile(t, filepath.Join(dir, fmt.Sprintf("h.%d.log", i)), fmt.Sprintf("h:%d:1 [0] NCCL WARN x\n", i+1))
	}
	c.poll()
	wantCounts(t, c, 600, 0, 300)
	if after := openFDs(t); after > fds {
		t.Errorf("%d descriptors open after polling, %d before", after, fds)
	}
	if c.files() != 300 {
		t.Errorf("files %v", c.files())
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
	testenv.WriteFile(t, p, lineIB)
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
	testenv.WriteFile(t, filepath.Join(dir, "big.log"), sb.String())
	c.poll()
	if c.lines() != float64(n) || c.bytes() != float64(sb.Len()) || c.backlog() != 0 {
		t.Errorf("lines %v bytes %v backlog %v, want %d %d 0", c.lines(), c.bytes(), c.backlog(), n, sb.Len())
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

// BenchmarkNCCLParse: splitting, parsing and recording the real sample
// lines, in memory (no file system):
// go test ./internal/nccl -run x -bench NCCLParse
func BenchmarkNCCLParse(b *testing.B) {
	body := ncclSampleBody(b)
	var sb strings.Builder
	for sb.Len() < 4<<20 {
		sb.WriteString(body)
	}
	data := []byte(sb.String())
	c := newTestNCCL(b, testOpts{LogPaths: []string{"unused"}})
	f := &File{}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		for off := 0; off < len(data); off += readBuf {
			chunk := data[off:min(off+readBuf, len(data))]
			c.Begin(f)
			c.tailer.feed(f, chunk)
			c.End(f, len(chunk))
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
	testenv.WriteFile(b, path, sb.String())
	b.SetBytes(int64(sb.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ScanLog(path); err != nil {
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
	testenv.WriteFile(t, filepath.Join(dir, "good.log"), "node1:42:42 [0] NCCL INFO Using network IB\nnode1:42:50 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA\n")
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
		backlog := c.backlog()
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
	unparsed, lines := c.unparsed(), c.lines()
	if unparsed < 1000 || lines < unparsed {
		t.Errorf("lines %v, unparsed %v", lines, unparsed)
	}
	if s := c.summary()["node1/42"]; s.Net != "IB" || s.Conns["NET/IB gdr"] != 1 {
		t.Errorf("the healthy process lost its state: %+v", s)
	}
	t.Logf("1 GiB read: %v lines, %v unparsed, heap %+d MiB", lines, unparsed, (int64(after.HeapInuse)-int64(before.HeapInuse))>>20)
}
