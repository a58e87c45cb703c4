package proc

import (
	"strings"
	"testing"
)

// As NCCL's setEnvFile reads a line: comments only in the first column,
// no trimming, a NUL ends the line's C string, name and value cut at
// 1023 bytes.
func TestParseNCCLConf(t *testing.T) {
	long := strings.Repeat("x", 2000)
	in := "# c\n #NCCL_A=1\nNCCL_B= spaced \nNOEQUALS\nNCCL_C=a\x00=b\nNCCL_D=" + long + "\n\nNCCL_E=last"
	var got []string
	ParseNCCLConf([]byte(in), func(n, v []byte) { got = append(got, string(n)+"|"+string(v)) })
	want := []string{" #NCCL_A|1", "NCCL_B| spaced ", "NCCL_C|a", "NCCL_D|" + long[:1023], "NCCL_E|last"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got %q, want %q", got, want)
	}
	if h := PasswdHome([]byte("root:x:0:0:root:/root:/bin/sh\nserve:x:1000:1000::/home/serve:/bin/sh\n"), 1000); h != "/home/serve" {
		t.Errorf("home %q", h)
	}
}

// A tenant writes its configuration files: any bytes parse without a
// panic, and nothing longer than NCCL keeps comes out.
func FuzzParseNCCLConf(f *testing.F) {
	f.Add([]byte("NCCL_RAS_ADDR=0.0.0.0:28028\n# c\nNCCL_SOCKET_IFNAME=eth0\n"))
	f.Add([]byte("=\n==\nA\x00=B\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ParseNCCLConf(b, func(n, v []byte) {
			if len(n) > 1023 || len(v) > 1023 {
				t.Fatalf("name %d value %d bytes", len(n), len(v))
			}
		})
		PasswdHome(b, 0)
	})
}
