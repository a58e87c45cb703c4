package alerts

import (
	"strings"
	"testing"
)

// for.nccl (NCCLSocketFallback, NCCLInitFailed) must be set, and the
// shipped rules use it for both alerts.
func TestForNCCL(t *testing.T) {
	b := strings.Replace(string(defaultConfig), "  nccl: 0s\n", "", 1)
	if b == string(defaultConfig) {
		t.Fatal("config.yml has no 'nccl: 0s' under for")
	}
	if _, err := ParseConfig([]byte(b)); err == nil || !strings.Contains(err.Error(), "for.nccl") {
		t.Errorf("config without for.nccl: err = %v", err)
	}
	c := DefaultConfig()
	c.For.NCCL = "42s"
	out, err := Render(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"NCCLSocketFallback", "NCCLInitFailed"} {
		i := strings.Index(string(out), "alert: "+a+"\n")
		if i < 0 {
			t.Fatalf("%s not rendered", a)
		}
		rest := string(out)[i:]
		if j := strings.Index(rest[1:], "- alert:"); j > 0 {
			rest = rest[:j]
		}
		if !strings.Contains(rest, "for: 42s") {
			t.Errorf("%s does not use for.nccl:\n%s", a, rest)
		}
	}
}
