package proc

import (
	"net/netip"
	"testing"
)

// Lines as a 6.8 kernel prints them: a listener on 127.0.0.1:28028, one
// on 0.0.0.0:22, an established connection (not a listener); tcp6: a
// listener on [::]:28028 and on [::1]:9100.
func TestParseTCPListeners(t *testing.T) {
	tcp := []byte(`  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:6D7C 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 81234 1 0000000000000000 100 0 0 10 0
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 20011 1 0000000000000000 100 0 0 10 0
   2: 0100007F:6D7C 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 81999 1 0000000000000000 20 4 30 10 -1
   3: garbage
`)
	tcp6 := []byte(`  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:6D7C 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 90001 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:238C 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 90002 1 0000000000000000 100 0 0 10 0
`)
	got := append(ParseTCPListeners(tcp), ParseTCPListeners(tcp6)...)
	want := []Listener{
		{netip.MustParseAddrPort("127.0.0.1:28028"), 81234},
		{netip.MustParseAddrPort("0.0.0.0:22"), 20011},
		{netip.MustParseAddrPort("[::]:28028"), 90001},
		{netip.MustParseAddrPort("[::1]:9100"), 90002},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%d: %v, want %v", i, got[i], want[i])
		}
	}
}

// /proc/PID/net/tcp of a namespace a tenant fills: any bytes parse
// without a panic; every listener has a port-sized port and an inode.
func FuzzParseTCPListeners(f *testing.F) {
	f.Add([]byte("  sl  local_address rem_address   st\n   0: 0100007F:6D7C 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 81234 1\n"))
	f.Add([]byte("h\n 0: 00000000000000000000000001000000:238C 0:0 0A a b c d e 9\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, l := range ParseTCPListeners(b) {
			if l.Inode == 0 || !l.Addr.IsValid() {
				t.Fatalf("listener %+v", l)
			}
		}
	})
}
