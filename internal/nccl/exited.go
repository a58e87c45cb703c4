package nccl

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Whether a process of this host still runs. A process is checked only
// when its host name as NCCL logged it is this machine's
// (TrackerOptions.Hostname) and its PID is numeric, and only when Procfs
// looks like a procfs ("btime" in Procfs/stat): its PID namespace is the
// one Procfs shows. The process has exited when
//
//   - Procfs/PID does not exist, or is a zombie;
//   - Procfs/PID is another process that reused the PID: it started after
//     the Tracker first saw the logged process (start = btime of
//     Procfs/stat + starttime of Procfs/PID/stat in clock ticks), or its
//     starttime differs from the one seen while the process was alive.
//
// The Tracker first sees a process after that process started, so a
// process that started later is another one; one that started earlier may
// still be another one (the exporter started after the PID was reused):
// it counts as alive, and the retention applies as before.
//
// An exited process is dropped ExitedGrace after the check first found it
// gone, or after its latest line was read when that is later (a backlog of
// its lines being read does not make it flap). Processes of other host
// names (containers with their own UTS and PID namespaces) cannot be
// checked: only the retention drops them.

type pidState uint8

const (
	pidUnknown pidState = iota // cannot tell
	pidAlive
	pidExited
)

const (
	// clockTicks is USER_HZ, the unit of /proc/PID/stat's starttime
	// (`getconf CLK_TCK`): 100 on every Linux architecture Go supports.
	clockTicks = 100
	// pidCheckEvery bounds how often the PIDs are checked (Expire runs
	// after every poll, which may be as often as every 10 ms).
	pidCheckEvery = time.Second
	// btimeMaxAge is how long the boot time read from Procfs/stat is used
	// (the kernel moves it when the wall clock is stepped).
	btimeMaxAge = time.Minute
	// startSlack is how much later than the Tracker's first sight a
	// process may seem to have started and still be the logged one (btime
	// is whole seconds; a clock step between the two readings).
	startSlack = 2 * time.Second
)

// pidChecks reports whether the PIDs are due for a check at now (Unix
// nanoseconds), reading the boot time when needed; false when Procfs has
// no boot time.
func (t *Tracker) pidChecks(now int64) bool {
	if t.locals == 0 || t.pidCheckAt != 0 && now-t.pidCheckAt < int64(pidCheckEvery) && now >= t.pidCheckAt {
		return false
	}
	t.pidCheckAt = now
	if !t.btimeOK || now-t.btimeAt >= int64(btimeMaxAge) || now < t.btimeAt {
		t.btime, t.btimeOK = readBootTime(filepath.Join(t.opts.Procfs, "stat"))
		t.btimeAt = now
	}
	return t.btimeOK
}

// pidState checks whether the process p logged as still runs.
func (t *Tracker) pidState(p *Process) pidState {
	n, err := readSmall(filepath.Join(t.opts.Procfs, p.PID, "stat"), t.statBuf[:])
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return pidExited
		}
		return pidUnknown
	}
	state, start, ok := parseProcStat(t.statBuf[:n])
	switch {
	case !ok:
		return pidUnknown
	case state == 'Z' || state == 'X':
		return pidExited
	case p.startKnown:
		if start != p.startTicks {
			return pidExited // the PID was reused
		}
		return pidAlive
	}
	startNs := t.btime*int64(time.Second) + int64(start)*(int64(time.Second)/clockTicks)
	if startNs > p.firstSeen+int64(startSlack) {
		return pidExited // started after the Tracker saw the logged process
	}
	p.startTicks, p.startKnown = start, true
	return pidAlive
}

// readSmall reads up to len(buf) bytes of a /proc file.
func readSmall(path string, buf []byte) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := f.Read(buf)
	if n > 0 {
		return n, nil
	}
	if err == nil {
		err = errors.New("empty")
	}
	return 0, err
}

// parseProcStat returns the state (field 3) and starttime (field 22, clock
// ticks after boot) of a /proc/PID/stat line. The command (field 2) is in
// parentheses and may hold spaces and parentheses: fields are counted
// after the last ')'.
func parseProcStat(b []byte) (state byte, start uint64, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+3 >= len(b) || b[i+1] != ' ' {
		return 0, 0, false
	}
	rest := b[i+2:]
	state = rest[0]
	// fields 3..22: skip 19 separators
	field := 3
	j := 0
	for ; j < len(rest) && field < 22; j++ {
		if rest[j] == ' ' {
			field++
		}
	}
	if field != 22 {
		return 0, 0, false
	}
	k := j
	for k < len(rest) && rest[k] >= '0' && rest[k] <= '9' {
		k++
	}
	if k == j || k-j > 19 || k < len(rest) && rest[k] != ' ' && rest[k] != '\n' {
		return 0, 0, false
	}
	for _, c := range rest[j:k] {
		start = start*10 + uint64(c-'0')
	}
	return state, start, true
}

// readBootTime reads "btime <seconds>" from a /proc/stat file.
func readBootTime(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			v = bytes.TrimSpace(v)
			if !isDigits(v) || len(v) > 18 {
				return 0, false
			}
			var n int64
			for _, c := range v {
				n = n*10 + int64(c-'0')
			}
			return n, n > 0
		}
	}
	return 0, false
}
