package nlattr

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/mdlayher/netlink"
)

// What the builders lay out is what a netlink decoder reads back.
func TestRoundTrip(t *testing.T) {
	b := Cat(U8(1, 7), U32(2, 0xdeadbeef), U64(3, 1<<40), Str(4, "mlx5_0"), Nest(5, U32(1, 9)), NestNoFlag(6, Str(1, "fw")))
	d, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		t.Fatal(err)
	}
	var got []any
	for d.Next() {
		switch d.Type() {
		case 1:
			got = append(got, d.Uint8())
		case 2:
			got = append(got, d.Uint32())
		case 3:
			got = append(got, d.Uint64())
		case 4:
			got = append(got, d.String())
		case 5, 6:
			d.Nested(func(n *netlink.AttributeDecoder) error {
				for n.Next() {
					if n.Type() == 1 && d.Type() == 5 {
						got = append(got, n.Uint32())
					} else {
						got = append(got, n.String())
					}
				}
				return nil
			})
		}
	}
	if err := d.Err(); err != nil {
		t.Fatal(err)
	}
	want := []any{uint8(7), uint32(0xdeadbeef), uint64(1 << 40), "mlx5_0", uint32(9), "fw"}
	if len(got) != len(want) {
		t.Fatalf("%v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%d: %v, want %v", i, got[i], want[i])
		}
	}
	// Lengths and padding: a 1-byte payload takes 8 bytes, its nla_len 5;
	// the flag is on the nest's type only.
	if u := U8(1, 7); len(u) != 8 || binary.NativeEndian.Uint16(u) != 5 {
		t.Errorf("U8: % x", u)
	}
	if n := Nest(5); binary.NativeEndian.Uint16(n[2:]) != 5|FNested || !bytes.Equal(NestNoFlag(5)[2:4], binary.NativeEndian.AppendUint16(nil, 5)) {
		t.Errorf("nest types: % x, % x", n, NestNoFlag(5))
	}
}
