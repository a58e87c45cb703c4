package e2e

import (
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/fabric-exporter/fabric_exporter/alerts"
	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// What the end-to-end tests share: the exporter built from this tree,
// Alertmanager with the shipped routing and a webhook of the test,
// Prometheus with the shipped rules at lab speed.

// buildExporter builds the exporter into dir and returns its path.
func buildExporter(t testing.TB, dir string) string {
	t.Helper()
	exporter := filepath.Join(dir, "fabric_exporter")
	if out, err := exec.Command("go", "build", "-o", exporter, "../cmd/fabric_exporter").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return exporter
}

// startAlertmanager runs one Alertmanager with the shipped example routing
// (deploy/alertmanager/alertmanager.yml), its receivers pointed at a webhook
// of the test and fast timers (writeAlertmanagerConfig); it returns the
// webhook and Alertmanager's address.
func startAlertmanager(t testing.TB, dir string) (*webhook, string) {
	t.Helper()
	amBin := testenv.Tool(t, "prometheus-alertmanager", "alertmanager")
	hook := &webhook{}
	hookSrv := httptest.NewServer(hook)
	t.Cleanup(hookSrv.Close)
	amAddr := testenv.FreeAddr(t)
	amCfg := filepath.Join(dir, "alertmanager.yml")
	if err := writeAlertmanagerConfig(filepath.Join(repo, "deploy/alertmanager/alertmanager.yml"), amCfg, hookSrv.URL); err != nil {
		t.Fatal(err)
	}
	start(t, amBin, "--config.file="+amCfg, "--storage.path="+filepath.Join(dir, "am"), "--web.listen-address="+amAddr,
		"--cluster.listen-address=")
	testenv.WaitHTTP(t, "http://"+amAddr+"/-/ready")
	return hook, amAddr
}

// labJob is the job the alerting tests scrape the exporters under: not
// "fabric" (a ServiceMonitor's name; the rules select by metric name and
// FabricExporterDown's selector is set to it).
const labJob = "serviceMonitor/monitoring/fabric-exporter/0"

// labRules renders the shipped rules with test timings (Prometheus scrapes
// and evaluates every second) and the exporter-down selector set to
// labJob; it returns the config and the rules.
func labRules(t testing.TB) (alerts.Config, []byte) {
	t.Helper()
	cfg := alerts.DefaultConfig()
	cfg.ExporterSelector = `job="` + labJob + `"`
	cfg.For.Short, cfg.For.Medium, cfg.For.Long = "2s", "3s", "5s"
	// keep_firing_for of the pages (5m in production, 20 scrapes at 15 s):
	// 10 scrapes; the latched cause outlives it.
	cfg.For.KeepFiring, cfg.CauseLatchWindow = "10s", "1m"
	cfg.PauseStormWindow, cfg.FlapWindow = "15s", "30s"
	cfg.RailHistoryInterval, cfg.ErrorCounterInterval = "5s", "5s" // the slow groups at lab speed (2m, 1m in production)
	cfg.WarningInterval = "2s"                                     // the warning groups (1m in production) slower than the 1s evaluation
	rules, err := alerts.Render(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// FabricExporterDown waits 2m in production, far longer than an
	// exporter restart; at lab speed (for: 3s) a restart on a loaded
	// machine would look like an outage. Keep the ratio: 15s.
	return cfg, exporterDownFor(t, rules, cfg.For.Medium, "15s")
}

// scrapeJob is a scrape job of startPrometheus (label cluster="lab").
type scrapeJob struct {
	name    string
	targets []string
}

// startPrometheus runs Prometheus with rules, scraping and evaluating every
// second and sending alerts to the Alertmanager at am.
func startPrometheus(t testing.TB, dir string, rules []byte, am string, jobs ...scrapeJob) *promClient {
	t.Helper()
	promBin := testenv.Tool(t, "prometheus")
	rulesPath := filepath.Join(dir, "rules.yml")
	if err := os.WriteFile(rulesPath, rules, 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: ['%s']
alerting:
  alertmanagers:
  - static_configs:
    - targets: ['%s']
scrape_configs:
`, rulesPath, am)
	for _, j := range jobs {
		fmt.Fprintf(&b, "- job_name: '%s'\n  static_configs:\n  - targets: ['%s']\n    labels: {cluster: lab}\n", j.name, strings.Join(j.targets, "', '"))
	}
	promYml := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(promYml, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	promAddr := testenv.FreeAddr(t)
	start(t, promBin, "--config.file="+promYml, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"), "--web.listen-address="+promAddr)
	testenv.WaitHTTP(t, "http://"+promAddr+"/-/ready")
	return newPromClient("http://" + promAddr)
}

// labelKey is a label set as one string, the labels sorted.
func labelKey(m map[string]string) string {
	var l []string
	for k, v := range m {
		l = append(l, k+"="+v)
	}
	sort.Strings(l)
	return "{" + strings.Join(l, ",") + "}"
}
