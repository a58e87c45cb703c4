package proc

import (
	"errors"
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestParseNetnsFiles(t *testing.T) {
	for _, c := range []struct {
		file string
		v6   bool
		want []netip.Addr
	}{
		{"host-fib_trie", false, addrs("127.0.0.1", "192.0.2.2")},
		{"pod-fib_trie", false, addrs("10.77.0.2", "127.0.0.1")},
		{"pod-if_inet6", true, addrs("fe80::701a:caff:fee7:1689", "::1", "fd00:77::2")},
		{"host-if_inet6", true, addrs("::1", "fe80::fc:ff:fe00:1", "fd00::2")},
	} {
		b, err := os.ReadFile("testdata/netns/" + c.file)
		if err != nil {
			t.Fatal(err)
		}
		parse := ParseFibTrieLocal
		if c.v6 {
			parse = ParseIfInet6
		}
		got, err := parse(b)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, %v; want %v", c.file, got, err, c.want)
		}
	}
}

func TestParseNetnsGarbage(t *testing.T) {
	if _, err := ParseFibTrieLocal([]byte("Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- nonsense\n")); !errors.Is(err, sysfs.ErrGarbage) {
		t.Errorf("fib_trie garbage: %v", err)
	}
	if _, err := ParseIfInet6([]byte("zz000000000000000000000000000001 01 80 10 80 lo\n")); !errors.Is(err, sysfs.ErrGarbage) {
		t.Errorf("if_inet6 garbage: %v", err)
	}
	if got, err := ParseFibTrieLocal(nil); err != nil || len(got) != 0 {
		t.Errorf("empty: %v %v", got, err)
	}
}

func TestParseNSLink(t *testing.T) {
	for _, c := range []struct {
		target string
		want   uint64
		ok     bool
	}{
		{"net:[4026532178]", 4026532178, true},
		{"net:[0]", 0, false},
		{"pid:[4026531836]", 0, false},
		{"net:[12", 0, false},
		{"net:[]", 0, false},
	} {
		got, err := ParseNSLink("net", c.target)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("%q: %d, %v", c.target, got, err)
		}
	}
}

func FuzzParseFibTrieLocal(f *testing.F) {
	b, _ := os.ReadFile("testdata/netns/pod-fib_trie")
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := ParseFibTrieLocal(b)
		if err == nil {
			for _, a := range got {
				if !a.Is4() {
					t.Fatalf("%v is not IPv4", a)
				}
			}
		}
	})
}

func FuzzParseIfInet6(f *testing.F) {
	b, _ := os.ReadFile("testdata/netns/pod-if_inet6")
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) { ParseIfInet6(b) })
}
