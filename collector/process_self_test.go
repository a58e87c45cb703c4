package collector

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fabric-exporter/fabric_exporter/internal/procwatch"
)

// The exporter never selects itself, even when --collector.process.cmdline
// matches its own command line ('nccl3\.py|multiprocessing' matched the
// exporter's --collector.process.cmdline=… argument). In the fixture the
// exporter is 3907, in a pod with its own PID namespace reading the host's
// /proc (self -> 3907, NSpid 3907 1: its os.Getpid() is 1 there).
func TestProcessNeverSelectsItself(t *testing.T) {
	procDir := copyTree(t, fixtureProc)
	// A serving process the same pattern should select: SGLang's scheduler
	// before setproctitle.
	spawn := "python3\x00-c\x00from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)\x00--multiprocessing-fork\x00"
	if err := os.WriteFile(filepath.Join(procDir, "4311", "cmdline"), []byte(spawn), 0o644); err != nil {
		t.Fatal(err)
	}
	o := processOptions(t, procDir)
	o.Process.Cmdline = `nccl3\.py|multiprocessing`
	c, errs, _ := newTestProcess(t, o, 3907) // also when a GPU lister named it
	out, err := processScrape(t, c)
	if err != nil {
		t.Fatal(err)
	}
	hasLine(t, out, `fabric_process_info{comm="sglang::schedul",pid="4311",selected_by="cmdline"} 1`)
	hasLine(t, out, `fabric_process_selected 1`)
	hasLine(t, out, `fabric_process_candidates 1`)
	if strings.Contains(out, `pid="3907"`) {
		t.Errorf("the exporter selected itself:\n%s", strings.Join(grepLines(out, `pid="3907"`), "\n"))
	}
	if errs.Value() != 0 {
		t.Errorf("read errors %v", errs.Value())
	}

	// Without a self link (not a procfs: a copied tree) nothing is left out.
	if err := os.Remove(filepath.Join(procDir, "self")); err != nil {
		t.Fatal(err)
	}
	c, _, _ = newTestProcess(t, o)
	out, _ = processScrape(t, c)
	hasLine(t, out, `fabric_process_info{comm="fabric_exporter",pid="3907",selected_by="cmdline"} 1`)
}

// On this machine's real /proc, in this PID namespace: a pattern matching
// this test binary's command line selects other processes but never this one
// (os.Getpid()).
func TestProcessNeverSelectsItselfLive(t *testing.T) {
	o := processOptions(t, "/proc")
	o.Process.Cmdline = regexp.QuoteMeta(os.Args[0])
	c, _, _ := newTestProcess(t, o)
	out, err := processScrape(t, c)
	if err != nil {
		t.Fatal(err)
	}
	if me := `pid="` + strconv.Itoa(os.Getpid()) + `"`; strings.Contains(out, me) {
		t.Errorf("the exporter (%s) selected itself:\n%s", me, strings.Join(grepLines(out, me), "\n"))
	}
	if s, err := procwatch.SelfPID("/proc"); err != nil || s != os.Getpid() {
		t.Errorf("procwatch.SelfPID(/proc) = %d, %v; want %d", s, err, os.Getpid())
	}
}
