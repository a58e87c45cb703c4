package collector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

type stubCollector struct {
	name string
	err  error
}

var stubFamily = testFamilies.NewFamily("fabric_stub", "stub", prometheus.GaugeValue, "name")

func (s stubCollector) Update(_ context.Context, b *exposition.Batch) error {
	b.AddWith(stubFamily, 1, s.name)
	return s.err
}

// One failing collector never blanks the scrape: its success is 0, the
// others still report.
func TestExporterIsolatesCollectors(t *testing.T) {
	e := newTestExporter(0)
	for _, s := range []stubCollector{{"bad", errors.New("boom")}, {"absent", ErrNoData}, {name: "good"}} {
		e.add(s.name, s, log.NewNopLogger())
	}
	err := testutil.CollectAndCompare(e, strings.NewReader(`
# HELP fabric_scrape_collector_success 1 if the collector worked in this scrape (state ok, not_configured or no_hardware), 0 if it failed or a configured source is missing (state failed or source_missing; see fabric_collector_state_info).
# TYPE fabric_scrape_collector_success gauge
fabric_scrape_collector_success{collector="absent"} 1
fabric_scrape_collector_success{collector="bad"} 0
fabric_scrape_collector_success{collector="good"} 1
# HELP fabric_collector_state_info The state of each enabled collector in this scrape (ok, not_configured, no_hardware, source_missing, failed) and why ("" when ok).
# TYPE fabric_collector_state_info gauge
fabric_collector_state_info{collector="absent",reason="collector returned no data",state="no_hardware"} 1
fabric_collector_state_info{collector="bad",reason="boom",state="failed"} 1
fabric_collector_state_info{collector="good",reason="",state="ok"} 1
`), "fabric_scrape_collector_success", "fabric_collector_state_info")
	if err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(e, "fabric_scrape_collector_duration_seconds"); n != 3 {
		t.Errorf("duration series = %d, want 3", n)
	}
	if n := testutil.CollectAndCount(e, "fabric_stub"); n != 3 {
		t.Errorf("metrics of the collectors = %d, want 3 (a failing collector keeps what it sent)", n)
	}
}

func TestNewExporterOnFixture(t *testing.T) {
	o := fixtureOptions(t, fixtureSys)
	e, err := NewExporter([]string{"rdma", "netdev", "pfc"}, o, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(e.Names(), ","); got != "netdev,pfc,rdma" {
		t.Errorf("names = %s", got)
	}
	if _, err := NewExporter([]string{"nope"}, o, log.NewNopLogger()); err == nil {
		t.Error("unknown collector accepted")
	}
	// Concurrent scrapes are safe (run with -race).
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 5 {
				if n := testutil.CollectAndCount(e, "fabric_rdma_port_up"); n != 5 {
					t.Errorf("port_up series = %d, want 5", n)
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
}

func TestFilter(t *testing.T) {
	if _, err := NewFilter("a", "b"); err == nil {
		t.Error("include and exclude together accepted")
	}
	if _, err := NewFilter("(", ""); err == nil {
		t.Error("bad regexp accepted")
	}
	f, _ := NewFilter("mlx5_.*", "")
	if f.Ignored("mlx5_0") || !f.Ignored("mlx4_0") || !f.Ignored("xmlx5_0") {
		t.Error("include filter is wrong (anchored match expected)")
	}
	f, _ = NewFilter("", "lo|docker.*")
	if !f.Ignored("docker0") || f.Ignored("eth0") {
		t.Error("exclude filter is wrong")
	}
}

func TestOnceLogger(t *testing.T) {
	var buf bytes.Buffer
	o := NewOnceLogger(log.NewLogfmtLogger(&buf), 2)
	o.Debug("a", "msg", "first")
	o.Debug("a", "msg", "again")
	if n := strings.Count(buf.String(), "msg="); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, buf.String())
	}
	o.Clear("a")
	o.Debug("a", "msg", "after recovery")
	if n := strings.Count(buf.String(), "msg="); n != 2 {
		t.Errorf("after Clear: logged %d times, want 2", n)
	}
	// Beyond max keys every message is logged (nothing is remembered).
	o.Debug("b", "msg", "b")
	o.Debug("c", "msg", "c")
	o.Debug("c", "msg", "c")
	if n := strings.Count(buf.String(), "msg=c"); n != 2 {
		t.Errorf("over the bound: %d lines for c, want 2", n)
	}
}

// hw_counters names come from firmware: a port with more files than
// maxDynamicNames gets that many families and no panic.
func TestRDMADynamicNamesBound(t *testing.T) {
	root := t.TempDir()
	port := filepath.Join(root, "class", "infiniband", "hostile0", "ports", "1")
	testenv.WriteFile(t, filepath.Join(port, "link_layer"), "Ethernet\n")
	for i := range maxDynamicNames + 100 {
		testenv.WriteFile(t, filepath.Join(port, "hw_counters", fmt.Sprintf("c%04d", i)), "1\n")
	}
	c, _ := newTestRDMA(t, fixtureOptions(t, root))
	var b exposition.Batch
	if err := c.Update(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	if len(c.names) != maxDynamicNames {
		t.Errorf("dynamic names = %d, want %d", len(c.names), maxDynamicNames)
	}
}
