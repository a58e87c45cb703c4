package ncclras

import (
	"bufio"
	"bytes"
	"errors"
	"regexp"
	"strconv"
	"strings"
)

// The lines of the text answer (format strings of client_support.cc).
var (
	reVersion   = regexp.MustCompile(`^NCCL version (\S+) compiled with CUDA`)
	reGroupRow  = regexp.MustCompile(`^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+(?:-\d+)?)\s+(\d+)\s+(\d+)\s+([A-Z]+)\s+([A-Z,]+)\s*$`)
	reEntry     = regexp.MustCompile(`^#(\d+)-(\d+) \(([0-9a-fA-F]{1,16})\) (INCOMPLETE|ERROR|MISMATCH)$`)
	reProcess   = regexp.MustCompile(`^  Process (\d+) on node (\S+) managing GPUs? (.*)$`)
	reMissingN  = regexp.MustCompile(`^  Missing communicator data from (\d+) ranks?$`)
	reMissingLs = regexp.MustCompile(`^  The missing ranks?: ([0-9,]+)$`)
	// "Rank 3 -- GPU 0 managed by process 659 on node 10.0.0.1" and the
	// variants with "reported <error>", "has launched up to operation
	// <n>", "has status <s>", "has not launched any operations" before
	// " -- ", and "[process information not found]" after it.
	reRank     = regexp.MustCompile(`^  Rank (\d+)(?: (.*?))? -- (?:GPU (.+) managed by process (\d+) on node (\S+)|\[process information not found\])$`)
	reNReports = regexp.MustCompile(`^  \d+ ranks reported (.+)$`)
	// A MISMATCH entry's status part: "N ranks have status S" before the
	// ranks of that status (when more than one), "Rank N has status S
	// -- …" (one, reRank); 2.24 and 2.25 name the UNKNOWN ranks by number
	// only: "The unknown ranks: 1,3", "Rank 3 has status UNKNOWN".
	reNStatus    = regexp.MustCompile(`^  (\d+) ranks have status ([A-Z]+)$`)
	reUnknownLs  = regexp.MustCompile(`^  The unknown ranks: ([0-9,]+)$`)
	reRankStatus = regexp.MustCompile(`^  Rank (\d+) has status ([A-Z]+)$`)
)

