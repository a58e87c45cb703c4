package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// demoExceptions returns the families the README says `make demo` does
// not show: the backticked family names after "except" in its demo
// paragraph (from "No RDMA hardware or GPU?" to the next code block).
func demoExceptions(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, para, ok := strings.Cut(string(readme), "No RDMA hardware or GPU?")
	if ok {
		para, _, ok = strings.Cut(para, "```")
	}
	if !ok {
		t.Fatal(`README: no demo paragraph ("No RDMA hardware or GPU?" … a code block)`)
	}
	parts := regexp.MustCompile(`\sexcept\s`).Split(para, -1)
	if len(parts) != 2 {
		t.Fatalf(`README's demo paragraph says "except" %d times, want once`, len(parts)-1)
	}
	before, after := parts[0], parts[1]
	if strings.Contains(before, "`fabric_") {
		t.Errorf("README's demo paragraph names families before its \"except\": the list is after it")
	}
	var out []string
	for _, m := range backticked.FindAllStringSubmatch(after, -1) {
		if strings.HasPrefix(m[1], "fabric_") {
			out = append(out, m[1])
		}
	}
	return out
}

// demoSeries returns the number in the README's demo paragraph's "sends N
// series" and in its code block's "# N".
func readmeDemoCount(t *testing.T) (sentence, comment int) {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, para, _ := strings.Cut(string(readme), "No RDMA hardware or GPU?")
	s := regexp.MustCompile(`sends ([0-9,]+) series`).FindStringSubmatch(para)
	c := regexp.MustCompile(`grep -vc '\^#' +# ([0-9,]+)`).FindStringSubmatch(para)
	if s == nil || c == nil {
		t.Fatalf("README's demo paragraph: no \"sends N series\" or no \"grep -vc '^#'   # N\"")
	}
	atoi := func(x string) int { n, _ := strconv.Atoi(strings.ReplaceAll(x, ",", "")); return n }
	return atoi(s[1]), atoi(c[1])
}

// startDemo runs tools/demo, as `make demo` does, with the built exporter
// on a free port, and returns the exporter's address.
func startDemo(t *testing.T) string {
	t.Helper()
	demo := filepath.Join(t.TempDir(), "fabric_demo")
	if out, err := exec.Command("go", "build", "-o", demo, "../../tools/demo").CombinedOutput(); err != nil {
		t.Fatalf("building tools/demo: %v\n%s", err, out)
	}
	addr := testenv.FreeAddr(t)
	logs := &syncBuffer{}
	cmd := exec.Command(demo, "-exporter", binary, "-root", "../..", "-listen", addr, "-dir", filepath.Join(shortTempDir(t), "demo"))
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("demo log:\n%s", logs)
		}
	})
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
			resp.Body.Close()
			return addr
		}
	}
	t.Fatalf("the demo did not serve:\n%s", logs)
	return ""
}

// exportedFamilies returns the families of a scrape (its # TYPE lines) and
// its number of series (lines that are not comments).
func exportedFamilies(scrape string) (families []string, series int) {
	for _, l := range strings.Split(strings.TrimSpace(scrape), "\n") {
		if f, ok := strings.CutPrefix(l, "# TYPE "); ok {
			families = append(families, strings.Fields(f)[0])
		} else if !strings.HasPrefix(l, "#") {
			series++
		}
	}
	return families, series
}

