package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/fakeras"
	"github.com/fabric-exporter/fabric_exporter/internal/fixturetree"
	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// TestOneIncidentOnePage: one node in an incident, its pages firing
// (NCCLSocketFallback: an NCCL process on sockets; NCCLAsyncError and
// NCCLRankMissing: a rank of its communicator killed, from NCCL's RAS
// service), goes through what used to page twice for one incident: two
// failed scrapes (Prometheus marks every series of the node stale), an
// exporter restart, and a cause that grows (every rail goes down:
// rail_down joins the cause, and RailLinkDown pages for each rail). Each
// page reaches the pager once, firing, and nothing resolves until the
// incident ends; then each page resolves once, no sooner than
// keep_firing_for after the end. Alertmanager runs the shipped routing
// with group_interval 1s: an alert that resolved and fired again, or a
// cause label that changed, would show as a second notification within
// a second or two.
//
// Without keep_firing_for (for.keepFiring 0s in labRules) the test fails
// at the failed scrapes: NCCLSocketFallback and NCCLAsyncError are
// resolved at the pager and fire again, NCCLRankMissing resolves and
// waits out its for: again. Without the latch (causeLatchWindow 1s) it
// fails at the rails going down: NCCLSocketFallback fires a second time
// with the cause rail_down added.
func TestOneIncidentOnePage(tt *testing.T) {
	t := testenv.RepeatFailures(tt)
	if testing.Short() {
		t.Skip("-short")
	}
	tmp := t.TempDir()
	exporter := buildExporter(t, tmp)
	gpu := filepath.Join(tmp, "gpu.json")
	if err := writeFullGPUFixture(filepath.Join(repo, "collector/fixtures/gpu/dcgm-8gpu.json"), gpu, false); err != nil {
		t.Fatal(err)
	}
	sys, eth, logs := filepath.Join(tmp, "sys"), filepath.Join(tmp, "ethtool"), filepath.Join(tmp, "nccl")
	for _, d := range [][2]string{{"collector/fixtures/sys", sys}, {"collector/fixtures/ethtool", eth}} {
		if err := os.MkdirAll(d[1], 0o755); err != nil {
			t.Fatal(err)
		}
		if err := fixturetree.Copy(filepath.Join(repo, d[0]), d[1]); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(logs, 0o755)
	// The incident from the start: pid 5555 on NET/Socket across nodes (its
	// log, kept alive by a line every 250 ms: --collector.nccl.retention
	// forgets it 3 s after the last), rank 1 of a communicator killed.
	ncclLog := filepath.Join(logs, "node7.5555.log")
	writeNCCL(t, ncclLog, ncclSocket)
	var alive atomic.Bool
	alive.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
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
			if alive.Load() {
				appendNCCL(ncclLog, "node7:5555:5555 [0] NCCL INFO AllReduce: opCount 1a2 sendbuff 0x7f sendcount 1048576 datatype 9 op 0 root 0 comm 0x5 [nranks=16] stream 0x1\n")
			}
		}
	}()
	defer wg.Wait()
	defer cancel()
	ras := fakeras.Start(t, filepath.Join(repo, "internal/ncclras/testdata"), true, "2.28.9-json-killed.txt", "")

	listen := testenv.FreeAddr(t)
	proxy := newScrapeProxy(t, listen)
	instance := proxy.addr()
	args := []string{"--web.listen-address=" + listen, "--path.sysfs=" + sys, "--collector.pfc.ethtool-fixtures=" + eth,
		"--collector.phy.fixtures=" + filepath.Join(repo, "collector/fixtures/phy"), "--collector.gpu.fixture=" + gpu,
		"--collector.gpu.interval=1s", "--collector.process.numa-maps-interval=1s",
		"--collector.nccl.log-path=" + filepath.Join(logs, "*.log"), "--collector.nccl.retention=3s", "--collector.nccl.poll-interval=250ms",
		"--collector.nccl-ras.address=" + ras.Addr(), "--collector.nccl-ras.interval=1s"}
	cmd := start(t, exporter, args...)

	hook, amAddr := startAlertmanager(t, tmp)
	cfg, rules := labRules(t)
	keepFiring, err := time.ParseDuration(cfg.For.KeepFiring)
	if err != nil {
		t.Fatal(err)
	}
	prom := startPrometheus(t, tmp, rules, amAddr, scrapeJob{labJob, []string{instance}})

	socket := map[string]string{"alertname": "NCCLSocketFallback", "instance": instance, "pid": "5555", "evidence": "log"}
	pages := []map[string]string{socket,
		{"alertname": "NCCLAsyncError", "comm": "0xf8e68da1f581fed5", "rank": "0", "pid": "658"},
		{"alertname": "NCCLRankMissing", "comm": "0xf8e68da1f581fed5", "rank": "1", "pid": "659"}}
	for _, p := range pages {
		waitFor(t, 90*time.Second, p["alertname"]+" paged", func() bool {
			ev, ok := hook.find("firing", p)
			return ok && ev.receiver == "pager"
		})
	}
	first, _ := hook.find("firing", socket)
	cause := first.labels["cause"]
	t.Logf("paging: NCCLSocketFallback with cause %q, NCCLAsyncError, NCCLRankMissing", cause)

	// failedScrapes says how many scrapes of the node failed in the last
	// 30 s (Prometheus wrote up 0 and stale markers for each series).
	failedScrapes := func() int {
		v, err := prom.scalar(fmt.Sprintf(`count_over_time(up{instance=%q}[30s]) - sum_over_time(up{instance=%q}[30s])`, instance, instance))
		if err != nil {
			t.Fatal(err)
		}
		return int(v)
	}
	// onePage checks that every page so far reached the pager once, firing,
	// and that nothing resolved; then that each of want did page.
	onePage := func(step string, want ...map[string]string) {
		t.Helper()
		time.Sleep(6 * time.Second) // a resolved or second notification goes out within 1-2 s (group_interval 1s)
		seqs, bad := pageSequences(hook), 0
		for key, seq := range seqs {
			if len(seq) != 1 || seq[0] != "firing" {
				bad++
				t.Errorf("%s: %s sent %v, want one firing notification", step, key, seq)
			}
		}
		for _, p := range want {
			if _, ok := hook.find("firing", p); !ok {
				bad++
				t.Errorf("%s: %v never paged", step, p)
			}
		}
		if bad == 0 {
			t.Logf("%s: %d pages, each sent once", step, len(seqs))
		}
	}

	// Two scrapes fail (the proxy answers 503 for 2.5 s).
	proxy.failing.Store(true)
	time.Sleep(2500 * time.Millisecond)
	proxy.failing.Store(false)
	if n := failedScrapes(); n < 1 {
		t.Fatalf("failed scrapes: %d in the last 30 s; the test did not exercise the case", n)
	} else {
		t.Logf("failed scrapes: %d", n)
	}
	onePage("failed scrapes", pages...)

	// The exporter restarts: killed, started again 1.5 s later (scrapes
	// fail meanwhile); the new one reads the log and RAS anew.
	cmd.Process.Kill()
	cmd.Wait()
	restarted := time.Now()
	time.Sleep(1500 * time.Millisecond)
	cmd = start(t, exporter, args...)
	waitFor(t, 30*time.Second, "the restarted exporter's scrapes with the NCCL process", func() bool {
		n, _ := prom.count(fmt.Sprintf(`fabric_nccl_fallback_cause_info{instance=%q, pid="5555"}`, instance))
		up, _ := prom.count(fmt.Sprintf(`up{instance=%q} == 1`, instance))
		return n == 1 && up == 1 && time.Since(restarted) > 3*time.Second
	})
	if n := failedScrapes(); n < 1 {
		t.Fatalf("exporter restart: no failed scrape in the last 30 s")
	}
	onePage("exporter restart", pages...)

	// Every rail goes down: rail_down joins the cause the exporter reports
	// for pid 5555, RailLinkDown pages for both rails. The page keeps the
	// cause it began with; its description says what the cause is now.
	for _, dev := range []string{"mlx5_0", "mlx5_3"} {
		if err := writeInPlace(filepath.Join(sys, "class/infiniband", dev, "ports/1/state"), "1: DOWN\n"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "rail_down in the cause of pid 5555", func() bool {
		n, _ := prom.count(fmt.Sprintf(`fabric_nccl_fallback_cause_info{instance=%q, pid="5555", cause=~"(.+,)?rail_down"}`, instance))
		return n == 1
	})
	railDown := []map[string]string{
		{"alertname": "RailLinkDown", "instance": instance, "rail": "mlx5_0"},
		{"alertname": "RailLinkDown", "instance": instance, "rail": "mlx5_3"}}
	for _, p := range railDown {
		waitFor(t, 30*time.Second, "RailLinkDown on "+p["rail"], func() bool { _, ok := hook.find("firing", p); return ok })
	}
	onePage("rail_down added to the cause", append(pages, railDown...)...)
	as, err := prom.Alerts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, a := range as {
		if a.Labels["alertname"] == "NCCLSocketFallback" {
			n++
			if d := a.Annotations["description"]; a.Labels["cause"] != cause || !strings.Contains(d, "; now: ") || !strings.Contains(d, "rail_down") {
				t.Errorf("NCCLSocketFallback after the rails went down: cause %q, want %q; description %q", a.Labels["cause"], cause, a.Annotations["description"])
			}
		}
	}
	if n != 1 {
		t.Errorf("%d NCCLSocketFallback alerts in Prometheus, want 1", n)
	}

	// The incident ends: the job restarted healthy (RAS), the process on
	// sockets is gone, the rails are up. Each page resolves once,
	// keep_firing_for after its condition ended at the earliest.
	ended := time.Now()
	ras.Set("2.28.9-json-healthy.txt", "")
	alive.Store(false)
	for _, dev := range []string{"mlx5_0", "mlx5_3"} {
		if err := writeInPlace(filepath.Join(sys, "class/infiniband", dev, "ports/1/state"), "4: ACTIVE\n"); err != nil {
			t.Fatal(err)
		}
	}
	all := append(pages, railDown...)
	for _, p := range all {
		waitFor(t, 90*time.Second, p["alertname"]+" resolved", func() bool { _, ok := hook.find("resolved", p); return ok })
		ev, _ := hook.find("resolved", p)
		if d := ev.at.Sub(ended); d < keepFiring {
			t.Errorf("%v resolved %.1f s after the incident ended, before keep_firing_for (%s)", p, d.Seconds(), keepFiring)
		} else {
			t.Logf("%s %s resolved %.1f s after the incident ended", p["alertname"], p["rail"], d.Seconds())
		}
	}
	time.Sleep(3 * time.Second)
	seqs := pageSequences(hook)
	for key, seq := range seqs {
		if strings.Join(seq, " ") != "firing resolved" {
			t.Errorf("%s sent %v, want one firing and one resolved notification", key, seq)
		}
	}
	if len(seqs) != len(all) {
		t.Errorf("%d pages, want %d: %v", len(seqs), len(all), seqs)
	}
}

// pageSequences returns the statuses of the notifications the pager got,
// in order, per alert (its label set).
func pageSequences(hook *webhook) map[string][]string {
	seqs := map[string][]string{}
	for _, ev := range hook.all() {
		if ev.receiver == "pager" {
			k := labelKey(ev.labels)
			seqs[k] = append(seqs[k], ev.status)
		}
	}
	return seqs
}
