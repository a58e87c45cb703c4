package analyze

import (
	"os"
	"strings"
	"testing"
	"time"
)

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// testdata/bench/c16.log is one bench_serving run (SGLang's printed format:
// arguments, warm-up, tqdm bar, the result block with its 40-column
// padding and latency sections) saved through
// `ts '%Y-%m-%dT%H:%M:%.S%z'`.
func TestBenchServingOneRun(t *testing.T) {
	runs, err := ParseBenchServing(readFile(t, "testdata/bench/c16.log"), DefaultBenchOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 {
		t.Fatalf("%d runs", len(runs))
	}
	r := runs[0]
	if !r.Started.Equal(mustTime("2026-11-02T10:24:59Z")) || r.Duration != 300*time.Second || r.Concurrency != 16 ||
		r.Successful != 128 || r.InputTokens != 8388608 || r.InputThroughput != 27962.03 || r.RequestThroughput != 0.43 || r.Line != 6 {
		t.Errorf("run %+v", r)
	}
	sw, err := LoadSweep([]string{"testdata/bench/c16.log"}, DefaultBenchOptions())
	if err != nil {
		t.Fatal(err)
	}
	w := sw.Windows[0]
	// start = timestamp + 1 s (bench_serving sleeps before its clock starts), end = start + duration.
	if w.Name != "c16" || !w.Start.Equal(mustTime("2026-11-02T10:25:00Z")) || !w.End.Equal(mustTime("2026-11-02T10:30:00Z")) || w.Bench == nil {
		t.Errorf("window %+v", w)
	}
	sw, err = LoadSweep([]string{"testdata/bench/c16.log"}, BenchOptions{})
	if err != nil || !sw.Windows[0].Start.Equal(mustTime("2026-11-02T10:24:59Z")) {
		t.Errorf("offset 0: %v %v", sw, err)
	}
}

// testdata/bench/sweep-loop.log: two runs appended by a shell loop, Unix
// timestamps (ts '%.s'), colour escapes around the progress bar.
func TestBenchServingLoop(t *testing.T) {
	runs, err := ParseBenchServing(readFile(t, "testdata/bench/sweep-loop.log"), DefaultBenchOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[0].Concurrency != 1 || runs[1].Concurrency != 2 ||
		!runs[0].Started.Equal(mustTime("2026-11-02T10:00:59Z")) || !runs[1].Started.Equal(mustTime("2026-11-02T10:06:59Z")) ||
		runs[1].InputTokens != 1048576 {
		t.Errorf("runs %+v", runs)
	}
}

func TestBenchServingFormats(t *testing.T) {
	result := `============ Serving Benchmark Result ============
Backend:                                 sglang    
Max request concurrency:                 8         
Successful requests:                     64        
Benchmark duration (s):                  42.17     
Total input tokens:                      32768     
==================================================
`
	for _, tc := range []struct {
		name, text string
		want       time.Time
		conc       int
		loc        *time.Location
	}{
		{"rfc3339 nano", "2026-11-02T10:00:00.123456789Z Warmup completed with 1 sequences. Starting main benchmark run...\n" + result,
			mustTime("2026-11-02T10:00:00.123456789Z"), 8, nil},
		{"offset with colon", "2026-11-02T11:00:00+01:00 Warmup completed with 1 sequences. Starting main benchmark run...\n" + result,
			mustTime("2026-11-02T10:00:00Z"), 8, nil},
		{"logger style, zone from options", "[2026-11-02 11:00:00,500] Initial test run completed. Starting main benchmark run...\n" + result,
			mustTime("2026-11-02T10:00:00.5Z"), 8, time.FixedZone("CET", 3600)},
		{"space separated, no zone = UTC", "2026-11-02 10:00:00.25 Warmup completed with 1 sequences. Starting main benchmark run...\n" + result,
			mustTime("2026-11-02T10:00:00.25Z"), 8, nil},
		// Older bench_serving (and vLLM's) print the concurrency before the run.
		{"old format", "Maximum request concurrency: 4\n1793613600.5 Initial test run completed. Starting main benchmark run...\n" +
			strings.Replace(result, "Max request concurrency:                 8         \n", "", 1),
			mustTime("2026-11-02T10:00:00.5Z"), 4, nil},
		{"CRLF line ends", strings.ReplaceAll("2026-11-02T10:00:00Z Warmup completed with 1 sequences. Starting main benchmark run...\n"+result, "\n", "\r\n"),
			mustTime("2026-11-02T10:00:00Z"), 8, nil},
	} {
		runs, err := ParseBenchServing(tc.text, BenchOptions{Location: tc.loc})
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if len(runs) != 1 || !runs[0].Started.Equal(tc.want) || runs[0].Concurrency != tc.conc || runs[0].Duration != 42170*time.Millisecond {
			t.Errorf("%s: %+v, want start %s C=%d duration 42.17s", tc.name, runs, tc.want, tc.conc)
		}
	}
}

func TestBenchServingErrors(t *testing.T) {
	start := "2026-11-02T10:00:00Z Warmup completed with 1 sequences. Starting main benchmark run...\n"
	for _, tc := range []struct{ name, text, want string }{
		{"not bench output", "hello\nworld\n", "no \"Starting main benchmark run\" line"},
		{"no timestamp", "Warmup completed with 1 sequences. Starting main benchmark run...\nBenchmark duration (s): 1.0\n", "line 1: \"Starting main benchmark run\" has no timestamp"},
		{"interrupted", start + "  5%|▌         | 1/20 [00:03<01:02,  3.27s/it]\nKeyboardInterrupt\n", "line 1: the run started here has no \"Benchmark duration (s):\" line"},
		{"interrupted then rerun", start + "Traceback\n" + start + "Benchmark duration (s): 2.5\n", "line 1: the run started here"},
		{"bad number", start + "Benchmark duration (s):                  fast\n", "line 2: Benchmark duration (s): \"fast\": not a number"},
		{"zero duration", start + "Benchmark duration (s):                  0.00\n", "not a number"},
		// Found by FuzzParseBenchServing: year 1 parsed as a time and became a
		// zero start. Dates outside 2000–2199 are not taken for timestamps.
		{"year 1", "0001-01-01 0:00:00 Starting main benchmark run\nBenchmark duration (s):1", "line 1: \"Starting main benchmark run\" has no timestamp"},
	} {
		_, err := ParseBenchServing(tc.text, DefaultBenchOptions())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// No concurrency in the output: a window cannot be placed in the sweep.
	p := writeTemp(t, "run.log", start+"Max request concurrency:                 not set   \nBenchmark duration (s):                  10.00\n")
	if _, err := LoadSweep([]string{p}, DefaultBenchOptions()); err == nil || !strings.Contains(err.Error(), "run.log:1: no \"Max request concurrency\"") {
		t.Errorf("concurrency not set: %v", err)
	}
}

func FuzzParseBenchServing(f *testing.F) {
	f.Add("2026-11-02T10:00:00Z Starting main benchmark run...\nBenchmark duration (s): 1.5\nMax request concurrency: 4\n")
	f.Add("[2026-11-02 10:00:00] x\r\x1b[1mStarting main benchmark run\nTotal input tokens: 12\n")
	f.Add("1793613600.5 Starting main benchmark run\n")
	f.Fuzz(func(t *testing.T, s string) {
		runs, err := ParseBenchServing(s, DefaultBenchOptions())
		if err == nil {
			for _, r := range runs {
				if r.Duration <= 0 || r.Started.IsZero() {
					t.Errorf("run %+v without duration or start", r)
				}
			}
		}
	})
}