// TestDemoFamilies: `make demo` shows every family docs/metrics.md
// documents except the ones the README lists after "except" (no more, no
// fewer), every family it exports is documented, and it sends the number
// of series the README and docs/performance.md say, with the per-prefix
// table of docs/performance.md, and the README's sample scrape lines. The demo is tools/demo, which `make demo`
// runs: the fixtures, real NCCL logs, the Inspector dumps of both modes,
// and stand-ins for NCCL's RAS service and the kubelet.
func TestDemoFamilies(t *testing.T) {
	md, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	docs := documentedFamilies(t, string(md))
	except := demoExceptions(t)
	addr := startDemo(t)

	missing := func(families []string) (out []string) {
		for _, d := range docs {
			if !d.matchesAny(families) && !slices.Contains(except, d.name) {
				out = append(out, d.name)
			}
		}
		return out
	}
	// The sources are read in the background: wait until nothing but the
	// exceptions is missing and the number of series holds still.
	var scrape string
	var families []string
	series := -1
	for deadline := time.Now().Add(60 * time.Second); ; {
		scrape = get(t, "http://"+addr+"/metrics")
		f, n := exportedFamilies(scrape)
		if len(missing(f)) == 0 && n == series {
			families = f
			break
		}
		if time.Now().After(deadline) {
			families = f
			break
		}
		series = n
		time.Sleep(time.Second)
	}
	for _, name := range missing(families) {
		t.Errorf("documented in docs/metrics.md, not in the demo, not in the README's exceptions: %s", name)
	}
	for _, e := range except {
		i := slices.IndexFunc(docs, func(d docFamily) bool { return d.name == e })
		switch {
		case i < 0:
			t.Errorf("the README's demo exception %s is no family of docs/metrics.md's tables", e)
		case docs[i].matchesAny(families):
			t.Errorf("the README says the demo lacks %s; it shows it", e)
		}
	}
	for _, f := range families {
		if !slices.ContainsFunc(docs, func(d docFamily) bool { return d.re.MatchString(f) }) {
			t.Errorf("the demo exports %s, which docs/metrics.md does not document", f)
		}
	}

	// "make demo serves these lines too"
	lines := map[string]bool{}
	for _, l := range strings.Split(scrape, "\n") {
		lines[l] = true
	}
	for _, l := range readmeSampleLines(t) {
		if !lines[l] {
			t.Errorf("README sample line not in the demo's scrape: %s", l)
		}
	}

	_, n := exportedFamilies(scrape)
	counts := prefixCounts(scrape)
	if s, c := readmeDemoCount(t); s != n || c != n {
		t.Errorf("the demo sends %d series; the README says %d and %d\n%s", n, s, c, formatCounts(counts))
	}
	perf, err := os.ReadFile("../../docs/performance.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range performanceTable(t, string(perf)) {
		if e.prefix == "total" {
			if e.n != n {
				t.Errorf("docs/performance.md: total %d series, the demo sends %d", e.n, n)
			}
		} else if counts[e.prefix] != e.n {
			t.Errorf("docs/performance.md: %s %d series, the demo sends %d", e.prefix, e.n, counts[e.prefix])
		}
		delete(counts, e.prefix)
	}
	for p, c := range counts {
		t.Errorf("docs/performance.md: no row for %s (%d series)", p, c)
	}
}

// seriesPrefix is the grouping of docs/performance.md's table, what its
// command's sed 's/^(fabric_[a-z]+|[a-z]+)_.*/\1/' keeps.
var seriesPrefix = regexp.MustCompile(`^(fabric_[a-z]+|[a-z]+)_`)

func prefixCounts(scrape string) map[string]int {
	out := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(scrape), "\n") {
		if m := seriesPrefix.FindStringSubmatch(l); m != nil && !strings.HasPrefix(l, "#") {
			out[m[1]]++
		}
	}
	return out
}

func formatCounts(c map[string]int) string {
	var keys []string
	for k := range c {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return c[keys[i]] > c[keys[j]] || c[keys[i]] == c[keys[j]] && keys[i] < keys[j] })
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%7d %s\n", c[k], k)
	}
	return b.String()
}

type prefixRow struct {
	prefix string
	n      int
}

// performanceTable parses docs/performance.md's "| prefix | series |"
// table: one or more backticked prefixes, as many comma-separated counts;
// the **total** row.
func performanceTable(t *testing.T, md string) []prefixRow {
	t.Helper()
	_, table, ok := strings.Cut(md, "| prefix | series |")
	if !ok {
		t.Fatal(`docs/performance.md: no "| prefix | series |" table`)
	}
	var out []prefixRow
	for _, line := range strings.Split(table, "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(line, "|")
		var names []string
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			names = append(names, m[1])
		}
		if strings.Contains(cells[1], "**total**") {
			names = []string{"total"}
		}
		nums := strings.Split(strings.Trim(strings.TrimSpace(cells[2]), "*"), ",")
		if len(nums) != len(names) {
			t.Fatalf("docs/performance.md: %d prefixes, %d counts: %s", len(names), len(nums), line)
		}
		for i, s := range nums {
			n, err := strconv.Atoi(strings.ReplaceAll(strings.TrimSpace(s), " ", ""))
			if err != nil {
				t.Fatalf("docs/performance.md: %s: %v", line, err)
			}
			out = append(out, prefixRow{names[i], n})
		}
	}
	if len(out) < 10 {
		t.Fatalf("docs/performance.md: only %d rows in the prefix table", len(out))
	}
	return out
}
