package analyze

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

const goodYAML = `# NCCL_CROSS_NIC=0 sweep, 64K prompts, cold prefix cache
name: NCCL_CROSS_NIC=0
windows:
  - name: c4
    concurrency: 4
    start: 2026-11-02T10:13:00Z
    end: 2026-11-02T10:18:00Z
  - {name: c1, concurrency: 1, start: "2026-11-02T10:01:00Z", end: "2026-11-02T10:06:00.5Z"}
  - name: c2
    concurrency: 2
    start: 1793614020
    end: 1793614320.25
`

func TestSweepYAML(t *testing.T) {
	sw, err := LoadSweep([]string{writeTemp(t, "s.yaml", goodYAML)}, DefaultBenchOptions())
	if err != nil {
		t.Fatal(err)
	}
	if sw.Name != "NCCL_CROSS_NIC=0" || len(sw.Windows) != 3 {
		t.Fatalf("got %+v", sw)
	}
	want := []struct {
		name       string
		c          int
		start, end string
	}{
		{"c1", 1, "2026-11-02T10:01:00Z", "2026-11-02T10:06:00.5Z"},
		{"c2", 2, "2026-11-02T10:07:00Z", "2026-11-02T10:12:00.25Z"},
		{"c4", 4, "2026-11-02T10:13:00Z", "2026-11-02T10:18:00Z"},
	}
	for i, w := range want {
		got := sw.Windows[i]
		if got.Name != w.name || got.Concurrency != w.c || !got.Start.Equal(mustTime(w.start)) || !got.End.Equal(mustTime(w.end)) {
			t.Errorf("window %d = %s C=%d %s–%s, want %+v", i, got.Name, got.Concurrency, got.Start, got.End, w)
		}
	}
	if !strings.HasSuffix(sw.Windows[2].Source, "s.yaml:4") {
		t.Errorf("source %q, want …s.yaml:4", sw.Windows[2].Source)
	}
}

const goodCSV = `# sweep of 2026-11-02
concurrency,name,start,end
1,c1,2026-11-02T10:01:00Z,2026-11-02T10:06:00Z
 2, c2 ,2026-11-02T10:07:00Z,2026-11-02T10:12:00Z
`

