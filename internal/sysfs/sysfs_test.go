package sysfs

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

func TestParseSysfsUint(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		err  error
	}{
		{"230442669431839\n", 230442669431839, nil},
		{"0", 0, nil},
		{"18446744073709551615", math.MaxUint64, nil},
		{"18446744073709551616", 0, ErrGarbage},
		{"N/A (no PMA)\n", 0, ErrNotAvailable}, // i40iw, node_exporter#966
		{"N/A", 0, ErrNotAvailable},
		{"", 0, ErrNotAvailable},
		{"  \n", 0, ErrNotAvailable},
		{"0x1f!", 0, ErrGarbage},
		{"-1", 0, ErrGarbage},
		{"12 34", 0, ErrGarbage},
		{"\x00\xff", 0, ErrGarbage},
	} {
		got, err := ParseUint([]byte(tc.in))
		if !errors.Is(err, tc.err) || (err == nil && got != tc.want) {
			t.Errorf("ParseUint(%q) = %d, %v; want %d, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestParseRateAndState(t *testing.T) {
	for in, want := range map[string]float64{
		"400 Gb/sec (4X NDR)": 5e10, "200 Gb/sec (2X NDR)": 2.5e10, "10 Gb/sec (4X)": 1.25e9, "2.5 Gb/sec (1X SDR)": 3.125e8,
	} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "fast", "400 Mb/sec", "-1 Gb/sec", "x Gb/sec"} {
		if _, err := ParseRate(bad); !errors.Is(err, ErrGarbage) {
			t.Errorf("ParseRate(%q) err = %v, want ErrGarbage", bad, err)
		}
	}
	if id, name, err := ParseState("4: ACTIVE"); err != nil || id != 4 || name != "ACTIVE" {
		t.Errorf("parseState = %d %q %v", id, name, err)
	}
	if _, _, err := ParseState("ACTIVE"); err == nil {
		t.Error("parseState without id succeeded")
	}
}

func TestSanitizeName(t *testing.T) {
	for in, want := range map[string]string{
		"local_ack_timeout_err": "local_ack_timeout_err", "VL15_dropped": "vl15_dropped", "rx-icrc.x": "rx_icrc_x",
		"": "", strings.Repeat("a", 97): "",
	} {
		if got := SanitizeName(in); got != want {
			t.Errorf("SanitizeName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSysReaderKeepsFilesOpen(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x")
	testenv.WriteFile(t, p, "1\n")
	r := NewReader()
	defer r.Close()
	var buf [64]byte
	for i, want := range []string{"1", "22"} {
		if i == 1 {
			testenv.RewriteFile(t, p, "22\n")
		}
		b, err := r.Read(p, buf[:])
		if err != nil || string(b) != want {
			t.Fatalf("read = %q, %v; want %q", b, err, want)
		}
	}
	if r.OpenCount() != 1 {
		t.Errorf("open files = %d, want 1", r.OpenCount())
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	r.ForgetPrefix(dir)
	if _, err := r.Read(p, buf[:]); !IsGone(err) {
		t.Errorf("read of a removed file = %v, want a 'gone' error", err)
	}
	// Values longer than the buffer are an error, not a truncated value.
	testenv.WriteFile(t, p, strings.Repeat("9", 100))
	if _, err := r.Read(p, buf[:]); err == nil {
		t.Error("oversized value read without error")
	}
	// The budget of open files is respected.
	r.maxOpen = 0
	r.ForgetPrefix(dir)
	testenv.WriteFile(t, p, "5")
	if _, err := r.Read(p, buf[:]); err != nil || r.OpenCount() != 0 {
		t.Errorf("read over budget: err %v, open %d", err, r.OpenCount())
	}
}

// FuzzParseSysfsUint: no panic; a success round-trips; every failure is
// classified as "not available" or "garbage".
func FuzzParseSysfsUint(f *testing.F) {
	for _, s := range []string{"230442669431839\n", "N/A (no PMA)\n", "N/A", "", "0x1f!", "4294967295", "18446744073709551615", "12\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseUint(b)
		if err != nil {
			if !errors.Is(err, ErrNotAvailable) && !errors.Is(err, ErrGarbage) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if got := strings.TrimLeft(strings.TrimSpace(string(b)), "0"); got != "" && got != uintString(v) {
			t.Fatalf("parse(%q) = %d", b, v)
		}
	})
}

func uintString(v uint64) string {
	if v == 0 {
		return ""
	}
	var b []byte
	for v > 0 {
		b = append([]byte{byte('0' + v%10)}, b...)
		v /= 10
	}
	return string(b)
}

// FuzzParseEthtoolStats: arbitrary text never panics.
func FuzzParseEthtoolStats(f *testing.F) {
	f.Add([]byte("NIC statistics:\n     rx_prio3_pause: 120394\n     duplicate metric: 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ParseEthtoolStats(b)
	})
}
