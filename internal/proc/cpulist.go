package proc

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// CPUSet is a set of CPU (or NUMA node) numbers as a bitmap.
type CPUSet []uint64

// MaxCPUs bounds the CPU numbers a cpulist may name (the kernel's NR_CPUS
// is at most 8192).
const MaxCPUs = 8192

// ParseCPUList parses a kernel cpulist ("0-47,96-143", "3", "" for none),
// the format of node*/cpulist, local_cpulist, Cpus_allowed_list and
// Mems_allowed_list. Anything else is sysfs.ErrGarbage.
func ParseCPUList(b []byte) (CPUSet, error) {
	b = bytes.TrimSpace(b)
	var s CPUSet
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
			s = s.With(c)
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
	if n >= MaxCPUs {
		return 0, fmt.Errorf("%w: cpu %d beyond %d", sysfs.ErrGarbage, n, MaxCPUs)
	}
	return n, nil
}

// With returns s with c added (it may grow s).
func (s CPUSet) With(c int) CPUSet {
	for len(s) <= c/64 {
		s = append(s, 0)
	}
	s[c/64] |= 1 << (c % 64)
	return s
}

// Has reports whether c is in s.
func (s CPUSet) Has(c int) bool {
	return c/64 < len(s) && s[c/64]&(1<<(c%64)) != 0
}

// Intersects reports whether s and t share a member.
func (s CPUSet) Intersects(t CPUSet) bool {
	for i := 0; i < len(s) && i < len(t); i++ {
		if s[i]&t[i] != 0 {
			return true
		}
	}
	return false
}

// String formats the set as a canonical cpulist ("0-2,5").
func (s CPUSet) String() string {
	var b strings.Builder
	n := len(s) * 64
	for c := 0; c < n; {
		if !s.Has(c) {
			c++
			continue
		}
		lo := c
		for c+1 < n && s.Has(c+1) {
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

// Expand formats the set as every member, comma-separated ("0,1,2,5").
func (s CPUSet) Expand() string {
	var b strings.Builder
	for i := 0; i < len(s)*64; i++ {
		if s.Has(i) {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(i))
		}
	}
	return b.String()
}
