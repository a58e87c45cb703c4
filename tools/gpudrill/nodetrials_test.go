package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/ncclras"
	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// buildExporter builds fabric_exporter into the test's directory.
func buildExporter(t *testing.T) string {
	t.Helper()
	exporter := filepath.Join(t.TempDir(), "fabric_exporter")
	if out, err := exec.Command("go", "build", "-o", exporter, "../../cmd/fabric_exporter").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return exporter
}

// TestNodeTrials runs the two-node trials end to end where the test may
// make namespaces (root): container-shaped ranks on two nodes, the real
// exporter on each, Prometheus and Alertmanager inside node 0, and
// testdata/fakerank.py in place of PyTorch (a RAS service on each rank
// that answers like NCCL's with the pids the ranks see themselves as,
// loses rank 1 when it is killed, loses it as NOCOMM when it destroys the
// second communicator, and shows ncclInProgress in nonblocking mode). Two
// kill trials, nodebug, destroy and nonblocking at once, 2 s intervals.
func TestNodeTrials(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	pairOrSkip(t).teardown()
	prom := testenv.Tool(t, "prometheus")
	am := testenv.Tool(t, "prometheus-alertmanager", "alertmanager")
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	tmp := t.TempDir()
	exporter := buildExporter(t)
	fake, _ := filepath.Abs("testdata/fakerank.py")
	wrapper := filepath.Join(tmp, "python")
	os.WriteFile(wrapper, []byte("#!/bin/sh\nexec "+py+" "+fake+" \"$@\"\n"), 0o755)
	cfg := Config{Repo: repo, Exporter: exporter, Prometheus: prom, Alertmanager: am, Python: wrapper, WorkDir: filepath.Join(tmp, "work"),
		RASTrials: 2, RASHealthy: 3 * time.Second, RASStagger: time.Second, RASParallel: true, NoDebug: true,
		DestroyTrial: true, NonblockingTrial: true, Shape: shapeContainer,
		ExporterPort: freePort(t), PrometheusPort: freePort(t), AlertmanagerPort: freePort(t), WebhookPort: freePort(t), TorchPort: freePort(t),
		PageTimeout: 90 * time.Second, ScrapeInterval: "2s", EvalInterval: "2s"}
	res := runDrill(t, cfg)
	var names []string
	for _, c := range res.Checks {
		names = append(names, c.name)
		switch {
		case c.ok:
		default:
			t.Errorf("FAIL %s: %s", c.name, c.detail)
		}
	}
	shape := []string{"the ranks are container-shaped", "each node's /proc shows its own processes only", "rank 0 is on its node's network", "RDMA devices hidden in the containers"}
	up := append(shape, "RAS reports both ranks on two nodes", "each node's exporter reports the communicator on 2 nodes")
	var all []string
	add := func(trial string, checks ...string) {
		for _, c := range checks {
			all = append(all, trial+": "+c)
		}
	}
	for _, k := range []string{"kill1", "kill2"} {
		add(k, up...)
		add(k, "NCCLSocketFallback (kernel evidence) pages for rank 0's host pid", "nothing pages on the healthy job", "the killed rank paged",
			"NCCLRankMissing names the killed rank", "NCCLRankMissing gives the killed rank's host pid",
			"NCCLAsyncError names the survivor", "NCCLAsyncError gives the survivor's host pid", "nothing left in the nodes' namespaces")
	}
	add("nodebug", up...)
	add("nodebug", "NCCLSocketFallback (kernel evidence) pages for rank 0's host pid", "nothing else pages", "no NCCL log", "nothing left in the nodes' namespaces")
	add("destroy", up...)
	add("destroy", "NCCLSocketFallback (kernel evidence) pages for rank 0's host pid", "RAS reports rank 1 of the destroyed communicator missing, responsive and alive (NOCOMM)",
		"NCCLRankMissing and NCCLAsyncError do not page", "nothing else pages", "nothing left in the nodes' namespaces")
	add("nonblocking", up...)
	add("nonblocking", "RAS answered the fast poll", "NCCLSocketFallback (kernel evidence) pages for rank 0's host pid",
		"NCCLRankMissing and NCCLAsyncError do not page", "nothing else pages", "nothing left in the nodes' namespaces")
	if strings.Join(names, "\n") != strings.Join(all, "\n") {
		t.Errorf("checks:\n%s\nwant:\n%s", strings.Join(names, "\n"), strings.Join(all, "\n"))
	}
	if len(res.KillToPage) != 2 || len(res.Rows) != 5 {
		t.Errorf("kill → page %v, %d rows", res.KillToPage, len(res.Rows))
	}
	for _, r := range res.Rows {
		if r.Ranks[0].Own != 1 || r.Ranks[1].Own != 1 || r.Ranks[0].Host <= 1 || r.Ranks[1].Host <= 1 {
			t.Errorf("%s: ranks %v", r.Name, r.Ranks)
		}
	}
	// RAS's answers as written: the kill's, healthy and after; the
	// destroy's, NOCOMM; the nonblocking poll's, in progress.
	for _, f := range []struct {
		path    string
		comms   int
		missing int
	}{{"kill1/ras-healthy.json", 1, 0}, {"kill1/ras-killed.json", 1, 1}, {"destroy/ras-healthy.json", 2, 0}, {"destroy/ras-destroyed.json", 2, 1},
		{"destroy/ras-later.json", 2, 1}, {"nonblocking/ras-inprogress-1.json", 1, 0}} {
		b, err := os.ReadFile(filepath.Join(cfg.WorkDir, f.path))
		if err != nil {
			t.Error(err)
			continue
		}
		st, err := ncclras.ParseJSON(b)
		missing := 0
		for _, c := range st.Communicators {
			missing += len(c.Missing)
		}
		if err != nil || len(st.Communicators) != f.comms || missing != f.missing {
			t.Errorf("%s: %v, %d communicators, %d ranks missing", f.path, err, len(st.Communicators), missing)
		}
	}
	if i7, a7 := inProgressIn(mustParse(t, filepath.Join(cfg.WorkDir, "nonblocking/ras-inprogress-1.json"))); !i7 && !a7 {
		t.Error("ras-inprogress-1.json shows no ncclInProgress")
	}
}

