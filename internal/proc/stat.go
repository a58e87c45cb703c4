package proc

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"

	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// Stat holds the fields of /proc/PID/stat the process collector uses.
type Stat struct {
	Comm                []byte // between the first '(' and the last ')'; valid until the buffer is reused
	State               byte   // field 3: R, S, D, T (stopped), t (tracing stop), Z, X, I, …
	MajFlt              uint64
	UTime, STime        uint64 // clock ticks (USER_HZ)
	StartTime           uint64 // clock ticks after boot: with the PID, identifies a process
	NumThreads, RSSPage uint64
}

// UserHZ is USER_HZ, the unit of UTime and STime (100 on every Linux ABI).
const UserHZ = 100

// ParseStat parses /proc/PID/stat. comm may hold spaces and parentheses,
// so the fields are counted from the last ')'.
func ParseStat(b []byte) (Stat, error) {
	var s Stat
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return s, fmt.Errorf("%w: stat without (comm)", sysfs.ErrGarbage)
	}
	s.Comm = b[open+1 : closing]
	// Field 3 (state) is the first after ')'; we need 12 majflt, 14 utime,
	// 15 stime, 20 num_threads, 22 starttime, 24 rss.
	rest := b[closing+1:]
	field := 2
	var err error
	for len(rest) > 0 && field < 24 {
		for len(rest) > 0 && rest[0] == ' ' {
			rest = rest[1:]
		}
		end := bytes.IndexByte(rest, ' ')
		if end < 0 {
			end = len(rest)
		}
		tok := bytes.TrimRight(rest[:end], "\n")
		rest = rest[end:]
		if len(tok) == 0 {
			break
		}
		field++
		if field == 3 {
			if len(tok) != 1 {
				return s, fmt.Errorf("%w: stat state %q", sysfs.ErrGarbage, tok)
			}
			s.State = tok[0]
			continue
		}
		var dst *uint64
		switch field {
		case 12:
			dst = &s.MajFlt
		case 14:
			dst = &s.UTime
		case 15:
			dst = &s.STime
		case 20:
			dst = &s.NumThreads
		case 22:
			dst = &s.StartTime
		case 24:
			dst = &s.RSSPage
		default:
			continue
		}
		if *dst, err = sysfs.ParseUint(tok); err != nil {
			return s, fmt.Errorf("stat field %d: %w", field, err)
		}
	}
	if field < 24 {
		return s, fmt.Errorf("%w: stat has %d fields, want at least 24", sysfs.ErrGarbage, field)
	}
	return s, nil
}

// Status holds the lines of /proc/PID/status the collector uses.
type Status struct {
	VmRSS                    uint64 // bytes
	HasRSS                   bool   // kernel threads and zombies have no VmRSS
	VolCtx, NonvolCtx        uint64
	HasCtx                   bool
	CpusAllowed, MemsAllowed []byte // cpulists; valid until the buffer is reused
	// NSpidLevels is the number of PIDs on the NSpid line (Linux 4.1+): the
	// process's PID in each PID namespace from that of the procfs mount
	// down to its own. 1: it lives in the procfs's namespace; more: in a
	// nested one (a container with its own PID namespace); 0: no NSpid line.
	NSpidLevels int
	// NSpidInner is the last PID of the NSpid line: the process's PID in
	// its own PID namespace, what getpid() returns inside it (NCCL's RAS
	// service reports that one); 0 without an NSpid line.
	NSpidInner int
	// Tgid is the thread group (the process) of the task: a thread's
	// /proc/TID/status names the process it belongs to; 0 when absent.
	Tgid int
}

// ParseStatus parses /proc/PID/status ("Key:\tvalue" lines).
func ParseStatus(b []byte) (Status, error) {
	var s Status
	var haveVol, haveNonvol bool
	var err error
	eachLine(b, func(line []byte) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok || err != nil {
			return
		}
		v = bytes.TrimSpace(v)
		switch string(k) {
		case "VmRSS":
			n, e := sysfs.ParseUint(bytes.TrimSuffix(v, []byte(" kB")))
			if e != nil {
				err = fmt.Errorf("VmRSS: %w", e)
				return
			}
			s.VmRSS, s.HasRSS = n*1024, true
		case "voluntary_ctxt_switches":
			s.VolCtx, err = sysfs.ParseUint(v)
			haveVol = err == nil
		case "nonvoluntary_ctxt_switches":
			s.NonvolCtx, err = sysfs.ParseUint(v)
			haveNonvol = err == nil
		case "Cpus_allowed_list":
			s.CpusAllowed = v
		case "Mems_allowed_list":
			s.MemsAllowed = v
		case "NSpid":
			s.NSpidLevels = countFields(v)
			if s.NSpidLevels > 0 {
				inner := v[bytes.LastIndexAny(v, " \t")+1:]
				n, e := sysfs.ParseUint(inner)
				if e != nil || n == 0 || n > 1<<22 {
					err = fmt.Errorf("%w: NSpid %q", sysfs.ErrGarbage, v)
					return
				}
				s.NSpidInner = int(n)
			}
		case "Tgid":
			if n, e := sysfs.ParseUint(v); e == nil && n > 0 && n <= 1<<22 {
				s.Tgid = int(n)
			}
		}
	})
	if err != nil {
		return s, err
	}
	s.HasCtx = haveVol && haveNonvol
	if s.CpusAllowed == nil && !s.HasCtx {
		return s, fmt.Errorf("%w: status without Cpus_allowed_list or context switches", sysfs.ErrGarbage)
	}
	return s, nil
}

// countFields counts the blank-separated fields of b without allocating.
func countFields(b []byte) int {
	n, in := 0, false
	for _, ch := range b {
		blank := ch == ' ' || ch == '\t'
		if !blank && !in {
			n++
		}
		in = !blank
	}
	return n
}

// ParsePID parses a /proc entry name that is a PID.
func ParsePID(name []byte) (int, bool) {
	if len(name) == 0 || len(name) > 9 {
		return 0, false
	}
	n := 0
	for _, ch := range name {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		n = n*10 + int(ch-'0')
	}
	return n, n > 0
}

// Gone reports errors that mean the process exited: its directory is gone
// (ENOENT), or the kernel answers ESRCH for a process being reaped.
func Gone(err error) bool {
	return sysfs.IsGone(err) || errors.Is(err, syscall.ESRCH)
}

// eachLine calls fn for every line of b (without the newline).
func eachLine(b []byte, fn func(line []byte)) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		fn(line)
	}
}
