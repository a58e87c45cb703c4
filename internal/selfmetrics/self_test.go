package selfmetrics

import (
	"bytes"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
)

// batchCollector sends a batch through client_golang.
type batchCollector struct{ b *exposition.Batch }

func (batchCollector) Describe(chan<- *prometheus.Desc)      {}
func (c batchCollector) Collect(ch chan<- prometheus.Metric) { c.b.Collect(ch) }

func TestParseNetDev(t *testing.T) {
	in := []byte(`Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0
  eth0: 2195783498134 1 0 0 0 0 0 0 352713922 2 0 0 0 0 0 0
`)
	rx, tx, err := parseNetDev(in)
	if err != nil || rx != 2195783499134 || tx != 352714922 {
		t.Errorf("parseNetDev = %v, %v, %v", rx, tx, err)
	}
	if _, _, err := parseNetDev([]byte("  eth0: 1 2 3\n")); err == nil {
		t.Error("short line accepted")
	}
}

// The self metrics' summary (go_gc_duration_seconds) comes out the same
// through the text writer and through Collect.
func TestSelfMetricsSummaryBothPaths(t *testing.T) {
	r := exposition.NewRegistry()
	sm := New(r, "/proc")
	var b exposition.Batch
	sm.Add(&b)
	var buf bytes.Buffer
	if err := r.WriteText(&buf, []*exposition.Batch{&b}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# TYPE go_gc_duration_seconds summary\n", `go_gc_duration_seconds{quantile="0.5"} `, "\ngo_gc_duration_seconds_sum ", "\ngo_gc_duration_seconds_count "} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("text lacks %q", want)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(batchCollector{&b})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "go_gc_duration_seconds" {
			found = mf.GetType().String() == "SUMMARY" && len(mf.GetMetric()[0].GetSummary().GetQuantile()) == 5
		}
	}
	if !found {
		t.Error("Collect lacks the go_gc_duration_seconds summary with 5 quantiles")
	}
}