func mustParse(t *testing.T, path string) *ncclras.Status {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ncclras.ParseJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestShapeSelftest runs --selftest-shape: both shapes, sleep for ranks,
// with both nodes' exporters scraped by node 0's Prometheus.
func TestShapeSelftest(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	pairOrSkip(t).teardown()
	prom := testenv.Tool(t, "prometheus")
	am := testenv.Tool(t, "prometheus-alertmanager", "alertmanager")
	cfg := Config{Repo: repo, Exporter: buildExporter(t), Prometheus: prom, Alertmanager: am, WorkDir: filepath.Join(t.TempDir(), "work"),
		SelftestShape: true, RASParallel: true, ContainerRDMA: false,
		ExporterPort: freePort(t), PrometheusPort: freePort(t), AlertmanagerPort: freePort(t), WebhookPort: freePort(t), TorchPort: freePort(t),
		PageTimeout: 30 * time.Second, ScrapeInterval: "1s", EvalInterval: "1s"}
	res := runDrill(t, cfg)
	if res.Failed() {
		t.Error("the selftest failed")
	}
	var names []string
	for _, c := range res.Checks {
		names = append(names, c.name)
	}
	want := []string{
		"selftest-container: the ranks are container-shaped", "selftest-container: each node's /proc shows its own processes only",
		"selftest-container: rank 0 is on its node's network", "selftest-container: RDMA devices hidden in the containers",
		"selftest-container: rank 0's container /proc shows the rank alone, as PID 1", "selftest-container: node 0's Prometheus scrapes both nodes' exporters",
		"selftest-container: node 1's agent kills rank 1", "selftest-container: nothing left in the nodes' namespaces",
		"selftest-host: the ranks are host-shaped", "selftest-host: each node's /proc shows its own processes only",
		"selftest-host: rank 0 is on its node's network", "selftest-host: node 0's Prometheus scrapes both nodes' exporters",
		"selftest-host: node 1's agent kills rank 1", "selftest-host: nothing left in the nodes' namespaces",
	}
	if strings.Join(names, "\n") != strings.Join(want, "\n") {
		t.Errorf("checks:\n%s\nwant:\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
}
