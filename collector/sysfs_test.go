package collector

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		{"18446744073709551616", 0, errGarbage},
		{"N/A (no PMA)\n", 0, errNotAvailable}, // i40iw, node_exporter#966
		{"N/A", 0, errNotAvailable},
		{"", 0, errNotAvailable},
		{"  \n", 0, errNotAvailable},
		{"0x1f!", 0, errGarbage},
		{"-1", 0, errGarbage},
		{"12 34", 0, errGarbage},
		{"\x00\xff", 0, errGarbage},
	} {
		got, err := parseSysfsUint([]byte(tc.in))
		if !errors.Is(err, tc.err) || (err == nil && got != tc.want) {
			t.Errorf("parseSysfsUint(%q) = %d, %v; want %d, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestParseRateAndState(t *testing.T) {
	for in, want := range map[string]float64{
		"400 Gb/sec (4X NDR)": 5e10, "200 Gb/sec (2X NDR)": 2.5e10, "10 Gb/sec (4X)": 1.25e9, "2.5 Gb/sec (1X SDR)": 3.125e8,
	} {
		if got, err := parseRate(in); err != nil || got != want {
			t.Errorf("parseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "fast", "400 Mb/sec", "-1 Gb/sec", "x Gb/sec"} {
		if _, err := parseRate(bad); !errors.Is(err, errGarbage) {
			t.Errorf("parseRate(%q) err = %v, want errGarbage", bad, err)
		}
	}
	if id, name, err := parseState("4: ACTIVE"); err != nil || id != 4 || name != "ACTIVE" {
		t.Errorf("parseState = %d %q %v", id, name, err)
	}
	if _, _, err := parseState("ACTIVE"); err == nil {
		t.Error("parseState without id succeeded")
	}
}

func TestParseRail(t *testing.T) {
	for in, want := range map[string]RailConfig{
		"rail0=mlx5_0":     {"rail0", "mlx5_0", 1},
		"rail1=mlx5_3:1":   {"rail1", "mlx5_3", 1},
		"r=roceP2p1s0f1:2": {"r", "roceP2p1s0f1", 2},
	} {
		if got, err := ParseRail(in); err != nil || got != want {
			t.Errorf("ParseRail(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "mlx5_0", "=mlx5_0", "rail0=", "rail0=mlx5_0:0", "rail0=mlx5_0:x", "rail 0=mlx5_0", "r=../x", "r=a/b"} {
		if _, err := ParseRail(bad); err == nil {
			t.Errorf("ParseRail(%q) succeeded", bad)
		}
	}
}

func TestSanitizeName(t *testing.T) {
	for in, want := range map[string]string{
		"local_ack_timeout_err": "local_ack_timeout_err", "VL15_dropped": "vl15_dropped", "rx-icrc.x": "rx_icrc_x",
		"": "", strings.Repeat("a", 97): "",
	} {
		if got := sanitizeName(in); got != want {
			t.Errorf("sanitizeName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSysReaderKeepsFilesOpen(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x")
	mustWrite(t, p, "1\n")
	r := newSysReader()
	defer r.close()
	var buf [64]byte
	for i, want := range []string{"1", "22"} {
		if i == 1 {
			mustWriteInPlace(t, p, "22\n")
		}
		b, err := r.read(p, buf[:])
		if err != nil || string(b) != want {
			t.Fatalf("read = %q, %v; want %q", b, err, want)
		}
	}
	if r.openCount() != 1 {
		t.Errorf("open files = %d, want 1", r.openCount())
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	r.forgetPrefix(dir)
	if _, err := r.read(p, buf[:]); !isGone(err) {
		t.Errorf("read of a removed file = %v, want a 'gone' error", err)
	}
	// Values longer than the buffer are an error, not a truncated value.
	mustWrite(t, p, strings.Repeat("9", 100))
	if _, err := r.read(p, buf[:]); err == nil {
		t.Error("oversized value read without error")
	}
	// The budget of open files is respected.
	r.maxOpen = 0
	r.forgetPrefix(dir)
	mustWrite(t, p, "5")
	if _, err := r.read(p, buf[:]); err != nil || r.openCount() != 0 {
		t.Errorf("read over budget: err %v, open %d", err, r.openCount())
	}
}

// FuzzParseSysfsUint: no panic; a success round-trips; every failure is
// classified as "not available" or "garbage".
func FuzzParseSysfsUint(f *testing.F) {
	for _, s := range []string{"230442669431839\n", "N/A (no PMA)\n", "N/A", "", "0x1f!", "4294967295", "18446744073709551615", "12\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseSysfsUint(b)
		if err != nil {
			if !errors.Is(err, errNotAvailable) && !errors.Is(err, errGarbage) {
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

// FuzzMapEthtoolName: no panic, and whatever maps carries valid labels.
func FuzzMapEthtoolName(f *testing.F) {
	for _, s := range []string{"rx_prio3_pause", "tx_prio3_pause_duration", "rx_prio3_pause_transition", "rx_global_pause",
		"tx_pause_storm_warning_events", "rx_pause_ctrl_phy", "rx_discards_phy", "rx_out_of_buffer", "link_down_events_phy",
		"tx_vport_rdma_unicast_bytes", "rx_prio0_bytes", "port.rx_dropped", "duplicate metric", "rx_csum_complete", "rx_prio"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		s := mapEthtoolName(name)
		if s.kind == pfcNone {
			return
		}
		if s.direction != "" && s.direction != "rx" && s.direction != "tx" {
			t.Fatalf("%q: direction %q", name, s.direction)
		}
		if s.priority != "" && s.priority != "global" && (len(s.priority) != 1 || s.priority[0] < '0' || s.priority[0] > '7') {
			t.Fatalf("%q: priority %q", name, s.priority)
		}
		if s.scale <= 0 {
			t.Fatalf("%q: scale %v", name, s.scale)
		}
	})
}

// FuzzParseEthtoolStats: arbitrary text never panics.
func FuzzParseEthtoolStats(f *testing.F) {
	f.Add([]byte("NIC statistics:\n     rx_prio3_pause: 120394\n     duplicate metric: 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ParseEthtoolStats(b)
	})
}
