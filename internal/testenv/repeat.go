package testenv

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// Repeating is a test whose failures are said twice: where they happen,
// and again after everything its cleanups print. A test that starts
// processes dumps their logs when it fails (tens of kilobytes); a CI log
// shows its tail, so without the repeat the tail is Alertmanager's gossip
// and not why the test failed.
type Repeating struct {
	testing.TB
	mu   sync.Mutex
	said []string
}

// RepeatFailures wraps t. Call it first in the test, before anything that
// registers a cleanup: cleanups run last-registered first, so its own runs
// after theirs.
func RepeatFailures(t testing.TB) *Repeating {
	r := &Repeating{TB: t}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.said) > 0 {
			t.Logf("--- why the test failed (said above, before the process logs):\n%s", strings.Join(r.said, "\n"))
		}
	})
	return r
}

func (r *Repeating) note(s string) {
	r.mu.Lock()
	r.said = append(r.said, s)
	r.mu.Unlock()
}

func (r *Repeating) Errorf(format string, args ...any) {
	r.TB.Helper()
	r.note(fmt.Sprintf(format, args...))
	r.TB.Errorf(format, args...)
}

func (r *Repeating) Error(args ...any) {
	r.TB.Helper()
	r.note(fmt.Sprint(args...))
	r.TB.Error(args...)
}

func (r *Repeating) Fatalf(format string, args ...any) {
	r.TB.Helper()
	r.note(fmt.Sprintf(format, args...))
	r.TB.Fatalf(format, args...)
}

func (r *Repeating) Fatal(args ...any) {
	r.TB.Helper()
	r.note(fmt.Sprint(args...))
	r.TB.Fatal(args...)
}
