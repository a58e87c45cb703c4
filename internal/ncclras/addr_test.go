package ncclras

import "testing"

// NCCL_RAS_ADDR values in the forms ncclSocketGetAddrFromString reads.
func TestParseAddr(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"localhost:28028", "localhost:28028"},
		{"LOCALHOST:28028", "localhost:28028"},
		{" 127.0.0.1:28029 ", "127.0.0.1:28029"},
		{"10.77.0.2:28028", "10.77.0.2:28028"},
		{"0.0.0.0:28028", "127.0.0.1:28028"},
		{"[::]:28028", "[::1]:28028"},
		{"[::1]:28028", "[::1]:28028"},
		{"[2001:DB8::0:1]:28028", "[2001:db8::1]:28028"},
		{"[fe80::1%eth0]:28028", "[fe80::1%eth0]:28028"},
		{"[::ffff:10.0.0.1]:28028", "10.0.0.1:28028"},
		{"", ""},
		{"28028", ""},               // a bare port: NCCL resolves "28028" as a host
		{"10.0.0.1", ""},            // no port: NCCL would listen on 65535
		{":28028", ""},              // no host
		{"10.0.0.1:", ""},           // empty port
		{"10.0.0.1:0", ""},          // no port 0
		{"10.0.0.1:65536", ""},      // out of range
		{"10.0.0.1:+28028", ""},     // not decimal
		{"::1:28028", ""},           // IPv6 without brackets
		{"[10.0.0.1]:28028", ""},    // brackets around IPv4
		{"[::1]28028", ""},          // no colon after ]
		{"[::1", ""},                // no ]
		{"node7.example:28028", ""}, // a name: the exporter's resolver is not the process's
		{"10.0.0.1:28028,10.0.0.2:28028", ""},
	} {
		got, err := ParseAddr(tc.in)
		if got != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("ParseAddr(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestAddrIP(t *testing.T) {
	if ip, ok := AddrIP("[fe80::1%eth0]:28028"); !ok || ip.String() != "fe80::1" {
		t.Errorf("zone not removed: %v %v", ip, ok)
	}
	if _, ok := AddrIP("localhost:28028"); ok {
		t.Error("localhost has an IP")
	}
}

func FuzzParseAddr(f *testing.F) {
	f.Add("127.0.0.1:28028")
	f.Add("[fe80::1%eth0]:28028")
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ParseAddr(in)
		if err != nil {
			return
		}
		// The result parses to itself (a canonical form).
		if again, err := ParseAddr(got); err != nil || again != got {
			t.Fatalf("ParseAddr(%q) = %q, again %q %v", in, got, again, err)
		}
	})
}
