// Package ncclras queries NCCL's RAS service and parses its answers.
//
// Every NCCL process (2.24 and later, NCCL_RAS_ENABLE=1 by default) runs a
// RAS thread; the processes of one host share a client listening socket
// (NCCL_RAS_ADDR, default localhost:28028, bound with SO_REUSEPORT, so the
// kernel hands each connection to one of them), and the RAS network
// spans the job: one query answers for every rank of every communicator.
// The protocol, from src/ras/client.cc and client_support.cc of
// NVIDIA/nccl (v2.24.3-1 to v2.30.7-1), is a line protocol:
//
//	CLIENT PROTOCOL 2      → SERVER PROTOCOL 2   (2 in every release so far)
//	TIMEOUT <s>            → OK                  (optional: RAS's collective leg timeout;
//	                                              default 5 s × NCCL_RAS_TIMEOUT_FACTOR)
//	SET FORMAT json        → OK                  (2.28.7 and later; older servers
//	                                              answer "ERROR: Unknown command …")
//	STATUS | VERBOSE STATUS → the answer, until the server closes the connection
//
// Invalid commands answer "ERROR: …" and leave the connection open. Query
// sends TIMEOUT only when Options.RASTimeout asks for it, as NCCL's own
// ncclras client sends it only with -t (client.cc).
//
// Answers:
//
//   - JSON (2.28.7+): one object with nccl_version, communicators (hash,
//     size, ranks_count, missing_ranks_count, ranks with host, pid,
//     cuda_dev, nvml_dev, status {init_state, async_error,
//     finalize_called, destroy_flag, abort_flag} and collective_counts per
//     operation; missing_ranks with status {unresponsive,
//     considered_dead}) and ras {collection_time_sec, timeouts_count}.
//     2.28.7 to 2.28.9 omit the comma after a missing rank's nvml_dev
//     (fixed in 2.29): ParseJSON repairs a missing comma between two
//     members before decoding. The JSON answer carries no judgement; Parse
//     derives RAS's own (INCOMPLETE, ERROR, MISMATCH and the status) from
//     the data as rasClientRunComms does for the text answer: a missing
//     rank whose process answered the query without the communicator
//     (unresponsive false: not created yet, or destroyed) is NOCOMM, a
//     MISMATCH; only a missing rank whose process did not answer is
//     INCOMPLETE. See judge in state.go.
//   - Text (every version): a job summary, a table of communicator groups
//     (no hashes; the group's status and errors), then Errors and Warnings
//     entries that name communicators by hash ("#<group>-<index>
//     (<%016lx hash>) INCOMPLETE | ERROR | MISMATCH") and ranks by pid and
//     node, only for outliers (at most 10 and a quarter of the ranks; half
//     with VERBOSE). 2.24 and 2.25 list missing ranks by number only ("The
//     missing ranks: 1,3"), call a rank without the communicator UNKNOWN
//     (NOCOMM from 2.26) and report one collective count ("different
//     collective operation counts"); 2.26 to 2.30 name each missing rank's
//     pid and node and the operation whose counts differ. The text answer
//     has no per-rank collective counts.
//
// Hashes are normalized to the JSON form ("0x" and lower-case hex without
// leading zeros), the form the NCCL Inspector prints too.
package ncclras

// Status is one RAS answer.
type Status struct {
	Format    string // "json" or "text"
	Version   string // NCCL version of the answering process ("2.28.9")
	Protocol  int    // SERVER PROTOCOL (0 when not queried)
	Nodes     int    // nodes of the job (text: job summary; JSON: distinct hosts of all ranks)
	Processes int    // processes of the job (text job summary; JSON: distinct host/pid)
	Timeouts  int    // RAS communication timeouts while gathering
	// Communicators: every one (JSON); those named in Errors or Warnings (text).
	Communicators []Communicator
	// Groups is the text answer's table of communicator groups.
	Groups []Group
	// DeadProcesses and MissingProcesses are the text answer's job-wide
	// DEAD and INCOMPLETE entries.
	DeadProcesses    []Process
	MissingProcesses []Process
}

// Group is one row of the text answer's communicator table.
type Group struct {
	Index, Comms, NodesPerComm, RanksPerComm, RanksInGroup int
	RanksPerNode                                           string // "8" or "7-8"
	Status                                                 string // NOCOMM (UNKNOWN ≤2.25), INIT, RUNNING, FINALIZE, ABORT
	Errors                                                 string // OK, MISMATCH, ERROR, INCOMPLETE or a comma list
}

// Process is a job process a text entry names.
type Process struct {
	PID  int
	Host string
	GPUs string
}

