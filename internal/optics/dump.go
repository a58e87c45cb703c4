package optics

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// PageReader reads module memory the way the kernel's ethtool netlink
// module-EEPROM request addresses it (I2C address 0x50): offset 0-127 is
// the lower page (page and bank 0), offset 128-255 the upper page of the
// given page and bank.
type PageReader interface {
	ReadEEPROM(offset, length uint32, page, bank uint8) ([]byte, error)
}

// ErrNoModule is returned by Read when the lower page cannot be read (no
// module, or a module that does not answer).
var ErrNoModule = errors.New("module memory: lower page unreadable")

// Read reads the lower page and the upper pages Decode uses. Upper pages
// that fail are left out (Decode reports them in Missing).
func Read(r PageReader) (Memory, error) {
	lower, err := r.ReadEEPROM(0, 128, 0, 0)
	if err != nil {
		return Memory{}, fmt.Errorf("%w: %w", ErrNoModule, err)
	}
	if len(lower) != 128 {
		return Memory{}, fmt.Errorf("%w: %d bytes", ErrNoModule, len(lower))
	}
	m := Memory{Lower: lower, Upper: map[PageKey][]byte{}}
	for _, k := range Pages(lower) {
		if b, err := r.ReadEEPROM(128, 128, k.Page, k.Bank); err == nil && len(b) == 128 {
			m.Upper[k] = b
		}
	}
	return m, nil
}

// ParseDump reads a text dump of module memory: a header line per page,
// "lower page 00h" or "upper page 11h [bank 0]" (case-insensitive, as
// sfputil show eeprom-hexdump prints them), then hexdump lines "OFFSET b0
// b1 ... [|ascii|]". Lines starting with # are comments; lines before the
// first header are skipped.
func ParseDump(r io.Reader) (Memory, error) {
	m := Memory{Upper: map[PageKey][]byte{}}
	var cur *[]byte
	var key PageKey
	lower := false
	flush := func() error {
		if cur == nil {
			return nil
		}
		if len(*cur) != 128 {
			return fmt.Errorf("page %02xh bank %d: %d bytes, want 128", key.Page, key.Bank, len(*cur))
		}
		if lower {
			m.Lower = *cur
		} else {
			m.Upper[key] = *cur
		}
		cur = nil
		return nil
	}
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if h := strings.ToLower(f[0]); (h == "lower" || h == "upper") && len(f) >= 3 && strings.EqualFold(f[1], "page") {
			if err := flush(); err != nil {
				return m, err
			}
			p, err := strconv.ParseUint(strings.TrimSuffix(strings.ToLower(f[2]), "h"), 16, 8)
			if err != nil {
				return m, fmt.Errorf("line %d: page %q", n, f[2])
			}
			key, lower = PageKey{Page: uint8(p)}, h == "lower"
			if len(f) >= 5 && strings.EqualFold(f[3], "bank") {
				b, err := strconv.ParseUint(f[4], 10, 8)
				if err != nil {
					return m, fmt.Errorf("line %d: bank %q", n, f[4])
				}
				key.Bank = uint8(b)
			}
			if lower && (key != PageKey{}) {
				return m, fmt.Errorf("line %d: the lower page is page 00h bank 0", n)
			}
			if !lower {
				if _, dup := m.Upper[key]; dup {
					return m, fmt.Errorf("line %d: page %02xh bank %d twice", n, key.Page, key.Bank)
				}
			} else if m.Lower != nil {
				return m, fmt.Errorf("line %d: lower page twice", n)
			}
			cur = new([]byte)
			continue
		}
		if cur == nil {
			continue // text before the first page header (a tool's title line)
		}
		for _, t := range f[1:] {
			if strings.HasPrefix(t, "|") {
				break
			}
			v, err := strconv.ParseUint(t, 16, 8)
			if err != nil || len(t) != 2 {
				return m, fmt.Errorf("line %d: byte %q", n, t)
			}
			if len(*cur) == 128 {
				return m, fmt.Errorf("line %d: more than 128 bytes in a page", n)
			}
			*cur = append(*cur, byte(v))
		}
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	if err := flush(); err != nil {
		return m, err
	}
	if m.Lower == nil {
		return m, errors.New("no lower page")
	}
	return m, nil
}
