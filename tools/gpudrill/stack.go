// The stack a trial runs against: child processes, the webhook receiver,
// Prometheus queries, and the stack itself (exporter, Prometheus,
// Alertmanager, webhook) started and stopped as one; the configurations
// it runs with are configs.go's.

package main

import (
	"context"
	"encoding/json"
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
	"syscall"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/promapi"
)

// proc is a child process in its own process group (killed with its
// children at the end).
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	err  error
}

func startProc(name, logPath string, env []string, bin string, args ...string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	return startCmd(name, logPath, cmd)
}

// startCmd starts a prepared command (its output to logPath) in its own
// process group (its SysProcAttr kept otherwise).
func startCmd(name, logPath string, cmd *exec.Cmd) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: f, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	started.Lock()
	started.pgids = append(started.pgids, cmd.Process.Pid)
	started.Unlock()
	return p, nil
}

// started are the process groups the drill made (killAll on a signal).
var started struct {
	sync.Mutex
	pgids []int
	hooks map[int]func()
	next  int
}

// atInterrupt registers f to run on SIGINT/SIGTERM before killAll (the
// two-node trials stop their child drills and remove their namespaces).
// It returns a function that unregisters f.
func atInterrupt(f func()) func() {
	started.Lock()
	defer started.Unlock()
	id := started.next
	started.next++
	if started.hooks == nil {
		started.hooks = map[int]func(){}
	}
	started.hooks[id] = f
	return func() {
		started.Lock()
		defer started.Unlock()
		delete(started.hooks, id)
	}
}

// interrupted runs the registered hooks, then kills every process group.
func interrupted() {
	started.Lock()
	hooks := make([]func(), 0, len(started.hooks))
	for _, f := range started.hooks {
		hooks = append(hooks, f)
	}
	started.Unlock()
	var wg sync.WaitGroup
	for _, f := range hooks {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	wg.Wait()
	killAll()
}

func killAll() {
	started.Lock()
	defer started.Unlock()
	for _, g := range started.pgids {
		syscall.Kill(-g, syscall.SIGKILL)
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the group, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	if p == nil {
		return
	}
	if !p.exited() {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
	// whatever the group left behind
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	p.log.Close()
}

// portsFree refuses to run where a port is taken.
func portsFree(ports ...int) error {
	for _, port := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return fmt.Errorf("port %d is taken (%v): the drill needs it free; choose others with the --port.* flags", port, err)
		}
		l.Close()
	}
	return nil
}

// waitReady waits until u answers 200 OK, and gives up early if p exits.
func waitReady(u string, timeout time.Duration, p *proc) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return promapi.WaitReady(ctx, nil, u, func() error {
		if p != nil && p.exited() {
			return fmt.Errorf("%s exited before it answered (see its log)", p.name)
		}
		return nil
	})
}

// notification is one alert of one webhook delivery.
type notification struct {
	at          time.Time
	receiver    string
	status      string
	labels      map[string]string
	annotations map[string]string
}

// webhook is the Alertmanager receiver the drill owns.
type webhook struct {
	mu    sync.Mutex
	notes []notification
	raw   []string
	srv   *http.Server
}

func (w *webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	at := time.Now()
	b, _ := io.ReadAll(r.Body)
	var msg promapi.WebhookMessage
	if err := json.Unmarshal(b, &msg); err != nil {
		http.Error(rw, err.Error(), 400)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.raw = append(w.raw, at.UTC().Format(time.RFC3339Nano)+" "+r.URL.Path+" "+string(b))
	for _, a := range msg.Alerts {
		w.notes = append(w.notes, notification{at: at, receiver: strings.TrimPrefix(r.URL.Path, "/"), status: a.Status, labels: a.Labels, annotations: a.Annotations})
	}
}

// first returns the first firing notification of alertname whose labels
// match want (pid: any of pids), or false.
func (w *webhook) first(alertname string, match func(map[string]string) bool) (notification, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range w.notes {
		if n.status == "firing" && n.labels["alertname"] == alertname && match(n.labels) {
			return n, true
		}
	}
	return notification{}, false
}

// all returns a copy of every notification so far.
func (w *webhook) all() []notification {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]notification(nil), w.notes...)
}

