package collector

import (
	"context"
	"strings"
	"testing"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

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
	var b Batch
	err := u.c.Update(context.Background(), &b)
	if u.err != nil {
		*u.err = err
	}
	constMetrics(&b, ch)
}

// testEnv returns an Env whose read-error counter can be inspected.
func testEnv() (Env, *Counter) {
	ctr := &Counter{}
	l := log.NewNopLogger()
	return Env{Logger: l, ReadErrors: ctr, Once: NewOnceLogger(l, 1024)}, ctr
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

// scrapeSamples runs c once and returns the label sets of the samples of
// the family name.
func scrapeSamples(t testing.TB, c Collector, name string) []map[string]string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(updater{c: c})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for _, mf := range mfs {
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
