package analyze

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"image/png"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/promapi"
	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// The tests in this file run the analysis against a real Prometheus
// (Debian's prometheus package) whose TSDB holds the synthetic series of
// synth_test.go, converted with `promtool tsdb create-blocks-from
// openmetrics`. Without prometheus/promtool they are skipped, unless $CI is
// set (.ci/run installs them).

var updateDocs = flag.Bool("docs", false, "write docs/analysis.md's worked example into ../docs/analyze")

var realProm struct {
	once sync.Once
	url  string
	err  error
	dir  string
	cmd  *exec.Cmd
	log  bytes.Buffer
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if realProm.cmd != nil {
		realProm.cmd.Process.Kill()
		realProm.cmd.Wait()
		if code != 0 {
			fmt.Fprintf(os.Stderr, "--- prometheus log (tail):\n%s\n", tail(realProm.log.String(), 3000))
		}
	}
	if realProm.dir != "" {
		os.RemoveAll(realProm.dir)
	}
	os.Exit(code)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func needProm(t *testing.T) (prometheus, promtool string) {
	t.Helper()
	return testenv.Tool(t, "prometheus"), testenv.Tool(t, "promtool")
}

// startPrometheus converts the synthetic series into TSDB blocks and
// serves them; once per test binary.
func startPrometheus(t *testing.T) string {
	t.Helper()
	prometheus, promtool := needProm(t)
	realProm.once.Do(func() {
		realProm.err = func() error {
			dir, err := os.MkdirTemp("", "analyze-prom-")
			if err != nil {
				return err
			}
			realProm.dir = dir
			om := filepath.Join(dir, "synthetic.om")
			if err := writeOpenMetrics(om); err != nil {
				return err
			}
			data := filepath.Join(dir, "data")
			// promtool 2.42 cuts 2 h blocks; they must not overlap the head
			// of the Prometheus that loads them, which holds nothing here:
			// the data lie in the past (2026-11-02) and nothing is scraped.
			out, err := exec.Command(promtool, "tsdb", "create-blocks-from", "openmetrics", om, data).CombinedOutput()
			if err != nil {
				return fmt.Errorf("promtool tsdb create-blocks-from openmetrics: %v\n%s", err, out)
			}
			cfg := filepath.Join(dir, "prometheus.yml")
			if err := os.WriteFile(cfg, []byte("global:\n  scrape_interval: 15s\n"), 0o644); err != nil {
				return err
			}
			addr := testenv.FreeAddr(t)
			cmd := exec.Command(prometheus, "--config.file="+cfg, "--storage.tsdb.path="+data,
				"--storage.tsdb.retention.time=100y", "--web.listen-address="+addr)
			cmd.Stdout, cmd.Stderr = &realProm.log, &realProm.log
			if err := cmd.Start(); err != nil {
				return err
			}
			realProm.cmd = cmd
			realProm.url = "http://" + addr
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := promapi.New(realProm.url, 0).WaitReady(ctx); err != nil {
				return fmt.Errorf("%v:\n%s", err, tail(realProm.log.String(), 3000))
			}
			return nil
		}()
	})
	if realProm.err != nil {
		t.Fatal(realProm.err)
	}
	return realProm.url
}

func testConfig(url, out string, sweep ...string) Config {
	return Config{
		PrometheusURL: url,
		Sweep:         sweep,
		Out:           out,
		Query:         QueryOptions{ExporterSelector: `job="fabric"`, SGLangSelector: `job="sglang"`, Timeout: 30 * time.Second},
		Direction:     Transmitted,
		KneeThreshold: 0.05,
		Bench:         DefaultBenchOptions(),
	}
}

func railIndex(k RailKey) int {
	for i, r := range synthRails {
		if r.instance == k.Instance && r.rail == k.Rail {
			return i
		}
	}
	return -1
}

// Tolerances against the known curve. The per-window values are exact up
// to float rounding (the counters are linear inside each window, so
// increase() needs no extrapolation); the fits carry the ±0.4 % wobble.
const (
	tolWindow    = 1e-6 // per-window Gbit/s, tokens
	tolBPT       = 0.005
	tolAsymptote = 0.01
)

// checkSweep asserts that a result recovers sweep s.
func checkSweep(t *testing.T, r *Result, s synthSweep) {
	t.Helper()
	if len(r.Rails) != len(synthRails) {
		t.Fatalf("rails %v, want the 4 rail ports (not the rail=\"\" one)", r.Rails)
	}
	if len(r.Windows) != len(synthConc) {
		t.Fatalf("%d windows", len(r.Windows))
	}
	for i, m := range r.Windows {
		if m.Concurrency != synthConc[i] {
			t.Fatalf("window %d: C=%d", i, m.Concurrency)
		}
		if want := s.tps(i) * synthWindow.Seconds(); !near(m.InputTokens, want, tolWindow) {
			t.Errorf("C=%d: input tokens %.1f, want %.1f", m.Concurrency, m.InputTokens, want)
		}
		for _, k := range r.Rails {
			ri := railIndex(k)
			if got, want := r.Gbps(m, k), s.gbps(ri, i); !near(got, want, tolWindow) {
				t.Errorf("C=%d %s: %.6f Gbit/s, want %.6f", m.Concurrency, k, got, want)
			}
			if got, want := m.Rails[k].Rx, 0.97*m.Rails[k].Tx; !near(got, want, tolWindow) {
				t.Errorf("C=%d %s: rx %g, want 0.97·tx = %g", m.Concurrency, k, got, want)
			}
		}
	}
	for _, k := range r.Rails {
		f := r.BytesPerToken[k]
		if !near(f.Slope, s.k, tolBPT) {
			t.Errorf("%s: %.5g bytes/token, want %.5g ± %.1f %%", k, f.Slope, s.k, 100*tolBPT)
		}
		sat, ok := r.Saturation[k]
		if !ok {
			t.Errorf("%s: no saturation fit: %v", k, r.SatErr[k])
			continue
		}
		if !near(sat.A, s.a, tolAsymptote) || math.Abs(sat.A-s.a) > 3*sat.ASE {
			t.Errorf("%s: asymptote %.3f ± %.3f Gbit/s, want %.2f within %.0f %% and 3 SE", k, sat.A, sat.ASE, s.a, 100*tolAsymptote)
		}
		if r.RailKnees[k].C != s.knee {
			t.Errorf("%s: knee %d, want %d", k, r.RailKnees[k].C, s.knee)
		}
	}
	if !near(r.MeanBytesPerToken(), s.k, tolBPT) {
		t.Errorf("mean bytes/token %.5g, want %.5g", r.MeanBytesPerToken(), s.k)
	}
	if a, _ := r.MeanAsymptote(); !near(a, s.a, tolAsymptote/2) {
		t.Errorf("mean asymptote %.3f, want %.2f ± %.1f %%", a, s.a, 50*tolAsymptote)
	}
	if r.Knee.C != s.knee {
		t.Errorf("knee %d, want %d; steps %+v", r.Knee.C, s.knee, r.Knee.Steps)
	}
	t.Logf("%s: bytes/token %.5g (true %.5g); asymptote %.3f Gbit/s (true %.2f), rail SEs %s; knee %d (true %d)",
		s.name, r.MeanBytesPerToken(), s.k, func() float64 { a, _ := r.MeanAsymptote(); return a }(), s.a, ses(r), r.Knee.C, s.knee)
}

func ses(r *Result) string {
	var out []string
	for _, k := range r.Rails {
		out = append(out, fmt.Sprintf("%.3f", r.Saturation[k].ASE))
	}
	return strings.Join(out, "/")
}

// checkImages decodes every PNG and parses every SVG as XML.
func checkImages(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n+".png"))
		if err != nil {
			t.Error(err)
			continue
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Errorf("%s.png: %v", n, err)
		} else if sz := img.Bounds().Size(); sz.X < 400 || sz.Y < 200 {
			t.Errorf("%s.png: %v pixels", n, sz)
		}
		if len(b) > 200<<10 {
			t.Errorf("%s.png: %d bytes", n, len(b))
		}
		f, err := os.Open(filepath.Join(dir, n+".svg"))
		if err != nil {
			t.Error(err)
			continue
		}
		dec := xml.NewDecoder(f)
		root := ""
		for {
			tok, err := dec.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Errorf("%s.svg: %v", n, err)
				break
			}
			if se, ok := tok.(xml.StartElement); ok && root == "" {
				root = se.Name.Local
			}
		}
		f.Close()
		if root != "svg" {
			t.Errorf("%s.svg: root element %q", n, root)
		}
	}
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func TestRealPrometheusSweep(t *testing.T) {
	url := startPrometheus(t)
	dir := t.TempDir()
	sweep := writeTemp(t, "sweep.yaml", synthA.sweepYAML())
	out := filepath.Join(dir, "out")
	var stdout bytes.Buffer
	a, _, err := run(context.Background(), testConfig(url, out, sweep), &stdout)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stdout:\n%s", stdout.String())
	checkSweep(t, a, synthA)
	if a.Name != synthA.name {
		t.Errorf("name %q", a.Name)
	}
	if !strings.Contains(stdout.String(), "knee C = 16") {
		t.Errorf("summary: %s", stdout.String())
	}
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Benchmark analysis: NCCL_CROSS_NIC=0", "**Knee: C = 16.**", "Model y = a·C/(b+C)",
		"| gpu-b:10470/mlx5_3 | 3.3", "![throughput per rail vs concurrency](throughput.png)"} {
		if !bytes.Contains(report, []byte(want)) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if rows := readCSV(t, filepath.Join(out, "windows.csv")); len(rows) != 1+len(synthConc)*len(synthRails) || rows[0][0] != "window" {
		t.Errorf("windows.csv: %d rows", len(rows))
	}
	fits := readCSV(t, filepath.Join(out, "fits.csv"))
	var knee string
	for _, r := range fits {
		if r[0] == "knee" && r[1] == "" && r[3] == "concurrency" {
			knee = r[4]
		}
	}
	if knee != "16" {
		t.Errorf("fits.csv knee %q", knee)
	}
	if rows := readCSV(t, filepath.Join(out, "residuals.csv")); len(rows) != 1+2*len(synthConc)*len(synthRails) {
		t.Errorf("residuals.csv: %d rows", len(rows))
	}
	checkImages(t, out, "throughput", "bytes_per_token")

	writeDocs(t, sweep, out, url)
}

