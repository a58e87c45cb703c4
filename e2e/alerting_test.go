// Package e2e runs fabric_exporter with a real Prometheus and Alertmanager
// (Debian's prometheus and prometheus-alertmanager packages): the shipped
// rules, the example Alertmanager routing, fixtures that change over time,
// and a webhook receiver in the test.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"

	"github.com/fabric-exporter/fabric_exporter/dashboards"
	"github.com/fabric-exporter/fabric_exporter/internal/fakekubelet"
	"github.com/fabric-exporter/fabric_exporter/internal/fakeras"
	"github.com/fabric-exporter/fabric_exporter/internal/fixturetree"
	"github.com/fabric-exporter/fabric_exporter/internal/promapi"
	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

const repo = ".."

// start runs a command until the test ends; its output goes to a log file
// that is printed if the test fails.
func start(t testing.TB, name string, args ...string) *exec.Cmd {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), filepath.Base(name)+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		f.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("--- %s log (tail):\n%s", filepath.Base(name), b)
		}
	})
	return cmd
}

func writeInPlace(path, content string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(content)
	return err
}

// node is one simulated GPU server: a fixture tree the test changes and an
// exporter reading it.
type node struct {
	name, addr, sys, eth string
	listen               string              // the exporter's address (addr, unless a scrape proxy stands before it)
	proxy                *scrapeProxy        // the healthy node: Prometheus scrapes it through a proxy that can fail scrapes
	proc, logs           string              // fixture /proc (placement node), NCCL log directory (nccl node)
	inspector            string              // NCCL Inspector dump directory (nccl node)
	kubelet              *fakekubelet.Server // the kubelet's pod-resources API (placement and healthy nodes)
	ras                  *fakeras.Server     // NCCL's RAS service (nccl node): recorded answers of the lent H200
	devlink, kmsg        string              // devlink answers (fixture directory) and the kernel log (a growing recording): driver node
	args                 []string
	cmd                  *exec.Cmd
	mu                   sync.Mutex
	counters             map[string]uint64 // path -> value, advanced by the traffic loop
	ethStats             map[string]uint64 // eth3 ethtool stats
	ethBase              string
}

// webhook records what Alertmanager delivers.
type webhook struct {
	mu     sync.Mutex
	events []event
}

type event struct {
	receiver, status string
	labels           map[string]string
	annotations      map[string]string
	at               time.Time // when the webhook got it
}

func (w *webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	var msg promapi.WebhookMessage
	if err := json.NewDecoder(r.Body).Decode(&msg); err != nil {
		http.Error(rw, err.Error(), 400)
		return
	}
	now := time.Now()
	w.mu.Lock()
	for _, a := range msg.Alerts {
		w.events = append(w.events, event{receiver: strings.TrimPrefix(r.URL.Path, "/"), status: a.Status, labels: a.Labels, annotations: a.Annotations, at: now})
	}
	w.mu.Unlock()
}

// find returns the first event matching status and labels.
func (w *webhook) find(status string, want map[string]string) (event, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.events {
		if e.status != status {
			continue
		}
		ok := true
		for k, v := range want {
			if e.labels[k] != v {
				ok = false
				break
			}
		}
		if ok {
			return e, true
		}
	}
	return event{}, false
}

func (w *webhook) all() []event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]event(nil), w.events...)
}

