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

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// A real /proc/PID/stat line (Linux 6.x, `cat /proc/self/stat`): starttime
// (field 22) is 161078.
const realProcStat = "24042 (cat) R 24037 24037 9981 0 -1 4194304 99 0 0 0 0 0 0 0 20 0 1 0 161078 3133440 413 18446744073709551615 94269075963904 94269075983785 140730231618800 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 94269075999792 94269076001408 94270119821312 140730231626423 140730231626443 140730231626443 140730231627755 0\n"

func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		line  string
		state byte
		start uint64
		ok    bool
	}{
		{realProcStat, 'R', 161078, true},
		// a command with spaces and parentheses: fields count from the last ')'
		{strings.Replace(realProcStat, "(cat) R", "(pt (main) th) S", 1), 'S', 161078, true},
		{strings.Replace(realProcStat, "(cat) R", "(python3) Z", 1), 'Z', 161078, true},
		{"24042 (cat) R 24037 24037", 0, 0, false},
		{"24042 cat R", 0, 0, false},
		{strings.Replace(realProcStat, " 161078 ", " 16x078 ", 1), 0, 0, false},
		{"", 0, 0, false},
	} {
		state, start, ok := parseProcStat([]byte(tc.line))
		if state != tc.state || start != tc.start || ok != tc.ok {
			t.Errorf("%.40q: %c %d %v, want %c %d %v", tc.line, state, start, ok, tc.state, tc.start, tc.ok)
		}
	}
	if b, ok := readBootTime("/proc/stat"); ok && b < 1e9 {
		t.Errorf("btime of this machine %d", b)
	}
}

// fakeProc is a procfs fixture: stat with btime, and PID/stat files.
type fakeProc struct {
	t     *testing.T
	dir   string
	btime time.Time
}

func newFakeProc(t *testing.T, btime time.Time) *fakeProc {
	dir := t.TempDir()
	testenv.WriteFile(t, filepath.Join(dir, "stat"), fmt.Sprintf("cpu  1 2 3 4 5 6 7 0 0 0\nintr 0\nctxt 1\nbtime %d\nprocesses 9\n", btime.Unix()))
	return &fakeProc{t: t, dir: dir, btime: btime}
}

// set writes PID's stat: a process in state started at start.
func (f *fakeProc) set(pid string, state byte, start time.Time) {
	f.t.Helper()
	ticks := start.Sub(f.btime) / (time.Second / clockTicks)
	line := strings.Replace(realProcStat, "24042 (cat) R", pid+" (pt_main_thread) "+string(state), 1)
	line = strings.Replace(line, " 161078 ", fmt.Sprintf(" %d ", ticks), 1)
	os.RemoveAll(filepath.Join(f.dir, pid))
	if err := os.MkdirAll(filepath.Join(f.dir, pid), 0o755); err != nil {
		f.t.Fatal(err)
	}
	testenv.WriteFile(f.t, filepath.Join(f.dir, pid, "stat"), line)
}

func (f *fakeProc) remove(pid string) { os.RemoveAll(filepath.Join(f.dir, pid)) }

func (c *testNCCL) keys() []string {
	var keys []string
	c.View(func(procs []*Process, _ Stats) {
		for _, p := range procs {
			keys = append(keys, p.Host+"/"+p.PID)
		}
	})
	sort.Strings(keys)
	return keys
}

