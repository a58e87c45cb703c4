//go:build scaleout

// The scale-out path (deploy/victoriametrics/README.md): the exporter's
// output scraped by vmagent and remote-written into VictoriaMetrics, the
// shipped rules file evaluated unchanged by vmalert (recording rules
// written back into VictoriaMetrics), alerts sent to Alertmanager with the
// shipped routing, and the dashboards queried through VictoriaMetrics'
// Prometheus API. `make test-scaleout` installs the VictoriaMetrics
// binaries (pinned) and runs it; .ci/run runs that target.
package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/dashboards"
	"github.com/fabric-exporter/fabric_exporter/internal/promapi"
	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

func TestScaleOutVictoriaMetrics(tt *testing.T) {
	t := testenv.RepeatFailures(tt)
	dir := os.Getenv("VM_BIN_DIR")
	if dir == "" {
		t.Skip("VM_BIN_DIR not set: `make test-scaleout` installs VictoriaMetrics and sets it")
	}
	vmBin, vmagentBin, vmalertBin := filepath.Join(dir, "victoria-metrics"), filepath.Join(dir, "vmagent"), filepath.Join(dir, "vmalert")
	tmp := t.TempDir()
	exporter := buildExporter(t, tmp)
	gpu := filepath.Join(tmp, "gpu.json")
	if err := writeFullGPUFixture(filepath.Join(repo, "collector/fixtures/gpu/dcgm-8gpu.json"), gpu, false); err != nil {
		t.Fatal(err)
	}
	// Two real NCCL logs: one process on IB (dgxh100-3, dgxh100-4) and the
	// planted fallback, an SGLang rank on NET/Socket.
	logs := filepath.Join(tmp, "nccl")
	os.MkdirAll(logs, 0o755)
	for _, f := range []string{"nccl-tests-185-roce-2.19.3-dgxh100-init.log", "sglang-3398-h20-socket-fallback-mnnvl-cumem-env.log"} {
		b, err := os.ReadFile(filepath.Join(repo, "collector/fixtures/nccl", f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(logs, f), b, 0o644)
	}
	expAddr := testenv.FreeAddr(t)
	start(t, exporter, "--web.listen-address="+expAddr, "--path.sysfs="+filepath.Join(repo, "collector/fixtures/sys"),
		"--collector.pfc.ethtool-fixtures="+filepath.Join(repo, "collector/fixtures/ethtool"), "--collector.gpu.fixture="+gpu,
		"--collector.nccl.log-path="+filepath.Join(logs, "*.log"), "--collector.nccl.retention=0")
	testenv.WaitHTTP(t, "http://"+expAddr+"/metrics")

	hook, amAddr := startAlertmanager(t, tmp)

	// Storage and query engine (single-node VictoriaMetrics: the same
	// ingestion and Prometheus query API as the cluster's vminsert and
	// vmselect). -search.latencyOffset: show samples after 1 s, not 30 s.
	vmAddr := testenv.FreeAddr(t)
	vm := "http://" + vmAddr
	start(t, vmBin, "-storageDataPath="+filepath.Join(tmp, "vm"), "-httpListenAddr="+vmAddr, "-search.latencyOffset=1s",
		"-loggerLevel=WARN")
	testenv.WaitHTTP(t, vm+"/health")

	scrape := fmt.Sprintf(`global:
  scrape_interval: 2s
scrape_configs:
- job_name: fabric
  static_configs:
  - targets: ['%s']
    labels: {cluster: lab}
`, expAddr)
	scrapeCfg := filepath.Join(tmp, "scrape.yml")
	os.WriteFile(scrapeCfg, []byte(scrape), 0o644)
	agentAddr := testenv.FreeAddr(t)
	start(t, vmagentBin, "-promscrape.config="+scrapeCfg, "-remoteWrite.url="+vm+"/api/v1/write",
		"-remoteWrite.tmpDataPath="+filepath.Join(tmp, "vmagent"), "-remoteWrite.flushInterval=1s", "-httpListenAddr="+agentAddr,
		"-loggerLevel=WARN")

	// The shipped rules file, unchanged.
	alertAddr := testenv.FreeAddr(t)
	start(t, vmalertBin, "-rule="+filepath.Join(repo, "alerts/fabric-rules.yml"), "-datasource.url="+vm, "-remoteWrite.url="+vm,
		"-remoteWrite.flushInterval=1s", "-notifier.url=http://"+amAddr, "-evaluationInterval=2s", "-httpListenAddr="+alertAddr,
		"-loggerLevel=WARN")
	testenv.WaitHTTP(t, "http://"+alertAddr+"/-/healthy")

	p := newPromClient(vm)
	var socket map[string]string
	waitFor(t, 90*time.Second, "the Socket process in VictoriaMetrics", func() bool {
		l, err := p.list(`fabric_nccl_net_info{net="Socket"}`)
		if err == nil && len(l) == 1 {
			socket = l[0]
		}
		return socket != nil
	})
	waitFor(t, 90*time.Second, "NCCLSocketFallback at Alertmanager's receiver", func() bool {
		_, ok := hook.find("firing", map[string]string{"alertname": "NCCLSocketFallback", "host": socket["host"], "pid": socket["pid"], "cluster": "lab"})
		return ok
	})
	for _, e := range hook.all() {
		if e.labels["alertname"] == "NCCLSocketFallback" && e.labels["host"] != socket["host"] {
			t.Errorf("NCCLSocketFallback for a process on IB: %v", e.labels)
		}
		if e.labels["alertname"] == "NCCLSocketFallback" && !strings.Contains(e.annotations["summary"], "interface eth0") {
			t.Errorf("summary without the socket interface (vmalert's query template): %q", e.annotations["summary"])
		}
	}

	// The recording rules, evaluated by vmalert and written back, and every
	// dashboard query through VictoriaMetrics' query API.
	waitFor(t, 90*time.Second, "recorded rail series", func() bool {
		n, err := p.count(`rail:fabric_rdma_transmitted_bits:rate1m{cluster="lab"}`)
		return err == nil && n == 2
	})
	// The groups of warnings and fleet records run every warningInterval
	// (1m): vmalert starts each group at a hash-based offset within its
	// interval, its first evaluation may come before the every-round records
	// it reads exist, and a record that reads an earlier record of its own
	// group sees it one evaluation later (vmalert reads them back through
	// VictoriaMetrics; Prometheus sees them in the same evaluation). Utilization is the
	// end of such a chain (bits/s, link speed, their ratio): allow five
	// intervals (three and a half sufficed here; CI machines are slower).
	waitFor(t, 300*time.Second, "records of the minute groups", func() bool {
		n, err := p.count(`rail:fabric_rdma_transmit_utilization:ratio_rate1m{cluster="lab"}`)
		return err == nil && n == 2
	})
	end := time.Now().Truncate(time.Second)
	data := map[string]bool{}
	var empty []string
	for _, q := range dashboards.Queries() {
		var n int
		var err error
		if q.Instant {
			var r []promapi.Sample
			r, err = p.Query(t.Context(), q.Expr, end)
			n = len(r)
		} else {
			var r []promapi.Series
			r, err = p.QueryRange(t.Context(), q.Expr, end.Add(-2*time.Minute), end, 2*time.Second)
			n = len(r)
		}
		if err != nil {
			t.Errorf("%s / %s: %v", q.Dashboard, q.Panel, err)
			continue
		}
		if n > 0 {
			data[q.Dashboard+" / "+q.Panel] = true
		} else {
			empty = append(empty, q.Dashboard+" / "+q.Panel)
		}
	}
	sort.Strings(empty)
	t.Logf("%d dashboard queries with data through VictoriaMetrics; empty on this fixture: %v", len(dashboards.Queries())-len(empty), empty)
	for _, panel := range []string{
		"Fabric overview / RDMA throughput per rail", "Fabric overview / Rail utilization of link rate",
		"Fabric overview / RDMA vs TCP on the rail netdevs", "Fabric overview / PFC pause occupancy per rail and priority",
		"Fabric overview / RoCE retransmission events per rail", "Fabric overview / Rail link state",
		"Fabric overview / Rail link rate", "Fabric overview / Collector state",
	} {
		if !data[panel] {
			t.Errorf("panel %q has no data through VictoriaMetrics", panel)
		}
	}
}
