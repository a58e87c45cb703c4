package analyze

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// BenchRun is one run of SGLang's bench_serving as read from its printed
// output.
type BenchRun struct {
	// Started is the timestamp on the "Starting main benchmark run" line.
	Started time.Time
	// Duration is "Benchmark duration (s):".
	Duration time.Duration
	// Concurrency is "Max request concurrency:" (0: not set).
	Concurrency int
	// Optional results, NaN/0 when absent.
	Successful        int
	InputTokens       int64
	InputThroughput   float64 // "Input token throughput (tok/s):"
	RequestThroughput float64 // "Request throughput (req/s):"
	// Line is the line number of the "Starting main benchmark run" line.
	Line int
}

// BenchOptions say how bench_serving output becomes windows.
type BenchOptions struct {
	// StartOffset is added to the timestamp of the "Starting main benchmark
	// run" line to get the start of the measured window. bench_serving
	// sleeps 1 s after printing that line before it starts its clock.
	StartOffset time.Duration
	// Location is the time zone of timestamps that carry none (nil: UTC).
	Location *time.Location
}

// DefaultBenchOptions returns the options that match SGLang's bench_serving.
func DefaultBenchOptions() BenchOptions {
	return BenchOptions{StartOffset: time.Second, Location: time.UTC}
}

const (
	markStart    = "Starting main benchmark run"
	markResult   = "Serving Benchmark Result"
	keyDuration  = "Benchmark duration (s):"
	keyConc      = "Max request concurrency:"
	keyConcOld   = "Maximum request concurrency:"
	keySuccess   = "Successful requests:"
	keyInputTok  = "Total input tokens:"
	keyInputTPS  = "Input token throughput (tok/s):"
	keyReqTPS    = "Request throughput (req/s):"
	tsHintFormat = "ts '%Y-%m-%dT%H:%M:%.S%z'"
)

var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

// ParseBenchServing reads the console output of one or more runs of
// `python -m sglang.bench_serving` (stdout and stderr together, as `tee`
// saves them). It needs, per run:
//
//   - the line containing "Starting main benchmark run" (printed after the
//     warm-up requests) with a timestamp at the start of the line, as added
//     by `ts` (moreutils) or any logger: RFC 3339 ("2026-11-02T10:00:00Z",
//     "2026-11-02T10:00:00.123+0100"), "2026-11-02 10:00:00[.fff]" (zone
//     from opts.Location), or Unix seconds ("1793613600.123"), optionally in
//     square brackets;
//   - "Benchmark duration (s):" from the result block;
//   - "Max request concurrency:" (or the older "Maximum request
//     concurrency:") for the concurrency; "not set" leaves it 0.
//
// "Successful requests:", "Total input tokens:", "Input token throughput
// (tok/s):" and "Request throughput (req/s):" are read when present.
// Everything else (arguments, progress bars with carriage returns, colour
// escapes, latency sections, timestamps on other lines) is ignored.
func ParseBenchServing(text string, opts BenchOptions) ([]BenchRun, error) {
	if opts.Location == nil {
		opts.Location = time.UTC
	}
	var runs []BenchRun
	var cur *BenchRun
	var haveDuration bool
	var preConc = -1 // "Maximum request concurrency" printed before the run starts (older versions)
	finish := func() error {
		if cur == nil {
			return nil
		}
		if !haveDuration {
			return fmt.Errorf("line %d: the run started here has no %q line (interrupted?)", cur.Line, keyDuration)
		}
		runs = append(runs, *cur)
		cur, haveDuration = nil, false
		return nil
	}
	lineNo := 0
	for _, raw := range strings.Split(text, "\n") {
		lineNo++
		// tqdm redraws with carriage returns: keep what comes after the last one
		// that is followed by text.
		if i := strings.LastIndexByte(strings.TrimRight(raw, "\r"), '\r'); i >= 0 {
			raw = raw[i+1:]
		}
		line := strings.TrimSpace(ansiEscape.ReplaceAllString(raw, ""))
		ts, rest, hasTS := splitTimestamp(line, opts.Location)
		switch {
		case strings.Contains(rest, markStart):
			if err := finish(); err != nil {
				return nil, err
			}
			if !hasTS {
				return nil, fmt.Errorf("line %d: %q has no timestamp at the start of the line; save the output through e.g. `%s` (with PYTHONUNBUFFERED=1)", lineNo, markStart, tsHintFormat)
			}
			cur = &BenchRun{Started: ts, Line: lineNo, Concurrency: max(preConc, 0)}
			preConc = -1
			continue
		case strings.Contains(rest, markResult):
			continue
		}
		key, val, ok := benchValue(rest)
		if !ok {
			continue
		}
		if cur == nil {
			if key == keyConcOld || key == keyConc {
				if n, err := benchConcurrency(val); err == nil {
					preConc = n
				}
			}
			continue
		}
		var err error
		switch key {
		case keyDuration:
			var f float64
			if f, err = strconv.ParseFloat(val, 64); err == nil && (f <= 0 || f > 1e7) {
				err = errors.New("out of range")
			}
			if err == nil {
				cur.Duration = time.Duration(f * float64(time.Second))
				haveDuration = true
			}
		case keyConc, keyConcOld:
			cur.Concurrency, err = benchConcurrency(val)
		case keySuccess:
			cur.Successful, err = strconv.Atoi(val)
		case keyInputTok:
			cur.InputTokens, err = strconv.ParseInt(val, 10, 64)
		case keyInputTPS:
			cur.InputThroughput, err = strconv.ParseFloat(val, 64)
		case keyReqTPS:
			cur.RequestThroughput, err = strconv.ParseFloat(val, 64)
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %s %q: not a number", lineNo, key, val)
		}
	}
	if err := finish(); err != nil {
		return nil, err
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("no %q line: not bench_serving output, or the benchmark never started", markStart)
	}
	return runs, nil
}

