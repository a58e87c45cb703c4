package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fabric-exporter/fabric_exporter/collector"
)

// selfFamilies scrapes h twice (so that the handler's own counters have a
// sample) and returns the go_*, process_* and promhttp_* families.
func selfFamilies(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	var body string
	for range 2 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
		if w.Code != 200 {
			t.Fatalf("scrape: %d", w.Code)
		}
		body = w.Body.String()
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for name, mf := range mfs {
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") || strings.HasPrefix(name, "promhttp_") {
			out[name] = mf
		}
	}
	return out
}

// The exporter's own metrics have exactly the names and types of
// client_golang's Go and process collectors and promhttp's handler
// instrumentation, which dashboards and alerts everywhere use; help texts
// say the same (ours may add a note after client_golang's sentence).
func TestSelfMetricsMatchClientGolang(t *testing.T) {
	exp, err := collector.NewExporter(nil, &collector.Options{}, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	ours := selfFamilies(t, newMux(exp, &collector.Options{}, "/metrics", 0, true, log.NewNopLogger(), false))

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ref := selfFamilies(t, promhttp.InstrumentMetricHandler(reg, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	if len(ref) < 30 {
		t.Fatalf("client_golang reference has only %d families", len(ref))
	}
	for name, r := range ref {
		o, ok := ours[name]
		if !ok {
			t.Errorf("%s (%s) missing", name, r.GetType())
			continue
		}
		if o.GetType() != r.GetType() {
			t.Errorf("%s: type %s, client_golang %s", name, o.GetType(), r.GetType())
		}
		if o.GetHelp() != r.GetHelp() && !strings.HasPrefix(o.GetHelp(), strings.TrimSuffix(r.GetHelp(), ".")) {
			t.Errorf("%s: help %q, client_golang %q", name, o.GetHelp(), r.GetHelp())
		}
		if len(o.GetMetric()) != len(r.GetMetric()) {
			t.Errorf("%s: %d series, client_golang %d", name, len(o.GetMetric()), len(r.GetMetric()))
		}
	}
	for name, o := range ours {
		if _, ok := ref[name]; !ok {
			t.Errorf("%s (%s) is not a client_golang metric", name, o.GetType())
		}
	}
}

// --web.disable-exporter-metrics drops them all.
func TestSelfMetricsDisabled(t *testing.T) {
	exp, err := collector.NewExporter(nil, &collector.Options{}, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	if got := selfFamilies(t, newMux(exp, &collector.Options{}, "/metrics", 0, false, log.NewNopLogger(), false)); len(got) != 0 {
		t.Errorf("exporter metrics with --web.disable-exporter-metrics: %d families", len(got))
	}
}
