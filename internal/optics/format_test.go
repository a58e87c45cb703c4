package optics

import (
	"bytes"
	"fmt"
	"io"
	"sort"
)

// FormatDump writes m in the format ParseDump reads (for round-trip tests).
func FormatDump(w io.Writer, m Memory) error {
	var b bytes.Buffer
	page := func(base int, p []byte) {
		for i := 0; i < len(p); i += 16 {
			fmt.Fprintf(&b, "%08x", base+i)
			for j := i; j < i+16 && j < len(p); j++ {
				fmt.Fprintf(&b, " %02x", p[j])
			}
			b.WriteString(" |")
			for j := i; j < i+16 && j < len(p); j++ {
				c := p[j]
				if c < 0x20 || c > 0x7e {
					c = '.'
				}
				b.WriteByte(c)
			}
			b.WriteString("|\n")
		}
	}
	b.WriteString("lower page 00h\n")
	page(0, m.Lower)
	keys := make([]PageKey, 0, len(m.Upper))
	for k := range m.Upper {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Page != keys[j].Page {
			return keys[i].Page < keys[j].Page
		}
		return keys[i].Bank < keys[j].Bank
	})
	for _, k := range keys {
		fmt.Fprintf(&b, "upper page %02xh bank %d\n", k.Page, k.Bank)
		page(128, m.Upper[k])
	}
	_, err := w.Write(b.Bytes())
	return err
}
