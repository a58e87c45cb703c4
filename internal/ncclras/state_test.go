package ncclras

import "testing"

func TestRankStateAndFailed(t *testing.T) {
	for _, tc := range []struct {
		r      Rank
		state  string
		failed bool
	}{
		{Rank{HasStatus: true}, StateRunning, false},
		{Rank{HasStatus: true, InitState: InProgress}, StateInit, false},
		{Rank{HasStatus: true, InitState: InProgress, AsyncError: InProgress}, StateInit, false},
		{Rank{HasStatus: true, AsyncError: InProgress}, StateRunning, false},
		{Rank{HasStatus: true, InitState: 3}, StateInit, true},
		{Rank{HasStatus: true, AsyncError: 6}, StateRunning, true},
		{Rank{HasStatus: true, FinalizeCalled: true}, StateFinalize, false},
		{Rank{HasStatus: true, DestroyFlag: true}, StateFinalize, false},
		{Rank{HasStatus: true, DestroyFlag: true, InitState: InProgress}, StateFinalize, false},
		{Rank{HasStatus: true, AbortFlag: true, DestroyFlag: true, AsyncError: 6}, StateAbort, true},
		{Rank{AsyncError: 6}, "", true},                                     // text: named by an ERROR entry only
		{Rank{TextState: StateFinalize}, StateFinalize, false},              // text: named by a MISMATCH entry
		{Rank{AsyncError: UnknownError}, "", true},                          // "Unexpected error"
		{Rank{HasStatus: true, TextState: StateAbort}, StateRunning, false}, // JSON fields win
	} {
		if s, f := tc.r.State(), tc.r.Failed(); s != tc.state || f != tc.failed {
			t.Errorf("%+v: State %q Failed %v, want %q %v", tc.r, s, f, tc.state, tc.failed)
		}
	}
}

// TestJudge: RAS's judgements of a communicator as rasClientRunComms
// makes them.
func TestJudge(t *testing.T) {
	run := Rank{HasStatus: true, Collectives: []OpCount{{"AllReduce", 5}}}
	ops := func(r Rank, c ...OpCount) Rank { r.Collectives = c; return r }
	set := func(r Rank, f func(*Rank)) Rank { f(&r); return r }
	for _, tc := range []struct {
		name                        string
		c                           Communicator
		status                      string
		incomplete, error, mismatch bool
	}{
		{"agree", Communicator{Ranks: []Rank{run, run}}, StateRunning, false, false, false},
		{"counts", Communicator{Ranks: []Rank{run, ops(run, OpCount{"AllReduce", 4})}}, StateRunning, false, false, true},
		{"absent op is 0", Communicator{Ranks: []Rank{ops(run, OpCount{"AllReduce", 5}, OpCount{"Broadcast", 0}), run}}, StateRunning, false, false, false},
		{"nocomm", Communicator{NoCommCount: 1, Ranks: []Rank{run}}, StateRunning, false, false, true},
		{"missing", Communicator{MissingCount: 1, Ranks: []Rank{run}}, StateRunning, true, false, false},
		{"in progress", Communicator{Ranks: []Rank{
			set(run, func(r *Rank) { r.InitState, r.AsyncError = InProgress, InProgress }),
			set(run, func(r *Rank) { r.InitState, r.AsyncError = InProgress, InProgress })}}, StateInit, false, false, false},
		{"one initialized", Communicator{Ranks: []Rank{run, set(run, func(r *Rank) { r.InitState = InProgress })}}, StateRunning, false, false, true},
		{"finalize", Communicator{Ranks: []Rank{run, set(run, func(r *Rank) { r.DestroyFlag = true })}}, StateFinalize, false, false, true},
		{"all finalize", Communicator{Ranks: []Rank{
			set(run, func(r *Rank) { r.FinalizeCalled = true }),
			set(run, func(r *Rank) { r.DestroyFlag = true })}}, StateFinalize, false, false, false},
		{"abort", Communicator{Ranks: []Rank{
			set(run, func(r *Rank) { r.AbortFlag, r.DestroyFlag, r.AsyncError = true, true, 6 }), run}}, StateAbort, false, true, true},
	} {
		c := tc.c
		c.judge()
		if c.Status != tc.status || c.Incomplete != tc.incomplete || c.Error != tc.error || c.Mismatch != tc.mismatch {
			t.Errorf("%s: status %q incomplete %v error %v mismatch %v", tc.name, c.Status, c.Incomplete, c.Error, c.Mismatch)
		}
	}
}