// docsDir holds docs/analysis.md's worked example, produced by this test.
var docsDir = filepath.Join("..", "docs", "analyze")

// writeDocs refreshes docs/analysis.md's worked example (make analyze-example);
// without -docs it checks that the committed sweep and report are what
// the analysis produces now.
func writeDocs(t *testing.T, sweep, out, url string) {
	t.Helper()
	files := map[string]string{"sweep.yaml": sweep}
	for _, f := range []string{"report.md", "throughput.png", "bytes_per_token.png", "windows.csv", "fits.csv"} {
		files[f] = filepath.Join(out, f)
	}
	if *updateDocs {
		if err := os.MkdirAll(docsDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for to, from := range files {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(to, ".md") {
			// The test's Prometheus listens on a random port.
			b = bytes.ReplaceAll(b, []byte(url), []byte("http://prometheus:9090"))
		}
		dst := filepath.Join(docsDir, to)
		if *updateDocs {
			if err := os.WriteFile(dst, b, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if to != "sweep.yaml" && to != "report.md" {
			continue
		}
		if old, err := os.ReadFile(dst); err != nil || !sameUpToLastDigit(old, b) {
			t.Errorf("%s is not what the analysis produces now (%v); run make analyze-example and commit the result", dst, err)
		}
	}
}

// printedNumber is a number as the report prints it.
var printedNumber = regexp.MustCompile(`-?[0-9]+(\.[0-9]+)?`)

// sameUpToLastDigit: the texts are equal but for numbers that differ by
// at most one unit of their last printed digit. Prometheus versions sum a
// window's increase in another order (2.42 against 3.x), and a residual
// of 6315.25 MB prints as 6315.2 with one and 6315.3 with the other.
// Integers (token counts, concurrencies, the knee) must be equal.
func sameUpToLastDigit(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	ia, ib := printedNumber.FindAllIndex(a, -1), printedNumber.FindAllIndex(b, -1)
	if len(ia) != len(ib) {
		return false
	}
	pa, pb := 0, 0
	for k := range ia {
		if !bytes.Equal(a[pa:ia[k][0]], b[pb:ib[k][0]]) {
			return false
		}
		na, nb := string(a[ia[k][0]:ia[k][1]]), string(b[ib[k][0]:ib[k][1]])
		if na != nb {
			x, err1 := strconv.ParseFloat(na, 64)
			y, err2 := strconv.ParseFloat(nb, 64)
			i := strings.IndexByte(na, '.')
			if i < 0 { // counts and concurrencies are exact
				return false
			}
			unit := math.Pow(10, -float64(len(na)-i-1))
			if err1 != nil || err2 != nil || len(na) != len(nb) || math.Abs(x-y) > unit*1.0001 {
				return false
			}
		}
		pa, pb = ia[k][1], ib[k][1]
	}
	return bytes.Equal(a[pa:], b[pb:])
}

// TestRealPrometheusBench derives the windows from bench_serving output
// instead: the committed logs (testdata/bench: C = 1, 2, 16) plus logs
// written for the other points; the result must equal the sweep file's.
func TestRealPrometheusBench(t *testing.T) {
	url := startPrometheus(t)
	dir := t.TempDir()
	files := []string{"testdata/bench/sweep-loop.log", "testdata/bench/c16.log"}
	for i, c := range synthConc {
		if c == 1 || c == 2 || c == 16 {
			continue
		}
		files = append(files, writeTemp(t, fmt.Sprintf("c%d.log", c), synthA.benchLog(i)))
	}
	cfg := testConfig(url, filepath.Join(dir, "out"), files...)
	cfg.Name = synthA.name
	cfg.NoPlots = true // TestRealPrometheusSweep checks them; they are slow under -race
	a, _, err := run(context.Background(), cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	checkSweep(t, a, synthA)
	for _, m := range a.Windows {
		if m.Bench == nil || m.Bench.Concurrency != m.Concurrency {
			t.Errorf("window %s: bench run %+v", m.Name, m.Bench)
		}
	}
	report, _ := os.ReadFile(filepath.Join(dir, "out", "report.md"))
	if !bytes.Contains(report, []byte("| c64 | 64 |")) || bytes.Contains(report, []byte("throughput.png")) {
		t.Errorf("report lacks the c64 window or links plots it did not draw:\n%s", report)
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "throughput.png")); err == nil {
		t.Error("throughput.png written with NoPlots")
	}
}

func TestRealPrometheusCompare(t *testing.T) {
	url := startPrometheus(t)
	dir := t.TempDir()
	cfg := testConfig(url, filepath.Join(dir, "out"), writeTemp(t, "a.yaml", synthA.sweepYAML()))
	cfg.Compare = []string{writeTemp(t, "b.yaml", synthB.sweepYAML())}
	a, b, err := run(context.Background(), cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	checkSweep(t, a, synthA)
	checkSweep(t, b, synthB)
	md, err := os.ReadFile(filepath.Join(cfg.Out, "compare.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# A/B: NCCL_CROSS_NIC=0 (A) vs NCCL_CROSS_NIC=2 (B)", "| knee C | 16 | 32 | |"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("compare.md lacks %q:\n%s", want, md)
		}
	}
	// Point by point: B/A of the mean rail throughput at C is the ratio of
	// the two curves (the wobble is the same in both sweeps).
	rows := readCSV(t, filepath.Join(cfg.Out, "compare.csv"))
	checked := 0
	for _, r := range rows[1:] {
		if r[3] != "gbps_mean_rail" {
			continue
		}
		var c, ratio float64
		fmt.Sscan(r[0], &c)
		fmt.Sscan(r[6], &ratio)
		var i int
		for i = range synthConc {
			if float64(synthConc[i]) == c {
				break
			}
		}
		var sa, sb float64
		for ri := range synthRails {
			sa += synthA.gbps(ri, i)
			sb += synthB.gbps(ri, i)
		}
		if !near(ratio, sb/sa, 1e-5) {
			t.Errorf("C=%g: B/A %g, want %g", c, ratio, sb/sa)
		}
		checked++
	}
	if checked != len(synthConc) {
		t.Errorf("compare.csv: %d mean-rail rows", checked)
	}
	for _, d := range []string{"a", "b"} {
		checkImages(t, filepath.Join(cfg.Out, d), "throughput", "bytes_per_token")
	}
	checkImages(t, cfg.Out, "compare_throughput")
}

func TestRealPrometheusErrors(t *testing.T) {
	url := startPrometheus(t)
	a := synthA.sweepYAML()
	// A window a day before anything was recorded.
	noData := a + "  - {name: c128, concurrency: 128, start: 2026-11-01T10:00:00Z, end: 2026-11-01T10:05:00Z}\n"
	for _, tc := range []struct {
		name   string
		sweep  string
		modify func(*Config)
		want   []string
	}{
		{"window without data", noData, nil,
			[]string{`window "c128" (C=128, 2026-11-01T10:00:00Z to 2026-11-01T10:05:00Z`, "no data: no samples of fabric_rdma_port_transmitted_bytes_total{job=\"fabric\"} in the window"}},
		{"counter reset", a, func(c *Config) { c.Query.ExporterSelector = `job="fabric-reset"` },
			[]string{`window "c8" (C=8, 2026-11-02T10:19:00Z to 2026-11-02T10:24:00Z`, "counter reset inside the window",
				`fabric_rdma_port_transmitted_bytes_total{device="mlx5_0", instance="gpu-r:10470", job="fabric-reset", port="1", rail="mlx5_0"}`}},
		{"no SGLang series", a, func(c *Config) { c.Query.SGLangSelector = `job="vllm"` },
			[]string{`window "c1"`, `no samples of sglang:prompt_tokens_total{job="vllm"} in the window`}},
		{"no rails", a, func(c *Config) { c.Query.ExporterSelector = `job="fabric", device="mlx5_1"` },
			[]string{`window "c1"`, `no fabric_rdma_port_info{job="fabric", device="mlx5_1", rail!=""} in the window: the exporter reported no rails`}},
		{"bad selector", a, func(c *Config) { c.Query.ExporterSelector = `job=fabric` },
			[]string{`window "c1"`, "bad_data", "parse error"}},
		{"unreachable", a, func(c *Config) { c.PrometheusURL = "http://" + testenv.FreeAddr(t) },
			[]string{"cannot reach Prometheus at http://127.0.0.1:", "connection refused"}},
		{"bad URL", a, func(c *Config) { c.PrometheusURL = "prometheus:9090" },
			[]string{`Prometheus URL "prometheus:9090": want http(s)://host:port`}},
		{"bad sweep", "windows:\n  - {name: c1, concurrency: -1}\n", nil,
			[]string{"sweep: ", `concurrency "-1": must be a positive integer`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(url, t.TempDir(), writeTemp(t, "sweep.yaml", tc.sweep))
			if tc.modify != nil {
				tc.modify(&cfg)
			}
			err := Run(context.Background(), cfg, io.Discard)
			if err == nil {
				t.Fatal("no error")
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestSameUpToLastDigit(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"| c2 | 6315.2 | 0.33 % |", "| c2 | 6315.2 | 0.33 % |", true},
		{"| c2 | 6315.2 | 0.33 % |", "| c2 | 6315.3 | 0.33 % |", true},
		{"| c2 | 6315.2 | 0.33 % |", "| c2 | 6315.4 | 0.33 % |", false},
		{"knee C = 16", "knee C = 17", false},
		{"-0.15 %", "-0.16 %", true},
		{"| c2 | 6315.2 |", "| c3 | 6315.2 |", false},
		{"| c2 | 6315.2 |", "| d2 | 6315.2 |", false},
		{"1.5 GB", "1.50 GB", false},
		{"a 1", "a 1 2", false},
		{"x 1.0 y", "x 1.0 z", false},
	} {
		if got := sameUpToLastDigit([]byte(c.a), []byte(c.b)); got != c.want {
			t.Errorf("sameUpToLastDigit(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