// benchValue splits "Key (unit):     value   " at the 40-column padding.
func benchValue(line string) (key, val string, ok bool) {
	for _, k := range []string{keyDuration, keyConc, keyConcOld, keySuccess, keyInputTok, keyInputTPS, keyReqTPS} {
		if strings.HasPrefix(line, k) {
			f := strings.Fields(line[len(k):])
			if len(f) == 0 {
				return "", "", false
			}
			return k, f[0], true
		}
	}
	return "", "", false
}

func benchConcurrency(v string) (int, error) {
	switch strings.ToLower(v) {
	case "not", "none", "inf":
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad concurrency %q", v)
	}
	return n, nil
}

var zonedLayouts = []string{
	"2006-01-02T15:04:05Z07:00",
	"2006-01-02T15:04:05Z0700",
	"2006-01-02 15:04:05Z07:00",
	"2006-01-02 15:04:05Z0700",
}

var localLayouts = []string{
	"2006-01-02T15:04:05",
	"2006-01-02 15:04:05",
}

// splitTimestamp takes a timestamp off the start of line.
func splitTimestamp(line string, loc *time.Location) (time.Time, string, bool) {
	s := line
	bracket := strings.HasPrefix(s, "[")
	if bracket {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return time.Time{}, line, false
		}
		if t, ok := parseStamp(strings.TrimSpace(s[1:end]), loc); ok {
			return t, strings.TrimSpace(s[end+1:]), true
		}
		return time.Time{}, line, false
	}
	f := strings.Fields(s)
	if len(f) == 0 {
		return time.Time{}, line, false
	}
	// "date time[zone]" is two fields; try the longer form first.
	if len(f) >= 2 {
		if t, ok := parseStamp(f[0]+" "+f[1], loc); ok {
			return t, strings.TrimSpace(cutFields(s, 2)), true
		}
	}
	if t, ok := parseStamp(f[0], loc); ok {
		return t, strings.TrimSpace(cutFields(s, 1)), true
	}
	return time.Time{}, line, false
}

func cutFields(s string, n int) string {
	for i := 0; i < n; i++ {
		s = strings.TrimLeft(s, " \t")
		j := strings.IndexAny(s, " \t")
		if j < 0 {
			return ""
		}
		s = s[j:]
	}
	return s
}

func parseStamp(s string, loc *time.Location) (time.Time, bool) {
	// A benchmark cannot predate Prometheus, let alone the Unix epoch: a
	// date before 2000 is a typo or a log line that merely looks like one,
	// and year 1 would read as "no time" (time.IsZero) downstream.
	plausible := func(t time.Time) bool { return t.Year() >= 2000 && t.Year() < 2200 }
	for _, l := range zonedLayouts {
		if t, err := time.Parse(l, s); err == nil && plausible(t) {
			return t.UTC(), true
		}
	}
	for _, l := range localLayouts {
		if t, err := time.ParseInLocation(l, s, loc); err == nil && plausible(t) {
			return t.UTC(), true
		}
	}
	// Unix seconds (ts '%.s'): only plausible values, so that a number at the
	// start of an ordinary line is not taken for a time.
	if f, err := strconv.ParseFloat(s, 64); err == nil && f > 1e9 && f < 1e10 && strings.Contains(s, ".") {
		sec := int64(f)
		return time.Unix(sec, int64((f-float64(sec))*1e9)).Round(time.Microsecond).UTC(), true
	}
	return time.Time{}, false
}

// benchSweep turns bench_serving output into windows: start = the
// timestamp of "Starting main benchmark run" + StartOffset, end = start +
// "Benchmark duration (s)". Windows are named after the file (with -2, -3…
// when it holds several runs).
func benchSweep(path string, b []byte, opts BenchOptions) (*Sweep, error) {
	runs, err := ParseBenchServing(string(b), opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	base := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	sw := &Sweep{}
	for i, r := range runs {
		src := fmt.Sprintf("%s:%d", path, r.Line)
		if r.Concurrency <= 0 {
			return nil, fmt.Errorf("%s: no \"Max request concurrency\" in the run's result (run bench_serving with --max-concurrency, or write a sweep file)", src)
		}
		name := base
		if len(runs) > 1 {
			name = fmt.Sprintf("%s-%d", base, i+1)
		}
		run := r
		start := r.Started.Add(opts.StartOffset)
		w := Window{Name: name, Concurrency: r.Concurrency, Start: start, End: start.Add(r.Duration), Bench: &run, Source: src}
		if err := checkWindow(w); err != nil {
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		sw.Windows = append(sw.Windows, w)
	}
	return sw, nil
}