func startWebhook(port int) (*webhook, error) {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	w := &webhook{}
	w.srv = &http.Server{Handler: w, ReadHeaderTimeout: 10 * time.Second}
	go w.srv.Serve(l)
	return w, nil
}

// query asks the drill's Prometheus; the samples come sorted by labels.
func query(promPort int, q string) ([]promapi.Sample, error) {
	c := promapi.New(fmt.Sprintf("http://127.0.0.1:%d", promPort), 30*time.Second)
	out, err := c.Query(context.Background(), q, time.Time{})
	sort.Slice(out, func(i, j int) bool { return fmt.Sprint(out[i].Metric) < fmt.Sprint(out[j].Metric) })
	return out, err
}

// procStat returns the CPU seconds (user+system) and resident set of pid.
func procStat(pid int) (cpu float64, rssBytes, hwmBytes int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+2:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0, 0, 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	cpu = (ut + st) / 100 // USER_HZ
	st2, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return cpu, 0, 0, err
	}
	for _, l := range strings.Split(string(st2), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rssBytes = n << 10
		case "VmHWM":
			hwmBytes = n << 10
		}
	}
	return cpu, rssBytes, hwmBytes, nil
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

// stackOpts is what a trial's stack has beyond the exporter's defaults.
type stackOpts struct {
	gpuFixture   string // --collector.gpu.fixture
	inspectorDir string // --collector.nccl-inspector.dump-dir: the ranks' NCCL_INSPECTOR_DUMP_DIR
	exporterArgs []string
	instance     string       // the exporter's instance label ("": the hostname)
	more         []promTarget // other exporters Prometheus scrapes (another node's)
}

// exporterArgs are a drill exporter's flags: listening on listen,
// following the NCCL logs in dir/nccl, selecting the ranks by command line.
func exporterArgs(cfg Config, listen, dir string, extra ...string) []string {
	sel := cfg.RankCmdline
	if sel == "" {
		sel = `allreduce\.py`
	}
	return append([]string{"--web.listen-address=" + listen,
		"--collector.nccl.log-path=" + filepath.Join(dir, "nccl", "*.log"),
		"--collector.process.cmdline=" + sel}, extra...)
}

func startStack(cfg Config, sh shipped, dir string, o stackOpts) (*stack, error) {
	s := &stack{}
	var err error
	if o.instance == "" {
		o.instance, _ = os.Hostname()
	}
	listen := "127.0.0.1:" + strconv.Itoa(cfg.ExporterPort)
	var extra []string
	if o.gpuFixture != "" {
		extra = append(extra, "--collector.gpu.fixture="+o.gpuFixture)
	}
	if o.inspectorDir != "" {
		extra = append(extra, "--collector.nccl-inspector.dump-dir="+o.inspectorDir)
	}
	extra = append(extra, o.exporterArgs...)
	if s.exporter, err = startProc("fabric_exporter", filepath.Join(dir, "exporter.log"), os.Environ(), cfg.Exporter, exporterArgs(cfg, listen, dir, extra...)...); err != nil {
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
	targets := append([]promTarget{{listen, o.instance}}, o.more...)
	if err := writePrometheusConfig(promCfg, rules, cfg.ScrapeInterval, cfg.EvalInterval, cfg.AlertmanagerPort, targets); err != nil {
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
	}{{"http://" + listen + "/metrics", s.exporter},
		{fmt.Sprintf("http://127.0.0.1:%d/-/ready", cfg.AlertmanagerPort), s.am},
		{fmt.Sprintf("http://127.0.0.1:%d/-/ready", cfg.PrometheusPort), s.prom}} {
		if err := waitReady(w.u, 60*time.Second, w.p); err != nil {
			return s, err
		}
	}
	return s, nil
}
