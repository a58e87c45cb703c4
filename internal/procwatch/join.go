package procwatch

import (
	"net/netip"
)

// Joining an NCCL rank to its process. NCCL's RAS service reports each
// rank's process by the PID the process knows itself by (getpid() in its
// own PID namespace: 1, say, in a container) and by the RAS address of its
// node. The watcher knows each selected process's PID in the namespace of
// the procfs, its own PID (the innermost of NSpid) and the addresses of its
// network namespace. A rank is joined to the one selected process whose
// own PID is the rank's and whose network namespace has the rank's host
// address: unique, or none — never a guess. Two containers of one node
// that share the node's network (hostNetwork pods) and whose rank
// processes have the same own PID are told apart by nothing RAS says:
// such a rank stays unjoined ("ambiguous"); GPU indices cannot settle it,
// since NCCL's cuda_dev and nvml_dev count the GPUs the container sees.

// Join results.
const (
	// JoinedByPID: the process lives in the PID namespace of the procfs,
	// so RAS's PID is its PID there.
	JoinedByPID = "pid"
	// JoinedByNSpid: the process lives in a nested PID namespace (a
	// container); RAS's PID is the innermost of its NSpid line.
	JoinedByNSpid = "nspid"

	// Why a rank of this node is not joined.
	UnjoinedNoProcess = "no_process"       // no selected process with that own PID on that node
	UnjoinedAmbiguous = "ambiguous"        // more than one
	UnjoinedUnread    = "addresses_unread" // a candidate's network namespace could not be read
	UnjoinedBadHost   = "unknown_host"     // RAS does not name the rank's host
	// Only the RAS service of another network namespace reports it: a pod
	// speaks only for the ranks of its own namespace.
	UnjoinedOtherNS = "other_namespace"
)

// JoinRank returns the process of the rank RAS reports at host (its RAS
// address) with pid (its own PID), and how it was joined; nil and the
// reason when there is none.
//
// netns is the network namespace of the RAS service that reported the rank
// (0: the exporter's own): only its processes are candidates, so that one
// pod's answer cannot name another pod's process.
func (s *Snapshot) JoinRank(host string, pid int, netns uint64) (p *Process, by, reason string) {
	addr, err := netip.ParseAddr(host)
	if err != nil || pid <= 0 {
		return nil, "", UnjoinedBadHost
	}
	addr = addr.Unmap().WithZone("")
	var found *Process
	n, unread := 0, 0
	for i := range s.Procs {
		c := &s.Procs[i]
		own := c.OwnPID
		if c.NSLevels == 0 {
			own = c.PID // a kernel without NSpid (before 4.1): the procfs's namespace
		}
		if own != pid || !s.inNS(c, netns) {
			continue
		}
		if c.NetAddrs == nil {
			unread++
			continue
		}
		if !hasAddr(c.NetAddrs, addr) {
			continue
		}
		n++
		found = c
	}
	switch {
	case n == 1 && unread == 0:
		if found.NSLevels > 1 {
			return found, JoinedByNSpid, ""
		}
		return found, JoinedByPID, ""
	case n > 1:
		return nil, "", UnjoinedAmbiguous
	case unread > 0:
		return nil, "", UnjoinedUnread
	}
	return nil, "", UnjoinedNoProcess
}

// Process returns the process with this PID and start time, nil when it
// is not in the snapshot (exited, PID reused, no longer selected).
func (s *Snapshot) Process(pid int, start uint64) *Process {
	for i := range s.Procs {
		if p := &s.Procs[i]; p.PID == pid && (start == 0 || p.Start == start) {
			return p
		}
	}
	return nil
}

// NodeAddresses returns the local addresses of every network namespace a
// selected process lives in: with the exporter's own, the addresses of
// this node's RAS services.
func (s *Snapshot) NodeAddresses() []netip.Addr {
	var out []netip.Addr
	seen := map[uint64]bool{}
	for i := range s.Procs {
		p := &s.Procs[i]
		if p.NetNS == 0 || seen[p.NetNS] {
			continue
		}
		seen[p.NetNS] = true
		for _, a := range p.NetAddrs {
			if !hasAddr(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

func hasAddr(list []netip.Addr, a netip.Addr) bool {
	for _, b := range list {
		if b.Unmap() == a {
			return true
		}
	}
	return false
}

// inNS reports whether a process lives in network namespace ns (0: the
// exporter's own).
func (s *Snapshot) inNS(p *Process, ns uint64) bool {
	if ns == 0 {
		ns = s.SelfNetNS
	}
	return p.NetNS != 0 && p.NetNS == ns
}

// NSHasAddr reports whether a selected process of network namespace ns (0:
// the exporter's own) lives where host (an IP address) is local: the
// rank RAS reports at host may be that namespace's.
func (s *Snapshot) NSHasAddr(ns uint64, host string) bool {
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	addr = addr.Unmap().WithZone("")
	for i := range s.Procs {
		if c := &s.Procs[i]; s.inNS(c, ns) && hasAddr(c.NetAddrs, addr) {
			return true
		}
	}
	return false
}

// OtherNSAddr reports whether host (an IP address) is an address of a
// selected process's network namespace other than ns (0: the exporter's
// own) and not of ns itself: a rank there is another namespace's to
// report. False for an address no known namespace has, or one ns shares
// (loopback is every namespace's).
func (s *Snapshot) OtherNSAddr(ns uint64, host string) bool {
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	addr = addr.Unmap().WithZone("")
	if addr.IsLoopback() {
		return false // every namespace has its own
	}
	other := false
	for i := range s.Procs {
		c := &s.Procs[i]
		if c.NetNS == 0 || !hasAddr(c.NetAddrs, addr) {
			continue
		}
		if s.inNS(c, ns) {
			return false
		}
		other = true
	}
	return other
}
