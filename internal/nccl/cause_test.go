package nccl

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// The lines behind the collector's fallback cause: "NET/IB : No device
// found." (IBNoDevice) and NCCL failing to load libibverbs
// (VerbsLibMissing), in every form NCCL printed them (message.go cites the
// format strings).
func TestNCCLFallbackReasonLines(t *testing.T) {
	for _, tc := range []struct {
		name, text         string
		noDevice, verbsLib bool
	}{
		// the alerting end-to-end test's log (e2e/alerting_test.go ncclSocket)
		{"e2e socket", "node7:5555:5555 [0] NCCL INFO Bootstrap : Using eth1:192.168.1.7<0>\n" +
			"node7:5555:5555 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth1\n" +
			"node7:5555:5555 [0] NCCL INFO NET/IB : No device found.\n" +
			"node7:5555:5555 [0] NCCL INFO NET/Socket : Using [0]eth1:192.168.1.7<0>\n" +
			"node7:5555:5555 [0] NCCL INFO Using network Socket\n", true, false},
		// NCCL 2.3-2.10: a WARN (misc/ibvwrap.cc:63@v2.4.7-1)
		{"2.4 warn", "g24c:32002:32002 [1] NCCL WARN Failed to open libibverbs.so[.1]\n" +
			"g24c:32002:32002 [1] NCCL INFO NET/IB : No device found.\n", true, true},
		// 2.11-2.29: INFO (misc/ibvsymbols.cc:81@v2.28.9-1)
		{"2.28 info", "vm:462:462 [0] NCCL INFO Failed to open libibverbs.so[.1]\n", false, true},
		// 2.30: one line per library tried; only the last one failing counts
		{"2.30 all failed", "vm:7:7 [0] NCCL INFO Count not open libibverbs.so\n" +
			"vm:7:7 [0] NCCL INFO Count not open libibverbs.so.1\n", false, true},
		{"2.30 first failed", "vm:7:7 [0] NCCL INFO Count not open libibverbs.so\n", false, false},
		{"2.30 own lib failed", "vm:7:7 [0] NCCL INFO Count not open libibverbs.so.1.2\n", false, false},
		// NCCL_IB_DISABLE: IB never tried (real sample nccl-1053)
		{"ib disabled", "axa:3048391:3048566 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n" +
			"axa:3048391:3048566 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>\n" +
			"axa:3048391:3048566 [0] NCCL INFO Using network Socket\n", false, false},
		// another net's "No device found" is not IB's
		{"other net", "h:1:1 [0] NCCL INFO NET/OFI : No device found.\n", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := scanText(t, tc.text)
			n := 0
			c.View(func(procs []*Process, _ Stats) {
				for _, p := range procs {
					n++
					if p.IBNoDevice != tc.noDevice || p.VerbsLibMissing != tc.verbsLib {
						t.Errorf("%s/%s: IBNoDevice %v VerbsLibMissing %v, want %v %v", p.Host, p.PID,
							p.IBNoDevice, p.VerbsLibMissing, tc.noDevice, tc.verbsLib)
					}
				}
			})
			if n != 1 {
				t.Fatalf("%d processes, want 1", n)
			}
		})
	}
}

// TestNCCLFallbackReasonGen: a reason line changes Gen (caches rebuild),
// a repeat does not.
func TestNCCLFallbackReasonGen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.log")
	testenv.WriteFile(t, path, "h:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n")
	c := newTestNCCL(t, testOpts{LogPaths: []string{filepath.Join(dir, "*.log")}})
	c.poll()
	gen := func() (g uint64) {
		c.View(func(procs []*Process, _ Stats) { g = procs[0].Gen })
		return g
	}
	g0 := gen()
	testenv.WriteFile(t, path, "h:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\nh:1:1 [0] NCCL INFO Failed to open libibverbs.so[.1]\n")
	c.poll()
	g1 := gen()
	if g1 == g0 {
		t.Fatal("Gen unchanged by the libibverbs line")
	}
	testenv.WriteFile(t, path, "h:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\nh:1:1 [0] NCCL INFO Failed to open libibverbs.so[.1]\nh:1:1 [0] NCCL INFO Failed to open libibverbs.so[.1]\n")
	c.poll()
	if gen() != g1 {
		t.Fatal("Gen changed by a repeated line")
	}
}

// TestNCCLOnThisHost follows the PID check: a process of this host name
// whose PID runs is on this host; another host's, or one found exited, is
// not.
func TestNCCLOnThisHost(t *testing.T) {
	btime := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	t0 := btime.Add(time.Hour)
	proc := newFakeProc(t, btime)
	proc.set("400", 'S', t0.Add(-time.Minute))
	dir := t.TempDir()
	for _, hp := range [][2]string{{"exporter-host", "400"}, {"exporter-host", "401"}, {"other-host", "400"}} {
		testenv.WriteFile(t, filepath.Join(dir, hp[0]+"."+hp[1]+".log"),
			hp[0]+":"+hp[1]+":"+hp[1]+" [0] NCCL INFO Using network Socket\n")
	}
	c := newTestNCCL(t, testOpts{LogPaths: []string{filepath.Join(dir, "*.log")}, Procfs: proc.dir,
		Hostname: "exporter-host", ExitedGrace: time.Hour, Now: func() time.Time { return t0 }})
	c.poll()
	got := map[string]bool{}
	c.View(func(procs []*Process, _ Stats) {
		for _, p := range procs {
			got[p.Host+"/"+p.PID] = p.OnThisHost()
		}
	})
	want := map[string]bool{"exporter-host/400": true, "exporter-host/401": false, "other-host/400": false}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s: OnThisHost %v (tracked %v), want %v", k, g, ok, v)
		}
	}
}
