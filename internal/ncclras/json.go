package ncclras

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
)

type jsonAnswer struct {
	Version       *string     `json:"nccl_version"`
	Communicators []jsonComm  `json:"communicators"`
	RAS           jsonRASInfo `json:"ras"`
}

type jsonRASInfo struct {
	Timeouts int `json:"timeouts_count"`
}

type jsonComm struct {
	Hash         string        `json:"hash"`
	Size         int           `json:"size"`
	MissingCount int           `json:"missing_ranks_count"`
	Ranks        []jsonRank    `json:"ranks"`
	Missing      []jsonMissing `json:"missing_ranks"`
}

type jsonRank struct {
	Rank    int    `json:"rank"`
	Host    string `json:"host"`
	PID     *int   `json:"pid"`
	CUDADev *int   `json:"cuda_dev"`
	NVMLDev int    `json:"nvml_dev"`
	Status  *struct {
		InitState      int  `json:"init_state"`
		AsyncError     int  `json:"async_error"`
		FinalizeCalled bool `json:"finalize_called"`
		DestroyFlag    bool `json:"destroy_flag"`
		AbortFlag      bool `json:"abort_flag"`
	} `json:"status"`
	Collectives map[string]uint64 `json:"collective_counts"`
}

type jsonMissing struct {
	Rank    int    `json:"rank"`
	Host    string `json:"host"`
	PID     *int   `json:"pid"`
	CUDADev *int   `json:"cuda_dev"`
	Status  *struct {
		Unresponsive bool `json:"unresponsive"`
		Dead         bool `json:"considered_dead"`
	} `json:"status"`
}

// ParseJSON parses a JSON STATUS answer (NCCL 2.28.7 and later).
func ParseJSON(data []byte) (*Status, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return nil, errors.New("ncclras: the JSON answer is not an object")
	}
	var a jsonAnswer
	if err := json.Unmarshal(repairJSON(data), &a); err != nil {
		return nil, fmt.Errorf("ncclras: JSON answer: %w", err)
	}
	if a.Version == nil {
		return nil, errors.New("ncclras: JSON answer without nccl_version")
	}
	st := &Status{Format: "json", Version: *a.Version, Timeouts: a.RAS.Timeouts}
	hosts, procs := map[string]struct{}{}, map[string]struct{}{}
	for _, jc := range a.Communicators {
		h, ok := normHash(jc.Hash)
		if !ok {
			return nil, fmt.Errorf("ncclras: JSON answer: communicator hash %q", trunc(jc.Hash))
		}
		c := Communicator{Hash: h, Size: jc.Size}
		for _, jr := range jc.Ranks {
			r := Rank{Rank: jr.Rank, Host: jr.Host, PID: intOr(jr.PID, -1), CUDADev: intOr(jr.CUDADev, -1), NVMLDev: jr.NVMLDev}
			if s := jr.Status; s != nil {
				r.HasStatus = true
				r.InitState, r.AsyncError = s.InitState, s.AsyncError
				r.FinalizeCalled, r.DestroyFlag, r.AbortFlag = s.FinalizeCalled, s.DestroyFlag, s.AbortFlag
			}
			r.Collectives = opCounts(jr.Collectives)
			c.Ranks = append(c.Ranks, r)
			hosts[r.Host] = struct{}{}
			procs[fmt.Sprint(r.Host, "/", r.PID)] = struct{}{}
		}
		for _, jm := range jc.Missing {
			m := MissingRank{Rank: jm.Rank, Host: jm.Host, PID: intOr(jm.PID, -1), CUDADev: intOr(jm.CUDADev, -1)}
			if s := jm.Status; s != nil {
				// rasDumpCommsToJSON: unresponsive is "not among the
				// peers that answered", the test rasClientRunComms
				// makes between INCOMPLETE and NOCOMM.
				m.Unresponsive, m.Dead, m.NoComm = s.Unresponsive, s.Dead, !s.Unresponsive
			}
			if m.NoComm {
				c.NoCommCount++
			} else {
				c.MissingCount++ // unresponsive, or no status to tell
			}
			c.Missing = append(c.Missing, m)
			hosts[m.Host] = struct{}{}
			procs[fmt.Sprint(m.Host, "/", m.PID)] = struct{}{}
		}
		if n := jc.MissingCount - len(jc.Missing); n > 0 {
			c.MissingCount += n // counted but not listed: no answer to tell otherwise
		}
		c.judge()
		st.Communicators = append(st.Communicators, c)
	}
	st.Nodes, st.Processes = len(hosts), len(procs)
	return st, nil
}

func intOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

// opCounts bounds the operation names (OpName) and sorts them in Ops'
// order, "other" last.
func opCounts(m map[string]uint64) []OpCount {
	if len(m) == 0 {
		return nil
	}
	sum := map[string]uint64{}
	for k, v := range m {
		sum[OpName(k)] += v
	}
	out := make([]OpCount, 0, len(sum))
	for k, v := range sum {
		out = append(out, OpCount{k, v})
	}
	idx := func(op string) int {
		for i, o := range Ops {
			if o == op {
				return i
			}
		}
		return len(Ops)
	}
	sort.Slice(out, func(i, j int) bool { return idx(out[i].Op) < idx(out[j].Op) })
	return out
}

// repairJSON inserts the comma JSON needs between two values that follow
// each other with only white space between them (NCCL 2.28.7 to 2.28.9
// write `"nvml_dev": 0` and then `"status": {` without one in every
// missing rank). Valid JSON never has two such values, so a valid answer
// passes unchanged; anything else stays invalid for the decoder.
func repairJSON(in []byte) []byte {
	var out []byte // nil until the first repair
	afterValue := false
	for i := 0; i < len(in); {
		c := in[i]
		start := i
		switch {
		case c == '"':
			j := i + 1
			for j < len(in) && in[j] != '"' {
				if in[j] == '\\' {
					j++
				}
				j++
			}
			i = j + 1
		case c == '{' || c == '[' || c == ',' || c == ':':
			i++
		case c == '}' || c == ']':
			i++
			afterValue = true
			if out != nil {
				out = append(out, c)
			}
			continue
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
			if out != nil {
				out = append(out, c)
			}
			continue
		default: // number or literal
			j := i
			for j < len(in) && isBare(in[j]) {
				j++
			}
			if j == i {
				j++
			}
			i = j
		}
		valueStart := c == '"' || c == '{' || c == '[' || isBare(c)
		if afterValue && valueStart {
			if out == nil {
				out = append(make([]byte, 0, len(in)+16), in[:start]...)
			}
			out = append(out, ',')
		}
		if out != nil {
			out = append(out, in[start:min(i, len(in))]...)
		}
		afterValue = c == '"' || isBare(c)
	}
	if out == nil {
		return in
	}
	return out
}

func isBare(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '+' || c == '.'
}

func trunc(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
