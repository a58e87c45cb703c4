package collector

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/fixturetree"
)

const fixtureSys = "fixtures/sys"

// updater adapts a Collector to prometheus.Collector for testutil.
type updater struct {
	c   Collector
	err *error
}

func (u updater) Describe(chan<- *prometheus.Desc) {}
func (u updater) Collect(ch chan<- prometheus.Metric) {
	var b exposition.Batch
	err := u.c.Update(context.Background(), &b)
	if u.err != nil {
		*u.err = err
	}
	b.Collect(ch)
}

// testFamilies is the registry of the tests' collectors.
var testFamilies = exposition.NewRegistry()

// updateValues runs one Update of c and returns "family{values}" -> value
// (label values in the family's label order).
func updateValues(t testing.TB, c Collector) map[string]float64 {
	t.Helper()
	var b exposition.Batch
	if err := c.Update(t.Context(), &b); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for s, v := range b.All() {
		out[s.Family().Name()+"{"+strings.Join(s.Values(), ",")+"}"] = v
	}
	return out
}

// newTestExporter returns an Exporter without collectors (add them with
// add), its families in testFamilies.
func newTestExporter(timeout time.Duration) *Exporter {
	return &Exporter{logger: log.NewNopLogger(), timeout: timeout, families: testFamilies}
}

// add appends a collector to a test Exporter.
func (e *Exporter) add(name string, c Collector, l log.Logger) {
	e.collectors = append(e.collectors, newNamedCollector(name, c, l, newExporterFamilies(e.families)))
}

// testEnv returns an Env whose read-error counter can be inspected.
func testEnv() (Env, *exposition.Counter) {
	ctr := &exposition.Counter{}
	l := log.NewNopLogger()
	return Env{Logger: l, Families: testFamilies, ReadErrors: ctr, Once: NewOnceLogger(l, 1024)}, ctr
}

// fixtureOptions returns Options for a sysfs tree with default rails.
func fixtureOptions(t testing.TB, sysfs string, rails ...string) *Options {
	t.Helper()
	var cfgs []RailConfig
	for _, r := range rails {
		rc, err := ParseRail(r)
		if err != nil {
			t.Fatal(err)
		}
		cfgs = append(cfgs, rc)
	}
	rs, err := NewRails(sysfs, cfgs)
	if err != nil {
		t.Fatal(err)
	}
	return &Options{SysfsPath: sysfs, Rails: rs, PFC: PFCOptions{EthtoolFixtures: "fixtures/ethtool"}}
}

// compare runs c once and compares the named metrics with want.
func compare(t testing.TB, c Collector, want string, names ...string) {
	t.Helper()
	var err error
	if cerr := testutil.CollectAndCompare(updater{c: c, err: &err}, strings.NewReader(want), names...); cerr != nil {
		t.Error(cerr)
	}
	if err != nil {
		t.Errorf("Update: %v", err)
	}
}

// copyTree copies a fixture tree (files, dirs, symlinks) to a temp dir.
func copyTree(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	if err := fixturetree.Copy(src, dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

// gather runs c once through client_golang and returns its families.
func gather(t testing.TB, c Collector) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(updater{c: c})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// scrapeSamples runs c once and returns the label sets of the samples of
// the family name.
func scrapeSamples(t testing.TB, c Collector, name string) []map[string]string {
	t.Helper()
	var out []map[string]string
	for _, mf := range gather(t, c) {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			ls := map[string]string{}
			for _, lp := range m.GetLabel() {
				ls[lp.GetName()] = lp.GetValue()
			}
			out = append(out, ls)
		}
	}
	return out
}
