package testenv

import (
	"fmt"
	"strings"
	"testing"
)

// failing stands in for a test: it records what is said and runs its
// cleanups when asked, last-registered first.
type failing struct {
	testing.TB
	out      []string
	cleanups []func()
}

func (f *failing) Helper() {}
func (f *failing) Errorf(s string, args ...any) {
	f.out = append(f.out, "error: "+fmt.Sprintf(s, args...))
}
func (f *failing) Fatalf(s string, args ...any) {
	f.out = append(f.out, "fatal: "+fmt.Sprintf(s, args...))
}
func (f *failing) Logf(s string, args ...any) { f.out = append(f.out, fmt.Sprintf(s, args...)) }
func (f *failing) Cleanup(c func())           { f.cleanups = append(f.cleanups, c) }
func (f *failing) finish() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func TestRepeatFailures(t *testing.T) {
	f := &failing{}
	r := RepeatFailures(f)
	r.Cleanup(func() { f.Logf("a process log, 4,000 bytes") })
	r.Errorf("page %s sent %d times", "PFCStorm", 2)
	r.Fatalf("timed out")
	f.finish()
	last := f.out[len(f.out)-1]
	if !strings.HasPrefix(last, "--- why the test failed") || !strings.Contains(last, "page PFCStorm sent 2 times\ntimed out") {
		t.Errorf("the last line is not the failures again: %q", f.out)
	}
	if f.out[0] != "error: page PFCStorm sent 2 times" || f.out[2] != "a process log, 4,000 bytes" {
		t.Errorf("said in the wrong order: %q", f.out)
	}

	quiet := &failing{}
	RepeatFailures(quiet).Cleanup(func() {})
	quiet.finish()
	if len(quiet.out) != 0 {
		t.Errorf("a passing test repeats something: %q", quiet.out)
	}
}
