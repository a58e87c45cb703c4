package main

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/promapi"
)

//go:embed allreduce.py
var allreduceScript []byte

// Config is one drill.
type Config struct {
	Repo         string // repository root: alerts/fabric-rules.yml, deploy/…
	Exporter     string // fabric_exporter binary
	Prometheus   string
	Alertmanager string
	Python       string // python3 with PyTorch (live mode)
	WorkDir      string // everything the drill writes goes here
	Trials       int    // socket-fallback trials (time to page)
	Replay       string // directory of recorded logs: replay them instead of running PyTorch
	// ReplayInspector is a directory of recorded NCCL Inspector JSON dumps
	// of the same run as Replay's socket/ logs (same hosts and pids): the
	// replay's trial 1 writes them into its Inspector dump directory.
	ReplayInspector string
	Inspector       string // NCCL Inspector plugin (.so); "" = none
	SocketIf        string // NCCL_SOCKET_IFNAME of the socket run
	GPU             int    // CUDA device of both ranks
	// Ports on 127.0.0.1.
	ExporterPort, PrometheusPort, AlertmanagerPort, WebhookPort, TorchPort int
	PageTimeout                                                            time.Duration
	// Intervals; "" = deploy/lab/prometheus.yml's (CI's replay test
	// shortens them; the drill's time to page is measured with the shipped).
	ScrapeInterval, EvalInterval string
	Out                          io.Writer // the report (also written to WorkDir/report.txt)
}

// check is one assertion of the drill.
type check struct {
	name   string
	ok     bool
	detail string
}

// Result is what a drill measured and checked.
type Result struct {
	Checks     []check
	TimeToPage []time.Duration // per socket trial
	InitPage   time.Duration   // forced-IB run: first line → NCCLInitFailed notification
	Lines      []string        // the report
}

// Failed reports whether any check failed.
func (r *Result) Failed() bool {
	for _, c := range r.Checks {
		if !c.ok {
			return true
		}
	}
	return len(r.Checks) == 0
}

func (r *Result) check(name string, ok bool, format string, a ...any) {
	r.Checks = append(r.Checks, check{name: name, ok: ok, detail: fmt.Sprintf(format, a...)})
}

func (r *Result) printf(format string, a ...any) {
	r.Lines = append(r.Lines, fmt.Sprintf(format, a...))
}

// rank is one NCCL process as its log file names it (NCCL_DEBUG_FILE=%h.%p.log).
type rank struct {
	host, pid string
	file      string
}

var logName = regexp.MustCompile(`^(.+)\.([0-9]+)\.log$`)

