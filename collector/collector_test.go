package collector

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type stubCollector struct {
	name string
	err  error
}

func (s stubCollector) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("fabric_stub", "stub", []string{"name"}, nil), prometheus.GaugeValue, 1, s.name)
	return s.err
}

// One failing collector never blanks the scrape: its success is 0, the
// others still report.
func TestExporterIsolatesCollectors(t *testing.T) {
	e := &Exporter{logger: log.NewNopLogger(), readErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fabric_scrape_read_errors_total", Help: "h"}, []string{"collector"})}
	e.collectors = []*namedCollector{
		{name: "bad", c: stubCollector{"bad", errors.New("boom")}},
		{name: "absent", c: stubCollector{"absent", ErrNoData}},
		{name: "good", c: stubCollector{name: "good"}},
	}
	err := testutil.CollectAndCompare(e, strings.NewReader(`
# HELP fabric_scrape_collector_success 1 if the collector's update succeeded in this scrape, 0 if it failed or its source is absent on this host.
# TYPE fabric_scrape_collector_success gauge
fabric_scrape_collector_success{collector="absent"} 0
fabric_scrape_collector_success{collector="bad"} 0
fabric_scrape_collector_success{collector="good"} 1
`), "fabric_scrape_collector_success")
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