// ParseText parses a text STATUS answer (every NCCL version with RAS).
func ParseText(data []byte) (*Status, error) {
	st := &Status{Format: "text"}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	var (
		section string // "", "summary", "comms", "errors", "warnings"
		summary int    // job summary lines seen
		e       textEntry
	)
	byHash := map[string]int{}
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if st.Version == "" {
			if m := reVersion.FindStringSubmatch(line); m != nil {
				st.Version = strings.SplitN(m[1], "+", 2)[0]
			}
		}
		switch {
		case line == "Job summary":
			section = "summary"
			continue
		case strings.HasPrefix(line, "Communicators..."):
			section = "comms"
			continue
		case line == "Errors":
			section = "errors"
			continue
		case line == "Warnings":
			section = "warnings"
			continue
		case line == "" || strings.HasPrefix(line, "==="):
			e = textEntry{}
			continue
		}
		switch section {
		case "summary":
			f := strings.Fields(line)
			if len(f) >= 2 && allDigits(f[0]) && summary == 0 {
				st.Nodes, _ = strconv.Atoi(f[0])
				if len(f) >= 4 {
					st.Processes, _ = strconv.Atoi(f[3])
				}
				summary++
			}
		case "comms":
			if m := reGroupRow.FindStringSubmatch(line); m != nil {
				g := Group{RanksPerNode: m[4], Status: m[7], Errors: m[8]}
				g.Index, _ = strconv.Atoi(m[1])
				g.Comms, _ = strconv.Atoi(m[2])
				g.NodesPerComm, _ = strconv.Atoi(m[3])
				g.RanksPerComm, _ = strconv.Atoi(m[5])
				g.RanksInGroup, _ = strconv.Atoi(m[6])
				st.Groups = append(st.Groups, g)
			}
		case "errors", "warnings":
			if line[0] != ' ' { // an entry's header
				e = textEntry{name: line}
				if m := reEntry.FindStringSubmatch(line); m != nil {
					h, _ := normHash(m[3])
					i, ok := byHash[h]
					if !ok {
						c := Communicator{Hash: h}
						if g, err := strconv.Atoi(m[1]); err == nil {
							for _, gr := range st.Groups {
								if gr.Index == g {
									c.Size, c.Nodes, c.Status = gr.RanksPerComm, gr.NodesPerComm, normState(gr.Status)
								}
							}
						}
						st.Communicators = append(st.Communicators, c)
						i = len(st.Communicators) - 1
						byHash[h] = i
					}
					e.comm = &st.Communicators[i]
					e.name = m[4]
					switch e.name {
					case "INCOMPLETE":
						e.comm.Incomplete = true
					case "ERROR":
						e.comm.Error = true
					case "MISMATCH":
						e.comm.Mismatch = true
					}
				}
				continue
			}
			e.detail(st, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, errors.New("ncclras: text answer: " + err.Error())
	}
	if st.Version == "" {
		return nil, errors.New("ncclras: text answer without an \"NCCL version\" line")
	}
	return st, nil
}

// textEntry is the Errors or Warnings entry being read.
type textEntry struct {
	name   string        // INCOMPLETE, ERROR, MISMATCH (communicator entries), DEAD, TIMEOUT, …
	comm   *Communicator // the communicator it names
	inInit bool          // ERROR: inside the initialization errors
	errStr string        // ERROR: the error of "N ranks reported X"
	part   string        // MISMATCH: "status" or "counts", the part being read
	status string        // MISMATCH status part: the status of "N ranks have status S"
}

// detail reads one indented line of an entry.
func (e *textEntry) detail(st *Status, line string) {
	comm := e.comm
	if comm == nil {
		if m := reProcess.FindStringSubmatch(line); m != nil {
			pid, _ := strconv.Atoi(m[1])
			p := Process{PID: pid, Host: m[2], GPUs: m[3]}
			switch e.name {
			case "DEAD":
				st.DeadProcesses = append(st.DeadProcesses, p)
			case "INCOMPLETE":
				st.MissingProcesses = append(st.MissingProcesses, p)
			}
		}
		if e.name == "TIMEOUT" {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "Encountered" {
				st.Timeouts, _ = strconv.Atoi(f[1])
			}
		}
		return
	}
	switch e.name {
	case "INCOMPLETE":
		if m := reMissingN.FindStringSubmatch(line); m != nil {
			comm.MissingCount, _ = strconv.Atoi(m[1])
			return
		}
		if m := reMissingLs.FindStringSubmatch(line); m != nil { // 2.24, 2.25
			for _, s := range strings.Split(m[1], ",") {
				if r, err := strconv.Atoi(s); err == nil {
					addMissing(comm, MissingRank{Rank: r, PID: -1, CUDADev: -1})
				}
			}
			return
		}
		// 2.26 and later name only the ranks whose process did not
		// answer (rasClientRunComms filters out the NOCOMM ones).
		if m := reRank.FindStringSubmatch(line); m != nil && m[2] == "" {
			mr := missingRank(m)
			mr.Unresponsive = true
			mr.Dead = isDead(st, mr)
			addMissing(comm, mr)
		}
	case "ERROR":
		switch {
		case strings.HasPrefix(line, "  Initialization error"):
			e.inInit, e.errStr = true, ""
			return
		case strings.HasPrefix(line, "  Asynchronous error"):
			e.inInit, e.errStr = false, ""
			return
		}
		if m := reNReports.FindStringSubmatch(line); m != nil {
			e.errStr = m[1]
			return
		}
		m := reRank.FindStringSubmatch(line)
		if m == nil {
			return
		}
		es := e.errStr
		if strings.HasPrefix(m[2], "reported ") {
			es = strings.TrimPrefix(m[2], "reported ")
		} else if m[2] != "" {
			return
		}
		if es == "" {
			return
		}
		r := textRank(comm, m)
		if e.inInit {
			r.InitState = errorCode(es)
		} else {
			r.AsyncError = errorCode(es)
		}
	case "MISMATCH":
		e.mismatch(comm, line)
	}
}

// mismatch reads a line of a MISMATCH entry. Its status part ("different
// status") lists the statuses by frequency, most frequent first: "N ranks
// have status S" when more than one has it, then its outliers "Rank R --
// GPU …"; a status only one rank has is "Rank R has status S -- GPU …".
// NOCOMM (2.26 and later) ranks' processes answered without the
// communicator. UNKNOWN (2.24, 2.25) are all the missing ranks: NOCOMM
// when no process is missing or dead, else the INCOMPLETE entry before
// counted them (rasClientRunComms of v2.25.1-1) and they stay missing.
func (e *textEntry) mismatch(comm *Communicator, line string) {
	if rest, ok := strings.CutPrefix(line, "  Communicator ranks have different "); ok {
		e.part, e.status = "counts", ""
		if rest == "status" {
			e.part = "status"
		}
		return
	}
	if e.part != "status" {
		return
	}
	noComm := func(word string) bool { return word == "NOCOMM" || word == "UNKNOWN" && !comm.Incomplete }
	addNoComm := func(word string, mr MissingRank) {
		mr.NoComm = noComm(word)
		addMissing(comm, mr)
		if mr.NoComm && comm.NoCommCount == 0 {
			comm.NoCommCount = 1 // a status only this rank has; more come with "N ranks have status"
		}
	}
	if m := reNStatus.FindStringSubmatch(line); m != nil {
		e.status = m[2]
		if noComm(m[2]) {
			comm.NoCommCount, _ = strconv.Atoi(m[1])
		}
		return
	}
	if m := reUnknownLs.FindStringSubmatch(line); m != nil { // 2.24, 2.25
		for _, s := range strings.Split(m[1], ",") {
			if r, err := strconv.Atoi(s); err == nil {
				addNoComm("UNKNOWN", MissingRank{Rank: r, PID: -1, CUDADev: -1})
			}
		}
		return
	}
	if m := reRankStatus.FindStringSubmatch(line); m != nil { // 2.24, 2.25: "Rank 3 has status UNKNOWN"
		if r, err := strconv.Atoi(m[1]); err == nil && m[2] == "UNKNOWN" {
			addNoComm(m[2], MissingRank{Rank: r, PID: -1, CUDADev: -1})
		}
		return
	}
	m := reRank.FindStringSubmatch(line)
	if m == nil {
		return
	}
	word := e.status
	if s, ok := strings.CutPrefix(m[2], "has status "); ok {
		word = s
	} else if m[2] != "" {
		return
	}
	switch normState(word) {
	case "":
	case StateNoComm:
		addNoComm(word, missingRank(m))
	default:
		textRank(comm, m).TextState = word
	}
}

// missingRank is the missing rank a reRank match names.
func missingRank(m []string) MissingRank {
	r, _ := strconv.Atoi(m[1])
	mr := MissingRank{Rank: r, PID: -1, CUDADev: -1, Host: m[5]}
	if m[4] != "" {
		mr.PID, _ = strconv.Atoi(m[4])
		mr.CUDADev = gpuNumber(m[3])
	}
	return mr
}

// addMissing adds a missing rank, or fills in the one of that number.
func addMissing(c *Communicator, mr MissingRank) {
	for i := range c.Missing {
		if o := &c.Missing[i]; o.Rank == mr.Rank {
			if o.PID < 0 && mr.PID >= 0 {
				o.Host, o.PID, o.CUDADev = mr.Host, mr.PID, mr.CUDADev
			}
			o.Unresponsive, o.Dead, o.NoComm = o.Unresponsive || mr.Unresponsive, o.Dead || mr.Dead, o.NoComm || mr.NoComm
			return
		}
	}
	c.Missing = append(c.Missing, mr)
}

// isDead reports whether the DEAD entry (before the communicators'
// entries) names the missing rank's process.
func isDead(st *Status, mr MissingRank) bool {
	if mr.PID < 0 {
		return false
	}
	for _, p := range st.DeadProcesses {
		if p.PID == mr.PID && p.Host == mr.Host {
			return true
		}
	}
	return false
}

// textRank returns the communicator's rank a reRank match names, adding it
// when new.
func textRank(c *Communicator, m []string) *Rank {
	n, _ := strconv.Atoi(m[1])
	for i := range c.Ranks {
		if c.Ranks[i].Rank == n {
			return &c.Ranks[i]
		}
	}
	r := Rank{Rank: n, PID: -1, CUDADev: -1, NVMLDev: -1, Host: m[5]}
	if m[4] != "" {
		r.PID, _ = strconv.Atoi(m[4])
		r.CUDADev = gpuNumber(m[3])
	}
	c.Ranks = append(c.Ranks, r)
	return &c.Ranks[len(c.Ranks)-1]
}

// gpuNumber reads "3" or "3 (NVML 5)" as 3; -1 otherwise.
func gpuNumber(s string) int {
	f := strings.Fields(s)
	if len(f) == 0 {
		return -1
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return -1
	}
	return n
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
