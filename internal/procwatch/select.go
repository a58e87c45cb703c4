package procwatch

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/proc"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// Selection: which processes the watcher keeps. A process is
// a candidate when its command line matches --collector.process.cmdline or
// the gpu collector sees it on a GPU; over --collector.process.max, GPU
// processes win, then the lowest PIDs.

const (
	cmdlineRecheck = 10 * time.Second // a process's command line is read again after this (setproctitle, exec),
	cmdlineMax     = 5 * time.Minute  // then after twice as long each time, up to this
	maxCmdline     = 64 << 10         // bytes of a command line matched
)

// selection is the selection state kept between scrapes.
type selection struct {
	re      *regexp.Regexp     // nil: GPU processes only
	match   func(pid int) bool // reads and matches a command line against re
	max     int
	gpuPIDs func(context.Context) []int // nil without a GPU inventory

	gen    uint64 // scrape generation
	self   int    // the exporter's PID in the listing's namespace (SelfPID); 0: not in it
	cands  map[int]*procCand
	pids   []int // the /proc listing of this scrape, sorted
	sel    []procSel
	gpuSet map[int]bool
}

// procCand is the selection cache of one PID of the last listing.
type procCand struct {
	gen     uint64
	match   bool
	checked time.Time     // zero: check on the next scrape
	wait    time.Duration // until the next check
}

// procSel is one selected process and why.
type procSel struct {
	pid          int
	byGPU, byCmd bool
}

func newSelection(re *regexp.Regexp, match func(pid int) bool, max int, gpuPIDs func(context.Context) []int) selection {
	return selection{re: re, match: match, max: max, gpuPIDs: gpuPIDs, cands: map[int]*procCand{}, gpuSet: map[int]bool{}}
}

// listPIDs lists the processes of procfs into s.pids, sorted.
func (s *selection) listPIDs(procfs string) error {
	s.pids = s.pids[:0]
	err := sysfs.ScanDir(procfs, func(name []byte) {
		if pid, ok := proc.ParsePID(name); ok {
			s.pids = append(s.pids, pid)
		}
	})
	sort.Ints(s.pids)
	return err
}

// choose selects among s.pids into s.sel (sorted by PID, at most max) and
// returns the number of candidates before the cap. A command line is
// matched (s.match) for a new PID at once, then again after
// 10 s, 20 s, 40 s … up to every 5 minutes: titles set by setproctitle
// shortly after start are seen, and the command lines of the host's
// long-lived processes are not re-read on every scrape.
func (s *selection) choose(ctx context.Context, now time.Time) int {
	clear(s.gpuSet)
	if s.gpuPIDs != nil {
		for _, pid := range s.gpuPIDs(ctx) {
			s.gpuSet[pid] = true
		}
	}
	s.sel = s.sel[:0]
	for _, pid := range s.pids {
		if pid == s.self {
			continue // never the exporter itself, whatever its command line
		}
		cand := s.cands[pid]
		if cand == nil {
			cand = &procCand{}
			s.cands[pid] = cand
		}
		cand.gen = s.gen
		if s.re != nil && (cand.checked.IsZero() || now.Sub(cand.checked) >= cand.wait) {
			m := s.match(pid)
			switch {
			case cand.checked.IsZero() || m != cand.match:
				cand.wait = cmdlineRecheck
			case cand.wait < cmdlineMax:
				cand.wait = min(2*cand.wait, cmdlineMax)
			}
			cand.match, cand.checked = m, now
		}
		if gpu := s.gpuSet[pid]; cand.match || gpu {
			s.sel = append(s.sel, procSel{pid: pid, byGPU: gpu, byCmd: cand.match})
		}
	}
	for pid, cand := range s.cands {
		if cand.gen != s.gen {
			delete(s.cands, pid)
		}
	}
	candidates := len(s.sel)
	if candidates > s.max {
		sort.SliceStable(s.sel, func(i, j int) bool { return s.sel[i].byGPU && !s.sel[j].byGPU })
		s.sel = s.sel[:s.max]
		sort.Slice(s.sel, func(i, j int) bool { return s.sel[i].pid < s.sel[j].pid })
	}
	return candidates
}

// recheck makes the command line of pid be read again on the next scrape
// (its PID was reused).
func (s *selection) recheck(pid int) {
	if cand := s.cands[pid]; cand != nil {
		cand.checked = time.Time{}
	}
}

// matchCmdline reads /proc/PID/cmdline and matches it against the regexp.
// The command line may hold secrets (--api-key): it is matched in place and
// wiped, never kept, exported or logged.
func (w *Watcher) matchCmdline(pid int) bool {
	path := w.o.Procfs + "/" + strconv.Itoa(pid) + "/cmdline"
	n, err := proc.ReadInto(w.IO.Open, path, w.cmdBuf)
	line := w.cmdBuf[:n]
	defer clear(line)
	if err != nil {
		w.readError(FileCmdline, path, err)
		return false
	}
	for i, ch := range line {
		if ch == 0 {
			line[i] = ' '
		}
	}
	return w.re.Match(bytes.TrimRight(line, " "))
}

// SelfPID returns the exporter's own PID in the PID namespace of procfs, so
// that the exporter never selects itself (its command line holds the
// --collector.process.cmdline pattern, which may match it).
//
// It reads the link procfs/self, which the kernel resolves to the reader's
// PID in the PID namespace of that procfs mount (proc_self_get_link:
// task_tgid_nr_ns of the mount's namespace), the namespace whose PIDs the
// listing holds. That covers both deployments: the host's /proc read from
// the host PID namespace (self is os.Getpid()), and the host's /proc
// mounted at --path.procfs=/host/proc in a container with its own PID
// namespace, where os.Getpid() (1, say) is not the host PID but self is.
// Matching os.Getpid() or the innermost NSpid against the listing would
// take another namespace's PID 1 for the exporter; start time and
// executable identity would need reads of every candidate. The link fails
// only where the exporter cannot be in the listing (a procfs of a
// namespace the exporter is not in) or procfs is not a procfs (a copied
// tree): then nothing is left out.
func SelfPID(procfs string) (int, error) {
	target, err := os.Readlink(procfs + "/self")
	if err != nil {
		return 0, err
	}
	pid, ok := proc.ParsePID([]byte(target))
	if !ok {
		return 0, fmt.Errorf("%w: %s/self -> %q", sysfs.ErrGarbage, procfs, target)
	}
	return pid, nil
}
