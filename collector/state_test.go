package collector

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/fixturetree"
)

// syncBuffer is a log sink safe for the concurrent collectors.
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

// lines returns the log lines that contain every one of subs.
func (s *syncBuffer) lines(subs ...string) []string {
	var out []string
	for _, l := range strings.Split(s.String(), "\n") {
		ok := l != ""
		for _, sub := range subs {
			ok = ok && strings.Contains(l, sub)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

type collectorView struct {
	state, reason string
	success       float64
}

// scrapeStates scrapes e once and returns each collector's
// fabric_collector_state_info and fabric_scrape_collector_success, checking
// that there is exactly one state series per collector.
func scrapeStates(t *testing.T, e *Exporter) map[string]collectorView {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(e)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]collectorView{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			ls := map[string]string{}
			for _, lp := range m.GetLabel() {
				ls[lp.GetName()] = lp.GetValue()
			}
			v := out[ls["collector"]]
			switch mf.GetName() {
			case "fabric_collector_state_info":
				if v.state != "" {
					t.Errorf("collector %s has two state series", ls["collector"])
				}
				if m.GetGauge().GetValue() != 1 {
					t.Errorf("state series of %s = %v, want 1", ls["collector"], m.GetGauge().GetValue())
				}
				v.state, v.reason = ls["state"], ls["reason"]
			case "fabric_scrape_collector_success":
				v.success = m.GetGauge().GetValue()
			default:
				continue
			}
			out[ls["collector"]] = v
		}
	}
	for _, n := range e.Names() {
		if out[n].state == "" {
			t.Errorf("collector %s has no state series", n)
		}
	}
	return out
}

// A wrong --path.sysfs / --path.procfs (a container started without
// -v /sys:/host/sys) makes every collector that reads them source_missing
// with success 0, one warn line each with the path and the fix; when the
// paths appear the collectors recover without a restart.
func TestCollectorStatesWrongPathsRecover(t *testing.T) {
	tmp := t.TempDir()
	sys, proc := filepath.Join(tmp, "host", "sys"), filepath.Join(tmp, "host", "proc")
	rs, err := NewRails(sys, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := &Options{SysfsPath: sys, ProcfsPath: proc, Rails: rs, PFC: PFCOptions{EthtoolFixtures: "fixtures/ethtool"},
		Process: ProcessOptions{Cmdline: DefaultProcessCmdline, Max: 64, NumaMapsInterval: time.Minute}}
	var logs syncBuffer
	names := []string{"netdev", "numa", "pfc", "process", "rdma", "topology"}
	e, err := NewExporter(names, o, log.NewLogfmtLogger(&logs))
	if err != nil {
		t.Fatal(err)
	}
	for scrape := 0; scrape < 2; scrape++ {
		states := scrapeStates(t, e)
		for _, n := range names {
			v := states[n]
			path, fix := sys, "-v /sys:/host/sys:ro"
			if n == "process" {
				path, fix = proc, "-v /proc:/host/proc:ro"
			}
			if v.state != "source_missing" || v.success != 0 || !strings.Contains(v.reason, path+" does not exist") || !strings.Contains(v.reason, fix) {
				t.Errorf("scrape %d: %s = %+v, want source_missing, success 0, a reason with %s and %q", scrape, n, v, path, fix)
			}
		}
	}
	for _, n := range names {
		if got := logs.lines("level=warn", "collector="+n+" ", "state=source_missing", "path=", "fix="); len(got) != 1 {
			t.Errorf("%s: %d warn lines with path and fix after two scrapes, want 1:\n%s", n, len(got), logs.String())
		}
	}

	// An existing directory that is not a sysfs.
	if err := os.MkdirAll(sys, 0o755); err != nil {
		t.Fatal(err)
	}
	if v := scrapeStates(t, e)["rdma"]; v.state != "source_missing" || !strings.Contains(v.reason, "is not a sysfs (no class/ in it)") {
		t.Errorf("empty --path.sysfs: rdma = %+v", v)
	}
	if got := logs.lines("level=warn", "collector=rdma ", "state=source_missing"); len(got) != 2 {
		t.Errorf("the changed reason must be logged again: %d warn lines", len(got))
	}

	// The host's trees appear (the mount was fixed): every collector recovers.
	if err := os.Remove(sys); err != nil {
		t.Fatal(err)
	}
	if err := fixturetree.Copy(fixtureSys, sys); err != nil {
		t.Fatal(err)
	}
	if err := fixturetree.Copy("fixtures/proc", proc); err != nil {
		t.Fatal(err)
	}
	states := scrapeStates(t, e)
	for _, n := range names {
		if v := states[n]; v.state != "ok" || v.success != 1 || v.reason != "" {
			t.Errorf("after the paths appeared: %s = %+v, want ok", n, v)
		}
		if got := logs.lines("level=info", "collector="+n+" ", "state=ok", "previous=source_missing"); len(got) != 1 {
			t.Errorf("%s: recovery logged %d times, want once", n, len(got))
		}
	}
	if n := testCount(t, e, "fabric_rdma_port_up"); n == 0 {
		t.Error("no RDMA ports after recovery")
	}

	// A valid sysfs without RDMA hardware: no_hardware, success 1, info log.
	if err := os.RemoveAll(filepath.Join(sys, "class", "infiniband")); err != nil {
		t.Fatal(err)
	}
	if v := scrapeStates(t, e)["rdma"]; v.state != "no_hardware" || v.success != 1 || !strings.Contains(v.reason, "class/infiniband does not exist") {
		t.Errorf("no class/infiniband: rdma = %+v, want no_hardware, success 1", v)
	}
	if got := logs.lines("level=info", "collector=rdma ", "state=no_hardware"); len(got) != 1 {
		t.Errorf("no_hardware logged %d times at info, want 1", len(got))
	}
}

func testCount(t *testing.T, e *Exporter, name string) int {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(e)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

// nccl: without a log path not_configured (success 1, one info line); a glob
// that matches nothing source_missing (success 0, one warn line with the
// glob and the fix); ok once a file matches, without a restart.
func TestNCCLStates(t *testing.T) {
	var logs syncBuffer
	l := log.NewLogfmtLogger(&logs)
	e, err := NewExporter([]string{"nccl"}, &Options{ProcfsPath: "/nonexistent"}, l)
	if err != nil {
		t.Fatal(err)
	}
	if v := scrapeStates(t, e)["nccl"]; v.state != "not_configured" || v.success != 1 || v.reason != "no --collector.nccl.log-path" {
		t.Errorf("no log path: nccl = %+v", v)
	}
	scrapeStates(t, e)
	if got := logs.lines("level=info", "state=not_configured"); len(got) != 1 {
		t.Errorf("not_configured logged %d times, want once:\n%s", len(got), logs.String())
	}

	// The log directory is not there (a missing mount): source_missing.
	dir := filepath.Join(t.TempDir(), "nccl")
	glob := filepath.Join(dir, "*.log")
	o := &Options{ProcfsPath: "/nonexistent", NCCL: NCCLOptions{LogPaths: []string{glob}, PollInterval: 20 * time.Millisecond}}
	e, err = NewExporter([]string{"nccl"}, o, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	waitState(t, e, "source_missing")
	v := scrapeStates(t, e)["nccl"]
	if v.success != 0 || !strings.Contains(v.reason, glob+" matches no file") || !strings.Contains(v.reason, "NCCL_DEBUG_FILE") {
		t.Errorf("glob matching nothing: nccl = %+v", v)
	}
	if got := logs.lines("level=warn", "state=source_missing", "path="+glob, "fix="); len(got) != 1 {
		t.Errorf("source_missing logged %d times at warn, want once:\n%s", len(got), logs.String())
	}
	src, err := os.ReadFile("fixtures/nccl/" + firstNCCLFixture(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "node.1.log"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	waitState(t, e, "ok")
	if v := scrapeStates(t, e)["nccl"]; v.success != 1 || v.reason != "" {
		t.Errorf("file matching: nccl = %+v", v)
	}
}

func firstNCCLFixture(t *testing.T) string {
	ents, err := os.ReadDir("fixtures/nccl")
	if err != nil || len(ents) == 0 {
		t.Fatalf("no NCCL fixture: %v", err)
	}
	return ents[0].Name()
}

// waitState scrapes until the single collector of e reaches state.
func waitState(t *testing.T, e *Exporter, state string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, v := range scrapeStates(t, e) {
			if v.state == state {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("state %s not reached: %+v", state, e.States())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// slowCollector blocks until its context ends or release is closed.
type slowCollector struct{ release chan struct{} }

func (s slowCollector) Update(ctx context.Context, b *exposition.Batch) error {
	b.AddWith(stubFamily, 1, "slow")
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.release:
		return nil
	}
}

// ignoringCollector overruns and ignores its context.
type ignoringCollector struct{ release chan struct{} }

func (s ignoringCollector) Update(_ context.Context, b *exposition.Batch) error {
	<-s.release
	b.AddWith(stubFamily, 1, "late")
	return nil
}

// --web.scrape-timeout: a collector that overruns is reported failed
// ("deadline exceeded"), the scrape returns on time with what the others
// produced, and the collector is ok again once it is fast.
func TestScrapeTimeout(t *testing.T) {
	release := make(chan struct{})
	e := newTestExporter(100 * time.Millisecond)
	var logs syncBuffer
	l := log.NewLogfmtLogger(&logs)
	e.add("good", stubCollector{name: "good"}, l)
	e.add("ignoring", ignoringCollector{release}, l)
	e.add("slow", slowCollector{release}, l)
	begin := time.Now()
	states := scrapeStates(t, e)
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("scrape took %s with a 100ms timeout", d)
	}
	for _, n := range []string{"ignoring", "slow"} {
		if v := states[n]; v.state != "failed" || v.success != 0 || !strings.HasPrefix(v.reason, "deadline exceeded") {
			t.Errorf("%s = %+v, want failed with deadline exceeded", n, v)
		}
	}
	if v := states["good"]; v.state != "ok" || v.success != 1 {
		t.Errorf("good = %+v", v)
	}
	if n := testCount(t, e, "fabric_stub"); n < 1 {
		t.Error("the fast collector's samples are missing")
	}
	if got := logs.lines("level=error", "deadline exceeded"); len(got) < 2 {
		t.Errorf("deadline not logged at error:\n%s", logs.String())
	}
	close(release)
	// The overrunning update finishes on its own; the next scrape is ok.
	deadline := time.Now().Add(10 * time.Second)
	for {
		states = scrapeStates(t, e)
		if states["ignoring"].state == "ok" && states["slow"].state == "ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not recovered: %+v", states)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStateErrorIsNoData(t *testing.T) {
	if !errors.Is(noHardware("x"), ErrNoData) || errors.Is(&StateError{State: StateFailed}, ErrNoData) {
		t.Error("StateError and ErrNoData disagree")
	}
	long := strings.Repeat("é", 200)
	if r := boundReason(long); len(r) > maxReasonLen || !strings.HasPrefix(long, r) {
		t.Errorf("boundReason cut badly: %d bytes", len(r))
	}
}

// Collectors with per-device or per-process loops stop when the scrape's
// context ends.
func TestCollectorsHonourContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	pc, _, _ := newTestProcess(t, processOptions(t, "fixtures/proc"))
	env, _ := testEnv()
	rc, err := newRDMACollector(env, fixtureOptions(t, fixtureSys))
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]Collector{"process": pc, "rdma": rc} {
		var b exposition.Batch
		if err := c.Update(ctx, &b); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: Update with an ended context = %v, want context.Canceled", name, err)
		}
	}
}

// A scrape that says its own timeout (Prometheus's header, less the
// offset, from the handler) is bounded by it when it is below
// --web.scrape-timeout: the slow collector is marked failed and the rest
// arrives in time.
func TestScrapeTimeoutFromScrape(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	e := newTestExporter(30 * time.Second)
	l := log.NewNopLogger()
	e.add("good", stubCollector{name: "good"}, l)
	e.add("slow", slowCollector{release}, l)
	var out bytes.Buffer
	begin := time.Now()
	if err := e.WriteTextWithin(&out, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Errorf("scrape took %s with a 200ms bound of its own", d)
	}
	text := out.String()
	for _, want := range []string{
		`fabric_collector_state_info{collector="slow",reason="deadline exceeded (the scrape's X-Prometheus-Scrape-Timeout-Seconds less --web.scrape-timeout-offset: 200ms)",state="failed"} 1`,
		`fabric_collector_state_info{collector="good",reason="",state="ok"} 1`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("missing %s in\n%s", want, text)
		}
	}
	// A bound above the flag's leaves the flag's.
	if d, why := e.deadline(time.Minute); d != 30*time.Second || !strings.Contains(why, "--web.scrape-timeout 30s") {
		t.Errorf("deadline(1m) = %s %q", d, why)
	}
	e.timeout = 0
	if d, _ := e.deadline(time.Second); d != time.Second {
		t.Errorf("no flag bound: deadline(1s) = %s", d)
	}
}
