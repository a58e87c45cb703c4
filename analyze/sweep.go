package analyze

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Window is one measured run of a sweep: the benchmark ran at Concurrency
// concurrent requests from Start to End (warm-up excluded).
type Window struct {
	Name        string
	Concurrency int
	Start, End  time.Time
	// Bench holds what bench_serving printed for this run; nil for windows
	// from a sweep file.
	Bench *BenchRun
	// Source says where the window was defined (file:line), for errors.
	Source string
}

// Duration is the length of the window.
func (w Window) Duration() time.Duration { return w.End.Sub(w.Start) }

// Sweep is a set of windows at different concurrencies.
type Sweep struct {
	// Name labels the sweep in reports (e.g. "NCCL_CROSS_NIC=0").
	Name    string
	Windows []Window
}

// LoadSweep reads one or more sweep sources into one sweep: files ending in
// .yaml/.yml or .csv are sweep descriptions, any other file is SGLang
// bench_serving output (see ParseBenchServing). A path that does not exist
// but contains *, ? or [ is a glob pattern (bench/c*.log), expanded in
// lexical order. The windows are validated together (unique names and
// concurrencies, Start < End) and sorted by concurrency.
func LoadSweep(paths []string, bench BenchOptions) (*Sweep, error) {
	if len(paths) == 0 {
		return nil, errors.New("no sweep given")
	}
	paths, err := expandGlobs(paths)
	if err != nil {
		return nil, err
	}
	sw := &Sweep{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var part *Sweep
		switch strings.ToLower(filepath.Ext(p)) {
		case ".yaml", ".yml":
			part, err = ParseSweepYAML(p, b)
		case ".csv":
			part, err = ParseSweepCSV(p, b)
		default:
			part, err = benchSweep(p, b, bench)
		}
		if err != nil {
			return nil, err
		}
		if sw.Name == "" {
			sw.Name = part.Name
		}
		sw.Windows = append(sw.Windows, part.Windows...)
	}
	if err := sw.validate(); err != nil {
		return nil, err
	}
	return sw, nil
}

func expandGlobs(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil || !strings.ContainsAny(p, "*?[") {
			out = append(out, p)
			continue
		}
		m, err := filepath.Glob(p)
		if err != nil {
			return nil, fmt.Errorf("pattern %q: %w", p, err)
		}
		if len(m) == 0 {
			return nil, fmt.Errorf("pattern %q matches no file", p)
		}
		out = append(out, m...)
	}
	return out, nil
}

// validate checks the windows together and sorts them by concurrency.
func (s *Sweep) validate() error {
	if len(s.Windows) == 0 {
		return errors.New("the sweep has no windows")
	}
	names := map[string]Window{}
	conc := map[int]Window{}
	for _, w := range s.Windows {
		if o, ok := names[w.Name]; ok {
			return fmt.Errorf("%s: window name %q already used at %s", w.Source, w.Name, o.Source)
		}
		names[w.Name] = w
		if o, ok := conc[w.Concurrency]; ok {
			return fmt.Errorf("%s: window %q has concurrency %d like window %q (%s); one window per concurrency",
				w.Source, w.Name, w.Concurrency, o.Name, o.Source)
		}
		conc[w.Concurrency] = w
	}
	sort.SliceStable(s.Windows, func(i, j int) bool { return s.Windows[i].Concurrency < s.Windows[j].Concurrency })
	return nil
}

// checkWindow validates the fields of one window.
func checkWindow(w Window) error {
	switch {
	case w.Name == "":
		return errors.New("name is empty")
	case w.Concurrency <= 0:
		return fmt.Errorf("window %q: concurrency %d: must be a positive integer", w.Name, w.Concurrency)
	case !w.End.After(w.Start):
		return fmt.Errorf("window %q: end %s is not after start %s", w.Name, w.End.Format(time.RFC3339Nano), w.Start.Format(time.RFC3339Nano))
	}
	return nil
}

// parseTime reads RFC 3339 (fractional seconds allowed) or Unix seconds.
func parseTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, errors.New("empty time")
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && f > 0 && !math.IsInf(f, 0) {
		sec, frac := math.Modf(f)
		return time.Unix(int64(sec), int64(math.Round(frac*1e9))).UTC(), nil
	}
	return time.Time{}, fmt.Errorf("time %q: want RFC 3339 (2026-11-02T10:00:00Z) or Unix seconds", s)
}

