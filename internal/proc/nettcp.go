package proc

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"strconv"
)

// TCP sockets of a network namespace (/proc/PID/net/tcp and tcp6: a line
// per socket, "sl local_address rem_address st ... inode"; addresses in
// hex as the kernel holds them, each 32-bit word in host byte order, the
// port in network order; st 0A is LISTEN).

// MaxNetTCP bounds a /proc/PID/net/tcp file read (about 100,000 sockets).
const MaxNetTCP = 16 << 20

// Listener is a listening TCP socket.
type Listener struct {
	Addr  netip.AddrPort
	Inode uint64
}

// ParseTCPListeners returns the listening sockets of a /proc/net/tcp or
// tcp6 file; lines it cannot read are skipped.
func ParseTCPListeners(b []byte) []Listener {
	var out []Listener
	first := true
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if first {
			first = false // the header
			continue
		}
		f := bytes.Fields(line)
		if len(f) < 10 || string(f[3]) != "0A" {
			continue
		}
		ap, ok := parseHexAddrPort(f[1])
		if !ok {
			continue
		}
		ino, err := strconv.ParseUint(string(f[9]), 10, 64)
		if err != nil || ino == 0 {
			continue
		}
		out = append(out, Listener{Addr: ap, Inode: ino})
	}
	return out
}

// parseHexAddrPort reads "0100007F:6D7C" (IPv4) or the 32-digit IPv6 form.
func parseHexAddrPort(s []byte) (netip.AddrPort, bool) {
	h, p, ok := bytes.Cut(s, []byte(":"))
	if !ok || len(p) != 4 {
		return netip.AddrPort{}, false
	}
	port, err := strconv.ParseUint(string(p), 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	raw := make([]byte, len(h)/2)
	if len(h)%2 != 0 || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, false
	}
	if _, err := hex.Decode(raw, h); err != nil {
		return netip.AddrPort{}, false
	}
	// Each 32-bit word was printed as a host-order integer: on the
	// little-endian machines this runs on, its bytes come reversed.
	for i := 0; i < len(raw); i += 4 {
		binary.LittleEndian.PutUint32(raw[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	a, ok := netip.AddrFromSlice(raw)
	if !ok {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(a, uint16(port)), true
}
