package proc

import (
	"bytes"

	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// NumaMaps sums /proc/PID/numa_maps per NUMA node the way `numastat -p`
// does, but with each mapping's own page size (kernelpagesize_kB, so 1 GiB
// huge pages count right where numastat assumes the default huge page
// size). Lines are fed as they are read (Write, then Finish); a line longer
// than MaxNumaMapsLine is skipped. The zero value is ready; Reset reuses
// the slices.
type NumaMaps struct {
	Bytes []uint64                 // per node
	Cats  [][NumaCategories]uint64 // per node: huge, heap, stack, private (numastat -p's rows)
	carry []byte
	skip  bool // inside an overlong line
}

// numastat -p's categories, in its order (the index into NumaMaps.Cats).
const (
	NumaHuge = iota
	NumaHeap
	NumaStack
	NumaPrivate
	NumaCategories
)

// MaxNumaNode bounds node numbers (MAX_NUMNODES is at most 1024).
const MaxNumaNode = 1023

// MaxNumaMapsLine bounds one numa_maps line (a path is at most 4096 bytes).
const MaxNumaMapsLine = 8192

// Reset empties the sums for another file.
func (m *NumaMaps) Reset() {
	m.Bytes = m.Bytes[:0]
	m.Cats = m.Cats[:0]
	m.carry = m.carry[:0]
	m.skip = false
}

// Write parses the complete lines of chunk and keeps the rest for the next.
func (m *NumaMaps) Write(chunk []byte) {
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			if !m.skip {
				if len(m.carry)+len(chunk) > MaxNumaMapsLine {
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

// Finish parses a last line without a newline.
func (m *NumaMaps) Finish() {
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
func (m *NumaMaps) line(l []byte) {
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
		if node > MaxNumaNode || pages > (1<<62)/(kb*1024) {
			continue
		}
		for uint64(len(m.Bytes)) <= node {
			m.Bytes = append(m.Bytes, 0)
			m.Cats = append(m.Cats, [NumaCategories]uint64{})
		}
		v := pages * kb * 1024
		m.Bytes[node] += v
		m.Cats[node][cat] += v
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
			return NumaPrivate
		case isNumaCounter(t):
			head = r
			continue
		case bytes.HasPrefix(t, []byte("huge")):
			return NumaHuge
		case bytes.HasPrefix(t, []byte("heap")):
			return NumaHeap
		case bytes.HasPrefix(t, []byte("stack")): // "stack:<tid>" before Linux 4.5
			return NumaStack
		}
		return NumaPrivate
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
