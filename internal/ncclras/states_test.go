package ncclras

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestParseStates: the constructed answers (testdata/construct.py, from
// NCCL's format strings) of each RAS state, JSON and text, judged as
// rasClientRunComms judges them.
func TestParseStates(t *testing.T) {
	type rank struct {
		n      int
		state  string
		failed bool
	}
	type comm struct {
		hash, status                string
		missing, nocomm             int
		incomplete, error, mismatch bool
		ranks                       []rank
		miss                        []MissingRank
	}
	running := func(n ...int) []rank {
		var rs []rank
		for _, i := range n {
			rs = append(rs, rank{i, StateRunning, false})
		}
		return rs
	}
	noComm := func(r, pid, gpu int) MissingRank {
		return MissingRank{Rank: r, Host: "10.0.0.1", PID: pid, CUDADev: gpu, NoComm: true}
	}
	unknown := func(r int) MissingRank { return MissingRank{Rank: r, PID: -1, CUDADev: -1, NoComm: true} }
	var (
		// (a) rank 1 destroyed its communicator, rank 0 keeps it.
		nocomm = comm{hash: "0x7c41d2e09a3b5f16", status: StateRunning, nocomm: 1, mismatch: true,
			ranks: running(0), miss: []MissingRank{noComm(1, 51201, 1)}}
		nocomm8 = comm{hash: "0x3e9b0c6d1f2a4857", status: StateRunning, nocomm: 2, mismatch: true,
			ranks: running(0, 1, 2, 3, 4, 5), miss: []MissingRank{noComm(6, 52306, 6), noComm(7, 52307, 7)}}
		// (b) non-blocking: rank 0 initialized with a group call in
		// flight, rank 1 still initializing: no ERROR, a status MISMATCH.
		inprogress = comm{hash: "0x11d05e7a2c9f3b64", status: StateRunning, mismatch: true,
			ranks: []rank{{0, StateRunning, false}, {1, StateInit, false}}}
		// (c) finalized on both ranks (one destroyed too): agreement;
		// destroyed on rank 0 only: FINALIZE against RUNNING.
		finalized = comm{hash: "0x2a6f4c81d03e9b57", status: StateFinalize,
			ranks: []rank{{0, StateFinalize, false}, {1, StateFinalize, false}}}
		finalizing = comm{hash: "0x9d3b7e15a8c2f460", status: StateFinalize, mismatch: true,
			ranks: []rank{{0, StateFinalize, false}, {1, StateRunning, false}}}
		// (d) rank 0 aborted (abort_flag and destroy_flag) with a remote
		// error.
		aborted = comm{hash: "0x5f08a3c6e1d94b72", status: StateAbort, error: true, mismatch: true,
			ranks: []rank{{0, StateAbort, true}, {1, StateRunning, false}}}
		// (e) rank 2's process does not answer, rank 3's is dead.
		gone = comm{hash: "0xc4e2a09b7d3f1865", status: StateRunning, missing: 2, incomplete: true, ranks: running(0, 1),
			miss: []MissingRank{{Rank: 2, Host: "10.0.1.2", PID: 42001, CUDADev: 0, Unresponsive: true},
				{Rank: 3, Host: "10.0.1.2", PID: 42002, CUDADev: 1, Unresponsive: true, Dead: true}}}
	)
	// The text answer names only the ranks of its entries.
	textOnly := func(c comm, ranks ...rank) comm { c.ranks = ranks; return c }
	for _, tc := range []struct {
		file     string
		comms    []comm
		timeouts int
	}{
		{file: "2.28.9-json-healthy.txt", comms: []comm{{hash: "0xf8e68da1f581fed5", status: StateRunning, ranks: running(0, 1)}}},
		{file: "2.28.9-json-killed.txt", comms: []comm{{hash: "0xf8e68da1f581fed5", status: StateRunning, missing: 1, incomplete: true, error: true,
			ranks: []rank{{0, StateRunning, true}}, miss: []MissingRank{{Rank: 1, Host: "127.0.0.1", PID: 659, CUDADev: 0, Unresponsive: true}}}}},
		{file: "2.28.9-json-constructed-nocomm.txt", comms: []comm{nocomm}},
		{file: "2.29.7-json-constructed-nocomm-tp8.txt", comms: []comm{nocomm8}},
		{file: "2.29.7-json-constructed-inprogress.txt", comms: []comm{inprogress}},
		{file: "2.29.7-json-constructed-finalize.txt", comms: []comm{finalized, finalizing}},
		{file: "2.28.9-json-constructed-abort.txt", comms: []comm{aborted}},
		{file: "2.29.7-json-constructed-unresponsive-dead.txt", comms: []comm{gone}, timeouts: 1},

		{file: "2.28.9-text-constructed-nocomm.txt", comms: []comm{nocomm}},
		{file: "2.28.9-text-constructed-nocomm-tp8.txt", comms: []comm{textOnly(nocomm8)}},
		{file: "2.28.9-text-constructed-inprogress.txt", comms: []comm{inprogress}},
		{file: "2.28.9-text-constructed-finalize.txt", comms: []comm{finalizing}}, // the agreeing one has no entry
		{file: "2.28.9-text-constructed-abort.txt", comms: []comm{aborted}},
		{file: "2.28.9-text-constructed-unresponsive-dead.txt", comms: []comm{textOnly(gone)}, timeouts: 1},

		{file: "2.25.1-text-constructed-unknown.txt", comms: []comm{func() comm { c := nocomm; c.miss = []MissingRank{unknown(1)}; return c }()}},
		{file: "2.25.1-text-constructed-unknown-tp8.txt", comms: []comm{func() comm {
			c := textOnly(nocomm8)
			c.miss = []MissingRank{unknown(6), unknown(7)}
			return c
		}()}},
		{file: "2.25.1-text-constructed-inprogress.txt", comms: []comm{inprogress}},
		{file: "2.25.1-text-constructed-finalize.txt", comms: []comm{finalizing}},
		{file: "2.25.1-text-constructed-abort.txt", comms: []comm{aborted}},
		// 2.25 names missing ranks by number and cannot tell a dead one.
		{file: "2.25.1-text-constructed-unresponsive-dead.txt", comms: []comm{func() comm {
			c := textOnly(gone)
			c.miss = []MissingRank{{Rank: 2, PID: -1, CUDADev: -1}, {Rank: 3, PID: -1, CUDADev: -1}}
			return c
		}()}, timeouts: 1},
	} {
		st := parseFixture(t, tc.file)
		if len(st.Communicators) != len(tc.comms) || st.Timeouts != tc.timeouts {
			t.Errorf("%s: %d communicators, %d timeouts; want %d, %d", tc.file, len(st.Communicators), st.Timeouts, len(tc.comms), tc.timeouts)
			continue
		}
		for i, w := range tc.comms {
			c := st.Communicators[i]
			if c.Hash != w.hash || c.Status != w.status || c.MissingCount != w.missing || c.NoCommCount != w.nocomm ||
				c.Incomplete != w.incomplete || c.Error != w.error || c.Mismatch != w.mismatch {
				t.Errorf("%s: %s status %q missing %d nocomm %d incomplete %v error %v mismatch %v; want %+v",
					tc.file, c.Hash, c.Status, c.MissingCount, c.NoCommCount, c.Incomplete, c.Error, c.Mismatch, w)
			}
			if len(c.Missing)+len(w.miss) > 0 && !reflect.DeepEqual(c.Missing, w.miss) {
				t.Errorf("%s: %s missing\n got %+v\nwant %+v", tc.file, c.Hash, c.Missing, w.miss)
			}
			if len(c.Ranks) != len(w.ranks) {
				t.Errorf("%s: %s ranks %+v, want %+v", tc.file, c.Hash, c.Ranks, w.ranks)
				continue
			}
			for j, wr := range w.ranks {
				r := c.Ranks[j]
				if r.Rank != wr.n || r.State() != wr.state || r.Failed() != wr.failed {
					t.Errorf("%s: %s rank %d State %q Failed %v; want rank %d %q %v", tc.file, c.Hash, r.Rank, r.State(), r.Failed(), wr.n, wr.state, wr.failed)
				}
			}
		}
	}
}

// TestParseLiveStates: the same states as NCCL 2.28.9 answered them on the
// lent H200 in the drill's container-shaped two-node trials (2026-12-03,
// collector/fixtures/nccl-drill/report-ras-container.txt): a rank that
// destroyed a second group's communicator while the other keeps it
// (NOCOMM, JSON and text), a non-blocking job in flight (in progress at
// init and in a group call), a killed rank of a container.
func TestParseLiveStates(t *testing.T) {
	load := func(file string) *Status {
		t.Helper()
		b, err := os.ReadFile("testdata/" + file)
		if err != nil {
			t.Fatal(err)
		}
		var st *Status
		if strings.Contains(file, "-json-") {
			st, err = ParseJSON(b)
		} else {
			st, err = ParseText(b)
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		return st
	}
	type want struct {
		missing, nocomm             int
		incomplete, error, mismatch bool
		failed                      bool // any rank Failed()
	}
	judge := func(file string, c *Communicator, w want) {
		t.Helper()
		failed := false
		for _, r := range c.Ranks {
			failed = failed || r.Failed()
		}
		got := want{c.MissingCount, c.NoCommCount, c.Incomplete, c.Error, c.Mismatch, failed}
		if got != w {
			t.Errorf("%s %s: %+v, want %+v", file, c.Hash, got, w)
		}
	}
	// NOCOMM: the world communicator complete, the second one with rank 1
	// answering without it.
	for _, f := range []string{"2.28.9-json-live-nocomm.txt", "2.28.9-text-live-nocomm.txt"} {
		st := load(f)
		var found bool
		for i := range st.Communicators {
			c := &st.Communicators[i]
			if c.Mismatch {
				found = true
				w := want{mismatch: true, nocomm: 1}
				if st.Format == "json" {
					if len(c.Missing) != 1 || !c.Missing[0].NoComm || c.Missing[0].Rank != 1 || c.Missing[0].PID != 1 {
						t.Errorf("%s: missing %+v, want rank 1 (pid 1) NOCOMM", f, c.Missing)
					}
				}
				judge(f, c, w)
			} else if st.Format == "json" {
				judge(f, c, want{})
			}
		}
		if !found {
			t.Errorf("%s: no communicator with the NOCOMM mismatch", f)
		}
	}
	// In progress is no error, at init (both ranks initializing) and in a
	// group call.
	st := load("2.28.9-json-live-inprogress-init.txt")
	for _, r := range st.Communicators[0].Ranks {
		if r.InitState != InProgress || r.State() != StateInit || r.Failed() {
			t.Errorf("in progress at init: rank %d init %d state %s failed %v", r.Rank, r.InitState, r.State(), r.Failed())
		}
	}
	judge("inprogress-init", &st.Communicators[0], want{})
	st = load("2.28.9-json-live-inprogress-async.txt")
	for _, r := range st.Communicators[0].Ranks {
		if r.AsyncError != InProgress || r.State() != StateRunning || r.Failed() {
			t.Errorf("in progress in a group call: rank %d async %d state %s failed %v", r.Rank, r.AsyncError, r.State(), r.Failed())
		}
	}
	// Busy: the ranks had launched 198 and 196 all-reduces at that
	// instant, so RAS's MISMATCH; no ERROR.
	judge("inprogress-async", &st.Communicators[0], want{mismatch: true})
	// A killed container rank: missing (pid 1, its own), the survivor's
	// remote error.
	st = load("2.28.9-json-live-container-killed.txt")
	c := &st.Communicators[0]
	judge("container-killed", c, want{missing: 1, incomplete: true, error: true, failed: true})
	if len(c.Missing) != 1 || c.Missing[0].PID != 1 || c.Missing[0].NoComm || c.Missing[0].Host != "10.77.0.2" {
		t.Errorf("container-killed: missing %+v", c.Missing)
	}
}
