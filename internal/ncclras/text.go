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
)

// ParseText parses a text STATUS answer (every NCCL version with RAS).
func ParseText(data []byte) (*Status, error) {
	st := &Status{Format: "text"}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	var (
		section string // "", "summary", "comms", "errors", "warnings"
		entry   string // header of the current Errors/Warnings entry
		comm    *Communicator
		inInit  bool   // inside an ERROR entry's initialization errors
		errStr  string // the error of "N ranks reported X"
		summary int    // job summary lines seen
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
			entry, comm = "", nil
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
				entry, comm, inInit, errStr = line, nil, false, ""
				if m := reEntry.FindStringSubmatch(line); m != nil {
					h, _ := normHash(m[3])
					i, ok := byHash[h]
					if !ok {
						c := Communicator{Hash: h}
						if g, err := strconv.Atoi(m[1]); err == nil {
							for _, gr := range st.Groups {
								if gr.Index == g {
									c.Size, c.Nodes = gr.RanksPerComm, gr.NodesPerComm
								}
							}
						}
						st.Communicators = append(st.Communicators, c)
						i = len(st.Communicators) - 1
						byHash[h] = i
					}
					comm = &st.Communicators[i]
					entry = m[4]
					switch entry {
					case "INCOMPLETE":
						comm.Incomplete = true
					case "ERROR":
						comm.Error = true
					case "MISMATCH":
						comm.Mismatch = true
					}
				}
				continue
			}
			textDetail(st, comm, entry, line, &inInit, &errStr)
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

// textDetail reads one indented line of an Errors or Warnings entry.
func textDetail(st *Status, comm *Communicator, entry, line string, inInit *bool, errStr *string) {
	if comm == nil {
		if m := reProcess.FindStringSubmatch(line); m != nil {
			pid, _ := strconv.Atoi(m[1])
			p := Process{PID: pid, Host: m[2], GPUs: m[3]}
			switch entry {
			case "DEAD":
				st.DeadProcesses = append(st.DeadProcesses, p)
			case "INCOMPLETE":
				st.MissingProcesses = append(st.MissingProcesses, p)
			}
		}
		if entry == "TIMEOUT" {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "Encountered" {
				st.Timeouts, _ = strconv.Atoi(f[1])
			}
		}
		return
	}
	switch entry {
	case "INCOMPLETE":
		if m := reMissingN.FindStringSubmatch(line); m != nil {
			comm.MissingCount, _ = strconv.Atoi(m[1])
			return
		}
		if m := reMissingLs.FindStringSubmatch(line); m != nil { // 2.24, 2.25
			for _, s := range strings.Split(m[1], ",") {
				if r, err := strconv.Atoi(s); err == nil {
					comm.Missing = append(comm.Missing, MissingRank{Rank: r, PID: -1, CUDADev: -1})
				}
			}
			return
		}
		if m := reRank.FindStringSubmatch(line); m != nil && m[2] == "" {
			r, _ := strconv.Atoi(m[1])
			mr := MissingRank{Rank: r, PID: -1, CUDADev: -1, Host: m[5]}
			if m[4] != "" {
				mr.PID, _ = strconv.Atoi(m[4])
				mr.CUDADev = gpuNumber(m[3])
			}
			comm.Missing = append(comm.Missing, mr)
		}
	case "ERROR":
		switch {
		case strings.HasPrefix(line, "  Initialization error"):
			*inInit, *errStr = true, ""
			return
		case strings.HasPrefix(line, "  Asynchronous error"):
			*inInit, *errStr = false, ""
			return
		}
		if m := reNReports.FindStringSubmatch(line); m != nil {
			*errStr = m[1]
			return
		}
		m := reRank.FindStringSubmatch(line)
		if m == nil {
			return
		}
		e := *errStr
		if strings.HasPrefix(m[2], "reported ") {
			e = strings.TrimPrefix(m[2], "reported ")
		} else if m[2] != "" {
			return
		}
		if e == "" {
			return
		}
		r := textRank(comm, m)
		if *inInit {
			r.InitState = errorCode(e)
		} else {
			r.AsyncError = errorCode(e)
		}
	}
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
