package collector

import (
	"slices"
	"strings"

	"github.com/fabric-exporter/fabric_exporter/internal/ncclras"
)

// RAS addresses: the process collector is the producer of Env.Processes.
// After each scrape it publishes the distinct NCCL_RAS_ADDR values of the
// processes it reported (read once per process with the rest of the
// environment, process_env.go), for the nccl-ras collector to query.

// rasAddrOf returns a process's RAS client address from its allow-listed
// NCCL variables: "" when NCCL_RAS_ADDR is unset (the process listens on
// NCCL's default, which the flag's default already queries), invalid
// (ncclras.ParseAddr), or NCCL_RAS_ENABLE turns RAS off. invalid is the
// value that could not be used, for a log.
func rasAddrOf(vars []envVar) (addr, invalid string) {
	var raw string
	enabled := true
	for _, e := range vars {
		switch e.name {
		case "NCCL_RAS_ADDR":
			raw = e.value
		case "NCCL_RAS_ENABLE":
			enabled = rasEnabled(e.value)
		}
	}
	if raw == "" || !enabled {
		return "", ""
	}
	a, err := ncclras.ParseAddr(raw)
	if err != nil {
		return "", raw
	}
	return a, ""
}

// rasEnabled reports whether NCCL runs RAS under an NCCL_RAS_ENABLE value.
// NCCL starts it only when the parameter is 1 (ncclParamRasEnable() == 1
// in bootstrap.cc), read by ncclLoadParam as strtoll(value, NULL, 0): the
// longest number at the start (after blanks and a sign; 0x hex, 0 octal),
// 0 when there is none, the default 1 when it overflows (ERANGE) or the
// value is empty. So "0", "false" and "2" turn RAS off; "1", "01" and
// "0x1" leave it on.
func rasEnabled(v string) bool {
	if v == "" {
		return true
	}
	s := strings.TrimLeft(v, " \t\n\v\f\r")
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	base := uint64(10)
	switch {
	case len(s) >= 3 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && hexDigit(s[2]) >= 0:
		base, s = 16, s[2:]
	case s != "" && s[0] == '0':
		base = 8
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		d := hexDigit(s[i])
		if d < 0 || uint64(d) >= base {
			break
		}
		if n > (1<<64-1-uint64(d))/base {
			return true // ERANGE: the default
		}
		if n = n*base + uint64(d); n > 1<<63 {
			return true
		}
	}
	if n == 1<<63 && !neg {
		return true // LLONG_MAX + 1: ERANGE
	}
	return n == 1 && !neg
}

// hexDigit returns the value of a hexadecimal digit, -1 for another byte.
func hexDigit(b byte) int {
	switch {
	case b >= '0' && b <= '9':
		return int(b - '0')
	case b >= 'a' && b <= 'f':
		return int(b-'a') + 10
	case b >= 'A' && b <= 'F':
		return int(b-'A') + 10
	}
	return -1
}

// publishRAS stores the distinct RAS addresses of the processes reported
// in this scrape.
func (c *processCollector) publishRAS() {
	var addrs []string
	for _, st := range c.procs {
		if st.gen == c.gen && st.rasAddr != "" && !slices.Contains(addrs, st.rasAddr) {
			addrs = append(addrs, st.rasAddr)
		}
	}
	slices.Sort(addrs)
	c.rasAddrs.Store(&addrs)
}

// RASAddresses implements ProcessInventory: a copy of the last scrape's
// addresses.
func (c *processCollector) RASAddresses() []string {
	p := c.rasAddrs.Load()
	if p == nil {
		return nil
	}
	return slices.Clone(*p)
}
