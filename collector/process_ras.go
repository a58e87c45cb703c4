package collector

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/proc"

	"github.com/fabric-exporter/fabric_exporter/internal/ncclras"
	"github.com/fabric-exporter/fabric_exporter/internal/procwatch"
)

// The process collector is the producer of Env.Processes: the process
// table, for the nccl-ras collector's rank joins, and where to ask the
// serving processes' RAS services.
//
// RAS targets. NCCL's RAS service listens on NCCL_RAS_ADDR (default
// localhost:28028; the environment, then NCCL's configuration files) in
// the network namespace of its process. A process and everything it
// writes is a tenant's: a pod can only speak for itself (docs/hardening.md).
// So a process's RAS is asked only
//
//   - at an address of its own network namespace: loopback, a wildcard
//     (asked at the loopback of the same family), or one of the
//     namespace's own addresses; never an address a process wrote that
//     belongs elsewhere (a host service, a metadata endpoint, another pod);
//   - from inside that namespace: for a pod with its own network, the
//     nccl-ras collector enters the namespace of the process (setns on a
//     locked thread, CAP_SYS_ADMIN) and dials there; never from the
//     exporter's namespace, where a pod's own address could be the same
//     as a host service's;
//   - where the process itself holds a listening socket on that address
//     and port (its socket fds against /proc/PID/net/tcp and tcp6): what
//     the exporter reaches is the process's own RAS service, not a daemon
//     whose port the process named;
//   - at most maxRASTargetsPerNS services per network namespace, taken in
//     turn across namespaces, so that one pod cannot crowd out the others.
//
// Ports several pods share (NCCL binds its RAS port with SO_REUSEPORT:
// two jobs in the node's network both listen on localhost:28028) are
// marked Shared: a query reaches one of them at random.

// RASTarget is one RAS service to ask.
type RASTarget struct {
	Addr string // host:port to dial
	// NetNS is the network namespace the service listens in; 0 for the
	// exporter's own.
	NetNS uint64
	// Enter is a process of that namespace whose /proc/PID/ns/net must be
	// entered to dial Addr; 0 when Addr is dialled from the exporter's own
	// namespace.
	Enter int
	// Shared: listening sockets of more than one container hold this
	// address and port (SO_REUSEPORT): each query reaches one of them.
	Shared bool
}

// maxRASTargetsPerNS bounds the RAS services asked in one network
// namespace (a pod): a job's processes share one (NCCL_RAS_ADDR is the
// same for all of them).
const maxRASTargetsPerNS = 2

// rasRefusal is why a process's RAS address is not asked.
type rasRefusal struct {
	pid          int
	value, cause string
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

// rasTargets returns the RAS services of the table's processes, each once,
// at most maxRASTargetsPerNS per namespace, the namespaces in turn;
// refused gets each address that is not asked and why. owns reports
// whether a process holds a listening socket on an address and port (the
// address as dialled, from inside the process's namespace).
func rasTargets(snap *procwatch.Snapshot, refused func(rasRefusal), owns func(p *procwatch.Process, addr string) (bool, string)) []RASTarget {
	if snap == nil {
		return nil
	}
	type cand struct {
		t          RASTarget
		containers map[string]bool
	}
	var cands []*cand
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
			refused(rasRefusal{p.PID, raw, "not an IP address or localhost with a port"})
			continue
		}
		own := p.NetNS == 0 || p.NetNS == snap.SelfNetNS
		if own && !set {
			continue // the flag's default asks NCCL's default
		}
		ip, isIP := ncclras.AddrIP(addr)
		_, port, _ := net.SplitHostPort(addr)
		switch {
		case !isIP || ip.IsLoopback():
		case ip.IsUnspecified():
			lo := "127.0.0.1"
			if ip.Is6() && !ip.Is4In6() {
				lo = "::1"
			}
			addr = net.JoinHostPort(lo, port)
		case p.NetAddrs == nil:
			refused(rasRefusal{p.PID, raw, "the addresses of its network namespace are unread"})
			continue
		case !slices.Contains(p.NetAddrs, ip.Unmap()):
			refused(rasRefusal{p.PID, raw, "not an address of its own network namespace"})
			continue
		}
		if ok, why := owns(p, addr); !ok {
			refused(rasRefusal{p.PID, raw, why})
			continue
		}
		t := RASTarget{Addr: addr}
		if !own {
			t.NetNS, t.Enter = p.NetNS, p.PID
		}
		cont := ""
		if p.InContainer {
			cont = p.Container.ID
		}
		if i := slices.IndexFunc(cands, func(o *cand) bool { return o.t.Addr == t.Addr && o.t.NetNS == t.NetNS }); i >= 0 {
			cands[i].containers[cont] = true
			continue
		}
		cands = append(cands, &cand{t: t, containers: map[string]bool{cont: true}})
	}
	slices.SortFunc(cands, func(a, b *cand) int {
		if a.t.NetNS != b.t.NetNS {
			if a.t.NetNS < b.t.NetNS {
				return -1
			}
			return 1
		}
		return strings.Compare(a.t.Addr, b.t.Addr)
	})
	// The namespaces in turn: the first of each, then the second of each.
	perNS := map[uint64]int{}
	var rounds [maxRASTargetsPerNS][]RASTarget
	for _, c := range cands {
		k := perNS[c.t.NetNS]
		if k >= maxRASTargetsPerNS {
			refused(rasRefusal{c.t.Enter, c.t.Addr, fmt.Sprintf("more than %d RAS services in one network namespace", maxRASTargetsPerNS)})
			continue
		}
		perNS[c.t.NetNS] = k + 1
		c.t.Shared = len(c.containers) > 1
		rounds[k] = append(rounds[k], c.t)
	}
	var out []RASTarget
	for _, r := range rounds {
		out = append(out, r...)
	}
	return out
}