// TestAlertingEndToEnd: the exporters are scraped under a job that is not
// "fabric" (a ServiceMonitor's name; the rules select by metric name and
// FabricExporterDown's selector is set to that job). A baseline where only
// the node with a broken placement (RDMA devices missing in a container,
// memory on the far NUMA node, a pod given GPUs but no RDMA device by the
// kubelet) and the node whose --path.sysfs points at
// nothing (FabricCollectorFailing with the reason) alert, then a PFC storm
// (one alert naming the rail), a retransmission burst, a rail going down, an
// NCCL process falling back to sockets, a rail device vanishing while the
// exporter runs and one vanishing across an exporter restart (with
// FabricExporterDown while it is down), on six nodes at once. Each alert
// must reach the webhook with the right labels and receiver (pages through
// the pager route); RailTCPFallbackSuspected fires in Prometheus but stays
// inhibited by NCCLSocketFallback; every dashboard panel's query returns
// data; everything resolves when the faults end (the blind node once its
// sysfs appears, without a restart); the healthy node never alerts, and no
// collector that is only not configured (nccl without a log path) alerts.
func TestAlertingEndToEnd(tt *testing.T) {
	t := testenv.RepeatFailures(tt)
	if testing.Short() {
		t.Skip("-short")
	}
	tmp := t.TempDir()
	exporter := buildExporter(t, tmp)

	// A GPU fixture where every field is present (the bundled one has a
	// sparse GPU, which would rightly raise GPUActivityMissing).
	gpuFixture, gpuFixturePIDs := filepath.Join(tmp, "gpu.json"), filepath.Join(tmp, "gpu-pids.json")
	for _, f := range []struct {
		path string
		pids bool
	}{{gpuFixture, false}, {gpuFixturePIDs, true}} {
		if err := writeFullGPUFixture(filepath.Join(repo, "collector/fixtures/gpu/dcgm-8gpu.json"), f.path, f.pids); err != nil {
			t.Fatal(err)
		}
	}

	nodes := map[string]*node{}
	for _, name := range []string{"healthy", "pfc", "retrans", "linkdown", "nccl", "placement", "vanish", "restart", "blind", "uncabled", "driver"} {
		n := &node{name: name, addr: testenv.FreeAddr(t), sys: filepath.Join(tmp, name, "sys"), eth: filepath.Join(tmp, name, "ethtool"),
			counters: map[string]uint64{}}
		n.listen = n.addr
		if name == "healthy" {
			n.proxy = newScrapeProxy(t, n.listen)
			n.addr = n.proxy.addr()
		}
		for _, d := range [][2]string{{"collector/fixtures/sys", n.sys}, {"collector/fixtures/ethtool", n.eth}} {
			if name == "blind" && d[1] == n.sys {
				continue // --path.sysfs points at nothing (a missing -v /sys:/host/sys)
			}
			if err := os.MkdirAll(d[1], 0o755); err != nil {
				t.Fatal(err)
			}
			if err := fixturetree.Copy(filepath.Join(repo, d[0]), d[1]); err != nil {
				t.Fatal(err)
			}
		}
		if name == "uncabled" {
			// Dual-port HCAs with one port of each cabled (the users' shape):
			// mlx5_1 and mlx5_2 are DOWN from boot, and no --rail is given.
			addUncabledPort(t, n.sys, "mlx5_0", "mlx5_1", "eth4")
			addUncabledPort(t, n.sys, "mlx5_3", "mlx5_2", "eth5")
		}
		b, _ := os.ReadFile(filepath.Join(n.eth, "eth3"))
		n.ethBase = string(b)
		n.ethStats = map[string]uint64{"rx_prio3_pause_duration": 392493240, "tx_pause_storm_warning_events": 2}
		for _, dev := range []string{"mlx5_0", "mlx5_3"} {
			if name == "blind" {
				break
			}
			for _, f := range []string{"port_xmit_data", "port_rcv_data"} {
				n.counters[filepath.Join(n.sys, "class/infiniband", dev, "ports/1/counters", f)] = 230442669431839
			}
			n.counters[filepath.Join(n.sys, "class/infiniband", dev, "ports/1/hw_counters/local_ack_timeout_err")] = 2705
		}
		for _, nd := range []string{"eth0", "eth3"} {
			if name == "blind" {
				break
			}
			n.counters[filepath.Join(n.sys, "class/net", nd, "statistics/tx_bytes")] = 13906677385
		}
		args := []string{"--web.listen-address=" + n.listen, "--path.sysfs=" + n.sys, "--collector.pfc.ethtool-fixtures=" + n.eth,
			"--collector.phy.fixtures=" + filepath.Join(repo, "collector/fixtures/phy"),
			"--collector.gpu.interval=1s", "--collector.process.numa-maps-interval=1s"}
		if name == "placement" || name == "healthy" {
			// The kubelet: on the placement node pod llm/sglang-1 got GPUs
			// but no RDMA device (PodWithoutRDMADevice); on the healthy
			// node every GPU pod got one.
			dir, err := os.MkdirTemp("", "kube")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			sock := filepath.Join(dir, "kubelet.sock")
			n.kubelet = fakekubelet.New(fakekubelet.NodePods(name == "healthy"))
			fakekubelet.Serve(t, n.kubelet, sock)
			args = append(args, "--collector.kubernetes.pod-resources-socket="+sock)
		}
		switch name {
		case "placement":
			// The fixture /proc: SGLang schedulers on GPUs 0 and 1, one with
			// its memory on the far NUMA node and no RDMA devices in its
			// container.
			n.proc = filepath.Join(tmp, name, "proc")
			if err := fixturetree.Copy(filepath.Join(repo, "collector/fixtures/proc"), n.proc); err != nil {
				t.Fatal(err)
			}
			// Their queue pairs, as `rdma -j resource show qp` prints them
			// (one in error; no RAS here, so no RDMAQueuePairsInError).
			args = append(args, "--path.procfs="+n.proc, "--collector.gpu.fixture="+gpuFixturePIDs,
				"--collector.process.rdma-qp-fixture="+filepath.Join(repo, "collector/fixtures/rdma-qp/qp.json"))
		case "nccl":
			n.logs = filepath.Join(tmp, name, "nccl")
			os.MkdirAll(n.logs, 0o755)
			writeNCCL(t, filepath.Join(n.logs, "node7.4242.log"), ncclIB)
			// A single-node job (TP8 on this node, no RDMA): NCCL names the
			// Socket network at init and never uses it. No page, ever.
			writeNCCL(t, filepath.Join(n.logs, "node7.6666.log"), ncclSocketSingleNode)
			args = append(args, "--collector.gpu.fixture="+gpuFixture, "--collector.nccl.log-path="+filepath.Join(n.logs, "*.log"),
				"--collector.nccl.retention=5s", "--collector.nccl.poll-interval=250ms")
			// The NCCL Inspector's real dumps of the lent H200, both modes in
			// one directory; the traffic loop appends operations to the JSON
			// file of pid 692 (host vm: no NCCL log of that process here, so
			// no join with a network and no NCCLBusBandwidthLow).
			n.inspector = filepath.Join(tmp, name, "nccl-inspector")
			os.MkdirAll(n.inspector, 0o755)
			for _, mode := range []string{"json", "prom"} {
				if err := fixturetree.Copy(filepath.Join(repo, "collector/fixtures/nccl-inspector", mode), n.inspector); err != nil {
					t.Fatal(err)
				}
			}
			args = append(args, "--collector.nccl-inspector.dump-dir="+n.inspector, "--collector.nccl-inspector.poll-interval=250ms")
			// NCCL's RAS service: two healthy ranks, then (a fault) rank 1
			// killed with SIGKILL 25 s before the answer (recorded on the
			// lent H200, NCCL 2.28.9, JSON).
			n.ras = fakeras.Start(t, filepath.Join(repo, "internal/ncclras/testdata"), true, "2.28.9-json-healthy.txt", "")
			args = append(args, "--collector.nccl-ras.address="+n.ras.Addr(), "--collector.nccl-ras.interval=1s")
		default:
			args = append(args, "--collector.gpu.fixture="+gpuFixture)
		}
		if name == "driver" {
			// The driver's own view: devlink health reporters (the fixture
			// answers, rewritten by the fault) and the kernel log, a
			// recording that the fault appends records to as the kernel
			// would write them.
			n.devlink = filepath.Join(tmp, name, "devlink")
			if err := fixturetree.Copy(filepath.Join(repo, "collector/fixtures/devlink"), n.devlink); err != nil {
				t.Fatal(err)
			}
			n.kmsg = filepath.Join(tmp, name, "kmsg")
			if err := os.WriteFile(n.kmsg, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			args = append(args, "--collector.devlink.fixtures="+n.devlink, "--collector.devlink.interval=1s",
				"--collector.kernel-events", "--collector.kernel-events.path="+n.kmsg, "--collector.kernel-events.poll-interval=250ms")
		}
		n.args = args
		n.cmd = start(t, exporter, args...)
		nodes[name] = n
	}
	byAddr := map[string]string{}
	for name, n := range nodes {
		byAddr[n.addr] = name
	}

	// Fault switches, read by the traffic loop.
	var fmu sync.Mutex
	faults := map[string]bool{}
	setFault := func(name string, on bool) { fmu.Lock(); faults[name] = on; fmu.Unlock() }
	fault := func(name string) bool { fmu.Lock(); defer fmu.Unlock(); return faults[name] }

	// SGLang stand-in: 1000 prompt tokens/s.
	t0 := time.Now()
	sglang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tokens := int(time.Since(t0).Seconds() * 1000)
		fmt.Fprintf(w, "# TYPE sglang:prompt_tokens_total counter\nsglang:prompt_tokens_total{model_name=\"m\"} %d\n# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"m\"} 8\n", tokens)
	}))
	defer sglang.Close()

	// Traffic: every 250 ms both rails of every node move 3.3 MB per token
	// (825 MB per 250 ms = 26 Gbit/s), a little TCP, and the faults.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	sn := 1000
	go func() {
		defer wg.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for _, n := range nodes {
				n.mu.Lock()
				for path, v := range n.counters {
					socket := n.name == "nccl" && fault("nccl")
					switch {
					case strings.HasSuffix(path, "_data") && socket:
						// NCCL on sockets: the RDMA counters stand still ...
					case strings.HasSuffix(path, "_data"):
						v += 825_000_000 / 4 // 4-octet words
					case strings.HasSuffix(path, "tx_bytes") && socket:
						v += 250_000_000 // ... and the rail netdevs carry 8 Gbit/s of TCP
					case strings.HasSuffix(path, "tx_bytes"):
						v += 100_000 // 3.2 Mbit/s of TCP
					case strings.HasSuffix(path, "local_ack_timeout_err") && n.name == "retrans" && fault("retrans"):
						v += 50 // 200 retransmission timeouts/s
					}
					n.counters[path] = v
					writeInPlace(path, fmt.Sprintf("%d\n", v))
				}
				if n.name == "pfc" && fault("pfc") {
					n.ethStats["rx_prio3_pause_duration"] += 125_000 // µs per 250 ms: paused half the time
					n.ethStats["tx_pause_storm_warning_events"]++
				}
				eth := n.ethBase
				for k, v := range n.ethStats {
					eth = replaceStat(eth, k, v)
				}
				writeInPlace(filepath.Join(n.eth, "eth3"), eth)
				state := "4: ACTIVE"
				if n.name == "linkdown" && fault("linkdown") {
					state = "1: DOWN"
				}
				writeInPlace(filepath.Join(n.sys, "class/infiniband/mlx5_3/ports/1/state"), state+"\n")
				if n.logs != "" {
					appendNCCL(filepath.Join(n.logs, "node7.4242.log"), "node7:4242:4242 [0] NCCL INFO AllReduce: opCount 1a2 sendbuff 0x7f sendcount 1048576 datatype 9 op 0 root 0 comm 0x5 [nranks=16] stream 0x1\n")
					if fault("nccl") {
						appendNCCL(filepath.Join(n.logs, "node7.5555.log"), "node7:5555:5555 [0] NCCL INFO AllReduce: opCount 1a2 sendbuff 0x7f sendcount 1048576 datatype 9 op 0 root 0 comm 0x5 [nranks=16] stream 0x1\n")
					}
				}
				if n.inspector != "" {
					sn++
					appendNCCL(filepath.Join(n.inspector, "vm-pid692.log"), fmt.Sprintf(inspectorLine, sn))
				}
				n.mu.Unlock()
			}
		}
	}()
	defer wg.Wait()
	defer cancel()

	// Alertmanager with the shipped example routing, receivers pointed at
	// the webhook and fast timers.
	hook, amAddr := startAlertmanager(t, tmp)

	// Prometheus with the shipped rules, rendered with test timings and the
	// exporter-down selector set to the scrape job, which is not "fabric".
	const job = labJob
	cfg, rules := labRules(t)
	var targets []string
	for _, n := range nodes {
		targets = append(targets, n.addr)
	}
	prom := startPrometheus(t, tmp, rules, amAddr, scrapeJob{job, targets},
		scrapeJob{"serviceMonitor/inference/sglang/0", []string{strings.TrimPrefix(sglang.URL, "http://")}})

	// Baseline: every target up, rates flowing, nothing firing.
	waitFor(t, 120*time.Second, "all targets up and rail rates recorded", func() bool {
		n, _ := prom.count(`up{` + cfg.ExporterSelector + `} == 1`)
		r, _ := prom.count(`rail:fabric_rdma_transmitted_bits:rate1m > 1e10`)
		return n == len(nodes) && r >= 2*(len(nodes)-1) // the blind node has no rails yet
	})
	if v, err := prom.scalar(`max(rail:fabric_rdma_transmitted_bytes_per_prompt_token:ratio_rate1m{instance="` + nodes["healthy"].addr + `"})`); err != nil || v < 2.5e6 || v > 4.5e6 {
		t.Errorf("bytes per prompt token on the healthy node = %v, %v; want about 3.3e6", v, err)
	}
	time.Sleep(8 * time.Second) // longer than every test `for`

	// Only the placement node, whose fixture /proc is broken from the start,
	// and the blind node, whose --path.sysfs does not exist, may alert on the
	// baseline. The blind node's alert carries the state and the reason.
	placementAlerts := []expectation{
		{"RDMADevicesMissingInContainer", "placement", "team-chat", map[string]string{"severity": "warning", "pid": "4310", "node": "uverbs0", "device": "mlx5_0"}},
		{"RDMADevicesMissingInContainer", "placement", "team-chat", map[string]string{"severity": "warning", "pid": "4311", "node": "uverbs0", "device": "mlx5_0"}},
		{"CrossNUMAPlacement", "placement", "team-chat", map[string]string{"severity": "warning", "pid": "4310"}},
		{"PodWithoutRDMADevice", "placement", "team-chat", map[string]string{"severity": "warning", "namespace": "llm", "pod": "sglang-1", "job": job}},
		{"FabricCollectorFailing", "blind", "team-chat", map[string]string{"severity": "warning", "collector": "rdma", "job": job}},
	}
	waitAlerts(t, hook, nodes, "firing", placementAlerts)
	if ev, _ := hook.find("firing", map[string]string{"alertname": "FabricCollectorFailing", "instance": nodes["blind"].addr, "collector": "rdma"}); !strings.Contains(ev.annotations["description"], "State source_missing: ") {
		t.Errorf("FabricCollectorFailing on the blind node: the description lacks the state and reason: %q", ev.annotations["description"])
	} else {
		t.Logf("FabricCollectorFailing on the blind node: %s", ev.annotations["description"])
	}
	firing, _ := prom.list(`ALERTS{alertstate="firing"}`)
	for _, a := range firing {
		if n := byAddr[a["instance"]]; n != "placement" && n != "blind" {
			t.Fatalf("alert firing on the baseline: %v", a)
		}
	}

	// A healthy node's scrape fails just before the rail-history group's
	// evaluation, then its exporter restarts at such a moment: no page.
	healthy := nodes["healthy"]
	aroundHistoryEvaluation(t, prom, healthy.addr, "failed scrape",
		func() { healthy.proxy.failing.Store(true) }, func() { healthy.proxy.failing.Store(false) })
	// The restart: the exporter is killed before the evaluation and its
	// new process starts 0.6 s after it, so that the scrapes fail across
	// the evaluation as the injected failure's do. (Restarted before it, a
	// full CI run missed the evaluation five times in a row; no successful
	// scrape can now carry a timestamp before the evaluation.)
	aroundHistoryEvaluation(t, prom, healthy.addr, "exporter restart", func() {
		healthy.cmd.Process.Kill()
		healthy.cmd.Wait()
	}, func() {
		healthy.cmd = start(t, exporter, healthy.args...)
	})
	// The node with uncabled ports and default rails has exactly its two
	// cabled rails.
	if rails, err := prom.list(`fabric_rail_info{instance="` + nodes["uncabled"].addr + `"}`); err != nil || len(rails) != 2 {
		t.Errorf("uncabled node: rails %v (%v), want mlx5_0 and mlx5_3 only", rails, err)
	}

	// Faults.
	setFault("pfc", true)
	setFault("retrans", true)
	setFault("linkdown", true)
	nccl := nodes["nccl"]
	writeNCCL(t, filepath.Join(nccl.logs, "node7.5555.log"), ncclSocket)
	setFault("nccl", true)
	nccl.ras.Set("2.28.9-json-killed.txt", "") // a rank dies
	// A rail device vanishes while its exporter runs, and another one while
	// its exporter is down: the restarted exporter never saw it.
	vanish, restart := nodes["vanish"], nodes["restart"]
	removeDevice := func(n *node) string {
		link := filepath.Join(n.sys, "class/infiniband/mlx5_3")
		target, err := os.Readlink(link)
		if err != nil {
			t.Fatal(err)
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		if err := os.Remove(link); err != nil {
			t.Fatal(err)
		}
		return target
	}
	vanishTarget := removeDevice(vanish)
	restart.cmd.Process.Kill()
	restart.cmd.Wait()
	waitAlerts(t, hook, nodes, "firing", []expectation{{"FabricExporterDown", "restart", "team-chat", map[string]string{"severity": "warning", "job": job}}})
	restartTarget := removeDevice(restart)
	restart.cmd = start(t, exporter, restart.args...)
	// The firmware of rail mlx5_3's HCA fails fatally under load: the
	// kernel logs mlx5's health lines (real lines, on the fixture's PCI
	// address) and devlink's fw_fatal reporter goes to error.
	driver := nodes["driver"]
	appendKmsg(t, driver.kmsg, driverFatalRecords(t))
	setReporter(t, driver.devlink, "pci/0000:9a:00.0", "fw_fatal", "error", 1, 0)
	expect := []expectation{
		{"PFCStorm", "pfc", "team-chat", map[string]string{"severity": "warning", "netdev": "eth3", "rail": "mlx5_3"}},
		{"RoCERetransmissions", "retrans", "pager", map[string]string{"severity": "page", "rail": "mlx5_0"}},
		{"RailLinkDown", "linkdown", "pager", map[string]string{"severity": "page", "rail": "mlx5_3", "device": "mlx5_3", "port": "1"}},
		{"NCCLSocketFallback", "nccl", "pager", map[string]string{"severity": "page", "host": "node7", "pid": "5555"}},
		{"RailLinkDown", "vanish", "pager", map[string]string{"severity": "page", "rail": "mlx5_3", "device": "mlx5_3", "port": "1", "job": job}},
		{"RailLinkDown", "restart", "pager", map[string]string{"severity": "page", "rail": "mlx5_3", "device": "mlx5_3", "port": "1", "job": job}},
		{"RailHCAFailed", "driver", "pager", map[string]string{"severity": "page", "rail": "mlx5_3", "device": "mlx5_3"}},
	}
	waitAlerts(t, hook, nodes, "firing", expect)
	// The page says what failed, from both sources: the reporter in error
	// and the kernel's fatal error line.
	if ev, _ := hook.find("firing", map[string]string{"alertname": "RailHCAFailed", "instance": driver.addr}); !strings.Contains(ev.annotations["summary"], "(firmware fatal)") ||
		!strings.Contains(ev.annotations["description"], "fw_fatal in error state") || !strings.Contains(ev.annotations["description"], "mlx5 fatal_error") {
		t.Errorf("RailHCAFailed on the driver node does not name the reporter and the kernel line: %q / %q", ev.annotations["summary"], ev.annotations["description"])
	} else {
		t.Logf("RailHCAFailed: %s / %s", ev.annotations["summary"], ev.annotations["description"])
	}
	// The dead rank pages through NCCL's RAS service, once per rank (the
	// RAS alerts aggregate without instance: every host of the job reports
	// the same communicator), and its survivor's asynchronous error too.
	rankMissing := map[string]string{"alertname": "NCCLRankMissing", "comm": "0xf8e68da1f581fed5", "rank": "1", "pid": "659", "severity": "page"}
	asyncError := map[string]string{"alertname": "NCCLAsyncError", "comm": "0xf8e68da1f581fed5", "rank": "0", "pid": "658", "severity": "page"}
	for _, want := range []map[string]string{rankMissing, asyncError} {
		waitFor(t, 90*time.Second, want["alertname"]+" paged", func() bool {
			ev, ok := hook.find("firing", want)
			return ok && ev.receiver == "pager"
		})
	}
	// The PFC storm (pause-storm events and priority 3 paused half the time
	// on eth3) is one alert, named by its rail, listing the paused priority.
	for _, ev := range hook.all() {
		if ev.labels["alertname"] == "PFCStorm" && ev.status == "firing" && ev.labels["rail"] != "mlx5_3" {
			t.Errorf("PFCStorm notification without the rail: %+v", ev)
		}
	}
	// (Prometheus' view of the alert: the notification may have gone out
	// from the storm events before the 1m occupancy rate passed 10%.)
	var pfcDesc string
	waitFor(t, 60*time.Second, "PFCStorm's description to list rx priority 3", func() bool {
		as, _ := prom.Alerts(context.Background())
		for _, a := range as {
			if a.Labels["alertname"] == "PFCStorm" && a.Labels["instance"] == nodes["pfc"].addr {
				pfcDesc = a.Annotations["description"]
			}
		}
		return strings.Contains(pfcDesc, "rx priority 3 ")
	})
	// The rail that vanished while its exporter ran stays known (its info
	// series with fabric_rail_device_present 0).
	if n, err := prom.count(`fabric_rail_device_present{rail="mlx5_3", instance="` + vanish.addr + `"} == 0`); err != nil || n != 1 {
		t.Errorf("vanished rail: %d fabric_rail_device_present 0 series (%v), want 1", n, err)
	}

	// RailTCPFallbackSuspected fires in Prometheus for the nccl node (its
	// rails carry TCP, RDMA stands still) but Alertmanager inhibits it
	// while NCCLSocketFallback fires for the same instance.
	waitFor(t, 60*time.Second, "RailTCPFallbackSuspected firing in Prometheus", func() bool {
		n, _ := prom.count(`ALERTS{alertname="RailTCPFallbackSuspected",alertstate="firing",instance="` + nccl.addr + `"}`)
		return n > 0
	})

	// Every dashboard panel's query returns data now.
	for _, q := range dashboards.Queries() {
		if strings.HasPrefix(q.Panel, "annotation:") || slices.Contains(railPanelsCheckedHere, q.Panel) {
			continue
		}
		if n, err := prom.count(q.Expr); err != nil || n == 0 {
			t.Errorf("dashboard %q panel %q query %s returns no data (%v): %s", q.Dashboard, q.Panel, q.RefID, err, q.Expr)
		}
	}

	// The NCCL Inspector's bus bandwidth, through the recording rule: the
	// operations the traffic loop appends run at 1.86 GB/s.
	if v, err := prom.scalar(`sum(comm:fabric_nccl_inspector_bus_bandwidth_bytes_per_second:rate1m{instance="` + nccl.addr + `", pid="692", size="16-256MiB"})`); err != nil || v < 1.8e9 || v > 1.9e9 {
		t.Errorf("NCCL Inspector bus bandwidth of pid 692: %v B/s (%v), want 1.86e9", v, err)
	}

	// The faults end; every alert resolves.
	setFault("pfc", false)
	setFault("retrans", false)
	setFault("linkdown", false)
	setFault("nccl", false)
	nccl.ras.Set("2.28.9-json-healthy.txt", "") // the job restarted
	// The driver recovered the firmware (the reporter is healthy again,
	// one recovery): the page resolves although the kernel's fatal error
	// line stays in the last 10 minutes' counts.
	setReporter(t, driver.devlink, "pci/0000:9a:00.0", "fw_fatal", "healthy", 1, 1)
	fixPlacement(t, nodes["placement"].proc)
	nodes["placement"].kubelet.Set(fakekubelet.NodePods(true))
	for _, d := range []struct {
		n      *node
		target string
	}{{vanish, vanishTarget}, {restart, restartTarget}} {
		if err := os.Symlink(d.target, filepath.Join(d.n.sys, "class/infiniband/mlx5_3")); err != nil {
			t.Fatal(err)
		}
	}
	// The blind node's sysfs appears (renamed into place at once): its
	// collectors recover without a restart.
	blind := nodes["blind"]
	if err := fixturetree.Copy(filepath.Join(repo, "collector/fixtures/sys"), blind.sys+".new"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(blind.sys+".new", blind.sys); err != nil {
		t.Fatal(err)
	}
	expect = append(expect, expectation{"FabricExporterDown", "restart", "team-chat", map[string]string{"severity": "warning", "job": job}})
	waitAlerts(t, hook, nodes, "resolved", append(expect, placementAlerts...))
	for _, want := range []map[string]string{rankMissing, asyncError} {
		waitFor(t, 60*time.Second, want["alertname"]+" resolved", func() bool {
			_, ok := hook.find("resolved", want)
			return ok
		})
	}

	delivered := append(append([]expectation(nil), expect...), placementAlerts...)
	for _, ev := range hook.all() {
		t.Logf("notification: %-8s %-9s %s on %s (%s)", ev.status, ev.receiver, ev.labels["alertname"], byAddr[ev.labels["instance"]], ev.labels["severity"])
		if n := byAddr[ev.labels["instance"]]; n == "healthy" || n == "uncabled" {
			t.Errorf("the %s node alerted: %+v", n, ev)
		}
		if ev.labels["pid"] == "6666" {
			t.Errorf("the single-node job alerted: %+v", ev)
		}
		if ev.labels["alertname"] == "FabricCollectorFailing" && ev.labels["collector"] == "nccl" {
			t.Errorf("nccl without --collector.nccl.log-path is not configured, not failing: %+v", ev)
		}
		known := false
		for _, e := range delivered {
			known = known || (ev.labels["alertname"] == e.alert && ev.labels["instance"] == nodes[e.node].addr)
		}
		// A rail that comes back starts with a partial 1m rate window, so
		// its node looks unbalanced for a few seconds: longer than the test's
		// 5 s `for` (10 m in the shipped rules).
		if n := byAddr[ev.labels["instance"]]; ev.labels["alertname"] == "RailImbalance" && (n == "vanish" || n == "restart") {
			known = true
		}
		if a := ev.labels["alertname"]; (a == "NCCLRankMissing" || a == "NCCLAsyncError") && ev.labels["comm"] == "0xf8e68da1f581fed5" {
			known = true
		}
		if !known {
			t.Errorf("unexpected notification (RailTCPFallbackSuspected must stay inhibited): %+v", ev)
		}
	}
}

// driverFatalRecords are /dev/kmsg records of an mlx5 firmware fatal error
// on mlx5_3 (PCI 0000:9a:00.0 in the fixture tree), as the kernel writes
// them now (prio,seq,usec,flags;text, then the dictionary; usec is
// CLOCK_MONOTONIC, the kernel log's clock): the Fatal error line of a wedged
// ConnectX (internal/kmsg/testdata/lines.txt, lore-hot-unplug) on the
// fixture's address, and the health buffer's syndrome line in the same
// driver's format (print_health_info; 0x1 is "firmware internal error" in
// its hlth_synd_str).
func driverFatalRecords(t testing.TB) string {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	usec := ts.Nano() / 1000
	return fmt.Sprintf("3,4100,%d,-;mlx5_core 0000:9a:00.0: poll_health:1083:(pid 0): Fatal error 1 detected\n SUBSYSTEM=pci\n DEVICE=+pci:0000:9a:00.0\n", usec) +
		fmt.Sprintf("3,4101,%d,-;mlx5_core 0000:9a:00.0: print_health_info:431:(pid 0): synd 0x1: firmware internal error\n SUBSYSTEM=pci\n DEVICE=+pci:0000:9a:00.0\n", usec+100)
}

// appendKmsg appends records to a kernel log recording.
func appendKmsg(t testing.TB, path, records string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(records); err != nil {
		t.Fatal(err)
	}
}

// setReporter sets one devlink health reporter of handle in the fixture
// directory's health.json (devlink -j health show) and writes it in place.
func setReporter(t testing.TB, dir, handle, reporter, state string, errors, recovers int) {
	t.Helper()
	path := filepath.Join(dir, "health.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Health map[string][]map[string]any `json:"health"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range doc.Health[handle] {
		if r["reporter"] == reporter {
			r["state"], r["error"], r["recover"] = state, errors, recovers
			found = true
		}
	}
	if !found {
		t.Fatalf("%s: no reporter %s of %s", path, reporter, handle)
	}
	out, err := json.MarshalIndent(doc, "", "    ")
	if err != nil {
		t.Fatal(err)
	}
	// Renamed into place: the exporter reads either answer whole, never a
	// truncated file.
	if err := os.WriteFile(path+".new", out, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// inspectorLine is an operation as the NCCL Inspector writes it in JSON
// mode (the fixture's format; %d: its sequence number): 64 MiB all-reduce
// at 1.85 GB/s.
const inspectorLine = `{"header":{"id":"0xa6ce86ab2388df","comm_name":"unknown","rank":0,"n_ranks":2,"nnodes":2},"metadata":{"inspector_output_format_version":"v4.0","git_rev":"unknown","rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":1796165787531274,"hostname":"vm","pid":692},"coll_perf":{"coll":"AllReduce","coll_sn":%d,"coll_msg_size_bytes":67108864,"coll_exec_time_us":36068,"coll_timing_source":"kernel_gpu","coll_algobw_gbs":1.860621,"coll_busbw_gbs":1.860621}}` + "\n"

type expectation struct {
	alert, node, receiver string
	labels                map[string]string
}

// waitAlerts waits until the webhook got each expected alert with status.
func waitAlerts(t testing.TB, hook *webhook, nodes map[string]*node, status string, exp []expectation) {
	t.Helper()
	for _, e := range exp {
		want := map[string]string{"alertname": e.alert, "instance": nodes[e.node].addr, "cluster": "lab"}
		for k, v := range e.labels {
			want[k] = v
		}
		timeout := 150 * time.Second // a bound for a loaded 2-core CI machine, not a measurement
		if status == "resolved" {
			timeout = 150 * time.Second // rates over 1m must forget the fault
		}
		waitFor(t, timeout, e.alert+" "+status+" at the webhook", func() bool {
			ev, ok := hook.find(status, want)
			if ok && ev.receiver != e.receiver {
				t.Errorf("%s went to %s, want %s", e.alert, ev.receiver, e.receiver)
			}
			return ok
		})
	}
}

// fixPlacement repairs the fixture /proc: the RDMA device nodes appear in
// the schedulers' containers and PID 4310's memory moves to its GPU's node.
func fixPlacement(t testing.TB, proc string) {
	t.Helper()
	for _, pid := range []string{"4310", "4311"} {
		dev := filepath.Join(proc, pid, "root/dev/infiniband")
		os.RemoveAll(dev)
		if err := os.MkdirAll(dev, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"uverbs0", "uverbs1", "rdma_cm"} {
			os.WriteFile(filepath.Join(dev, f), nil, 0o644)
		}
	}
	b, err := os.ReadFile(filepath.Join(proc, "4311/numa_maps"))
	if err != nil {
		t.Fatal(err)
	}
	if err := writeInPlace(filepath.Join(proc, "4310/numa_maps"), string(b)); err != nil {
		t.Fatal(err)
	}
}

// NCCL INFO logs in the format of the real samples: a healthy process on
// RoCE with GPU Direct RDMA, and one that fell back to sockets.
const ncclIB = `node7:4242:4242 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.7<0>
node7:4242:4242 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_3:1/RoCE [RO]; OOB eth0:10.0.0.7<0>
node7:4242:4242 [0] NCCL INFO Using network IB
node7:4242:4242 [0] NCCL INFO cudaDriverVersion 12040
NCCL version 2.21.5+cuda12.4
node7:4242:4300 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA
node7:4242:4300 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/1/GDRDMA
`

const ncclSocket = `node7:5555:5555 [0] NCCL INFO Bootstrap : Using eth1:192.168.1.7<0>
node7:5555:5555 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth1
node7:5555:5555 [0] NCCL INFO NET/IB : No device found.
node7:5555:5555 [0] NCCL INFO NET/Socket : Using [0]eth1:192.168.1.7<0>
node7:5555:5555 [0] NCCL INFO Using network Socket
NCCL version 2.21.5+cuda12.4
node7:5555:5600 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Socket/0
node7:5555:5600 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/Socket/1
`

// ncclSocketSingleNode is TP8 on one node without RDMA devices (NCCL 2.21:
// the nRanks/nNodes line of init.cc, P2P connections between its GPUs).
const ncclSocketSingleNode = `node7:6666:6666 [0] NCCL INFO Bootstrap : Using eth1:192.168.1.7<0>
node7:6666:6666 [0] NCCL INFO NET/IB : No device found.
node7:6666:6666 [0] NCCL INFO NET/Socket : Using [0]eth1:192.168.1.7<0>
node7:6666:6666 [0] NCCL INFO Using network Socket
NCCL version 2.21.5+cuda12.4
node7:6666:6700 [0] NCCL INFO comm 0x55d0c0a0 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0
node7:6666:6700 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC
node7:6666:6700 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/IPC
node7:6666:6666 [0] NCCL INFO ncclCommInitRank comm 0x55d0c0a0 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 19000 commId 0x5c1e2f3a4b5c6d7e - Init COMPLETE
`

func writeNCCL(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func appendNCCL(path, line string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return
	}
	f.WriteString(line)
	f.Close()
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s", d, what)
}

// replaceStat sets "name: value" in `ethtool -S` text.
func replaceStat(text, name string, v uint64) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if k, _, ok := strings.Cut(strings.TrimSpace(l), ":"); ok && k == name {
			lines[i] = fmt.Sprintf("     %s: %d", name, v)
		}
	}
	return strings.Join(lines, "\n")
}

// writeFullGPUFixture copies the GPU fixture with every blank field filled,
// and without its compute PIDs unless pids is set.
func writeFullGPUFixture(src, dst string, pids bool) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return err
	}
	for _, g := range doc["gpus"].([]any) {
		if !pids {
			delete(g.(map[string]any), "pids")
		}
		for k, v := range g.(map[string]any)["fields"].(map[string]any) {
			if v == nil {
				g.(map[string]any)["fields"].(map[string]any)[k] = 0.5
			}
		}
	}
	out, _ := json.Marshal(doc)
	return os.WriteFile(dst, out, 0o644)
}

