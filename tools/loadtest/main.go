// Command loadtest puts fabric_exporter under load on a large fixture node
// (8 HCAs, 8 fake GPUs, 64 serving processes with 3000-line numa_maps):
//
//  1. -scrapers concurrent scrapers for -duration with --web.max-requests
//     above their number: latency percentiles, errors (must be 0), CPU per
//     scrape, RSS, goroutines and open files at start and end;
//  2. the same scrapers against --web.max-requests=-overload-max: every
//     refused request must be a clean HTTP 503;
//  3. a soak: one scrape every -soak-interval for -soak, with RSS,
//     goroutines and open files sampled along the way (must stay flat).
//
// It prints a Markdown report (and writes it to -out). Run from the
// repository root after `make build`:
//
//	go run ./tools/loadtest -fabric ./fabric_exporter -soak 30m -out docs/load.md
package main

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/fixturetree"
)

func main() {
	var (
		bin         = flag.String("fabric", "./fabric_exporter", "exporter binary")
		hcas        = flag.Int("hcas", 8, "HCAs in the fixture")
		procs       = flag.Int("procs", 64, "serving processes in the fixture /proc")
		mapsLines   = flag.Int("maps-lines", 3000, "lines of each process's numa_maps")
		scrapers    = flag.Int("scrapers", 50, "concurrent scrapers")
		duration    = flag.Duration("duration", 60*time.Second, "length of the concurrent phase")
		maxReq      = flag.Int("max-requests", 64, "--web.max-requests in the concurrent phase")
		overloadMax = flag.Int("overload-max", 5, "--web.max-requests in the overload phase")
		overloadDur = flag.Duration("overload-duration", 10*time.Second, "length of the overload phase")
		soak        = flag.Duration("soak", 30*time.Minute, "length of the soak (0 skips it)")
		soakEvery   = flag.Duration("soak-interval", time.Second, "scrape interval of the soak")
		workdir     = flag.String("workdir", ".bench", "where the fixture is built")
		out         = flag.String("out", "", "also write the report here")
	)
	flag.Parse()
	if err := run(*bin, *hcas, *procs, *mapsLines, *scrapers, *duration, *maxReq, *overloadMax, *overloadDur, *soak, *soakEvery, *workdir, *out); err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

type fixture struct{ sys, eth, proc, gpu string }

func buildFixture(dir string, hcas, procs, mapsLines int) (fixture, error) {
	f := fixture{sys: filepath.Join(dir, "sys"), eth: filepath.Join(dir, "ethtool"), proc: filepath.Join(dir, "proc"), gpu: filepath.Join(dir, "gpu.json")}
	if err := fixturetree.HCAs("collector/fixtures/sys", f.sys, hcas); err != nil {
		return f, err
	}
	eth0, err := os.ReadFile("collector/fixtures/ethtool/eth0")
	if err != nil {
		return f, err
	}
	os.MkdirAll(f.eth, 0o755)
	for i := range hcas {
		os.WriteFile(filepath.Join(f.eth, fmt.Sprintf("eth%d", i)), eth0, 0o644)
	}
	pids, err := fixturetree.Procs("collector/fixtures/proc", f.proc, procs, mapsLines)
	if err != nil {
		return f, err
	}
	// The fixture's 8 GPUs, each running an eighth of the processes.
	b, err := os.ReadFile("collector/fixtures/gpu/dcgm-8gpu.json")
	if err != nil {
		return f, err
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return f, err
	}
	gpus := doc["gpus"].([]any)
	for i, g := range gpus {
		var mine []int
		for j, p := range pids {
			if j%len(gpus) == i {
				mine = append(mine, p)
			}
		}
		g.(map[string]any)["pids"] = mine
	}
	b, _ = json.Marshal(doc)
	return f, os.WriteFile(f.gpu, b, 0o644)
}

type exporter struct {
	cmd  *exec.Cmd
	addr string
}

func startExporter(bin string, f fixture, maxReq int) (*exporter, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "--web.listen-address="+addr, "--path.sysfs="+f.sys, "--path.procfs="+f.proc,
		"--collector.pfc.ethtool-fixtures="+f.eth, "--collector.gpu.fixture="+f.gpu, fmt.Sprintf("--web.max-requests=%d", maxReq))
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	e := &exporter{cmd: cmd, addr: addr}
	for range 100 {
		if code, _, _, err := e.scrape(http.DefaultClient); err == nil && code == 200 {
			return e, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.stop()
	return nil, fmt.Errorf("exporter did not start")
}

func (e *exporter) stop() { e.cmd.Process.Kill(); e.cmd.Wait() }

// scrape fetches /metrics the way Prometheus does (gzip).
func (e *exporter) scrape(c *http.Client) (code int, body string, d time.Duration, err error) {
	req, _ := http.NewRequest("GET", "http://"+e.addr+"/metrics", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", 0, err
	}
	defer resp.Body.Close()
	var r io.Reader = resp.Body
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return resp.StatusCode, "", 0, err
		}
		r = zr
	}
	b, err := io.ReadAll(r)
	return resp.StatusCode, string(b), time.Since(start), err
}

// state is what the exporter process looks like from outside.
type state struct {
	cpu        time.Duration
	rssKiB     int64
	fds        int
	goroutines string
	series     int
}

func (e *exporter) state() state {
	pid := e.cmd.Process.Pid
	var s state
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		s.cpu = time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ 100
	}
	if f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
				s.rssKiB, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			}
		}
		f.Close()
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		s.fds = len(ents)
	}
	if _, body, _, err := e.scrape(http.DefaultClient); err == nil {
		for _, l := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(l, "go_goroutines "); ok {
				s.goroutines = v
			}
			if l != "" && l[0] != '#' {
				s.series++
			}
		}
	}
	return s
}

