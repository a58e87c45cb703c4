package proc

import (
	"errors"
	"testing"

	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

func TestParseCPUList(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0-47,96-143\n", "0-47,96-143"}, {"3", "3"}, {"", ""}, {"0,1,2,5", "0-2,5"}, {"63-64", "63-64"},
	} {
		s, err := ParseCPUList([]byte(tc.in))
		if err != nil || s.String() != tc.want {
			t.Errorf("ParseCPUList(%q) = %q, %v; want %q", tc.in, s, err, tc.want)
		}
	}
	for _, bad := range []string{"-1", "5-3", "1,", "a", "0-99999", ",1", "1--2"} {
		if _, err := ParseCPUList([]byte(bad)); !errors.Is(err, sysfs.ErrGarbage) {
			t.Errorf("ParseCPUList(%q): err %v, want sysfs.ErrGarbage", bad, err)
		}
	}
}

// FuzzParseCPUList: no panic; a parsed list formats canonically and
// re-parses to the same set.
func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0-47,96-143", "48-95,144-191\n", "", "0", "0-191", "1,3,5-7", "8191"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseCPUList([]byte(in))
		if err != nil {
			return
		}
		s2, err := ParseCPUList([]byte(s.String()))
		if err != nil || s2.String() != s.String() {
			t.Fatalf("%q: canonical %q re-parses to %q, %v", in, s, s2, err)
		}
	})
}
