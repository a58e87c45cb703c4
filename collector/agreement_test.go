package collector

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fabric-exporter/fabric_exporter/internal/fakekubelet"
)

// allFixtureExporter builds an Exporter with every collector, configured
// by their own flags as `make demo` configures them (plus a kubelet
// stand-in), and waits until the followers (nccl, nccl-inspector) have
// read their fixtures, so that two scrapes in a row see the same state.
func allFixtureExporter(t *testing.T) *Exporter {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "agree")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "kubelet.sock")
	fakekubelet.Serve(t, fakekubelet.NodeFixture(), sock)
	insp := t.TempDir()
	files, _ := filepath.Glob("fixtures/nccl-inspector/*/*")
	if len(files) == 0 {
		t.Fatal("no NCCL Inspector fixtures")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(insp, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	o := &Options{}
	app := kingpin.New("agreement", "")
	var names []string
	for _, s := range Specs() {
		names = append(names, s.Name)
		if s.Flags != nil {
			s.Flags(app, o)
		}
	}
	if _, err := app.Parse([]string{
		"--collector.pfc.ethtool-fixtures=fixtures/ethtool", "--collector.phy.fixtures=fixtures/phy",
		"--collector.devlink.fixtures=fixtures/devlink",
		"--collector.kernel-events.path=../internal/kmsg/testdata/fabric.kmsg",
		"--collector.gpu.fixture=fixtures/gpu/dcgm-8gpu.json", "--collector.kubernetes.pod-resources-socket=" + sock,
		"--collector.nccl.log-path=fixtures/nccl/*.log", "--collector.nccl.retention=0",
		"--collector.nccl-inspector.dump-dir=" + insp, "--collector.nccl-inspector.retention=0",
		"--collector.nccl-ras.address=" + newFakeRAS(t, true, "2.28.9-json-killed.txt", "").Addr(),
		"--collector.process.rdma-qp-fixture=" + fixtureQPs,
	}); err != nil {
		t.Fatal(err)
	}
	rails, err := NewRails(fixtureSys, nil)
	if err != nil {
		t.Fatal(err)
	}
	o.SysfsPath, o.ProcfsPath, o.RootfsPath, o.Rails = fixtureSys, fixtureProc, "/", rails
	e, err := NewExporter(names, o, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var buf bytes.Buffer
		if err := e.WriteText(&buf); err != nil {
			t.Fatal(err)
		}
		s := buf.String()
		if strings.Contains(s, "\nfabric_nccl_log_backlog_bytes 0\n") && strings.Contains(s, "\nfabric_nccl_inspector_lines_total 400\n") &&
			strings.Contains(s, `fabric_collector_state_info{collector="kubernetes",reason="",state="ok"}`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the followers did not read the fixtures:\n%s", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return e
}

// The fast text writer and the client_golang path (Collect -> registry ->
// expfmt) must describe the same metrics for every collector: same
// families, help, types, label sets and values. Every collector must be in
// state ok, so that none is compared on an empty output.
func TestTextMatchesClientGolang(t *testing.T) {
	e := allFixtureExporter(t)
	var buf bytes.Buffer
	if err := e.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fast, err := parser.TextToMetricFamilies(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("parsing our own text output: %v\n%s", err, buf.String())
	}
	for _, s := range Specs() {
		if want := fmt.Sprintf(`fabric_collector_state_info{collector=%q,reason="",state="ok"} 1`, s.Name); !strings.Contains(buf.String(), want) {
			t.Errorf("collector %s is not ok on the fixtures, so its output is not compared:\n%s", s.Name, strings.Join(grepLines(buf.String(), "fabric_collector_state_info"), "\n"))
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != len(fast) {
		t.Errorf("families: client_golang %d, text %d", len(mfs), len(fast))
	}
	prefixes := map[string]int{}
	render := func(mf *dto.MetricFamily) []string {
		var out []string
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(ls)
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue() + m.GetUntyped().GetValue()
			out = append(out, fmt.Sprintf("%s %v", strings.Join(ls, ","), v))
		}
		sort.Strings(out)
		return out
	}
	for _, want := range mfs {
		name := want.GetName()
		if f := strings.SplitN(name, "_", 3); len(f) == 3 {
			prefixes[f[1]]++
		}
		got, ok := fast[name]
		if !ok {
			t.Errorf("family %s missing from text output", name)
			continue
		}
		if got.GetHelp() != want.GetHelp() || got.GetType() != want.GetType() {
			t.Errorf("%s: help/type %q/%v, want %q/%v", name, got.GetHelp(), got.GetType(), want.GetHelp(), want.GetType())
		}
		switch name {
		case "fabric_scrape_collector_duration_seconds", // differs between the two scrapes
			"fabric_nccl_ras_query_duration_seconds", // each scrape asks RAS again (--collector.nccl-ras.scrape-wait)
			"fabric_nccl_ras_answer_age_seconds",     // the time since the last poll
			"fabric_scrape_read_errors_total":        // advances by one scrape between the two runs
			continue
		}
		if g, w := strings.Join(render(got), "\n"), strings.Join(render(want), "\n"); g != w {
			t.Errorf("%s differs:\ntext:\n%s\nclient_golang:\n%s", name, g, w)
		}
	}
	// Every collector's families were compared (a name prefix per
	// collector: fabric_rdma_…, fabric_nccl_…, …).
	for _, p := range []string{"rdma", "netdev", "pfc", "numa", "topology", "process", "gpu", "nccl", "pcie", "transceiver", "kubernetes"} {
		if prefixes[p] == 0 {
			t.Errorf("no fabric_%s_* family compared", p)
		}
	}
}
