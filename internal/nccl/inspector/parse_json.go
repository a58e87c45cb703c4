package inspector

import (
	"bytes"
	"errors"
	"math"
	"strconv"
	"strings"
)

// Op is one completed operation of a JSON line.
type Op struct {
	Host, PID, Comm, CommName string // Comm: the communicator's hash (header.id)
	Rank, Ranks, Nodes        int64
	Name                      string  // the NCCL function, or "other"
	Bytes                     float64 // message size
	Seconds                   float64 // execution time
	BusBytesPerSecond         float64 // bus bandwidth
}

var errLine = errors.New("not an NCCL Inspector JSON operation")

// opName bounds an operation name: NCCL's function names as the plugin's
// ncclFuncToString prints them; anything else is "other".
func opName(s string) string {
	switch s {
	case "AllGather", "AllReduce", "Broadcast", "Recv", "Reduce", "ReduceScatter",
		"SendRecv", "Send", "All2All", "AllGatherV", "Gather", "Scatter", "AlltoAll":
		return s
	}
	return "other"
}

// ParseJSON parses one line of a JSON-mode file with a single-pass scanner (no
// reflection: encoding/json read 35k lines/s, see the collector's
// BenchmarkInspectorJSONFollow;
// the fuzz target checks this against it). Unknown keys and the verbose
// event traces are skipped; header and metadata must be objects, numbers
// finite and not negative, pid a decimal integer. Label values are bounded
// to maxLabel bytes of valid UTF-8.
func ParseJSON(line []byte) (Op, error) {
	var op Op
	s := jscan{b: line}
	var name string
	var size, us, bw float64
	var haveID, haveHost, havePID bool
	perfs := 0
	ok := s.object(func(key []byte) bool {
		switch string(key) {
		case "header":
			return s.object(func(k []byte) bool {
				switch string(k) {
				case "id":
					op.Comm, haveID = s.label()
					return haveID
				case "comm_name":
					var ok bool
					op.CommName, ok = s.label()
					return ok
				case "rank":
					return s.int(&op.Rank)
				case "n_ranks":
					return s.int(&op.Ranks)
				case "nnodes":
					return s.int(&op.Nodes)
				}
				return s.skip()
			})
		case "metadata":
			return s.object(func(k []byte) bool {
				switch string(k) {
				case "hostname":
					op.Host, haveHost = s.label()
					return haveHost
				case "pid":
					var n int64
					havePID = s.int(&n) && n >= 0 && n <= math.MaxUint32
					op.PID = strconv.FormatInt(n, 10)
					return havePID
				}
				return s.skip()
			})
		case "coll_perf", "p2p_perf":
			perfs++
			p := "coll"
			if key[0] == 'p' {
				p = "p2p"
			}
			var have [4]bool
			ok := s.object(func(k []byte) bool {
				rest, found := bytes.CutPrefix(k, []byte(p))
				if !found {
					return s.skip()
				}
				switch string(rest) {
				case "":
					var ok bool
					name, ok = s.label()
					have[0] = ok && name != ""
					return ok
				case "_msg_size_bytes":
					have[1] = s.float(&size)
					return have[1]
				case "_exec_time_us":
					have[2] = s.float(&us)
					return have[2]
				case "_busbw_gbs":
					have[3] = s.float(&bw)
					return have[3]
				}
				return s.skip()
			})
			return ok && have[0] && have[1] && have[2] && have[3]
		}
		return s.skip()
	})
	s.ws()
	if !ok || s.i != len(s.b) || perfs != 1 || !haveID || op.Comm == "" || !haveHost || op.Host == "" || !havePID {
		return Op{}, errLine
	}
	op.Name = opName(name)
	op.Bytes = size
	op.Seconds = us / 1e6
	op.BusBytesPerSecond = bw * 1e9
	return op, nil
}

// jscan is a minimal JSON scanner over one line.
type jscan struct {
	b []byte
	i int
}

func (s *jscan) ws() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

