package proc

// maxSocketIfEntries is how many NCCL_SOCKET_IFNAME entries NCCL reads
// (MAX_IFS).
const maxSocketIfEntries = 16

// ParseSocketIfname parses an NCCL_SOCKET_IFNAME value as NCCL's
// ncclFindInterfaces reads it (src/misc/socket.cc): the same list syntax
// and matcher as NCCL_IB_HCA ('^' excludes, then '=' asks for exact names,
// prefixes otherwise; ncclOsFindInterfaces, parseStringList and
// matchIfList with no port), at most 16 entries. ok is false when NCCL
// ignores the value and picks the interfaces itself: unset, or at most one
// byte long (NCCL requires strlen > 1).
func ParseSocketIfname(v string, set bool) (IBHCA, bool) {
	if !set || len(v) <= 1 {
		return IBHCA{}, false
	}
	return parseIfList(v, maxSocketIfEntries), true
}

// SelectsInterface reports whether NCCL would use the network interface
// name under this NCCL_SOCKET_IFNAME (by name: NCCL also skips interfaces
// that are not running or have no address).
func (h IBHCA) SelectsInterface(name string) bool { return h.Selects(name, -1) }