// writeAlertmanagerConfig takes the shipped example, points every webhook at
// base/<receiver> and shortens the timers.
func writeAlertmanagerConfig(src, dst, base string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return err
	}
	for _, r := range cfg["receivers"].([]any) {
		rm := r.(map[string]any)
		for _, w := range rm["webhook_configs"].([]any) {
			w.(map[string]any)["url"] = base + "/" + rm["name"].(string)
		}
	}
	var fast func(route map[string]any)
	fast = func(route map[string]any) {
		route["group_wait"], route["group_interval"] = "1s", "1s"
		if routes, ok := route["routes"].([]any); ok {
			for _, r := range routes {
				fast(r.(map[string]any))
			}
		}
	}
	fast(cfg["route"].(map[string]any))
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, out, 0o644)
}

// promClient adds to the shared API client what the tests ask: how many
// series, their labels, one value.
type promClient struct{ *promapi.Client }

func newPromClient(base string) *promClient { return &promClient{promapi.New(base, 30*time.Second)} }

func (p *promClient) query(q string) ([]promapi.Sample, error) {
	return p.Query(context.Background(), q, time.Time{})
}

func (p *promClient) count(q string) (int, error) {
	r, err := p.query(q)
	return len(r), err
}

func (p *promClient) list(q string) ([]map[string]string, error) {
	r, err := p.query(q)
	var out []map[string]string
	for _, s := range r {
		out = append(out, s.Metric)
	}
	return out, err
}

func (p *promClient) scalar(q string) (float64, error) {
	r, err := p.query(q)
	if err != nil {
		return 0, err
	}
	if len(r) == 0 {
		return 0, fmt.Errorf("no result for %q", q)
	}
	return r[0].Value, nil
}
