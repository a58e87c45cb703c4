package collector

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaultRails(t *testing.T) {
	rs, err := NewRails(fixtureSys, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := rs.Current(context.Background())
	want := []Rail{
		{Name: "mlx5_0", Device: "mlx5_0", Port: "1", Netdev: "eth0", Present: true},
		{Name: "mlx5_3", Device: "mlx5_3", Port: "1", Netdev: "eth3", Present: true}, // ndevs/0 empty: device/net fallback
	}
	if len(got) != len(want) {
		t.Fatalf("rails = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("rail %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestStaticRails(t *testing.T) {
	sys := copyTree(t, fixtureSys)
	cfg := []RailConfig{{"rail0", "mlx5_0", 1}, {"rail1", "mlx5_3", 1}}
	rs, err := NewRails(sys, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := rs.Current(context.Background()); len(got) != 2 || got[1].Netdev != "eth3" || got[0].Name != "rail0" {
		t.Fatalf("rails = %+v", got)
	}
	// A rail whose device disappears later is reported, not fatal.
	if err := os.Remove(filepath.Join(sys, "class", "infiniband", "mlx5_3")); err != nil {
		t.Fatal(err)
	}
	got := rs.Current(context.Background())
	if got[1].Present || got[1].Netdev != "" || !got[0].Present {
		t.Errorf("after removal rails = %+v", got)
	}
}

func TestStaticRailErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  []RailConfig
		want string
	}{
		{[]RailConfig{{"rail0", "mlx5_9", 1}}, `rail "rail0": RDMA device "mlx5_9" not found in fixtures/sys/class/infiniband (found: i40iw0, mlx4_0, mlx5_0, mlx5_3)`},
		{[]RailConfig{{"rail0", "mlx5_0", 2}}, `rail "rail0": RDMA device "mlx5_0" has no port 2`},
		{[]RailConfig{{"a", "mlx5_0", 1}, {"a", "mlx5_3", 1}}, `rail "a" is given twice`},
	} {
		_, err := NewRails(fixtureSys, tc.cfg)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("NewRails(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	_, err := NewRails(t.TempDir(), []RailConfig{{"rail0", "mlx5_0", 1}})
	if err == nil || !strings.Contains(err.Error(), "(found: none)") {
		t.Errorf("NewRails on a host without RDMA = %v", err)
	}
}

// Resolution is shared by the collectors of one scrape.
func TestRailsMemoizedPerScrape(t *testing.T) {
	sys := copyTree(t, fixtureSys)
	rs, err := NewRails(sys, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.WithValue(context.Background(), scrapeIDKey{}, uint64(7))
	if n := len(rs.Current(ctx)); n != 2 {
		t.Fatalf("rails = %d", n)
	}
	os.Remove(filepath.Join(sys, "class", "infiniband", "mlx5_3"))
	if n := len(rs.Current(ctx)); n != 2 {
		t.Errorf("same scrape re-resolved: %d rails", n)
	}
	ctx = context.WithValue(context.Background(), scrapeIDKey{}, uint64(8))
	if n := len(rs.Current(ctx)); n != 1 {
		t.Errorf("next scrape: %d rails, want 1", n)
	}
}

// FuzzParseRail: any --rail value either parses into a valid rail or is
// rejected with an error; it never panics.
func FuzzParseRail(f *testing.F) {
	for _, s := range []string{"rail0=mlx5_0", "rail1=mlx5_3:1", "r=roceP2p1s0f1:2", "=x", "a=b:0", "a=../x", "a=b:99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rc, err := ParseRail(s)
		if err != nil {
			return
		}
		if !railNameRE.MatchString(rc.Name) || rc.Device == "" || strings.ContainsAny(rc.Device, "/\x00") || rc.Port < 1 || rc.Port > 255 {
			t.Fatalf("ParseRail(%q) accepted %+v", s, rc)
		}
	})
}
