package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// The analysis itself is tested against a real Prometheus in ../../analyze;
// these tests run the binary: the command line, its flags and exit codes.

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fabric-analyze")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "fabric_analyze")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building fabric_analyze: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func runBinary(t *testing.T, args ...string) (out string, code int) {
	t.Helper()
	return testenv.Run(t, binary, args...)
}

func TestHelp(t *testing.T) {
	out, code := runBinary(t, "--help")
	if code != 0 {
		t.Fatalf("--help: exit %d\n%s", code, out)
	}
	for _, want := range []string{"usage: fabric_analyze --prometheus.url=URL --sweep=FILE", "--selector.exporter=", "--knee.threshold=0.05", "--bench.start-offset=1s", "--compare=FILE"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q:\n%s", want, out)
		}
	}
	for _, unwanted := range []string{"--path.sysfs", "--web.listen-address", "--collector."} {
		if strings.Contains(out, unwanted) {
			t.Errorf("--help has the exporter's flag %q", unwanted)
		}
	}
}

const cliSweep = `name: cli
windows:
  - {name: c1, concurrency: 1, start: 2026-11-02T10:00:00Z, end: 2026-11-02T10:05:00Z}
  - {name: c2, concurrency: 2, start: 2026-11-02T10:06:00Z, end: 2026-11-02T10:11:00Z}
  - {name: c4, concurrency: 4, start: 2026-11-02T10:12:00Z, end: 2026-11-02T10:17:00Z}
  - {name: c8, concurrency: 8, start: 2026-11-02T10:18:00Z, end: 2026-11-02T10:23:00Z}
  - {name: c16, concurrency: 16, start: 2026-11-02T10:24:00Z, end: 2026-11-02T10:29:00Z}
`

// fakePrometheus answers the analysis' queries: one rail whose transmitted
// throughput is 50·C/(2+C) Gbit/s (received: half of it), 3 MB per token.
// It records the queries.
type fakePrometheus struct {
	mu      sync.Mutex
	queries []string
}

func (f *fakePrometheus) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r.ParseForm()
	q, ts := r.Form.Get("query"), r.Form.Get("time")
	f.mu.Lock()
	f.queries = append(f.queries, q)
	f.mu.Unlock()
	sec, _ := strconv.ParseFloat(ts, 64)
	t := time.Unix(int64(sec), 0).UTC()
	c := map[string]float64{"10:05": 1, "10:11": 2, "10:17": 4, "10:23": 8, "10:29": 16}[t.Format("15:04")]
	bytes := 50 * c / (2 + c) * 1e9 / 8 * 300
	type sample struct {
		Metric map[string]string `json:"metric"`
		Value  [2]any            `json:"value"`
	}
	var res []sample
	one := func(m map[string]string, v float64) {
		res = append(res, sample{m, [2]any{sec, strconv.FormatFloat(v, 'g', -1, 64)}})
	}
	rail := map[string]string{"instance": "n1:10470", "rail": "r0"}
	switch {
	case q == "1":
		one(map[string]string{}, 1)
	case strings.Contains(q, "resets("), c == 0:
	case strings.HasPrefix(q, "sum by (instance, rail) (increase(fabric_rdma_port_transmitted_bytes_total"):
		one(rail, bytes)
	case strings.HasPrefix(q, "sum by (instance, rail) (increase(fabric_rdma_port_received_bytes_total"):
		one(rail, bytes/2)
	case strings.HasPrefix(q, "sum(increase(sglang:prompt_tokens_total"):
		one(map[string]string{}, bytes/3e6)
	}
	json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": res}})
}

func TestAnalyzeCommand(t *testing.T) {
	fake := &fakePrometheus{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	dir := t.TempDir()
	sweep := filepath.Join(dir, "sweep.yaml")
	os.WriteFile(sweep, []byte(cliSweep), 0o644)
	out := filepath.Join(dir, "out")
	stdout, code := runBinary(t, "--prometheus.url="+srv.URL, "--sweep="+sweep, "--out="+out,
		`--selector.exporter=job="x", cluster="c1"`, `--selector.sglang=job="y"`, "--direction=rx", "--knee.threshold=0.1")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stdout)
	}
	// rx: 25·C/(2+C) Gbit/s, 1.5 MB per token; the gain from C to 2C is
	// 2/(2+2C): 33 % from 2, 20 % from 4, 11 % from 8.
	for _, want := range []string{"5 windows, 1 rails (cli)", "1.5000 MB per input token per rail", "knee none", "asymptote 25.00 Gbit/s"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fits use received RDMA bytes", "both below 10 %", `exporter series ` + "`" + `{job="x", cluster="c1"}`} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	for _, f := range []string{"windows.csv", "fits.csv", "residuals.csv", "throughput.png", "throughput.svg", "bytes_per_token.png", "bytes_per_token.svg"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	fake.mu.Lock()
	for _, q := range fake.queries {
		if q != "1" && !strings.Contains(q, `{job="x", cluster="c1"`) && !strings.Contains(q, `{job="y"}`) {
			t.Errorf("query without the selectors: %s", q)
		}
	}
	fake.mu.Unlock()

	// A/B: the same windows under another name compare 1:1.
	b := filepath.Join(dir, "b.csv")
	os.WriteFile(b, []byte("name,concurrency,start,end\nb4,4,2026-11-02T10:12:00Z,2026-11-02T10:17:00Z\nb8,8,2026-11-02T10:18:00Z,2026-11-02T10:23:00Z\nb16,16,2026-11-02T10:24:00Z,2026-11-02T10:29:00Z\n"), 0o644)
	stdout, code = runBinary(t, "--prometheus.url="+srv.URL, "--sweep="+sweep, "--compare="+b, "--compare.name=other", "--out="+out, "--no-plots")
	if code != 0 {
		t.Fatalf("A/B: exit %d:\n%s", code, stdout)
	}
	cmp, err := os.ReadFile(filepath.Join(out, "compare.md"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "compare_throughput.png")); err == nil {
		t.Error("--no-plots: compare_throughput.png written")
	}
	if !strings.Contains(string(cmp), "# A/B: cli (A) vs other (B)") || !strings.Contains(string(cmp), "| 1.000 |") || !strings.Contains(string(cmp), "| — |") {
		t.Errorf("compare.md:\n%s", cmp)
	}
}

func TestAnalyzeErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "sweep.yaml")
	os.WriteFile(good, []byte(cliSweep), 0o644)
	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("name,concurrency,start\n"), 0o644)
	down := "http://" + testenv.FreeAddr(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{}, 2, "required flag(s)"},
		{[]string{"--prometheus.url=" + down, "--sweep=" + good, "--direction=up"}, 2, "enum value must be one of tx,rx,both"},
		{[]string{"--prometheus.url=" + down, "--sweep=" + good, "--out=" + dir}, 1, "fabric_analyze: cannot reach Prometheus at " + down},
		{[]string{"--prometheus.url=" + down, "--sweep=" + bad, "--out=" + dir}, 1, `fabric_analyze: sweep: ` + bad + `:1: column "end" missing`},
		{[]string{"--prometheus.url=" + down, "--sweep=" + good, "--knee.threshold=5"}, 1, "knee threshold 5: want a fraction"},
		{[]string{"--prometheus.url=" + down, "--sweep=" + good, "--bench.timezone=Mars/Olympus"}, 1, "--bench.timezone"},
	} {
		out, code := runBinary(t, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, output %q; want exit %d and %q", tc.args, code, out, tc.code, tc.want)
		}
	}
}
