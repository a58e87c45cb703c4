package proc

import (
	"strings"
	"testing"
)

// NCCL_SOCKET_IFNAME as ncclFindInterfaces reads it: the NCCL_IB_HCA list
// syntax, by interface name, 16 entries, ignored when shorter than 2 bytes.
func TestSocketIfname(t *testing.T) {
	for _, tc := range []struct {
		value   string
		set     bool
		ok      bool
		yes, no []string
	}{
		{"eth1", true, true, []string{"eth1", "eth10"}, []string{"eth0", "eth3"}},
		{"eth", true, true, []string{"eth0", "eth1", "eth3"}, []string{"ens1f0", "lo"}},
		{"=eth1", true, true, []string{"eth1"}, []string{"eth10", "eth0"}},
		{"^eth0,eth3", true, true, []string{"eth1", "lo"}, []string{"eth0", "eth3", "eth30"}},
		{"^docker,lo", true, true, []string{"eth0", "eth3"}, []string{"docker0", "lo"}},
		{"^=eth", true, true, []string{"eth0"}, nil},
		{"eth0:1", true, true, []string{"eth0"}, []string{"eth1"}}, // a port never restricts an interface
		{"eth1,eth0", true, true, []string{"eth0", "eth1"}, []string{"eth3"}},
		// Past 16 entries NCCL stops reading.
		{strings.Repeat("x,", 16) + "eth0", true, true, nil, []string{"eth0"}},
		// Unset or one byte: NCCL picks the interfaces itself.
		{"", false, false, nil, nil},
		{"", true, false, nil, nil},
		{"e", true, false, nil, nil},
		{"^", true, false, nil, nil},
	} {
		h, ok := ParseSocketIfname(tc.value, tc.set)
		if ok != tc.ok {
			t.Errorf("NCCL_SOCKET_IFNAME=%q (set %v): ok %v, want %v", tc.value, tc.set, ok, tc.ok)
			continue
		}
		for _, n := range tc.yes {
			if !h.SelectsInterface(n) {
				t.Errorf("NCCL_SOCKET_IFNAME=%q does not select %s", tc.value, n)
			}
		}
		for _, n := range tc.no {
			if h.SelectsInterface(n) {
				t.Errorf("NCCL_SOCKET_IFNAME=%q selects %s", tc.value, n)
			}
		}
	}
}

// FuzzSocketIfname: any value parses into at most 16 entries; an
// excluding list selects exactly what the same list without '^' does not.
func FuzzSocketIfname(f *testing.F) {
	for _, s := range []string{"eth1", "^=eth0", "eth0:1", ":1,,x", "="} {
		f.Add(s, "eth0")
	}
	f.Fuzz(func(t *testing.T, v, name string) {
		h, ok := ParseSocketIfname(v, true)
		if ok != (len(v) > 1) {
			t.Fatalf("%q: ok %v", v, ok)
		}
		if len(h.entries) > maxSocketIfEntries {
			t.Fatalf("%d entries", len(h.entries))
		}
		if rest, found := strings.CutPrefix(v, "^"); ok && found && len(rest) > 1 && !strings.HasPrefix(rest, "^") {
			if r, _ := ParseSocketIfname(rest, true); h.SelectsInterface(name) == r.SelectsInterface(name) {
				t.Fatalf("%q and %q agree on %q", v, rest, name)
			}
		}
	})
}
