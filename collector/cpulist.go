package collector

import (
	"bytes"
	"fmt"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
	"strconv"
	"strings"
)

// cpuSet is a set of CPU numbers as a bitmap.
type cpuSet []uint64

// maxCPUs bounds the CPU numbers a cpulist may name (the kernel's
// NR_CPUS is at most 8192).
const maxCPUs = 8192

// parseCPUList parses a kernel cpulist ("0-47,96-143", "3", "" for none),
// the format of node*/cpulist, local_cpulist and Cpus_allowed_list.
func parseCPUList(b []byte) (cpuSet, error) {
	b = bytes.TrimSpace(b)
	var s cpuSet
	if len(b) == 0 {
		return s, nil
	}
	for len(b) > 0 {
		var part []byte
		if i := bytes.IndexByte(b, ','); i >= 0 {
			part, b = b[:i], b[i+1:]
			if len(b) == 0 {
				return nil, fmt.Errorf("%w: cpulist ends with a comma", sysfs.ErrGarbage)
			}
		} else {
			part, b = b, nil
		}
		lo, hi, err := parseCPURange(part)
		if err != nil {
			return nil, err
		}
		for c := lo; c <= hi; c++ {
			s = s.with(c)
		}
	}
	return s, nil
}

func parseCPURange(p []byte) (int, int, error) {
	a, z, isRange := bytes.Cut(p, []byte("-"))
	lo, err := parseCPU(a)
	if err != nil {
		return 0, 0, err
	}
	hi := lo
	if isRange {
		if hi, err = parseCPU(z); err != nil {
			return 0, 0, err
		}
	}
	if hi < lo {
		return 0, 0, fmt.Errorf("%w: cpu range %q", sysfs.ErrGarbage, sysfs.Truncate(p, 32))
	}
	return lo, hi, nil
}

func parseCPU(b []byte) (int, error) {
	if len(b) == 0 || len(b) > 5 {
		return 0, fmt.Errorf("%w: cpu %q", sysfs.ErrGarbage, sysfs.Truncate(b, 32))
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: cpu %q", sysfs.ErrGarbage, sysfs.Truncate(b, 32))
		}
		n = n*10 + int(c-'0')
	}
	if n >= maxCPUs {
		return 0, fmt.Errorf("%w: cpu %d beyond %d", sysfs.ErrGarbage, n, maxCPUs)
	}
	return n, nil
}

func (s cpuSet) with(c int) cpuSet {
	for len(s) <= c/64 {
		s = append(s, 0)
	}
	s[c/64] |= 1 << (c % 64)
	return s
}

func (s cpuSet) has(c int) bool {
	return c/64 < len(s) && s[c/64]&(1<<(c%64)) != 0
}

// intersects reports whether s and t share a CPU.
func (s cpuSet) intersects(t cpuSet) bool {
	for i := 0; i < len(s) && i < len(t); i++ {
		if s[i]&t[i] != 0 {
			return true
		}
	}
	return false
}

// String formats the set as a canonical cpulist.
func (s cpuSet) String() string {
	var b strings.Builder
	n := len(s) * 64
	for c := 0; c < n; {
		if !s.has(c) {
			c++
			continue
		}
		lo := c
		for c+1 < n && s.has(c+1) {
			c++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(lo))
		if c > lo {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(c))
		}
		c++
	}
	return b.String()
}