// Communicator is one NCCL communicator.
type Communicator struct {
	Hash  string // "0xf8e68da1f581fed5"
	Size  int    // ranks (0: unknown)
	Nodes int    // distinct hosts of its ranks (0: unknown)
	// MissingCount is RAS's INCOMPLETE count (nIncompleteRanks in
	// rasClientRunComms): ranks whose process did not answer the query.
	// JSON: the missing ranks with unresponsive true (a dead process does
	// not answer), plus any missing_ranks_count counts beyond the ranks
	// listed; text: the INCOMPLETE entry's "Missing communicator data from
	// N ranks" (2.24 and 2.25 count every missing rank there when any
	// process is missing or dead).
	MissingCount int
	// NoCommCount is the number of ranks whose process answered without
	// this communicator (RAS's NOCOMM, UNKNOWN in 2.24 and 2.25): not yet
	// created there, or already destroyed (ncclCommDestroy, ncclCommAbort).
	// NCCL makes them a MISMATCH, not INCOMPLETE. Text: the MISMATCH
	// entry's "N ranks have status NOCOMM", else the NOCOMM ranks it lists
	// (a single one is always listed); 0 when RAS reports no status
	// MISMATCH.
	NoCommCount int
	Ranks       []Rank        // the ranks that answered (JSON); those an entry names (text)
	Missing     []MissingRank // the missing ranks RAS can name, NOCOMM ones with NoComm set
	// Status is the communicator's status as RAS's table prints it: the
	// highest of its ranks' states (State), NOCOMM lowest: ABORT >
	// FINALIZE > RUNNING > INIT > NOCOMM (statusStr and the rasACStatus
	// bitmask of client_support.cc). Text: the group's Status column
	// (UNKNOWN read as NOCOMM); "" when unknown.
	Status string
	// RAS's judgements (rasClientRunComms): INCOMPLETE (MissingCount > 0),
	// ERROR (a rank's initialization or asynchronous error other than
	// ncclSuccess and ncclInProgress: Rank.Failed), MISMATCH (NOCOMM
	// ranks, ranks in different states, or different collective counts).
	Incomplete, Error, Mismatch bool
}

// Rank is a rank that answered.
type Rank struct {
	Rank    int
	Host    string // RAS address of its process ("unknown" when RAS does not know)
	PID     int    // -1 when RAS does not know
	CUDADev int    // -1 when unknown
	NVMLDev int
	// HasStatus: the fields below come from the answer (JSON); a text
	// answer sets InitState or AsyncError only on ranks an ERROR entry
	// names, and TextState on ranks a MISMATCH entry names with a status.
	HasStatus      bool
	InitState      int // ncclResult_t of the communicator's initialization (0: success; 7: in progress)
	AsyncError     int // ncclResult_t of ncclCommGetAsyncError (0: none; 6: remote process error; 7: in progress)
	FinalizeCalled bool
	DestroyFlag    bool
	AbortFlag      bool
	// TextState is the status a text MISMATCH entry gives the rank
	// (INIT, RUNNING, FINALIZE, ABORT); "" otherwise and in JSON.
	TextState string
	// Collectives are the collective operations the rank launched, by
	// operation, in RAS's order (JSON only).
	Collectives []OpCount
}

// OpCount is the count of one collective operation.
type OpCount struct {
	Op    string
	Count uint64
}

// MissingRank is a rank RAS has no data from for its communicator.
type MissingRank struct {
	Rank    int
	Host    string // "" or "unknown" when RAS does not know
	PID     int    // -1 when unknown
	CUDADev int    // -1 when unknown
	// Unresponsive: its process did not answer this query (JSON; text:
	// the ranks an INCOMPLETE entry names, 2.26 and later). Dead: RAS
	// considers the process dead (rasPeerIsDead: unreachable over the RAS
	// network; text: its process is in the DEAD entry).
	Unresponsive, Dead bool
	// NoComm: its process answered, without this communicator (RAS's
	// NOCOMM). JSON: unresponsive false, whatever considered_dead says:
	// rasClientRunComms decides on the answer alone. Text: named with
	// status NOCOMM (2.26+), or UNKNOWN (2.24, 2.25) where the
	// communicator is not INCOMPLETE.
	NoComm bool
}

// Ops are the collective operations RAS counts (NCCL_NUM_FUNCTIONS, 5 in
// 2.24 to 2.30, named by ncclFuncToString).
var Ops = []string{"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"}

// OpName bounds an operation name to Ops; anything else is "other".
func OpName(s string) string {
	for _, o := range Ops {
		if o == s {
			return o
		}
	}
	return "other"
}

// Error codes (ncclResult_t) and the strings the text answer prints for
// them (ncclErrorToString in client_support.cc).
var errorStrings = []struct {
	code int
	s    string
}{
	{1, "Unhandled CUDA error"},
	{2, "System error"},
	{3, "Internal error"},
	{4, "Invalid argument"},
	{5, "Invalid usage"},
	{6, "Remote process error"},
	{7, "NCCL operation in progress"},
}

// UnknownError is the code given to an error the text answer names with a
// string NCCL does not map to a ncclResult_t ("Unexpected error").
const UnknownError = -1

func errorCode(s string) int {
	for _, e := range errorStrings {
		if e.s == s {
			return e.code
		}
	}
	return UnknownError
}

// normHash turns "0x00ab…", "00ab…" or "AB…" into "0xab…".
func normHash(s string) (string, bool) {
	if len(s) > 2 && (s[:2] == "0x" || s[:2] == "0X") {
		s = s[2:]
	}
	if s == "" || len(s) > 16 {
		return "", false
	}
	b := make([]byte, 0, 18)
	b = append(b, '0', 'x')
	lead := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
		case c >= 'a' && c <= 'f':
		case c >= 'A' && c <= 'F':
			c += 'a' - 'A'
		default:
			return "", false
		}
		if lead && c == '0' && i < len(s)-1 {
			continue
		}
		lead = false
		b = append(b, c)
	}
	return string(b), true
}