type result struct {
	lat           []time.Duration
	codes         map[int]int
	errs          int
	bad503        int
	ok            int
	start, finish state
	wall          time.Duration
}

// hammer runs n scrapers for d against e.
func hammer(e *exporter, n int, d time.Duration) result {
	r := result{codes: map[int]int{}}
	r.start = e.state()
	var mu sync.Mutex
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	begin := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}
			defer tr.CloseIdleConnections() // the scraper goes away, as Prometheus would
			c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
			for time.Now().Before(deadline) {
				code, body, lat, err := e.scrape(c)
				mu.Lock()
				switch {
				case err != nil:
					r.errs++
				case code == 200:
					r.ok++
					r.lat = append(r.lat, lat)
				case code == 503:
					if !strings.Contains(body, "Limit of concurrent requests reached") {
						r.bad503++
					}
				}
				if err == nil {
					r.codes[code]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	r.wall = time.Since(begin)
	time.Sleep(2 * time.Second) // let the server notice the closed connections
	r.finish = e.state()
	return r
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

func run(bin string, hcas, procs, mapsLines, scrapers int, duration time.Duration, maxReq, overloadMax int, overloadDur, soak, soakEvery time.Duration, workdir, out string) error {
	os.MkdirAll(workdir, 0o755)
	dir, err := os.MkdirTemp(workdir, "loadtest-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	f, err := buildFixture(dir, hcas, procs, mapsLines)
	if err != nil {
		return fmt.Errorf("fixture: %w", err)
	}
	var rep strings.Builder
	w := io.MultiWriter(os.Stdout, &rep)
	fmt.Fprintf(w, "# Load test\n\n%s, `go run ./tools/loadtest` on the 2-core build machine: %d HCAs, 8 fake GPUs (DCGM fixture), %d serving processes with %d-line numa_maps; scrapes with gzip like Prometheus.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), hcas, procs, mapsLines)

	e, err := startExporter(bin, f, maxReq)
	if err != nil {
		return err
	}
	r := hammer(e, scrapers, duration)
	e.stop()
	total := r.ok
	cpu := r.finish.cpu - r.start.cpu
	fmt.Fprintf(w, "## %d concurrent scrapers for %s (--web.max-requests=%d)\n\n", scrapers, duration, maxReq)
	fmt.Fprintf(w, "| scrapes | errors | non-200 | p50 | p99 | max | CPU per scrape | scrapes/s |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	fmt.Fprintf(w, "| %d | %d | %d | %s | %s | %s | %.2f ms | %.0f |\n\n", total, r.errs, sumExcept(r.codes, 200), ms(pct(r.lat, .5)), ms(pct(r.lat, .99)), ms(pct(r.lat, 1)),
		float64(cpu)/1e6/float64(max(total, 1)), float64(total)/r.wall.Seconds())
	fmt.Fprintf(w, "| | series | RSS | goroutines | open files |\n|---|---:|---:|---:|---:|\n| start | %d | %.1f MiB | %s | %d |\n| end | %d | %.1f MiB | %s | %d |\n\n",
		r.start.series, float64(r.start.rssKiB)/1024, r.start.goroutines, r.start.fds, r.finish.series, float64(r.finish.rssKiB)/1024, r.finish.goroutines, r.finish.fds)

	e, err = startExporter(bin, f, overloadMax)
	if err != nil {
		return err
	}
	o := hammer(e, scrapers, overloadDur)
	e.stop()
	fmt.Fprintf(w, "## Overload: %d scrapers against --web.max-requests=%d for %s\n\n", scrapers, overloadMax, overloadDur)
	fmt.Fprintf(w, "| 200 | 503 | other status | transport errors | 503 without the limit message |\n|---:|---:|---:|---:|---:|\n| %d | %d | %d | %d | %d |\n\n",
		o.codes[200], o.codes[503], sumExcept(o.codes, 200, 503), o.errs, o.bad503)

	if soak > 0 {
		e, err = startExporter(bin, f, maxReq)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "## Soak: one scrape every %s for %s\n\n| elapsed | scrapes | errors | RSS | goroutines | open files | CPU per scrape |\n|---:|---:|---:|---:|---:|---:|---:|\n", soakEvery, soak)
		start := time.Now()
		s0 := e.state()
		var lat []time.Duration
		errs, n := 0, 0
		prev := s0
		prevN := 0
		tick := time.NewTicker(soakEvery)
		next := time.Duration(0)
		for time.Since(start) < soak {
			<-tick.C
			code, _, d, err := e.scrape(http.DefaultClient)
			n++
			if err != nil || code != 200 {
				errs++
			} else {
				lat = append(lat, d)
			}
			if el := time.Since(start); el >= next || el >= soak {
				s := e.state()
				fmt.Fprintf(w, "| %s | %d | %d | %.1f MiB | %s | %d | %.2f ms |\n", el.Round(time.Second), n, errs, float64(s.rssKiB)/1024, s.goroutines, s.fds,
					float64(s.cpu-prev.cpu)/1e6/float64(max(n-prevN, 1)))
				prev, prevN = s, n
				next += soak / 6
			}
		}
		tick.Stop()
		e.stop()
		fmt.Fprintf(w, "\nSoak latency: p50 %s, p99 %s, max %s; %d errors in %d scrapes.\n", ms(pct(lat, .5)), ms(pct(lat, .99)), ms(pct(lat, 1)), errs, n)
	}
	if out != "" {
		return os.WriteFile(out, []byte(rep.String()), 0o644)
	}
	return nil
}

func sumExcept(m map[int]int, skip ...int) int {
	n := 0
	for k, v := range m {
		skipped := false
		for _, s := range skip {
			skipped = skipped || k == s
		}
		if !skipped {
			n += v
		}
	}
	return n
}
