package main

import (
	"bytes"
	"flag"
	"fmt"
	"html"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/fakekubelet"
	"github.com/fabric-exporter/fabric_exporter/internal/fixturetree"
	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden file collector/fixtures/e2e-output.txt")

const (
	goldenPath       = "../../collector/fixtures/e2e-output.txt"
	fixtureSys       = "../../collector/fixtures/sys"
	fixtureEth       = "../../collector/fixtures/ethtool"
	fixtureGPU       = "../../collector/fixtures/gpu/dcgm-8gpu.json"
	fixtureProc      = "../../collector/fixtures/proc"
	fixtureLog       = "../../collector/fixtures/nccl"
	fixtureCauseLog  = "../../collector/fixtures/nccl-cause"
	fixturePhy       = "../../collector/fixtures/phy"
	fixtureInspector = "../../collector/fixtures/nccl-inspector"
)

var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "fabric-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "fabric_exporter")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building fabric_exporter: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuffer is a bytes.Buffer safe for the exec copier and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startExporter runs the built binary and waits until it serves.
func startExporter(t *testing.T, args ...string) (addr string, logs *syncBuffer) {
	t.Helper()
	return startExporterWith(t, func(addr string) bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, args...)
}

// startExporterWith runs the binary and waits until ready(addr) is true.
func startExporterWith(t *testing.T, ready func(addr string) bool, args ...string) (addr string, logs *syncBuffer) {
	t.Helper()
	addr = testenv.FreeAddr(t)
	logs = &syncBuffer{}
	cmd := exec.Command(binary, append([]string{"--web.listen-address=" + addr}, args...)...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("exporter log:\n%s", logs)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ready(addr) {
			return addr, logs
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("exporter did not start:\n%s", logs)
	return "", nil
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, b)
	}
	return string(b)
}

// volatile matches series whose values change between runs.
var volatile = regexp.MustCompile(`^(# (HELP|TYPE) )?(go_|process_|promhttp_|fabric_exporter_build_info|fabric_scrape_collector_duration_seconds|fabric_transceiver_read_timestamp_seconds|fabric_nccl_ras_answer_age_seconds)`)

func stable(metrics string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(metrics, "\n") {
		if line != "" && !volatile.MatchString(line) {
			b.WriteString(line)
		}
	}
	return b.String()
}

// TestEndToEnd starts the binary on the fixture tree, scrapes it and diffs
// the output against the golden file; `go test ./cmd/fabric_exporter -update`
// rewrites it. promtool (Debian's prometheus package) lints the scrape.
func TestEndToEnd(t *testing.T) {
	logDir := ncclLogDir(t)
	// A process of this node (host fixture-node0, PID 4310 of the fixture
	// /proc): its fallback cause looks into its container.
	causeLog, err := os.ReadFile(filepath.Join(fixtureCauseLog, "fixture-node0.4310.log"))
	if err != nil {
		t.Fatal(err)
	}
	causeDst := filepath.Join(logDir, "fixture-node0.4310.log")
	if err := os.WriteFile(causeDst, causeLog, 0o644); err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(causeDst, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	// The kubelet's pod-resources API, served by a real gRPC server with the
	// fixture node's pods (internal/fakekubelet).
	sock := filepath.Join(shortTempDir(t), "kubelet.sock")
	fakekubelet.Serve(t, fakekubelet.NodeFixture(), sock)
	inspDir := inspectorDir(t)
	addr, logs := startExporterWith(t, ncclAndInspectorRead,
		"--path.sysfs="+fixtureSys, "--path.procfs="+fixtureProc, "--collector.pfc.ethtool-fixtures="+fixtureEth,
		"--collector.gpu.fixture="+fixtureGPU, "--collector.phy.fixtures="+fixturePhy, "--collector.kubernetes.pod-resources-socket="+sock,
		"--collector.devlink.fixtures=../../collector/fixtures/devlink",
		"--collector.nccl.log-path="+filepath.Join(logDir, "*.log"), "--collector.nccl.retention=0", "--collector.nccl.hostname=fixture-node0",
		"--collector.nccl-inspector.dump-dir="+inspDir, "--collector.nccl-inspector.retention=0")
	// fabric_scrape_read_errors_total counts the fixture's unreadable files
	// again at every scrape, and the readiness probe scrapes as often as the
	// machine's speed needs: the golden holds what one scrape adds.
	before := get(t, "http://"+addr+"/metrics")
	raw := get(t, "http://"+addr+"/metrics")
	got := readErrorsPerScrape(t, stable(raw), before)
	if *update {
		if err := os.WriteFile(goldenPath, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("scrape differs from %s (rerun with -update to accept):\n%s", goldenPath, lineDiff(string(want), got))
	}
	for _, s := range []string{"fabric_exporter_build_info{", `fabric_scrape_collector_duration_seconds{collector="rdma"}`, "go_goroutines ", "process_resident_memory_bytes "} {
		if !strings.Contains(raw, s) {
			t.Errorf("scrape lacks %s", s)
		}
	}
	if strings.Contains(logs.String(), "level=error") {
		t.Errorf("exporter logged errors:\n%s", logs)
	}
	promtoolCheck(t, raw)
}

// shortTempDir is a temporary directory with a path short enough for a
// unix socket (107 bytes; t.TempDir() can be longer).
func shortTempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "fe2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// ncclLogDir copies the NCCL log fixtures (the real sample logs) to a
// temporary directory with a fixed modification time, which the nccl
// collector reports as each process's last log time.
func ncclLogDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob(filepath.Join(fixtureLog, "*.log"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no NCCL log fixtures in %s: %v", fixtureLog, err)
	}
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.Base(f))
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(dst, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// inspectorDir copies the NCCL Inspector fixtures of both modes (the real
// JSON and .prom dumps of the lent H200) into one dump directory.
func inspectorDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob(filepath.Join(fixtureInspector, "*", "*"))
	if err != nil || len(files) != 4 {
		t.Fatalf("NCCL Inspector fixtures in %s: %v %v", fixtureInspector, files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// ncclAndInspectorRead is ncclLogsRead, and the nccl-inspector collector
// has read both JSON files (200 lines each) and both .prom files; one
// scrape per probe (every scrape counts the fixture's unreadable files
// again in fabric_scrape_read_errors_total).
func ncclAndInspectorRead(addr string) bool {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return ncclReady(b) && strings.Contains(string(b), "\nfabric_nccl_inspector_lines_total 400\n") &&
		strings.Contains(string(b), "\nfabric_nccl_inspector_files{format=\"prom\"} 2\n")
}

// readErrorsPerScrape replaces the value of every
// fabric_scrape_read_errors_total line of metrics by its increase since
// the scrape before.
func readErrorsPerScrape(t *testing.T, metrics, before string) string {
	t.Helper()
	prev := map[string]float64{}
	for _, l := range strings.Split(before, "\n") {
		if k, v, ok := strings.Cut(l, " "); ok && strings.HasPrefix(k, "fabric_scrape_read_errors_total{") {
			prev[k], _ = strconv.ParseFloat(v, 64)
		}
	}
	lines := strings.SplitAfter(metrics, "\n")
	for i, l := range lines {
		k, v, ok := strings.Cut(strings.TrimSuffix(l, "\n"), " ")
		if !ok || !strings.HasPrefix(k, "fabric_scrape_read_errors_total{") {
			continue
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		lines[i] = k + " " + strconv.FormatFloat(n-prev[k], 'g', -1, 64) + "\n"
	}
	return strings.Join(lines, "")
}

func ncclReady(b []byte) bool {
	return strings.Contains(string(b), "\nfabric_nccl_log_backlog_bytes 0\n") &&
		regexp.MustCompile(`\nfabric_nccl_log_files [1-9]`).Match(b)
}

func promtoolCheck(t *testing.T, metrics string) {
	t.Helper()
	cmd := exec.Command(testenv.Tool(t, "promtool"), "check", "metrics")
	cmd.Stdin = strings.NewReader(metrics)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// lineDiff lists lines only in want (-) or only in got (+).
func lineDiff(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			fmt.Fprintf(&b, "-%s\n", l)
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			fmt.Fprintf(&b, "+%s\n", l)
		}
	}
	return b.String()
}

// On a host without RDMA (this machine's own /sys) the exporter starts,
// serves, and reports rdma and pfc as no_hardware (success 1); an empty
// directory as --path.sysfs is a wrong mount: source_missing, success 0.
func TestNoRDMAHost(t *testing.T) {
	if _, err := os.Stat("/sys/class/infiniband"); err == nil {
		t.Skip("this host has RDMA devices")
	}
	empty := t.TempDir()
	for sys, wants := range map[string][]string{
		"/sys": {`fabric_scrape_collector_success{collector="rdma"} 1`, `fabric_scrape_collector_success{collector="pfc"} 1`,
			`fabric_collector_state_info{collector="rdma",reason="/sys/class/infiniband does not exist (no RDMA device)",state="no_hardware"} 1`,
			`fabric_collector_state_info{collector="pfc",reason="no rail netdev (no Ethernet RDMA port with a netdev, and no --rail)",state="no_hardware"} 1`},
		empty: {`fabric_scrape_collector_success{collector="rdma"} 0`, `fabric_scrape_collector_success{collector="pfc"} 0`,
			`fabric_collector_state_info{collector="rdma",reason="--path.sysfs ` + empty + ` is not a sysfs (no class/ in it): mount the host's /sys there`},
	} {
		addr, logs := startExporter(t, "--path.sysfs="+sys)
		raw := get(t, "http://"+addr+"/metrics")
		for _, want := range wants {
			if !strings.Contains(raw, want) {
				t.Errorf("sysfs %s: scrape lacks %q", sys, want)
			}
		}
		if strings.Contains(raw, "fabric_rdma_port_") {
			t.Errorf("sysfs %s: RDMA port series without RDMA devices", sys)
		}
		if strings.Contains(logs.String(), "level=error") {
			t.Errorf("sysfs %s: errors logged on a host without RDMA:\n%s", sys, logs)
		}
		promtoolCheck(t, raw)
	}
}

func TestLandingPage(t *testing.T) {
	addr, _ := startExporter(t, "--path.sysfs="+fixtureSys, "--rail=rail0=mlx5_0:1", "--rail=rail1=mlx5_3",
		"--collector.pfc.ethtool-fixtures="+fixtureEth, "--collector.phy.fixtures="+fixturePhy, "--path.procfs=/nonexistent/proc")
	page := get(t, "http://"+addr+"/")
	for _, want := range []string{"<tr><td>rdma</td><td>ok</td><td></td></tr>", "<tr><td>pfc</td><td>ok</td><td></td></tr>",
		"<tr><td>nccl</td><td>not_configured</td><td>no --collector.nccl.log-path</td></tr>",
		"<tr><td>process</td><td>source_missing</td><td>--path.procfs /nonexistent/proc does not exist: mount the host&#39;s /proc there",
		"<td>rail0</td><td>mlx5_0:1</td><td>eth0</td>", "<td>rail1</td><td>mlx5_3:1</td><td>eth3</td>", `href="/metrics"`} {
		if !strings.Contains(page, want) {
			t.Errorf("landing page lacks %q", want)
		}
	}
	// Profiling is off by default: no link, and no handler.
	if strings.Contains(page, `href="/debug/pprof`) {
		t.Error("landing page links profiles that are not served")
	}
	if resp, err := http.Get("http://" + addr + "/debug/pprof/"); err != nil || resp.StatusCode != 404 {
		t.Errorf("/debug/pprof/ without --web.enable-pprof: %v %v", resp.Status, err)
	} else {
		resp.Body.Close()
	}
	// --web.enable-pprof serves every profile the landing page links.
	addr, _ = startExporter(t, "--path.sysfs="+fixtureSys, "--web.enable-pprof")
	page = get(t, "http://"+addr+"/")
	links := regexp.MustCompile(`href="(/debug/pprof[^"]*)"`).FindAllStringSubmatch(page, -1)
	if len(links) == 0 {
		t.Fatal("--web.enable-pprof: no profiling link on the landing page")
	}
	for _, l := range links {
		// The CPU profile link asks for 60 s; 1 s shows it is served.
		get(t, "http://"+addr+strings.Replace(html.UnescapeString(l[1]), "seconds=60", "seconds=1", 1))
	}
}

// A wrong --path.sysfs / --path.procfs (Docker without -v /sys:/host/sys):
// one warn line per collector at startup with the path and the fix, every
// line with one timestamp, and recovery without a restart once the host's
// trees are there.
func TestWrongPathsLoudAndRecover(t *testing.T) {
	host := t.TempDir()
	sys, proc := filepath.Join(host, "sys"), filepath.Join(host, "proc")
	addr, logs := startExporter(t, "--path.sysfs="+sys, "--path.procfs="+proc, "--path.rootfs="+filepath.Join(host, "root"),
		"--collector.pfc.ethtool-fixtures="+fixtureEth, "--collector.phy.fixtures="+fixturePhy, "--no-collector.gpu")
	for _, c := range []string{"netdev", "numa", "pcie", "pfc", "phy", "rdma", "topology"} {
		if n := countLines(logs.String(), "level=warn", "collector="+c+" ", "state=source_missing", "path="+sys, `fix="mount the host's /sys there (docker run -v /sys:/host/sys:ro`); n != 1 {
			t.Errorf("%s: %d warn lines with path and fix at startup, want 1:\n%s", c, n, logs)
		}
	}
	if n := countLines(logs.String(), "level=warn", "collector=process ", "state=source_missing", "path="+proc, "-v /proc:/host/proc:ro"); n != 1 {
		t.Errorf("process: %d warn lines, want 1", n)
	}
	if n := countLines(logs.String(), "level=warn", "--path.rootfs does not exist"); n != 1 {
		t.Errorf("rootfs: %d warn lines, want 1", n)
	}
	raw := get(t, "http://"+addr+"/metrics")
	if !strings.Contains(raw, `fabric_scrape_collector_success{collector="rdma"} 0`) || !strings.Contains(raw, `fabric_collector_state_info{collector="rdma",reason="--path.sysfs `+sys+` does not exist`) {
		t.Errorf("wrong --path.sysfs not in the scrape:\n%s", grep(raw, "collector"))
	}
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if strings.Count(l, "ts=") != 1 || strings.Contains(l, " time=") {
			t.Errorf("log line without exactly one timestamp: %s", l)
		}
	}
	if !strings.Contains(logs.String(), "Listening on") {
		t.Errorf("no exporter-toolkit line to check:\n%s", logs)
	}
	// The mounts appear: every collector is ok again, logged at info.
	copyDir(t, fixtureSys, sys)
	copyDir(t, fixtureProc, proc)
	raw = get(t, "http://"+addr+"/metrics")
	for _, c := range []string{"netdev", "numa", "pcie", "pfc", "phy", "process", "rdma", "topology"} {
		if !strings.Contains(raw, `fabric_collector_state_info{collector="`+c+`",reason="",state="ok"} 1`) {
			t.Errorf("%s did not recover:\n%s", c, grep(raw, "collector_state"))
		}
	}
	if !strings.Contains(raw, "fabric_rdma_port_up{") {
		t.Error("no RDMA series after recovery")
	}
	if n := countLines(logs.String(), "level=info", "state=ok", "previous=source_missing"); n != 8 {
		t.Errorf("%d recoveries logged, want 8:\n%s", n, logs)
	}
}

func countLines(s string, subs ...string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		ok := l != ""
		for _, sub := range subs {
			ok = ok && strings.Contains(l, sub)
		}
		if ok {
			n++
		}
	}
	return n
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := fixturetree.Copy(src, dst); err != nil {
		t.Fatal(err)
	}
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--path.sysfs=" + fixtureSys, "--rail=oops"}, `want NAME=DEVICE[:PORT]`},
		{[]string{"--path.sysfs=" + fixtureSys, "--rail=a=mlx5_0", "--rail=b=mlx5_0"}, `rails \"a\" and \"b\" name the same RDMA port mlx5_0:1`},
		{[]string{"--collector.rdma.device-include=(", "--path.sysfs=" + fixtureSys}, `device-include`},
		{[]string{"--no-such-flag"}, "unknown long flag"},
		{[]string{"--path.sysfs=" + fixtureSys, "--collector.process.cmdline=("}, "collector.process.cmdline"},
		{[]string{"--path.sysfs=" + fixtureSys, "--collector.process.max=0"}, "collector.process.max"},
		{[]string{"--collector.nccl.log-path=/var/log/[nccl"}, "collector.nccl.log-path"},
		{[]string{"--collector.nccl.max-processes=0"}, "max-processes 0: must be at least 1"},
		{[]string{"--collector.nccl.poll-interval=1ms"}, "poll-interval 1ms: must be at least 10ms"},
		{[]string{"--collector.nccl-inspector.max-communicators=0"}, "max-communicators 0: must be at least 1"},
		{[]string{"--collector.nccl-inspector.poll-interval=1ms"}, "nccl-inspector.poll-interval 1ms: must be at least 10ms"},
		{[]string{"--collector.nccl-inspector.retention=-1s"}, "nccl-inspector.retention -1s: must not be negative"},
	} {
		out, err := exec.Command(binary, append(tc.args, "--web.listen-address="+testenv.FreeAddr(t))...).CombinedOutput()
		if err == nil {
			t.Errorf("%v: exporter started", tc.args)
			continue
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("%v: output %q lacks %q", tc.args, out, tc.want)
		}
	}
}

// A --rail whose HCA is missing at start-up does not stop the exporter
// (the node would only raise FabricExporterDown, a warning): it starts,
// warns, and reports the rail as not present, which pages as RailLinkDown.
func TestRailMissingAtStartup(t *testing.T) {
	addr, logs := startExporter(t, "--path.sysfs="+fixtureSys, "--rail=rail0=mlx5_0", "--rail=rail1=mlx5_9")
	raw := get(t, "http://"+addr+"/metrics")
	for _, want := range []string{
		`fabric_rail_device_present{device="mlx5_9",port="1",rail="rail1"} 0`,
		`fabric_rail_device_present{device="mlx5_0",port="1",rail="rail0"} 1`,
		`fabric_rail_info{device="mlx5_9",netdev="",port="1",rail="rail1"} 1`,
	} {
		if !strings.Contains(raw, want+"\n") {
			t.Errorf("scrape lacks %s:\n%s", want, grep(raw, "fabric_rail_"))
		}
	}
	if !strings.Contains(logs.String(), `RDMA device \"mlx5_9\" not found`) {
		t.Errorf("no start-up warning for the missing rail device:\n%s", logs)
	}
}

func TestCollectorFlags(t *testing.T) {
	addr, _ := startExporter(t, "--path.sysfs="+fixtureSys, "--collector.disable-defaults", "--collector.rdma")
	raw := get(t, "http://"+addr+"/metrics")
	if !strings.Contains(raw, `fabric_scrape_collector_success{collector="rdma"} 1`) || strings.Contains(raw, `collector="netdev"`) {
		t.Errorf("--collector.disable-defaults --collector.rdma: wrong collectors:\n%s", grep(raw, "collector_success"))
	}
	addr, _ = startExporter(t, "--path.sysfs="+fixtureSys, "--no-collector.pfc")
	raw = get(t, "http://"+addr+"/metrics")
	if strings.Contains(raw, `collector="pfc"`) || !strings.Contains(raw, `collector="netdev"`) {
		t.Errorf("--no-collector.pfc: wrong collectors:\n%s", grep(raw, "collector_success"))
	}
}

func grep(s, sub string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// TestProcessSecrets runs the binary at debug level on the fixture /proc,
// whose environments and command lines hold secrets next to NCCL variables:
// the NCCL variables are exported, no secret reaches the scrape or the log.
func TestProcessSecrets(t *testing.T) {
	addr, logs := startExporter(t, "--path.sysfs="+fixtureSys, "--path.procfs="+fixtureProc, "--log.level=debug",
		"--collector.pfc.ethtool-fixtures="+fixtureEth, "--collector.phy.fixtures="+fixturePhy)
	raw := get(t, "http://"+addr+"/metrics") + get(t, "http://"+addr+"/metrics")
	if !strings.Contains(raw, `fabric_process_nccl_env_info{comm="sglang::schedul",name="NCCL_SOCKET_IFNAME",pid="4310",value="eth1"} 1`) {
		t.Fatalf("no NCCL variables in the scrape:\n%s", grep(raw, "nccl"))
	}
	if !strings.Contains(logs.String(), "level=debug") {
		t.Fatalf("no debug log lines:\n%s", logs)
	}
	for _, secret := range []string{"hf_fixtureSECRETtoken9c1eA7", "fixtureSECRETawsKey", "AKIAFIXTURE0EXAMPLE", "sk-fixture-SECRET-apikey-4f9a", "SECRET"} {
		if strings.Contains(raw, secret) || strings.Contains(logs.String(), secret) {
			t.Errorf("secret %q in the scrape or the log", secret)
		}
	}
}
