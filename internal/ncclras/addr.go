package ncclras

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// An NCCL_RAS_ADDR value as NCCL reads it (rasClientInitSocket in
// src/ras/client_support.cc passes it to ncclSocketGetAddrFromString in
// src/misc/socket.cc):
//
//   - "[IPv6]:port" or "[IPv6%ifname]:port" when it starts with '[';
//   - otherwise "host:port" cut by parseStringList at the first ':', host an
//     IPv4 address or a name resolved with getaddrinfo (its first answer);
//   - the port is C's atoi of the rest: a value without one (a bare port or
//     a bare host) makes NCCL listen on a port nobody asked for, and a
//     bare IPv6 address without brackets is cut at its first ':'.
//
// ParseAddr accepts the forms that name one listener unambiguously: an IP
// literal (IPv4, or IPv6 in brackets with an optional zone) or
// "localhost", and a port from 1 to 65535 written in decimal. It returns
// the address in the form Query dials (net.JoinHostPort; IP literals in
// their canonical text, so equal listeners give equal strings). A wildcard
// address (0.0.0.0, [::]) means every local address: it is rewritten to
// the loopback of its family. Host names other than localhost are refused:
// resolving them would use the exporter's resolver, not the process's.
func ParseAddr(v string) (string, error) {
	v = strings.TrimSpace(v)
	var host, port string
	if strings.HasPrefix(v, "[") {
		end := strings.IndexByte(v, ']')
		if end < 0 || !strings.HasPrefix(v[end+1:], ":") {
			return "", errors.New("want [IPv6]:port")
		}
		host, port = v[1:end], v[end+2:]
		if !strings.Contains(host, ":") {
			return "", errors.New("an address in brackets must be IPv6")
		}
	} else {
		var ok bool
		if host, port, ok = strings.Cut(v, ":"); !ok {
			return "", errors.New("want host:port")
		}
		if strings.Contains(port, ":") {
			return "", errors.New("an IPv6 address needs brackets: [addr]:port")
		}
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return "", errors.New("the port must be 1 to 65535")
	}
	if strings.EqualFold(host, "localhost") {
		return net.JoinHostPort("localhost", port), nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return "", errors.New("the host must be an IP address or localhost")
	}
	if ip.Is4In6() && ip.Zone() == "" {
		ip = ip.Unmap()
	}
	if ip.IsUnspecified() {
		if ip.Is4() {
			ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
		} else {
			ip = netip.IPv6Loopback()
		}
	}
	return netip.AddrPortFrom(ip, uint16(p)).String(), nil
}

// AddrIP returns the IP address of an address ParseAddr returned, without
// its zone; ok is false for localhost.
func AddrIP(addr string) (ip netip.Addr, ok bool) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().WithZone(""), true
}
