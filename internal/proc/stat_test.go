package proc

import (
	"bytes"
	"os"
	"testing"
)

// fixtures is the collector's fixture directory: the /proc of SGLang
// processes (proc/, built by collector/fixtures/build-proc.sh) and the real
// numa_maps and numastat -p samples (numa_maps/).
const (
	fixtures    = "../../collector/fixtures"
	fixtureProc = fixtures + "/proc"
)

func TestParseProcStat(t *testing.T) {
	s, err := ParseStat([]byte("77 (a) b (c)) S 1 77 77 0 -1 4194560 10 0 5 0 300 200 0 0 20 0 3 0 999 1000 42 18446744073709551615\n"))
	if err != nil || string(s.Comm) != "a) b (c)" || s.MajFlt != 5 || s.UTime != 300 || s.STime != 200 || s.NumThreads != 3 || s.StartTime != 999 || s.RSSPage != 42 {
		t.Errorf("%+v %v", s, err)
	}
	for _, bad := range []string{"", "1 (x S 1", "1 (x) S 1 2 3", "1 (x) S 1 1 1 0 -1 0 0 0 z 0 1 1 0 0 20 0 1 0 1 1 1"} {
		if _, err := ParseStat([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestParseProcStatus(t *testing.T) {
	raw, _ := os.ReadFile(fixtures + "/proc/4310/status")
	s, err := ParseStatus(raw)
	if err != nil || !s.HasRSS || s.VmRSS != 17807244*1024 || !s.HasCtx || s.VolCtx != 97002114 || s.NonvolCtx != 188314 ||
		string(s.CpusAllowed) != "48-95,144-191" || string(s.MemsAllowed) != "1" || s.NSpidLevels != 1 || s.NSpidInner != 4310 || s.Tgid != 4310 {
		t.Errorf("%+v %v", s, err)
	}
	// The exporter in its own PID namespace: its PID there and in procfs's.
	raw, _ = os.ReadFile(fixtures + "/proc/3907/status")
	if s, err := ParseStatus(raw); err != nil || s.NSpidLevels != 2 || s.NSpidInner != 1 {
		t.Errorf("nested PID namespace: %+v %v", s, err)
	}
	// A thread of a container's process, as /proc/TID/status shows it from
	// the host (three levels: host, the pod's, the container's own).
	s, err = ParseStatus([]byte("Name:	pt_main_thread\nTgid:\t964\nPid:\t981\nNSpid:\t981\t19\t7\nCpus_allowed_list:\t0-15\n"))
	if err != nil || s.Tgid != 964 || s.NSpidLevels != 3 || s.NSpidInner != 7 {
		t.Errorf("thread of a nested process: %+v %v", s, err)
	}
	if _, err := ParseStatus([]byte("NSpid:\t12\tx\nCpus_allowed_list:\t0\n")); err == nil {
		t.Error("garbage NSpid: no error")
	}
	// A kernel thread: no VmRSS.
	s, err = ParseStatus([]byte("Name:\tkworker/0:1\nCpus_allowed_list:\t0\nvoluntary_ctxt_switches:\t5\nnonvoluntary_ctxt_switches:\t0\n"))
	if err != nil || s.HasRSS || !s.HasCtx || s.NSpidLevels != 0 {
		t.Errorf("kernel thread (no NSpid line): %+v %v", s, err)
	}
	if _, err := ParseStatus([]byte("VmRSS:\tlots kB\n")); err == nil {
		t.Error("garbage VmRSS: no error")
	}
}

// FuzzParseProcStat: no panic; comm is what lies between the first '(' and
// the last ')'.
func FuzzParseProcStat(f *testing.F) {
	raw, _ := os.ReadFile(fixtures + "/proc/4242/stat")
	f.Add(raw)
	f.Add([]byte("1 (a) b) S 0"))
	f.Fuzz(func(t *testing.T, in []byte) {
		s, err := ParseStat(in)
		if err == nil && !bytes.Contains(in, append(append([]byte("("), s.Comm...), ')')) {
			t.Fatalf("comm %q not in %q", s.Comm, in)
		}
	})
}

// FuzzParseProcStatus: no panic.
func FuzzParseProcStatus(f *testing.F) {
	raw, _ := os.ReadFile(fixtures + "/proc/4242/status")
	f.Add(raw)
	f.Fuzz(func(t *testing.T, in []byte) {
		_, _ = ParseStatus(in)
	})
}
