package collector

import (
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/fabric-exporter/fabric_exporter/internal/ncclras"
	"github.com/fabric-exporter/fabric_exporter/internal/procwatch"
)

// The process collector is the producer of Env.Processes: the process
// table, for the nccl-ras collector's rank joins, and where to ask the
// serving processes' RAS services.
//
// RAS targets. NCCL's RAS service listens on NCCL_RAS_ADDR (default
// localhost:28028) in the network namespace of its process. For each
// selected process whose RAS is on (NCCL_RAS_ENABLE):
//
//   - in the exporter's own network namespace: its NCCL_RAS_ADDR when set
//     (unset: the flag's default already asks localhost:28028);
//   - in another namespace (a pod with its own network):
//   - a wildcard address (0.0.0.0, [::]) listens on every address of
//     that namespace: dialled from the exporter's namespace at the
//     namespace's first non-loopback address (the pod IP), no privilege;
//   - a specific address: dialled as it is from the exporter's namespace
//     (the pod IP is routed from the node);
//   - a loopback address or localhost (NCCL's default): reachable only
//     from inside that namespace; the nccl-ras collector dials it from
//     there (entering the namespace of the target's process on a locked
//     thread, CAP_SYS_ADMIN), or reports it unreachable.

// RASTarget is one RAS service to ask.
type RASTarget struct {
	Addr string // host:port to dial
	// NetNS is the network namespace the service listens in; 0 for the
	// exporter's own.
	NetNS uint64
	// Enter is a process of that namespace whose /proc/PID/ns/net must be
	// entered to dial Addr (a loopback address of another namespace); 0
	// when Addr is dialled from the exporter's own namespace.
	Enter int
}

// rasEnv returns a process's RAS client address as NCCL reads it: raw is
// NCCL_RAS_ADDR (ncclras.DefaultAddr when unset, set false), ok false when
// NCCL_RAS_ENABLE turns RAS off.
func rasEnv(p *procwatch.Process) (raw string, set, ok bool) {
	if v, has := p.Getenv("NCCL_RAS_ENABLE"); has && !rasEnabled(v) {
		return "", false, false
	}
	raw, set = p.Getenv("NCCL_RAS_ADDR")
	if !set || raw == "" {
		return ncclras.DefaultAddr, false, true
	}
	return raw, true, true
}

// wildcardAddr reports whether an NCCL_RAS_ADDR value binds every address
// of its namespace.
func wildcardAddr(raw string) bool {
	host, _, err := net.SplitHostPort(strings.TrimSpace(raw))
	if err != nil {
		return false
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsUnspecified()
}

// rasTargets returns the RAS services of the table's processes, each once,
// sorted; invalid is called with an address that cannot be used.
func rasTargets(snap *procwatch.Snapshot, invalid func(pid int, value string)) []RASTarget {
	var out []RASTarget
	if snap == nil {
		return nil
	}
	for i := range snap.Procs {
		p := &snap.Procs[i]
		if !p.EnvRead {
			continue
		}
		raw, set, on := rasEnv(p)
		if !on {
			continue
		}
		addr, err := ncclras.ParseAddr(raw)
		if err != nil {
			invalid(p.PID, raw)
			continue
		}
		t := RASTarget{Addr: addr}
		if p.NetNS == 0 || p.NetNS == snap.SelfNetNS {
			if !set {
				continue // the flag's default asks NCCL's default
			}
		} else {
			t.NetNS = p.NetNS
			ip, isIP := ncclras.AddrIP(addr)
			switch {
			case wildcardAddr(raw):
				a, ok := podAddr(p.NetAddrs)
				if !ok {
					continue
				}
				_, port, _ := net.SplitHostPort(addr)
				t.Addr = net.JoinHostPort(a.String(), port)
			case !isIP || ip.IsLoopback():
				t.Enter = p.PID
			}
		}
		if !slices.ContainsFunc(out, func(o RASTarget) bool { return o.Addr == t.Addr && o.NetNS == t.NetNS }) {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b RASTarget) int {
		if a.NetNS != b.NetNS {
			if a.NetNS < b.NetNS {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Addr, b.Addr)
	})
	return out
}

// podAddr picks the address a wildcard listener of another namespace is
// dialled at: its first global IPv4 address, else its first global IPv6.
func podAddr(addrs []netip.Addr) (netip.Addr, bool) {
	for _, want4 := range [2]bool{true, false} {
		for _, a := range addrs {
			if a.Is4() == want4 && a.IsGlobalUnicast() {
				return a, true
			}
		}
	}
	return netip.Addr{}, false
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

// RASTargets implements ProcessInventory.
func (c *processCollector) RASTargets() []RASTarget {
	return rasTargets(c.w.Snapshot(), func(pid int, v string) {
		c.env.Once.Debug("ras-addr", "msg", "NCCL_RAS_ADDR is not an IP address or localhost with a port; not queried", "pid", pid, "value", v)
	})
}

// Table implements ProcessInventory: the last process table.
func (c *processCollector) Table() *procwatch.Snapshot { return c.w.Snapshot() }

// Nudge implements ProcessInventory: the evidence of these processes is
// re-read now, off the scrape path.
func (c *processCollector) Nudge(pids ...int) {
	if len(pids) == 0 {
		return
	}
	c.w.Nudge(pids...)
	c.poller.Wake()
}
