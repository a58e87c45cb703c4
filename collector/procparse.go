package collector

import (
	"bytes"
	"fmt"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// Parsers for /proc/PID files. They work on bytes in reused buffers and do
// not allocate, except for the strings the caller keeps.

// procStat holds the fields of /proc/PID/stat the process collector uses.
type procStat struct {
	comm                []byte // between the first '(' and the last ')'; valid until the buffer is reused
	majflt              uint64
	utime, stime        uint64 // clock ticks (USER_HZ)
	starttime           uint64 // clock ticks after boot: with the PID, identifies a process
	numThreads, rssPage uint64
}

// parseProcStat parses /proc/PID/stat. comm may hold spaces and
// parentheses, so the fields are counted from the last ')'.
func parseProcStat(b []byte) (procStat, error) {
	var s procStat
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return s, fmt.Errorf("%w: stat without (comm)", sysfs.ErrGarbage)
	}
	s.comm = b[open+1 : closing]
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
		var dst *uint64
		switch field {
		case 12:
			dst = &s.majflt
		case 14:
			dst = &s.utime
		case 15:
			dst = &s.stime
		case 20:
			dst = &s.numThreads
		case 22:
			dst = &s.starttime
		case 24:
			dst = &s.rssPage
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

// procStatus holds the lines of /proc/PID/status the collector uses.
type procStatus struct {
	vmRSS                  uint64 // bytes
	hasRSS                 bool   // kernel threads and zombies have no VmRSS
	volCtx, nonvolCtx      uint64
	hasCtx                 bool
	cpusAllowed, memsAllow []byte // cpulists; valid until the buffer is reused
}

// parseProcStatus parses /proc/PID/status ("Key:\tvalue" lines).
func parseProcStatus(b []byte) (procStatus, error) {
	var s procStatus
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
			s.vmRSS, s.hasRSS = n*1024, true
		case "voluntary_ctxt_switches":
			s.volCtx, err = sysfs.ParseUint(v)
			haveVol = err == nil
		case "nonvoluntary_ctxt_switches":
			s.nonvolCtx, err = sysfs.ParseUint(v)
			haveNonvol = err == nil
		case "Cpus_allowed_list":
			s.cpusAllowed = v
		case "Mems_allowed_list":
			s.memsAllow = v
		}
	})
	if err != nil {
		return s, err
	}
	s.hasCtx = haveVol && haveNonvol
	if s.cpusAllowed == nil && !s.hasCtx {
		return s, fmt.Errorf("%w: status without Cpus_allowed_list or context switches", sysfs.ErrGarbage)
	}
	return s, nil
}

// numaMaps sums /proc/PID/numa_maps per NUMA node the way `numastat -p`
// does, but with each mapping's own page size (kernelpagesize_kB, so 1 GiB
// huge pages count right where numastat assumes the default huge page
// size). Lines are fed as they are read; a line longer than the carry
// buffer is skipped.
type numaMaps struct {
	bytes []uint64                 // per node
	cats  [][numaCategories]uint64 // per node: huge, heap, stack, private (numastat -p's rows)
	carry []byte
	skip  bool // inside an overlong line
}

// numastat -p's categories, in its order.
const (
	numaHuge = iota
	numaHeap
	numaStack
	numaPrivate
	numaCategories
)

// maxNumaNode bounds node numbers (MAX_NUMNODES is at most 1024).
const maxNumaNode = 1023

// maxNumaMapsLine bounds one numa_maps line (a path is at most 4096 bytes).
const maxNumaMapsLine = 8192

func (m *numaMaps) reset() {
	m.bytes = m.bytes[:0]
	m.cats = m.cats[:0]
	m.carry = m.carry[:0]
	m.skip = false
}

// write parses the complete lines of chunk and keeps the rest for the next.
func (m *numaMaps) write(chunk []byte) {
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			if !m.skip {
				if len(m.carry)+len(chunk) > maxNumaMapsLine {
					m.skip, m.carry = true, m.carry[:0]
				} else {
					m.carry = append(m.carry, chunk...)
				}
			}
			return
		}
		line := chunk[:i]
		chunk = chunk[i+1:]
		if m.skip {
			m.skip = false
			continue
		}
		if len(m.carry) > 0 {
			m.carry = append(m.carry, line...)
			line = m.carry
		}
		m.line(line)
		m.carry = m.carry[:0]
	}
}

// finish parses a last line without a newline.
func (m *numaMaps) finish() {
	if len(m.carry) > 0 && !m.skip {
		m.line(m.carry)
	}
	m.carry = m.carry[:0]
	m.skip = false
}

