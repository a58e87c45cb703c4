package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/promapi"
	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

const repo = "../.."

func freePort(t *testing.T) int {
	_, p, err := net.SplitHostPort(testenv.FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// TestDrillReplay runs the drill's checks on the logs the drill recorded on
// the lent H200 (collector/fixtures/nccl-drill): the real exporter, a real
// Prometheus with the shipped rules and a real Alertmanager with the
// shipped routing. The GPU is the recorded one (a --collector.gpu.fixture
// with the ranks' PIDs). Intervals are shortened to keep CI fast; the
// drill's time to page is measured on the GPU with the shipped ones.
func TestDrillReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	prom := testenv.Tool(t, "prometheus")
	am := testenv.Tool(t, "prometheus-alertmanager", "alertmanager")
	tmp := t.TempDir()
	exporter := filepath.Join(tmp, "fabric_exporter")
	if out, err := exec.Command("go", "build", "-o", exporter, "../../cmd/fabric_exporter").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cfg := Config{Repo: repo, Exporter: exporter, Prometheus: prom, Alertmanager: am, WorkDir: filepath.Join(tmp, "work"),
		Trials: 1, Replay: filepath.Join(repo, "collector/fixtures/nccl-drill"), SocketIf: "lo",
		ReplayInspector: filepath.Join(repo, "collector/fixtures/nccl-inspector/json"),
		ExporterPort:    freePort(t), PrometheusPort: freePort(t), AlertmanagerPort: freePort(t), WebhookPort: freePort(t), TorchPort: freePort(t),
		PageTimeout: 90 * time.Second, ScrapeInterval: "2s", EvalInterval: "2s"}
	res := runDrill(t, cfg)
	if res.Failed() {
		t.Fatal("the drill's checks failed on the recorded logs")
	}
	// The checks that make the drill: every one ran.
	want := []string{"trial1: NCCLSocketFallback paged", "trial1: NCCLSocketFallback for every rank", "trial1: socket interface",
		"trial1: fabric_gpu_process_info joins the ranks", "trial1: no init failure for a working rank",
		"trial1: Inspector bus bandwidth for every rank", `trial1: Inspector bus bandwidth joins fabric_nccl_net_info{net="Socket"}`,
		"trial1: scraped Inspector bus bandwidth agrees with the dump files",
		"ib-failure: NCCLInitFailed paged", "ib-failure: fabric_nccl_init_failure_info for every rank",
		"ib-failure: no network reported for a failed rank", "ib-failure: NCCLInitFailed carries the reason",
		"ib-failure: no NCCLSocketFallback for a failed rank"}
	var got []string
	for _, c := range res.Checks {
		got = append(got, c.name)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("checks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(res.TimeToPage) != 1 || res.InitPage <= 0 {
		t.Errorf("time to page %v, init failure page %v", res.TimeToPage, res.InitPage)
	}
	// Nothing outside the work dir: everything the drill wrote is in it.
	if _, err := os.Stat(filepath.Join(cfg.WorkDir, "trial1", "webhook.jsonl")); err != nil {
		t.Error(err)
	}
}

// The drill refuses to run where one of its ports is taken.
func TestDrillRefusesTakenPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	_, err = Run(Config{Repo: repo, WorkDir: t.TempDir(), ExporterPort: freePort(t), PrometheusPort: port,
		AlertmanagerPort: freePort(t), WebhookPort: freePort(t), TorchPort: freePort(t)})
	if err == nil || !strings.Contains(err.Error(), "port "+strconv.Itoa(port)+" is taken") {
		t.Fatalf("err = %v", err)
	}
}

func TestResultFailed(t *testing.T) {
	var r Result
	if !r.Failed() {
		t.Error("a drill without checks passed")
	}
	r.check("a", true, "")
	if r.Failed() {
		t.Error("failed with every check passing")
	}
	r.check("b", false, "")
	if !r.Failed() {
		t.Error("passed with a failing check")
	}
}

func TestShippedSettings(t *testing.T) {
	sh, err := loadShipped(repo)
	if err != nil {
		t.Fatal(err)
	}
	if sh.scrapeInterval != "15s" || sh.evalInterval != "15s" || sh.pageGroupWait == "" || sh.ncclFor == "" {
		t.Errorf("%+v", sh)
	}
	// The Alertmanager config keeps the routing and points every receiver
	// at the webhook.
	path := filepath.Join(t.TempDir(), "am.yml")
	if err := writeAlertmanagerConfig(copyMap(sh.am), path, 1234); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	for _, s := range []string{"http://127.0.0.1:1234/pager", "http://127.0.0.1:1234/team-chat", "group_wait: " + sh.pageGroupWait, "inhibit_rules"} {
		if !strings.Contains(string(b), s) {
			t.Errorf("alertmanager config lacks %q:\n%s", s, b)
		}
	}
	if strings.Contains(string(b), "example.internal") {
		t.Errorf("a receiver still points outside:\n%s", b)
	}
}

// The replay writes the recorded Inspector files whole, in chunks.
func TestReplayInspector(t *testing.T) {
	src := filepath.Join(repo, "collector/fixtures/nccl-inspector/json")
	dst := t.TempDir()
	done, err := replayInspector(src, dst, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	<-done
	files, _ := filepath.Glob(filepath.Join(src, "*.log"))
	if len(files) != 2 {
		t.Fatalf("fixture files: %v", files)
	}
	for _, f := range files {
		want, _ := os.ReadFile(f)
		got, err := os.ReadFile(filepath.Join(dst, filepath.Base(f)))
		if err != nil || string(got) != string(want) {
			t.Errorf("%s: replayed %d bytes of %d (%v)", filepath.Base(f), len(got), len(want), err)
		}
	}
	if _, err := replayInspector(t.TempDir(), dst, 0); err == nil {
		t.Error("no error for a directory without dumps")
	}
}

// The dump files' bus bandwidth, per rank, as the recording rule weighs it.
func TestInspectorDumps(t *testing.T) {
	dir := t.TempDir()
	line := func(pid int, bw float64, us int) string {
		return `{"header":{"id":"0x1","comm_name":"unknown","rank":0,"n_ranks":2,"nnodes":2},"metadata":{"hostname":"vm","pid":` + strconv.Itoa(pid) +
			`},"coll_perf":{"coll":"AllReduce","coll_msg_size_bytes":67108864,"coll_exec_time_us":` + strconv.Itoa(us) + `,"coll_busbw_gbs":` + strconv.FormatFloat(bw, 'f', -1, 64) + "}}\n"
	}
	os.WriteFile(filepath.Join(dir, "vm-pid7.log"), []byte(line(7, 1, 100)+line(7, 4, 300)+"garbage\n"+line(7, 2, 100)), 0o644)
	d := inspectorDumps(dir)
	got := d["vm/7"]
	// (1·100 + 4·300 + 2·100) / 500 = 3
	if got.ops != 3 || got.median != 2 || got.weighted != 3 || len(d) != 1 {
		t.Errorf("%+v", d)
	}
	// Every rank needs a series.
	ranks := []rank{{host: "vm", pid: "7"}, {host: "vm", pid: "8"}}
	if _, ok := perRank([]promapi.Sample{{Metric: map[string]string{"host": "vm", "pid": "7"}, Value: 1}}, ranks); ok {
		t.Error("a rank without a series passed")
	}
	m, ok := perRank([]promapi.Sample{{Metric: map[string]string{"host": "vm", "pid": "7"}, Value: 1}, {Metric: map[string]string{"host": "vm", "pid": "8"}, Value: 2},
		{Metric: map[string]string{"host": "vm", "pid": "7"}, Value: 3}}, ranks)
	if !ok || m["vm/7"] != 3 || m["vm/8"] != 2 {
		t.Errorf("%v %v", m, ok)
	}
}

// runDrill runs the drill with cfg, logs its report and fails the test when
// it could not run (its checks are the caller's to judge).
func runDrill(t *testing.T, cfg Config) *Result {
	t.Helper()
	res, err := Run(cfg)
	if res != nil {
		t.Logf("report:\n%s", strings.Join(res.Lines, "\n"))
	}
	if err != nil {
		t.Fatal(err)
	}
	return res
}
