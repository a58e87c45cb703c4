package proc

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// A process's network namespace and its addresses, read from /proc/PID
// without entering the namespace:
//
//   - /proc/PID/ns/net is a link whose target names the namespace,
//     "net:[4026531992]" (the inode of the namespace's nsfs file, the same
//     for every process of one namespace): ParseNSLink;
//   - /proc/PID/net/ shows the files of the process's network namespace
//     (since Linux 2.6.25, /proc/net is a link to self/net); fib_trie lists
//     the IPv4 routing tables, where each local address is a leaf followed
//     by a "/32 host LOCAL" line (net/ipv4/fib_trie.c, fib_trie_seq_show):
//     ParseFibTrieLocal; if_inet6 lists the IPv6 addresses, one per line,
//     32 hex digits first (net/ipv6/addrconf.c, if6_seq_show):
//     ParseIfInet6.
//
// Reading /proc/PID/ns/net and /proc/PID/net needs what reading the
// process's other files needs (ptrace read access: root or
// CAP_SYS_PTRACE for another user's process).

// MaxNetFile bounds a read of fib_trie or if_inet6: a node's tables and
// addresses fit in a few KiB; a namespace with a full Internet table
// (hundreds of thousands of routes) is not a serving pod's.
const MaxNetFile = 256 << 10

// ParseNSLink parses the target of a /proc/PID/ns/<kind> link,
// "<kind>:[<inode>]", and returns the inode.
func ParseNSLink(kind, target string) (uint64, error) {
	rest, ok := bytes.CutPrefix([]byte(target), []byte(kind+":["))
	if !ok || len(rest) < 2 || rest[len(rest)-1] != ']' {
		return 0, fmt.Errorf("%w: namespace link %q", sysfs.ErrGarbage, target)
	}
	n, err := strconv.ParseUint(string(rest[:len(rest)-1]), 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%w: namespace link %q", sysfs.ErrGarbage, target)
	}
	return n, nil
}

// ParseFibTrieLocal returns the local IPv4 addresses of a fib_trie file
// (each once, in the order first seen): the leaves followed by a
// "/32 host LOCAL" line. A file whose leaves do not parse is garbage.
func ParseFibTrieLocal(b []byte) ([]netip.Addr, error) {
	var out []netip.Addr
	var leaf netip.Addr
	var err error
	eachLine(b, func(line []byte) {
		if err != nil {
			return
		}
		t := bytes.TrimLeft(line, " |+-")
		if i := bytes.Index(line, []byte("|-- ")); i >= 0 {
			a, e := netip.ParseAddr(string(bytes.TrimSpace(line[i+4:])))
			if e != nil || !a.Is4() {
				err = fmt.Errorf("%w: fib_trie leaf %q", sysfs.ErrGarbage, line)
				return
			}
			leaf = a
			return
		}
		if leaf.IsValid() && bytes.HasPrefix(t, []byte("/32 host LOCAL")) {
			for _, o := range out {
				if o == leaf {
					return
				}
			}
			out = append(out, leaf)
		}
	})
	return out, err
}

// ParseIfInet6 returns the addresses of an if_inet6 file (each once).
func ParseIfInet6(b []byte) ([]netip.Addr, error) {
	var out []netip.Addr
	var err error
	eachLine(b, func(line []byte) {
		f := bytes.Fields(line)
		if err != nil || len(f) == 0 {
			return
		}
		var a [16]byte
		if len(f[0]) != 32 {
			err = fmt.Errorf("%w: if_inet6 line %q", sysfs.ErrGarbage, line)
			return
		}
		if _, e := hex.Decode(a[:], f[0]); e != nil {
			err = fmt.Errorf("%w: if_inet6 line %q", sysfs.ErrGarbage, line)
			return
		}
		addr := netip.AddrFrom16(a)
		for _, o := range out {
			if o == addr {
				return
			}
		}
		out = append(out, addr)
	})
	return out, err
}