func (s *jscan) expect(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// object reads an object, calling member with each raw key, positioned at
// its value.
func (s *jscan) object(member func(key []byte) bool) bool {
	if !s.expect('{') {
		return false
	}
	if s.expect('}') {
		return true
	}
	for {
		key, esc, ok := s.rawString()
		if !ok || esc || !s.expect(':') {
			return false // escaped keys are none of ours: the plugin writes plain names
		}
		s.ws()
		if !member(key) {
			return false
		}
		if s.expect(',') {
			continue
		}
		return s.expect('}')
	}
}

// rawString reads a string and returns its raw bytes and whether it has
// escapes.
func (s *jscan) rawString() (raw []byte, esc, ok bool) {
	if !s.expect('"') {
		return nil, false, false
	}
	start := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			raw = s.b[start:s.i]
			s.i++
			return raw, esc, true
		case c == '\\':
			esc = true
			s.i += 2
		case c < 0x20:
			return nil, false, false
		default:
			s.i++
		}
	}
	return nil, false, false
}

// label reads a string value as a bounded label.
func (s *jscan) label() (string, bool) {
	raw, esc, ok := s.rawString()
	if !ok {
		return "", false
	}
	if !esc {
		return boundLabel(string(raw)), true
	}
	u, ok := jsonUnescape(raw)
	if !ok {
		return "", false
	}
	return boundLabel(u), true
}

// jsonUnescape decodes the escapes of a JSON string's contents (the plugin
// escapes '"', '\\', '/', tab and newline).
func jsonUnescape(raw []byte) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(raw) {
			return "", false
		}
		switch raw[i] {
		case '"', '\\', '/':
			b.WriteByte(raw[i])
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			if i+4 >= len(raw) {
				return "", false
			}
			n, err := strconv.ParseUint(string(raw[i+1:i+5]), 16, 32)
			if err != nil {
				return "", false
			}
			b.WriteRune(rune(n)) // lone surrogates become U+FFFD
			i += 4
		default:
			return "", false
		}
	}
	return b.String(), true
}

// number returns the bytes of a JSON number.
func (s *jscan) number() ([]byte, bool) {
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		if (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
			s.i++
			continue
		}
		break
	}
	return s.b[start:s.i], s.i > start
}

func (s *jscan) float(v *float64) bool {
	n, ok := s.number()
	if !ok {
		return false
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) || !jsonNumber(n) {
		return false
	}
	*v = f
	return true
}

func (s *jscan) int(v *int64) bool {
	n, ok := s.number()
	if !ok || !jsonNumber(n) {
		return false
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		return false
	}
	*v = i
	return true
}

// jsonNumber checks JSON's number grammar (ParseFloat also takes "+1",
// ".5", "0x1p3", "1_0").
func jsonNumber(n []byte) bool {
	i := 0
	if i < len(n) && n[i] == '-' {
		i++
	}
	digits := func() int {
		j := i
		for i < len(n) && n[i] >= '0' && n[i] <= '9' {
			i++
		}
		return i - j
	}
	if i < len(n) && n[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(n) && n[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(n) && (n[i] == 'e' || n[i] == 'E') {
		i++
		if i < len(n) && (n[i] == '+' || n[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(n)
}

// skip skips any value.
func (s *jscan) skip() bool {
	s.ws()
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		_, _, ok := s.rawString()
		return ok
	case c == '{':
		return s.object(func([]byte) bool { return s.skip() })
	case c == '[':
		s.i++
		if s.expect(']') {
			return true
		}
		for {
			if !s.skip() {
				return false
			}
			if s.expect(',') {
				continue
			}
			return s.expect(']')
		}
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	default:
		n, ok := s.number()
		return ok && jsonNumber(n)
	}
}

func (s *jscan) lit(w string) bool {
	if bytes.HasPrefix(s.b[s.i:], []byte(w)) {
		s.i += len(w)
		return true
	}
	return false
}

// boundLabel cuts s to maxLabel bytes and replaces invalid UTF-8.
func boundLabel(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > maxLabel {
		s = strings.ToValidUTF8(s[:maxLabel], "")
	}
	return s
}