// line adds one mapping: "<addr> <policy> [file=<path> | heap | stack]
// [huge] [anon=… dirty=… mapped=… …] N<node>=<pages>… kernelpagesize_kB=<kB>".
// Tokens are taken from the end, where the kernel puts the page counts, so
// a file name with spaces cannot pose as one; a mapping without pages has
// no kernelpagesize_kB and adds nothing.
func (m *numaMaps) line(l []byte) {
	tok, rest := lastToken(l)
	kb, ok := cutUint(tok, "kernelpagesize_kB=")
	if !ok || kb == 0 {
		return
	}
	counts := rest
	for {
		t, r := lastToken(rest)
		if _, _, ok := parseNodeCount(t); !ok {
			break
		}
		rest = r
	}
	if len(rest) == len(counts) {
		return
	}
	cat := numaCategory(rest)
	for len(counts) > len(rest) {
		var t []byte
		t, counts = lastToken(counts)
		node, pages, _ := parseNodeCount(t)
		if node > maxNumaNode || pages > (1<<62)/(kb*1024) {
			continue
		}
		for uint64(len(m.bytes)) <= node {
			m.bytes = append(m.bytes, 0)
			m.cats = append(m.cats, [numaCategories]uint64{})
		}
		v := pages * kb * 1024
		m.bytes[node] += v
		m.cats[node][cat] += v
	}
}

// numaCategory classifies a mapping like numastat -p (huge, heap, stack,
// else private) from what precedes its page counts: the kernel writes the
// keyword "huge", "heap" or "stack" just before the anon=/dirty=/… counters.
func numaCategory(head []byte) int {
	for {
		t, r := lastToken(head)
		switch {
		case len(t) == 0:
			return numaPrivate
		case isNumaCounter(t):
			head = r
			continue
		case bytes.HasPrefix(t, []byte("huge")):
			return numaHuge
		case bytes.HasPrefix(t, []byte("heap")):
			return numaHeap
		case bytes.HasPrefix(t, []byte("stack")): // "stack:<tid>" before Linux 4.5
			return numaStack
		}
		return numaPrivate
	}
}

// isNumaCounter reports a numa_maps page counter token ("anon=12").
func isNumaCounter(t []byte) bool {
	k, _, ok := bytes.Cut(t, []byte("="))
	if !ok {
		return false
	}
	switch string(k) {
	case "anon", "dirty", "mapped", "mapmax", "swapcache", "active", "writeback":
		return true
	}
	return false
}

// parseNodeCount parses "N<node>=<pages>".
func parseNodeCount(t []byte) (node, pages uint64, ok bool) {
	if len(t) < 4 || t[0] != 'N' {
		return 0, 0, false
	}
	k, v, found := bytes.Cut(t[1:], []byte("="))
	if !found {
		return 0, 0, false
	}
	node, err := sysfs.ParseUint(k)
	if err != nil || len(k) > 4 {
		return 0, 0, false
	}
	pages, err = sysfs.ParseUint(v)
	if err != nil || pages > 1<<40 {
		return 0, 0, false
	}
	return node, pages, true
}

// cutUint parses "<prefix><decimal>".
func cutUint(t []byte, prefix string) (uint64, bool) {
	if !bytes.HasPrefix(t, []byte(prefix)) {
		return 0, false
	}
	v, err := sysfs.ParseUint(t[len(prefix):])
	if err != nil || v > 1<<30 {
		return 0, false
	}
	return v, true
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' }

// lastToken splits off the last space-separated token of b.
func lastToken(b []byte) (tok, rest []byte) {
	e := len(b)
	for e > 0 && isSpace(b[e-1]) {
		e--
	}
	s := e
	for s > 0 && !isSpace(b[s-1]) {
		s--
	}
	return b[s:e], b[:s]
}

// firstToken splits off the first space-separated token of b.
func firstToken(b []byte) (tok, rest []byte) {
	s := 0
	for s < len(b) && isSpace(b[s]) {
		s++
	}
	e := s
	for e < len(b) && !isSpace(b[e]) {
		e++
	}
	return b[s:e], b[e:]
}

// ncclEnvAllowed is the allow-list of NCCL variables exported from a
// process environment. Nothing else from an environment ever reaches a
// metric or a log: environments hold secrets (HF_TOKEN, cloud keys).
var ncclEnvAllowed = [...]string{
	"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_CROSS_NIC", "NCCL_IB_DISABLE", "NCCL_NET",
	"NCCL_NET_GDR_LEVEL", "NCCL_IB_GID_INDEX", "NCCL_IB_TC", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE",
	"NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS", "NCCL_ALGO", "NCCL_PROTO",
}

// maxEnvValue bounds an exported NCCL value; longer values are cut.
const maxEnvValue = 1024

// ncclEnv calls fn for each allow-listed NCCL variable of a NUL-separated
// environment block, the first definition of a name winning (as getenv).
// value aliases environ.
func ncclEnv(environ []byte, fn func(name string, value []byte)) {
	var seen [len(ncclEnvAllowed)]bool
	for len(environ) > 0 {
		entry := environ
		if i := bytes.IndexByte(environ, 0); i >= 0 {
			entry, environ = environ[:i], environ[i+1:]
		} else {
			environ = nil
		}
		if len(entry) < 5 || string(entry[:5]) != "NCCL_" {
			continue
		}
		name, value, ok := bytes.Cut(entry, []byte("="))
		if !ok {
			continue
		}
		for i, allowed := range ncclEnvAllowed {
			if !seen[i] && string(name) == allowed {
				seen[i] = true
				if len(value) > maxEnvValue {
					value = value[:maxEnvValue]
				}
				fn(allowed, value)
				break
			}
		}
	}
}
