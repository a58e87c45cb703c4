package ncclras

import "math/bits"

// InProgress is ncclInProgress (ncclResult_t 7): a non-blocking
// communicator's initialization or group call not finished yet. RAS does
// not count it as an error (rasClientRunComms in client_support.cc:
// "initState != ncclSuccess && initState != ncclInProgress", the same for
// asyncError, since 2.24.3).
const InProgress = 7

// NCCL's communicator statuses (statusStr in rasClientRunComms, the
// rasACStatus bits RAS_ACS_NOCOMM 1, INIT 2, RUNNING 4, FINALIZE 8,
// ABORT 16). 2.24 and 2.25 print NOCOMM as "UNKNOWN" (RAS_ACS_UNKNOWN).
const (
	StateNoComm   = "NOCOMM"
	StateInit     = "INIT"
	StateRunning  = "RUNNING"
	StateFinalize = "FINALIZE"
	StateAbort    = "ABORT"
)

// stateNames are the statuses by bit, lowest first.
var stateNames = [...]string{StateNoComm, StateInit, StateRunning, StateFinalize, StateAbort}

func stateBit(s string) uint {
	for i, n := range stateNames {
		if n == s {
			return 1 << i
		}
	}
	return 0
}

// normState reads a status word of the text answer: 2.24 and 2.25's
// UNKNOWN is NOCOMM; anything else not a status is "".
func normState(s string) string {
	if s == "UNKNOWN" {
		return StateNoComm
	}
	if stateBit(s) == 0 {
		return ""
	}
	return s
}

// State is the rank's status as NCCL names it, in rasClientRunComms's
// precedence (client_support.cc, 2.24.3 to 2.30.7): ABORT if abort_flag,
// else FINALIZE if finalize_called or destroy_flag (ncclCommDestroy and
// ncclCommAbort set destroy_flag; an abort is ABORT first), else RUNNING
// if init_state is ncclSuccess, else INIT (ncclInProgress included). A
// text rank has the status its MISMATCH entry names (TextState), ""
// when none names one.
func (r Rank) State() string {
	if !r.HasStatus {
		return r.TextState
	}
	switch {
	case r.AbortFlag:
		return StateAbort
	case r.FinalizeCalled || r.DestroyFlag:
		return StateFinalize
	case r.InitState == 0:
		return StateRunning
	}
	return StateInit
}

// Failed reports an initialization or asynchronous error on the rank:
// a ncclResult_t other than ncclSuccess (0) and ncclInProgress (7), what
// RAS counts as ERROR.
func (r Rank) Failed() bool { return failedCode(r.InitState) || failedCode(r.AsyncError) }

func failedCode(c int) bool { return c != 0 && c != InProgress }

// judge sets Nodes, Status and RAS's judgements of a JSON communicator as
// rasClientRunComms (client_support.cc, 2.28.7 to 2.30.7: the releases
// with JSON) computes them for the text answer:
//
//   - a missing rank whose process did not answer (not found among the
//     answering peers, what the JSON calls unresponsive) is INCOMPLETE
//     (nIncompleteRanks++); one whose process answered is NOCOMM:
//     MISMATCH and the NOCOMM status bit. NCCL takes a shortcut when no
//     process is missing or dead (every missing rank NOCOMM); it differs
//     from the per-rank rule only for a rank whose address RAS does not
//     know, which the JSON cannot tell apart.
//   - each answering rank adds its State to the status bitmask; more than
//     one bit set (COMPILER_POPCOUNT32(status) > 1) is a MISMATCH.
//   - a rank's collective counts different from the first rank's is a
//     MISMATCH.
//   - an init_state or async_error other than ncclSuccess and
//     ncclInProgress is an ERROR (Rank.Failed).
//
// MissingCount and NoCommCount are set before.
func (c *Communicator) judge() {
	hosts := map[string]struct{}{}
	for _, r := range c.Ranks {
		hosts[r.Host] = struct{}{}
	}
	for _, m := range c.Missing {
		hosts[m.Host] = struct{}{}
	}
	c.Nodes = len(hosts)
	var status uint
	if c.NoCommCount > 0 {
		status |= stateBit(StateNoComm)
		c.Mismatch = true
	}
	for _, r := range c.Ranks {
		status |= stateBit(r.State())
		if r.Failed() {
			c.Error = true
		}
		if !sameCounts(r.Collectives, c.Ranks[0].Collectives) {
			c.Mismatch = true
		}
	}
	if bits.OnesCount(status) > 1 {
		c.Mismatch = true
	}
	c.Incomplete = c.MissingCount > 0
	c.Status = statusName(status)
}

// statusName is the highest status of a bitmask, as RAS's table prints
// it (statusStr[31-COMPILER_CLZ(status)]); "" for none.
func statusName(status uint) string {
	if status == 0 {
		return ""
	}
	return stateNames[bits.Len(status)-1]
}

// sameCounts compares two ranks' collective counts, an absent operation
// counting 0 (RAS compares all NCCL_NUM_FUNCTIONS counts).
func sameCounts(a, b []OpCount) bool {
	return countsWithin(a, b) && countsWithin(b, a)
}

func countsWithin(a, b []OpCount) bool {
	for _, x := range a {
		var y uint64
		for _, o := range b {
			if o.Op == x.Op {
				y = o.Count
				break
			}
		}
		if x.Count != y {
			return false
		}
	}
	return true
}
