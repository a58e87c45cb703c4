package collector

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"unicode/utf8"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
)

// State is what a collector could do in its latest update
// (fabric_collector_state_info{state}).
type State string

// The collector states. ok, not_configured and no_hardware report
// fabric_scrape_collector_success 1; source_missing and failed report 0.
const (
	// StateOK: the source is present and the collector ran. Single
	// unreadable files are counted in fabric_scrape_read_errors_total.
	StateOK State = "ok"
	// StateNotConfigured: the collector needs a flag that is not set.
	StateNotConfigured State = "not_configured"
	// StateNoHardware: the paths are valid but this host has none of the
	// hardware the collector reads.
	StateNoHardware State = "no_hardware"
	// StateSourceMissing: a configured root or path does not exist or does
	// not look like what it should (a blind spot the user can fix).
	StateSourceMissing State = "source_missing"
	// StateFailed: any other error.
	StateFailed State = "failed"
)

// Success is the fabric_scrape_collector_success value of a state.
func (s State) Success() bool {
	return s == StateOK || s == StateNotConfigured || s == StateNoHardware
}

// maxReasonLen bounds the reason label of fabric_collector_state_info.
const maxReasonLen = 256

// StateError is an error of a collector's Update that carries its state.
// Path and Fix, when set, are logged with a source_missing state.
type StateError struct {
	State  State
	Reason string
	Path   string
	Fix    string
}

func (e *StateError) Error() string { return string(e.State) + ": " + e.Reason }

// Is makes errors.Is(err, ErrNoData) true for the states in which the
// collector has nothing to report because its source is absent.
func (e *StateError) Is(target error) bool {
	return target == ErrNoData && e.State != StateFailed
}

func notConfigured(format string, a ...any) error {
	return &StateError{State: StateNotConfigured, Reason: fmt.Sprintf(format, a...)}
}

func noHardware(format string, a ...any) error {
	return &StateError{State: StateNoHardware, Reason: fmt.Sprintf(format, a...)}
}

func sourceMissing(path, fix, format string, a ...any) error {
	reason := fmt.Sprintf(format, a...)
	if fix != "" {
		reason += ": " + fix
	}
	return &StateError{State: StateSourceMissing, Reason: reason, Path: path, Fix: fix}
}

// classify turns an Update error into a state and a reason. A bare
// ErrNoData (from a collector that does not say more) is no_hardware.
func classify(err error) (State, string) {
	if err == nil {
		return StateOK, ""
	}
	var se *StateError
	if errors.As(err, &se) {
		return se.State, boundReason(se.Reason)
	}
	if errors.Is(err, ErrNoData) {
		return StateNoHardware, boundReason(err.Error())
	}
	return StateFailed, boundReason(err.Error())
}

// boundReason cuts a reason to maxReasonLen bytes at a UTF-8 boundary.
func boundReason(s string) string {
	if len(s) <= maxReasonLen {
		return s
	}
	cut := maxReasonLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// sysfsFix and procfsFix are the likely fixes of a wrong root.
const (
	sysfsFix  = "mount the host's /sys there (docker run -v /sys:/host/sys:ro --path.sysfs=/host/sys) or correct --path.sysfs"
	procfsFix = "mount the host's /proc there (docker run --pid host -v /proc:/host/proc:ro --path.procfs=/host/proc) or correct --path.procfs"
)

// checkSysfs explains why a directory under --path.sysfs is missing: the
// root itself is wrong (source_missing) or the host has none of the
// hardware (no_hardware, with reason).
func checkSysfs(root, reason string) error {
	if err := sysfsRootError(root); err != nil {
		return err
	}
	return noHardware("%s", reason)
}

// sysfsRootError returns a source_missing error when --path.sysfs does not
// look like a sysfs (no class/ and devices/ directories in it).
func sysfsRootError(root string) error {
	for _, d := range []string{"class", "devices"} {
		if fi, err := os.Stat(filepath.Join(root, d)); err != nil || !fi.IsDir() {
			if _, err := os.Stat(root); err != nil {
				return sourceMissing(root, sysfsFix, "--path.sysfs %s does not exist", root)
			}
			return sourceMissing(root, sysfsFix, "--path.sysfs %s is not a sysfs (no %s/ in it)", root, d)
		}
	}
	return nil
}

// checkProcfs returns a source_missing error when --path.procfs is not a
// procfs (no readable stat in it), nil otherwise.
func checkProcfs(root string) error {
	f, err := os.Open(filepath.Join(root, "stat"))
	if err != nil {
		if _, err := os.Stat(root); err != nil {
			return sourceMissing(root, procfsFix, "--path.procfs %s does not exist", root)
		}
		return sourceMissing(root, procfsFix, "--path.procfs %s is not a procfs (no readable stat in it)", root)
	}
	f.Close()
	return nil
}

// stateTracker remembers a collector's latest state, logs its changes and
// caches the state series.
type stateTracker struct {
	name   string
	logger log.Logger
	family *exposition.Family // fabric_collector_state_info

	mu     sync.Mutex
	state  State
	reason string
	known  bool // a state was recorded
	series *exposition.Series
	failed map[string]bool // failed reasons already logged
}

// CollectorState is a collector's latest state, for the landing page.
type CollectorState struct {
	Name   string
	State  State
	Reason string
}

// record sets the state from an Update error, logs a change and returns
// the state series.
func (t *stateTracker) record(err error) (*exposition.Series, State) {
	st, reason := classify(err)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.known && st == t.state && reason == t.reason {
		return t.series, st
	}
	prev, had := t.state, t.known
	t.state, t.reason, t.known = st, reason, true
	t.series = t.family.With(t.name, string(st), reason)
	kv := []any{"msg", "collector state", "state", string(st)}
	if reason != "" {
		kv = append(kv, "reason", reason)
	}
	if had {
		kv = append(kv, "previous", string(prev))
	}
	switch st {
	case StateOK:
		t.failed = nil
		if had {
			level.Info(t.logger).Log(kv...)
		}
	case StateNotConfigured, StateNoHardware:
		level.Info(t.logger).Log(kv...)
	case StateSourceMissing:
		var se *StateError
		if errors.As(err, &se) && se.Path != "" {
			kv = append(kv, "path", se.Path)
		}
		if se != nil && se.Fix != "" {
			kv = append(kv, "fix", se.Fix)
		}
		level.Warn(t.logger).Log(kv...)
	case StateFailed:
		if t.failed == nil {
			t.failed = map[string]bool{}
		}
		if !t.failed[reason] && len(t.failed) < 64 {
			t.failed[reason] = true
			level.Error(t.logger).Log(kv...)
		}
	}
	return t.series, st
}

func (t *stateTracker) get() CollectorState {
	t.mu.Lock()
	defer t.mu.Unlock()
	return CollectorState{Name: t.name, State: t.state, Reason: t.reason}
}