func parseConcurrency(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("concurrency %q: must be a positive integer", s)
	}
	return n, nil
}

var sweepFields = []string{"name", "concurrency", "start", "end"}

// ParseSweepYAML reads a sweep description:
//
//	name: NCCL_CROSS_NIC=0          # optional label
//	windows:
//	  - name: c1
//	    concurrency: 1
//	    start: 2026-11-02T10:00:00Z   # RFC 3339 or Unix seconds
//	    end: 2026-11-02T10:05:00Z
//
// Unknown keys, missing fields and values of the wrong kind are errors.
func ParseSweepYAML(path string, b []byte) (*Sweep, error) {
	var doc struct {
		Name    string      `yaml:"name"`
		Windows []yaml.Node `yaml:"windows"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty sweep file", path)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: more than one YAML document", path)
	}
	if len(doc.Windows) == 0 {
		return nil, fmt.Errorf("%s: no windows (want a list under \"windows:\")", path)
	}
	sw := &Sweep{Name: doc.Name}
	for i := range doc.Windows {
		n := &doc.Windows[i]
		src := fmt.Sprintf("%s:%d", path, n.Line)
		if n.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s: window %d: want a mapping with %s", src, i+1, strings.Join(sweepFields, ", "))
		}
		w := Window{Source: src}
		seen := map[string]bool{}
		for k := 0; k+1 < len(n.Content); k += 2 {
			key, val := n.Content[k], n.Content[k+1]
			at := fmt.Sprintf("%s:%d", path, key.Line)
			if val.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("%s: window %d: %s: want a single value", at, i+1, key.Value)
			}
			var err error
			switch key.Value {
			case "name":
				w.Name = strings.TrimSpace(val.Value)
			case "concurrency":
				w.Concurrency, err = parseConcurrency(val.Value)
			case "start":
				w.Start, err = parseTime(val.Value)
			case "end":
				w.End, err = parseTime(val.Value)
			default:
				err = fmt.Errorf("unknown key %q (want %s)", key.Value, strings.Join(sweepFields, ", "))
			}
			if err != nil {
				return nil, fmt.Errorf("%s: window %d: %w", at, i+1, err)
			}
			seen[key.Value] = true
		}
		for _, f := range sweepFields {
			if !seen[f] {
				return nil, fmt.Errorf("%s: window %d: %s missing", src, i+1, f)
			}
		}
		if err := checkWindow(w); err != nil {
			return nil, fmt.Errorf("%s: window %d: %w", src, i+1, err)
		}
		sw.Windows = append(sw.Windows, w)
	}
	return sw, nil
}

// ParseSweepCSV reads a sweep description as CSV with the header
// name,concurrency,start,end (any order, nothing else). Lines starting with
// # are comments.
func ParseSweepCSV(path string, b []byte) (*Sweep, error) {
	r := csv.NewReader(bytes.NewReader(b))
	r.Comment = '#'
	r.TrimLeadingSpace = true
	header, err := r.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: empty sweep file", path)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	col := map[string]int{}
	for i, h := range header {
		h = strings.TrimSpace(h)
		if i == 0 {
			h = strings.TrimPrefix(h, "\ufeff")
		}
		if !slices.Contains(sweepFields, h) {
			return nil, fmt.Errorf("%s:1: unknown column %q (want the header %s)", path, h, strings.Join(sweepFields, ","))
		}
		if _, dup := col[h]; dup {
			return nil, fmt.Errorf("%s:1: column %q twice", path, h)
		}
		col[h] = i
	}
	for _, f := range sweepFields {
		if _, ok := col[f]; !ok {
			return nil, fmt.Errorf("%s:1: column %q missing (want the header %s)", path, f, strings.Join(sweepFields, ","))
		}
	}
	sw := &Sweep{}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		line, _ := r.FieldPos(0)
		src := fmt.Sprintf("%s:%d", path, line)
		w := Window{Source: src, Name: strings.TrimSpace(rec[col["name"]])}
		if w.Concurrency, err = parseConcurrency(rec[col["concurrency"]]); err == nil {
			if w.Start, err = parseTime(rec[col["start"]]); err == nil {
				w.End, err = parseTime(rec[col["end"]])
			}
		}
		if err == nil {
			err = checkWindow(w)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		sw.Windows = append(sw.Windows, w)
	}
	if len(sw.Windows) == 0 {
		return nil, fmt.Errorf("%s: no windows below the header", path)
	}
	return sw, nil
}
