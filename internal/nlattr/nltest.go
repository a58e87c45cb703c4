// Package nlattr builds netlink attributes byte by byte as the kernel's
// nla_put lays them out (include/uapi/linux/netlink.h), for the tests of
// the netlink clients (internal/devlinknl, internal/rdmanl): a struct nlattr
// {__u16 nla_len; __u16 nla_type} in host byte order, the payload, padding
// to 4 bytes. A nest opened with nla_nest_start carries NLA_F_NESTED
// (1<<15, set by kernels since 5.2); one opened with nla_nest_start_noflag
// does not.
package nlattr

import "encoding/binary"

// FNested is NLA_F_NESTED.
const FNested = 1 << 15

// Attr is one attribute with its payload, padded.
func Attr(typ uint16, payload ...byte) []byte {
	b := make([]byte, 4, 4+len(payload)+3)
	binary.NativeEndian.PutUint16(b[0:], uint16(4+len(payload)))
	binary.NativeEndian.PutUint16(b[2:], typ)
	b = append(b, payload...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// U8 is nla_put_u8.
func U8(typ uint16, v uint8) []byte { return Attr(typ, v) }

// U32 is nla_put_u32.
func U32(typ uint16, v uint32) []byte { return Attr(typ, binary.NativeEndian.AppendUint32(nil, v)...) }

// U64 is nla_put_u64_64bit without its pad attribute (which an
// architecture with efficient unaligned access never adds).
func U64(typ uint16, v uint64) []byte { return Attr(typ, binary.NativeEndian.AppendUint64(nil, v)...) }

// Str is nla_put_string: the string and its NUL.
func Str(typ uint16, s string) []byte { return Attr(typ, append([]byte(s), 0)...) }

// Cat concatenates attributes.
func Cat(parts ...[]byte) []byte {
	var b []byte
	for _, x := range parts {
		b = append(b, x...)
	}
	return b
}

// Nest is a nest opened with nla_nest_start (NLA_F_NESTED set).
func Nest(typ uint16, parts ...[]byte) []byte { return Attr(typ|FNested, Cat(parts...)...) }

// NestNoFlag is a nest opened with nla_nest_start_noflag.
func NestNoFlag(typ uint16, parts ...[]byte) []byte { return Attr(typ, Cat(parts...)...) }