func TestSweepCSV(t *testing.T) {
	sw, err := LoadSweep([]string{writeTemp(t, "s.csv", goodCSV)}, DefaultBenchOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(sw.Windows) != 2 || sw.Windows[1].Name != "c2" || sw.Windows[1].Concurrency != 2 ||
		!sw.Windows[1].End.Equal(mustTime("2026-11-02T10:12:00Z")) {
		t.Fatalf("got %+v", sw.Windows)
	}
	if !strings.HasSuffix(sw.Windows[1].Source, "s.csv:4") {
		t.Errorf("source %q, want …s.csv:4", sw.Windows[1].Source)
	}
}

func TestSweepErrors(t *testing.T) {
	w := func(name, c, s, e string) string {
		return "  - {name: " + name + ", concurrency: " + c + ", start: " + s + ", end: " + e + "}\n"
	}
	ok1 := w("c1", "1", "2026-11-02T10:01:00Z", "2026-11-02T10:06:00Z")
	for _, tc := range []struct {
		file, content, want string
	}{
		{"s.yaml", "", "empty sweep file"},
		{"s.yaml", "name: x\n", "no windows"},
		{"s.yaml", "windows:\n" + ok1 + "extra: 1\n", "field extra not found"},
		{"s.yaml", "windows:\n  - {name: c1, concurrency: 1, start: 2026-11-02T10:01:00Z, end: 2026-11-02T10:06:00Z, tp: 16}\n", `s.yaml:2: window 1: unknown key "tp"`},
		{"s.yaml", "windows:\n  - {name: c1, start: 2026-11-02T10:01:00Z, end: 2026-11-02T10:06:00Z}\n", "window 1: concurrency missing"},
		{"s.yaml", "windows:\n" + w("c1", "0", "2026-11-02T10:01:00Z", "2026-11-02T10:06:00Z"), "concurrency \"0\": must be a positive integer"},
		{"s.yaml", "windows:\n" + w("c1", "4.5", "2026-11-02T10:01:00Z", "2026-11-02T10:06:00Z"), "must be a positive integer"},
		{"s.yaml", "windows:\n" + w("c1", "1", "yesterday", "2026-11-02T10:06:00Z"), `time "yesterday": want RFC 3339`},
		{"s.yaml", "windows:\n" + w("c1", "1", "2026-11-02T10:06:00Z", "2026-11-02T10:01:00Z"), "is not after start"},
		{"s.yaml", "windows:\n" + ok1 + w("c1", "2", "2026-11-02T10:07:00Z", "2026-11-02T10:12:00Z"), `window name "c1" already used`},
		{"s.yaml", "windows:\n" + ok1 + w("c1b", "1", "2026-11-02T10:07:00Z", "2026-11-02T10:12:00Z"), "one window per concurrency"},
		{"s.yaml", "windows:\n  - c1\n", "want a mapping"},
		{"s.yaml", "windows:\n  - {name: [a, b], concurrency: 1}\n", "want a single value"},
		{"s.yaml", "windows:\n" + ok1 + "---\nwindows: []\n", "more than one YAML document"},
		{"s.yaml", "windows: [\n", "s.yaml: yaml:"},
		{"s.csv", "", "empty sweep file"},
		{"s.csv", "name,concurrency,start\n", `column "end" missing`},
		{"s.csv", "name,concurrency,start,end,tp\n", `unknown column "tp"`},
		{"s.csv", "name,concurrency,start,end,end\n", `column "end" twice`},
		{"s.csv", "name,concurrency,start,end\n", "no windows below the header"},
		{"s.csv", "name,concurrency,start,end\nc1,1,2026-11-02T10:01:00Z\n", "wrong number of fields"},
		{"s.csv", "name,concurrency,start,end\nc1,x,2026-11-02T10:01:00Z,2026-11-02T10:06:00Z\n", `s.csv:2: concurrency "x"`},
		{"s.csv", "name,concurrency,start,end\n,1,2026-11-02T10:01:00Z,2026-11-02T10:06:00Z\n", "name is empty"},
	} {
		_, err := LoadSweep([]string{writeTemp(t, tc.file, tc.content)}, DefaultBenchOptions())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: error %v, want %q", tc.file, tc.content, err, tc.want)
		}
	}
	if _, err := LoadSweep([]string{"/nonexistent/s.yaml"}, DefaultBenchOptions()); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := LoadSweep(nil, DefaultBenchOptions()); err == nil {
		t.Error("no sweep accepted")
	}
}

// TestSweepMixed combines a sweep file with bench_serving logs; a
// concurrency that appears in both is an error.
func TestSweepMixed(t *testing.T) {
	y := writeTemp(t, "s.yaml", "windows:\n  - {name: c4, concurrency: 4, start: 2026-11-02T10:13:00Z, end: 2026-11-02T10:18:00Z}\n")
	sw, err := LoadSweep([]string{y, "testdata/bench/sweep-loop.log", "testdata/bench/c16.log"}, DefaultBenchOptions())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range sw.Windows {
		got = append(got, w.Name)
	}
	if strings.Join(got, ",") != "sweep-loop-1,sweep-loop-2,c4,c16" {
		t.Errorf("windows %v", got)
	}
	// The same through a glob pattern (quoted on the command line).
	sw, err = LoadSweep([]string{y, "testdata/bench/*.log"}, DefaultBenchOptions())
	if err != nil || len(sw.Windows) != 4 {
		t.Errorf("glob: %v %v", sw, err)
	}
	if _, err := LoadSweep([]string{"testdata/bench/nothing*.log"}, DefaultBenchOptions()); err == nil || !strings.Contains(err.Error(), "matches no file") {
		t.Errorf("empty glob: %v", err)
	}
	y2 := writeTemp(t, "s.yaml", "windows:\n  - {name: c16x, concurrency: 16, start: 2026-11-02T10:13:00Z, end: 2026-11-02T10:18:00Z}\n")
	if _, err := LoadSweep([]string{y2, "testdata/bench/c16.log"}, DefaultBenchOptions()); err == nil || !strings.Contains(err.Error(), `like window "c16x"`) {
		t.Errorf("duplicate concurrency across files: %v", err)
	}
}