// ownsListener reports whether process p holds a listening TCP socket on
// addr (an IP or localhost, with a port) of its network namespace: one of
// its socket fds (read with its fds) against the namespace's listeners
// (procfs/PID/net/tcp and tcp6). A wildcard listener serves every address.
func ownsListener(procfs string, p *procwatch.Process, addr string) (bool, string) {
	if !p.FDsRead {
		return false, "its fds are unread: whether it listens there is unknown"
	}
	host, portS, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err.Error()
	}
	port, err := strconv.ParseUint(portS, 10, 16)
	if err != nil {
		return false, "bad port"
	}
	var want []netip.Addr
	if host == "localhost" {
		want = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}
	} else if a, err := netip.ParseAddr(host); err == nil {
		want = []netip.Addr{a.Unmap()}
	} else {
		return false, "not an IP address"
	}
	mine := map[uint64]bool{}
	for _, s := range p.Sockets {
		mine[s] = true
	}
	dir := procfs + "/" + strconv.Itoa(p.PID) + "/net/"
	read := false
	for _, f := range [...]string{"tcp", "tcp6"} {
		b, err := readBounded(dir+f, proc.MaxNetTCP)
		if err != nil {
			continue
		}
		read = true
		for _, l := range proc.ParseTCPListeners(b) {
			if l.Addr.Port() != uint16(port) || !mine[l.Inode] {
				continue
			}
			la := l.Addr.Addr().Unmap()
			if la.IsUnspecified() || slices.Contains(want, la) {
				return true, ""
			}
		}
	}
	if !read {
		return false, "its namespace's TCP sockets are unreadable (" + dir + "tcp)"
	}
	return false, "the process holds no listening socket there"
}

// readBounded reads a file of at most max bytes.
func readBounded(path string, max int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, max)
	}
	return b, nil
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
	procfs := c.w.Procfs()
	var unseen []int
	out := rasTargets(c.w.Snapshot(), func(r rasRefusal) {
		c.env.Once.Debug("ras-addr:"+r.cause, "msg", "a process's NCCL_RAS_ADDR is not asked", "pid", r.pid, "value", r.value, "why", r.cause)
	}, func(p *procwatch.Process, addr string) (bool, string) {
		ok, why := ownsListener(procfs, p, addr)
		if !ok {
			unseen = append(unseen, p.PID)
		}
		return ok, why
	})
	c.nudgeListeners(unseen)
	return out
}

// listenerRecheck is how often the fds of a process with RAS on but no
// RAS listener seen are re-read: NCCL opens its RAS port at its first
// communicator's init, after the process was first read, and the fds are
// otherwise re-read only every --collector.process.numa-maps-interval.
const listenerRecheck = 5 * time.Second

// nudgeListeners asks for the fds of these processes to be re-read, each
// at most every listenerRecheck.
func (c *processCollector) nudgeListeners(pids []int) {
	if len(pids) == 0 {
		return
	}
	now := time.Now()
	c.listenMu.Lock()
	if c.listenAsked == nil {
		c.listenAsked = map[int]time.Time{}
	}
	var due []int
	for _, pid := range pids {
		if t, ok := c.listenAsked[pid]; !ok || now.Sub(t) >= listenerRecheck {
			c.listenAsked[pid] = now
			due = append(due, pid)
		}
	}
	for pid, t := range c.listenAsked {
		if now.Sub(t) > 10*listenerRecheck {
			delete(c.listenAsked, pid) // gone, or listening since
		}
	}
	c.listenMu.Unlock()
	c.Nudge(due...)
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
