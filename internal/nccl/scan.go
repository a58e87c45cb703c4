package nccl

import (
	"errors"
	"fmt"
	"path/filepath"
)

// ScanResult is what ScanLog read.
type ScanResult struct {
	Bytes, Lines, Unparsed int64
	Processes              int
}

// ScanLog reads the files of one glob once through the Follower and the
// Tracker, the code the exporter's nccl collector runs (tools/ncclbench
// measures it).
func ScanLog(glob string) (ScanResult, error) {
	if _, err := filepath.Match(glob, ""); err != nil {
		return ScanResult{}, fmt.Errorf("%q: %w", glob, err)
	}
	t := NewTracker(TrackerOptions{})
	f := NewFollower([]string{glob}, t)
	f.Yield = func() {}
	f.Poll(func() bool { return false })
	if _, files := f.Backlog(); files == 0 {
		return ScanResult{}, errors.New("no file matches " + glob)
	}
	var r ScanResult
	t.View(func(procs []*Process, st Stats) {
		r = ScanResult{Bytes: int64(st.Bytes), Lines: int64(st.Lines), Unparsed: int64(st.Unparsed), Processes: len(procs)}
	})
	return r, nil
}