// TestNCCLExitedProcesses: a process of this host whose PID is gone, a
// zombie or reused is dropped ExitedGrace after the check found it gone (or
// after its latest line was read); a live one is kept however old its log;
// other hosts' processes are left to the retention.
func TestNCCLExitedProcesses(t *testing.T) {
	btime := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	t0 := btime.Add(30 * time.Hour)
	now := t0
	proc := newFakeProc(t, btime)
	proc.set("300", 'S', t0.Add(-48*time.Hour+time.Minute)) // alive for good
	proc.set("301", 'S', t0.Add(-10*time.Minute))           // exits at t0+10s
	proc.set("302", 'S', t0.Add(-10*time.Minute))           // exits, its PID reused at t0+5s
	// 303's stat cannot be read at first (unknown), then shows a process
	// that started after the Tracker read 303's line: the PID was reused.
	if err := os.MkdirAll(filepath.Join(proc.dir, "303", "stat"), 0o755); err != nil {
		t.Fatal(err)
	}
	proc.set("304", 'Z', t0.Add(-10*time.Minute)) // a zombie
	// 305 is another host's (no entry here), 306 has exited already and
	// its lines are still being read.
	dir := t.TempDir()
	line := func(host, pid string) string {
		return host + ":" + pid + ":" + pid + " [0] NCCL INFO NET/IB : No device found.\n" +
			host + ":" + pid + ":" + pid + " [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n" +
			host + ":" + pid + ":" + pid + " [0] NCCL INFO Using network Socket\n"
	}
	for _, pid := range []string{"300", "301", "302", "303", "304", "306"} {
		testenv.WriteFile(t, filepath.Join(dir, pid+".log"), line("exporter-host", pid))
	}
	testenv.WriteFile(t, filepath.Join(dir, "305.log"), line("other-host", "305"))
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, l := range logs {
		os.Chtimes(l, t0, t0)
	}
	old := t0.Add(-48 * time.Hour) // past the retention
	os.Chtimes(filepath.Join(dir, "300.log"), old, old)

	c := newTestNCCL(t, testOpts{LogPaths: []string{filepath.Join(dir, "*.log")}, Procfs: proc.dir,
		Hostname: "exporter-host", Retention: 24 * time.Hour, ExitedGrace: 30 * time.Second,
		Now: func() time.Time { return now }})
	all := []string{"exporter-host/300", "exporter-host/301", "exporter-host/302", "exporter-host/303",
		"exporter-host/304", "exporter-host/306", "other-host/305"}
	step := func(at time.Duration, want []string) {
		t.Helper()
		now = t0.Add(at)
		c.poll()
		if got := c.keys(); !reflect.DeepEqual(got, want) {
			t.Errorf("t0+%s: tracked %v\nwant %v", at, got, want)
		}
	}
	without := func(drop ...string) []string {
		var out []string
	next:
		for _, k := range all {
			for _, d := range drop {
				if k == "exporter-host/"+d {
					continue next
				}
			}
			out = append(out, k)
		}
		return out
	}
	step(0, all) // 304 (zombie) and 306 (no entry) found gone: grace
	proc.remove("301")
	proc.set("302", 'S', t0.Add(5*time.Second))
	os.RemoveAll(filepath.Join(proc.dir, "303"))
	proc.set("303", 'S', t0.Add(5*time.Second))
	step(10*time.Second, all)
	// 306 logs on (a backlog): its grace counts from that line.
	testenv.AppendFile(t, filepath.Join(dir, "306.log"), "exporter-host:306:306 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n")
	os.Chtimes(filepath.Join(dir, "306.log"), t0.Add(31*time.Second), t0.Add(31*time.Second))
	step(31*time.Second, without("304"))
	step(41*time.Second, without("301", "302", "303", "304"))
	step(62*time.Second, without("301", "302", "303", "304", "306"))
	c.View(func(_ []*Process, st Stats) {
		if st.Exited != 5 {
			t.Errorf("%d exited, want 5", st.Exited)
		}
	})
	// A day later: the live process stays whatever its log's age; the other
	// host's goes by the retention.
	step(30*time.Hour, []string{"exporter-host/300"})

	// Grace 0: dropped at the first check that finds the PID gone.
	now = t0
	c0 := newTestNCCL(t, testOpts{LogPaths: []string{filepath.Join(dir, "30[01].log")}, Procfs: proc.dir,
		Hostname: "exporter-host", Retention: 24 * time.Hour, Now: func() time.Time { return now }})
	c0.poll()
	if got := c0.keys(); !reflect.DeepEqual(got, []string{"exporter-host/300"}) {
		t.Errorf("grace 0: tracked %v, want only the live process", got)
	}

	// A procfs without btime (not a procfs, or another kind of mount) is
	// never taken to say that a process exited.
	bare := t.TempDir()
	c1 := newTestNCCL(t, testOpts{LogPaths: []string{filepath.Join(dir, "301.log")}, Procfs: bare,
		Hostname: "exporter-host", Retention: 24 * time.Hour, Now: func() time.Time { return now }})
	c1.poll()
	now = now.Add(time.Hour)
	c1.poll()
	if got := c1.keys(); !reflect.DeepEqual(got, []string{"exporter-host/301"}) {
		t.Errorf("procfs without btime: tracked %v, want 301 kept", got)
	}
}