func ranksIn(dir string) []rank {
	ents, _ := os.ReadDir(dir)
	var out []rank
	for _, e := range ents {
		if m := logName.FindStringSubmatch(e.Name()); m != nil {
			out = append(out, rank{host: m[1], pid: m[2], file: filepath.Join(dir, e.Name())})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out
}

func pidRegexp(rs []rank) string {
	var p []string
	for _, r := range rs {
		p = append(p, r.pid)
	}
	return strings.Join(p, "|")
}

// Run runs the drill: Trials socket-fallback runs, then the forced-IB run,
// each against a fresh exporter, Prometheus and Alertmanager.
func Run(cfg Config) (*Result, error) {
	res := &Result{}
	if cfg.Trials < 1 {
		cfg.Trials = 1
	}
	if err := portsFree(cfg.ExporterPort, cfg.PrometheusPort, cfg.AlertmanagerPort, cfg.WebhookPort, cfg.TorchPort); err != nil {
		return nil, err
	}
	sh, err := loadShipped(cfg.Repo)
	if err != nil {
		return nil, err
	}
	if cfg.ScrapeInterval == "" {
		cfg.ScrapeInterval = sh.scrapeInterval
	}
	if cfg.EvalInterval == "" {
		cfg.EvalInterval = sh.evalInterval
	}
	host, _ := os.Hostname()
	mode := "live (PyTorch, real NCCL)"
	if cfg.Replay != "" {
		mode = "replay of " + cfg.Replay
	}
	res.printf("fabric_exporter GPU fire drill, %s on %s, %s", time.Now().UTC().Format("2006-01-02 15:04 UTC"), host, mode)
	res.printf("settings: scrape %s, evaluation %s (deploy/lab/prometheus.yml: %s/%s), NCCLSocketFallback for: %s, page route group_wait %s, nccl poll 1s",
		cfg.ScrapeInterval, cfg.EvalInterval, sh.scrapeInterval, sh.evalInterval, sh.ncclFor, sh.pageGroupWait)
	for i := 1; i <= cfg.Trials; i++ {
		inspector := ""
		if cfg.Replay != "" && cfg.ReplayInspector != "" && i == 1 {
			inspector = "json"
		}
		if cfg.Inspector != "" && cfg.Replay == "" {
			// JSON lines in the first trial, Prometheus textfiles in the second.
			switch i {
			case 1:
				inspector = "json"
			case 2:
				inspector = "prom"
			}
		}
		if err := runTrial(cfg, sh, res, fmt.Sprintf("trial%d", i), "socket", inspector); err != nil {
			return res, err
		}
	}
	if err := runTrial(cfg, sh, res, "ib-failure", "ib", ""); err != nil {
		return res, err
	}
	var med []float64
	for _, d := range res.TimeToPage {
		med = append(med, d.Seconds())
	}
	if len(med) > 0 {
		res.printf("time to page (median of %d): %.1f s  [%s]", len(med), median(med), joinFloats(med, " s, ")+" s")
	}
	res.printf("checks:")
	for _, c := range res.Checks {
		st := "PASS"
		if !c.ok {
			st = "FAIL"
		}
		res.printf("  %s %s: %s", st, c.name, c.detail)
	}
	return res, nil
}

func joinFloats(v []float64, sep string) string {
	var s []string
	for _, f := range v {
		s = append(s, strconv.FormatFloat(f, 'f', 1, 64))
	}
	return strings.Join(s, sep)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// stack is one exporter + Prometheus + Alertmanager + webhook.
type stack struct {
	exporter, prom, am *proc
	hook               *webhook
}

func (s *stack) stop() {
	s.prom.stop(5 * time.Second)
	s.am.stop(5 * time.Second)
	s.exporter.stop(5 * time.Second)
	if s.hook != nil {
		s.hook.srv.Close()
	}
}

func startStack(cfg Config, sh shipped, dir, gpuFixture, inspectorDir string) (*stack, error) {
	s := &stack{}
	var err error
	instance, _ := os.Hostname()
	args := []string{"--web.listen-address=127.0.0.1:" + strconv.Itoa(cfg.ExporterPort),
		"--collector.nccl.log-path=" + filepath.Join(dir, "nccl", "*.log"),
		`--collector.process.cmdline=allreduce\.py`}
	if gpuFixture != "" {
		args = append(args, "--collector.gpu.fixture="+gpuFixture)
	}
	if inspectorDir != "" {
		// The directory the ranks' NCCL_INSPECTOR_DUMP_DIR points to.
		args = append(args, "--collector.nccl-inspector.dump-dir="+inspectorDir)
	}
	if s.exporter, err = startProc("fabric_exporter", filepath.Join(dir, "exporter.log"), os.Environ(), cfg.Exporter, args...); err != nil {
		return s, err
	}
	if s.hook, err = startWebhook(cfg.WebhookPort); err != nil {
		return s, err
	}
	amCfg := filepath.Join(dir, "alertmanager.yml")
	if err := writeAlertmanagerConfig(copyMap(sh.am), amCfg, cfg.WebhookPort); err != nil {
		return s, err
	}
	if s.am, err = startProc("alertmanager", filepath.Join(dir, "alertmanager.log"), os.Environ(), cfg.Alertmanager,
		"--config.file="+amCfg, "--storage.path="+filepath.Join(dir, "am-data"),
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(cfg.AlertmanagerPort), "--cluster.listen-address="); err != nil {
		return s, err
	}
	rules, _ := filepath.Abs(filepath.Join(cfg.Repo, "alerts/fabric-rules.yml"))
	promCfg := filepath.Join(dir, "prometheus.yml")
	if err := writePrometheusConfig(promCfg, rules, cfg.ScrapeInterval, cfg.EvalInterval, cfg.AlertmanagerPort, cfg.ExporterPort, instance); err != nil {
		return s, err
	}
	if s.prom, err = startProc("prometheus", filepath.Join(dir, "prometheus.log"), os.Environ(), cfg.Prometheus,
		"--config.file="+promCfg, "--storage.tsdb.path="+filepath.Join(dir, "prom-data"),
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(cfg.PrometheusPort)); err != nil {
		return s, err
	}
	for _, w := range []struct {
		u string
		p *proc
	}{{fmt.Sprintf("http://127.0.0.1:%d/metrics", cfg.ExporterPort), s.exporter},
		{fmt.Sprintf("http://127.0.0.1:%d/-/ready", cfg.AlertmanagerPort), s.am},
		{fmt.Sprintf("http://127.0.0.1:%d/-/ready", cfg.PrometheusPort), s.prom}} {
		if err := waitReady(w.u, 60*time.Second, w.p); err != nil {
			return s, err
		}
	}
	return s, nil
}

// copyMap deep-copies a decoded YAML document (each trial rewrites its
// receivers).
func copyMap(m map[string]any) map[string]any {
	b, _ := json.Marshal(m)
	var out map[string]any
	json.Unmarshal(b, &out)
	return out
}

// runTrial runs one NCCL job (kind "socket" or "ib") against a fresh stack
// and checks what it must report.
func runTrial(cfg Config, sh shipped, res *Result, name, kind, inspector string) error {
	dir := filepath.Join(cfg.WorkDir, name)
	ncclDir := filepath.Join(dir, "nccl")
	if err := os.MkdirAll(ncclDir, 0o755); err != nil {
		return err
	}
	gpuFixture := ""
	if cfg.Replay != "" {
		gpuFixture = filepath.Join(cfg.Replay, "gpu-fixture.json")
	}
	inspDir := ""
	if inspector != "" {
		inspDir = filepath.Join(dir, "inspector")
		if err := os.MkdirAll(inspDir, 0o755); err != nil {
			return err
		}
	}
	st, err := startStack(cfg, sh, dir, gpuFixture, inspDir)
	defer st.stop()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	start := time.Now()
	var job []*proc
	defer func() {
		for _, p := range job {
			p.stop(10 * time.Second)
		}
	}()
	stopFile := filepath.Join(dir, "stop")
	if cfg.Replay != "" {
		if err := replayLogs(filepath.Join(cfg.Replay, kind), ncclDir); err != nil {
			return err
		}
		if inspector == "json" {
			done, err := replayInspector(cfg.ReplayInspector, inspDir, 4*parseDur(cfg.ScrapeInterval))
			if err != nil {
				return err
			}
			defer func() { <-done }()
		}
	} else {
		if job, err = startJob(cfg, dir, kind, inspector, stopFile); err != nil {
			return err
		}
	}
	// t0: the first NCCL line in the log directory.
	t0, err := firstLine(ncclDir, 120*time.Second, job)
	if err != nil {
		res.check(name+": NCCL log", false, "%v", err)
		return nil
	}
	cpu0, _, _, _ := procStat(st.exporter.cmd.Process.Pid)
	ranks := waitRanks(ncclDir, 2, 20*time.Second)
	pids := pidRegexp(ranks)
	alert := "NCCLSocketFallback"
	if kind == "ib" {
		alert = "NCCLInitFailed"
	}
	isRank := func(l map[string]string) bool {
		for _, r := range ranks {
			if l["pid"] == r.pid && l["host"] == r.host {
				return true
			}
		}
		return false
	}
	var page notification
	var paged bool
	deadline := time.Now().Add(cfg.PageTimeout)
	for time.Now().Before(deadline) {
		if page, paged = st.hook.first(alert, isRank); paged {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !paged {
		res.check(name+": "+alert+" paged", false, "no %s notification for pids %s within %s of the first NCCL line", alert, pids, cfg.PageTimeout)
	} else {
		ttp := page.at.Sub(t0)
		if kind == "socket" {
			res.TimeToPage = append(res.TimeToPage, ttp)
		} else {
			res.InitPage = ttp
		}
		res.check(name+": "+alert+" paged", page.receiver == "pager" && page.labels["severity"] == "page",
			"receiver %s, host %s, pid %s; first NCCL line %s, page %s: %.1f s", page.receiver, page.labels["host"], page.labels["pid"],
			t0.UTC().Format("15:04:05.0"), page.at.UTC().Format("15:04:05.0"), ttp.Seconds())
	}
	switch kind {
	case "socket":
		checkSocket(cfg, res, st, name, ranks, pids, page, paged)
		if inspector == "json" {
			checkInspector(cfg, res, name, ranks, pids, inspDir)
		}
	case "ib":
		checkInitFailure(cfg, res, name, ranks, pids, page, paged)
	}
	// Exporter cost while the job ran (from the first NCCL line to now).
	cpu1, rss, hwm, err := procStat(st.exporter.cmd.Process.Pid)
	wall := time.Since(t0).Seconds()
	if err == nil {
		res.printf("%s: exporter CPU %.2f%% of one core over %.0f s, RSS %.1f MiB (peak %.1f MiB)", name, 100*(cpu1-cpu0)/wall, wall, float64(rss)/(1<<20), float64(hwm)/(1<<20))
	}
	if d, err := query(cfg.PrometheusPort, `fabric_scrape_collector_duration_seconds{collector=~"gpu|nccl|process"}`); err == nil {
		var parts []string
		for _, s := range d {
			parts = append(parts, fmt.Sprintf("%s %.2f ms", s.Metric["collector"], s.Value*1e3))
		}
		res.printf("%s: collector durations at the last scrape: %s", name, strings.Join(parts, ", "))
	}
	if kind == "socket" && cfg.Replay == "" {
		// Prometheus-mode Inspector dumps come every 30 s at the least and
		// are deleted at teardown: let the job run long enough to see one.
		if inspector == "prom" {
			for time.Since(start) < 75*time.Second && !anyFile(filepath.Join(dir, "inspector"), ".prom") {
				time.Sleep(500 * time.Millisecond)
			}
			snapshotDir(filepath.Join(dir, "inspector"), filepath.Join(dir, "inspector-snapshot"))
			if anyFile(filepath.Join(dir, "inspector-snapshot"), ".prom") {
				reportInspectorProm(cfg, res, name, ranks, pids)
			}
		}
		os.WriteFile(stopFile, nil, 0o644)
		for _, p := range job {
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
			}
		}
		reportJob(res, name, dir, inspector)
	}
	if kind == "socket" && cfg.Replay == "" {
		writeGPUFixture(cfg, dir, ranks)
	}
	writeNotifications(st.hook, filepath.Join(dir, "webhook.jsonl"))
	saveScrape(cfg, filepath.Join(dir, "metrics.prom"))
	return nil
}

// saveScrape keeps the exporter's last scrape of a trial.
func saveScrape(cfg Config, path string) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", cfg.ExporterPort))
	if err != nil {
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	os.WriteFile(path, b, 0o644)
}

func checkSocket(cfg Config, res *Result, st *stack, name string, ranks []rank, pids string, page notification, paged bool) {
	// Every rank's alert fires (ranks whose lines came in a later scrape
	// are in Prometheus before their group's next notification).
	got := waitQuery(cfg, fmt.Sprintf(`ALERTS{alertname="NCCLSocketFallback",alertstate="firing",pid=~"%s"}`, pids), len(ranks), 40*time.Second)
	res.check(name+": NCCLSocketFallback for every rank", len(got) == len(ranks) && len(ranks) == 2, "%d of %d ranks firing (pids %s)", len(got), len(ranks), pids)
	// The interface: in the notification and in Prometheus.
	ifs := waitQuery(cfg, fmt.Sprintf(`fabric_nccl_socket_interface_info{pid=~"%s"}`, pids), len(ranks), 10*time.Second)
	okIf := len(ifs) >= len(ranks)
	for _, s := range ifs {
		okIf = okIf && s.Metric["interface"] == cfg.SocketIf
	}
	res.check(name+": socket interface", okIf && paged && strings.Contains(page.annotations["summary"], "interface "+cfg.SocketIf),
		"fabric_nccl_socket_interface_info %s; the page says %q", labelsOf(ifs, "pid", "interface"), page.annotations["summary"])
	// The join to the GPU: the same PIDs on the GPU.
	join := waitQuery(cfg, fmt.Sprintf(`fabric_nccl_net_info{net="Socket",pid=~"%s"} * on (instance, pid) group_left (gpu, uuid) fabric_gpu_process_info`, pids), len(ranks), 40*time.Second)
	res.check(name+": fabric_gpu_process_info joins the ranks", len(join) == len(ranks), "%s", labelsOf(join, "pid", "gpu", "uuid"))
	fail, _ := query(cfg.PrometheusPort, fmt.Sprintf(`fabric_nccl_init_failure_info{pid=~"%s"}`, pids))
	res.check(name+": no init failure for a working rank", len(fail) == 0, "%d series", len(fail))
}

func checkInitFailure(cfg Config, res *Result, name string, ranks []rank, pids string, page notification, paged bool) {
	fail := waitQuery(cfg, fmt.Sprintf(`fabric_nccl_init_failure_info{pid=~"%s"}`, pids), len(ranks), 30*time.Second)
	res.check(name+": fabric_nccl_init_failure_info for every rank", len(fail) == len(ranks) && len(ranks) > 0, "%s", labelsOf(fail, "pid", "reason"))
	net, _ := query(cfg.PrometheusPort, fmt.Sprintf(`fabric_nccl_net_info{pid=~"%s"} or fabric_nccl_net_device_info{pid=~"%s"}`, pids, pids))
	res.check(name+": no network reported for a failed rank", len(net) == 0, "%s", labelsOf(net, "pid", "net", "device"))
	res.check(name+": NCCLInitFailed carries the reason", paged && page.labels["reason"] != "", "reason %q", page.labels["reason"])
	sock, _ := query(cfg.PrometheusPort, fmt.Sprintf(`ALERTS{alertname="NCCLSocketFallback",pid=~"%s"}`, pids))
	res.check(name+": no NCCLSocketFallback for a failed rank", len(sock) == 0, "%d alerts", len(sock))
}

// waitQuery polls q until it returns n samples or timeout passes.
func waitQuery(cfg Config, q string, n int, timeout time.Duration) []promapi.Sample {
	return waitFor(cfg, q, func(ss []promapi.Sample) bool { return len(ss) >= n }, timeout)
}

func labelsOf(ss []promapi.Sample, names ...string) string {
	if len(ss) == 0 {
		return "(none)"
	}
	var out []string
	for _, s := range ss {
		var kv []string
		for _, n := range names {
			if v, ok := s.Metric[n]; ok {
				kv = append(kv, n+"="+v)
			}
		}
		out = append(out, "{"+strings.Join(kv, ",")+"}")
	}
	return strings.Join(out, " ")
}

// startJob starts the two ranks.
func startJob(cfg Config, dir, kind, inspector, stopFile string) ([]*proc, error) {
	script := filepath.Join(dir, "allreduce.py")
	if err := os.WriteFile(script, allreduceScript, 0o644); err != nil {
		return nil, err
	}
	var out []*proc
	for r := 0; r < 2; r++ {
		env := append(os.Environ(),
			"RANK="+strconv.Itoa(r), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(cfg.TorchPort),
			"DRILL_GPU="+strconv.Itoa(cfg.GPU), "PYTHONUNBUFFERED=1", "CUDA_CACHE_DISABLE=1",
			// Two "hosts" on one GPU: every byte crosses NCCL's network transport.
			"NCCL_HOSTID=drill-node-"+strconv.Itoa(r),
			"NCCL_DEBUG=INFO", "NCCL_DEBUG_FILE="+filepath.Join(dir, "nccl", "%h.%p.log"),
			"NCCL_NVLS_ENABLE=0", "TORCH_SYMM_MEM_DISABLE_MULTICAST=1", "NVSHMEM_DISABLE_NVLS=1")
		switch kind {
		case "socket":
			// The incident: RDMA unavailable (NCCL_IB_DISABLE, as in a
			// container without /dev/infiniband), NCCL takes NET/Socket.
			env = append(env, "NCCL_IB_DISABLE=1", "NCCL_SOCKET_IFNAME="+cfg.SocketIf)
		case "ib":
			// The other face: the network forced to IB where there is none
			// (NCCL_IB_HCA names no device, so hosts with RDMA fail too).
			env = append(env, "NCCL_NET=IB", "NCCL_IB_HCA==drill_no_such_hca", "NCCL_SOCKET_IFNAME="+cfg.SocketIf)
		}
		if inspector != "" {
			idir := filepath.Join(dir, "inspector")
			os.MkdirAll(idir, 0o755)
			env = append(env, "NCCL_PROFILER_PLUGIN="+cfg.Inspector, "NCCL_INSPECTOR_ENABLE=1", "NCCL_INSPECTOR_DUMP_DIR="+idir)
			if inspector == "prom" {
				env = append(env, "NCCL_INSPECTOR_PROM_DUMP=1", "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=30000000")
			} else {
				env = append(env, "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=1000000")
			}
		}
		p, err := startProc(fmt.Sprintf("rank%d", r), filepath.Join(dir, fmt.Sprintf("rank%d.out", r)), env, cfg.Python,
			script, "--stop-file", stopFile, "--seconds", "150")
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
	return out, nil
}

// replayLogs writes the recorded logs of src into dst, as NCCL would.
func replayLogs(src, dst string) error {
	files, _ := filepath.Glob(filepath.Join(src, "*.log"))
	if len(files) == 0 {
		return fmt.Errorf("replay: no *.log in %s", src)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(f)), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// firstLine waits for the first NCCL line in dir and returns when it was
// seen (polled every 10 ms).
func firstLine(dir string, timeout time.Duration, job []*proc) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, r := range ranksIn(dir) {
			if b, err := os.ReadFile(r.file); err == nil && strings.Contains(string(b), " NCCL INFO ") {
				return time.Now(), nil
			}
		}
		dead := len(job) > 0
		for _, p := range job {
			dead = dead && p.exited()
		}
		if dead {
			return time.Time{}, errors.New("the NCCL job exited without writing an NCCL log (see rank*.out)")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("no NCCL line in %s within %s", dir, timeout)
}

func waitRanks(dir string, n int, timeout time.Duration) []rank {
	deadline := time.Now().Add(timeout)
	for {
		rs := ranksIn(dir)
		if len(rs) >= n || time.Now().After(deadline) {
			return rs
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func anyFile(dir, suffix string) bool {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), suffix) {
			return true
		}
	}
	return false
}

func snapshotDir(src, dst string) {
	os.MkdirAll(dst, 0o755)
	filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil {
			os.WriteFile(filepath.Join(dst, filepath.Base(p)), b, 0o644)
		}
		return nil
	})
}

// reportJob reads the ranks' busbw lines and the Inspector's output.
func reportJob(res *Result, name, dir, inspector string) {
	var bw []float64
	for r := 0; r < 2; r++ {
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("rank%d.out", r)))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "busbw_gbs "); ok && r == 0 {
				if x, err := strconv.ParseFloat(v, 64); err == nil {
					bw = append(bw, x)
				}
			}
		}
		f.Close()
	}
	if len(bw) > 0 {
		res.printf("%s: all-reduce busbw over NET/Socket (job's own timing, %d batches): median %.2f GB/s", name, len(bw), median(bw))
	}
	switch inspector {
	case "json":
		var ibw []float64
		filepath.WalkDir(filepath.Join(dir, "inspector"), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			f, err := os.Open(p)
			if err != nil {
				return nil
			}
			defer f.Close()
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 1<<20), 1<<24)
			for sc.Scan() {
				var op struct {
					Coll struct {
						BusBW *float64 `json:"coll_busbw_gbs"`
					} `json:"coll_perf"`
				}
				if json.Unmarshal(sc.Bytes(), &op) == nil && op.Coll.BusBW != nil {
					ibw = append(ibw, *op.Coll.BusBW)
				}
			}
			return nil
		})
		res.printf("%s: NCCL Inspector (JSON) busbw: %d operations, median %.2f GB/s", name, len(ibw), median(ibw))
	case "prom":
		ps, _ := filepath.Glob(filepath.Join(dir, "inspector-snapshot", "*.prom"))
		res.printf("%s: NCCL Inspector (Prometheus textfile) dumps captured: %d", name, len(ps))
	}
}

// writeGPUFixture records, for the replay, the GPU the ranks ran on with
// their PIDs (a --collector.gpu.fixture file).
func writeGPUFixture(cfg Config, dir string, ranks []rank) {
	info, err := query(cfg.PrometheusPort, `fabric_gpu_info`)
	if err != nil || len(info) == 0 {
		return
	}
	var pids []uint32
	for _, r := range ranks {
		n, _ := strconv.ParseUint(r.pid, 10, 32)
		pids = append(pids, uint32(n))
	}
	g := info[0].Metric
	idx, _ := strconv.Atoi(g["gpu"])
	fx := map[string]any{"source": "nvml", "driver_version": g["driver_version"], "interval_ms": 1000,
		"gpus": []any{map[string]any{"index": idx, "uuid": g["uuid"], "name": g["name"], "pci_bus_id": g["pci_bus_id"], "pids": pids}}}
	b, _ := json.MarshalIndent(fx, "", " ")
	os.WriteFile(filepath.Join(dir, "gpu-fixture.json"), append(b, '\n'), 0o644)
}

func writeNotifications(w *webhook, path string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	os.WriteFile(path, []byte(strings.Join(w.raw, "\n")+"\n"), 0o644)
}
