package analyze

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// Metric names the analysis reads.
const (
	MetricTxBytes     = "fabric_rdma_port_transmitted_bytes_total"
	MetricRxBytes     = "fabric_rdma_port_received_bytes_total"
	MetricPortInfo    = "fabric_rdma_port_info"
	MetricPromptToken = "sglang:prompt_tokens_total"
)

// QueryOptions select the series.
type QueryOptions struct {
	// ExporterSelector is a label matcher list (without braces) for the
	// exporter's series, e.g. `job="fabric"`.
	ExporterSelector string
	// SGLangSelector selects SGLang's series, e.g. `job="sglang"`.
	SGLangSelector string
	// Timeout bounds each query.
	Timeout time.Duration
}

// RailKey names a rail of one node.
type RailKey struct{ Instance, Rail string }

func (k RailKey) String() string { return k.Instance + "/" + k.Rail }

// RailBytes is what a rail moved during a window.
type RailBytes struct{ Tx, Rx float64 }

// Measurement is what Prometheus says about one window.
type Measurement struct {
	Window
	// InputTokens is the increase of sglang:prompt_tokens_total, summed over
	// the selected SGLang series.
	InputTokens float64
	Rails       map[RailKey]RailBytes
}

// Seconds is the window length in seconds.
func (m Measurement) Seconds() float64 { return m.Duration().Seconds() }

// InputTPS is input tokens per second over the window.
func (m Measurement) InputTPS() float64 { return m.InputTokens / m.Seconds() }

// Prometheus queries a Prometheus server.
type Prometheus struct {
	URL  string
	api  v1.API
	opts QueryOptions
}

// NewPrometheus checks the URL and builds a client; it does not connect.
func NewPrometheus(rawURL string, opts QueryOptions) (*Prometheus, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("Prometheus URL %q: want http(s)://host:port[/path]", rawURL)
	}
	c, err := api.NewClient(api.Config{Address: rawURL})
	if err != nil {
		return nil, fmt.Errorf("Prometheus URL %q: %w", rawURL, err)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	return &Prometheus{URL: rawURL, api: v1.NewAPI(c), opts: opts}, nil
}

// Ping runs a trivial query, so that an unreachable server is reported
// once and clearly.
func (p *Prometheus) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	if _, _, _, err := p.api.Query(ctx, "1", time.Now()); err != nil {
		return fmt.Errorf("cannot reach Prometheus at %s: %w", p.URL, err)
	}
	return nil
}

func (p *Prometheus) vector(ctx context.Context, q string, t time.Time) (model.Vector, error) {
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	v, _, _, err := p.api.Query(ctx, q, t, v1.WithTimeout(p.opts.Timeout))
	if err != nil {
		var apiErr *v1.Error
		if !errors.As(err, &apiErr) {
			return nil, fmt.Errorf("cannot reach Prometheus at %s: %w", p.URL, err)
		}
		return nil, fmt.Errorf("query %s: %w", q, err)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("query %s: got %s, want a vector", q, v.Type())
	}
	return vec, nil
}

// sel joins label matchers into a selector body.
func sel(matchers ...string) string {
	var parts []string
	for _, m := range matchers {
		if m = strings.TrimSpace(m); m != "" {
			parts = append(parts, m)
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// promDuration renders d as a PromQL range in milliseconds.
func promDuration(d time.Duration) string {
	return fmt.Sprintf("%dms", d.Round(time.Millisecond).Milliseconds())
}

// Queries returns the PromQL the analysis runs for a window of length d
// (evaluated at the window's end), by purpose.
func (o QueryOptions) Queries(d time.Duration) map[string]string {
	r := promDuration(d)
	ex := sel(o.ExporterSelector)
	info := MetricPortInfo + sel(o.ExporterSelector, `rail!=""`)
	perRail := func(metric string) string {
		return fmt.Sprintf("sum by (instance, rail) (increase(%s%s[%s]) * on (instance, device, port) group_left (rail) %s)", metric, ex, r, info)
	}
	resets := func(metric string) string {
		return fmt.Sprintf("resets(%s%s[%s]) * on (instance, device, port) group_left (rail) %s > 0", metric, ex, r, info)
	}
	sg := sel(o.SGLangSelector)
	return map[string]string{
		"tx":          perRail(MetricTxBytes),
		"rx":          perRail(MetricRxBytes),
		"tokens":      fmt.Sprintf("sum(increase(%s%s[%s]))", MetricPromptToken, sg, r),
		"tx_resets":   resets(MetricTxBytes),
		"rx_resets":   resets(MetricRxBytes),
		"sglang_rsts": fmt.Sprintf("resets(%s%s[%s]) > 0", MetricPromptToken, sg, r),
		"tx_samples":  fmt.Sprintf("count(count_over_time(%s%s[%s]))", MetricTxBytes, ex, r),
		"rails":       fmt.Sprintf("count(last_over_time(%s[%s]))", info, r),
		"sg_samples":  fmt.Sprintf("count(count_over_time(%s%s[%s]))", MetricPromptToken, sg, r),
	}
}

// windowErr names the window in an error.
func windowErr(w Window, format string, args ...any) error {
	return fmt.Errorf("window %q (C=%d, %s to %s, %s): %s", w.Name, w.Concurrency,
		w.Start.Format(time.RFC3339), w.End.Format(time.RFC3339), w.Source, fmt.Sprintf(format, args...))
}

// Measure queries every window of the sweep.
func (p *Prometheus) Measure(ctx context.Context, sw *Sweep) ([]Measurement, error) {
	if err := p.Ping(ctx); err != nil {
		return nil, err
	}
	out := make([]Measurement, 0, len(sw.Windows))
	for _, w := range sw.Windows {
		m, err := p.measure(ctx, w)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

func (p *Prometheus) measure(ctx context.Context, w Window) (Measurement, error) {
	q := p.opts.Queries(w.Duration())
	t := w.End
	m := Measurement{Window: w, Rails: map[RailKey]RailBytes{}}

	// Counter resets inside the window: increase() would paper over them,
	// but a restarted exporter, HCA or SGLang means the run is suspect.
	for _, c := range []struct{ key, metric string }{{"tx_resets", MetricTxBytes}, {"rx_resets", MetricRxBytes}, {"sglang_rsts", MetricPromptToken}} {
		v, err := p.vector(ctx, q[c.key], t)
		if err != nil {
			return m, windowErr(w, "%v", err)
		}
		if len(v) > 0 {
			var series []string
			for _, s := range v {
				series = append(series, c.metric+seriesLabels(s.Metric))
			}
			sort.Strings(series)
			return m, windowErr(w, "counter reset inside the window (restarted exporter, driver or SGLang?): %s; re-run this point or shorten the window", strings.Join(series, ", "))
		}
	}

	for _, dir := range []string{"tx", "rx"} {
		v, err := p.vector(ctx, q[dir], t)
		if err != nil {
			return m, windowErr(w, "%v", err)
		}
		if len(v) == 0 {
			return m, p.noRailData(ctx, w, q, dir)
		}
		for _, s := range v {
			k := RailKey{Instance: string(s.Metric["instance"]), Rail: string(s.Metric["rail"])}
			rb := m.Rails[k]
			if dir == "tx" {
				rb.Tx = float64(s.Value)
			} else {
				rb.Rx = float64(s.Value)
			}
			m.Rails[k] = rb
		}
	}

	v, err := p.vector(ctx, q["tokens"], t)
	if err != nil {
		return m, windowErr(w, "%v", err)
	}
	if len(v) == 0 {
		n, _ := p.vector(ctx, q["sg_samples"], t)
		if len(n) == 0 {
			return m, windowErr(w, "no samples of %s%s in the window (check --selector.sglang and the window's times)", MetricPromptToken, sel(p.opts.SGLangSelector))
		}
		return m, windowErr(w, "%s%s has fewer than two samples in the window (window shorter than the scrape interval?)", MetricPromptToken, sel(p.opts.SGLangSelector))
	}
	m.InputTokens = float64(v[0].Value)
	if !(m.InputTokens > 0) {
		return m, windowErr(w, "%s%s did not increase: no input tokens were processed in the window", MetricPromptToken, sel(p.opts.SGLangSelector))
	}
	return m, nil
}

// noRailData explains an empty per-rail result.
func (p *Prometheus) noRailData(ctx context.Context, w Window, q map[string]string, dir string) error {
	metric := MetricTxBytes
	if dir == "rx" {
		metric = MetricRxBytes
	}
	if n, err := p.vector(ctx, q["tx_samples"], w.End); err == nil && len(n) == 0 {
		return windowErr(w, "no data: no samples of %s%s in the window (wrong times or --selector.exporter? was the exporter scraped then?)", MetricTxBytes, sel(p.opts.ExporterSelector))
	}
	if n, err := p.vector(ctx, q["rails"], w.End); err == nil && len(n) == 0 {
		return windowErr(w, "no data: no %s%s in the window: the exporter reported no rails", MetricPortInfo, sel(p.opts.ExporterSelector, `rail!=""`))
	}
	return windowErr(w, "no data: %s%s has fewer than two samples per rail port in the window (window shorter than the scrape interval?)", metric, sel(p.opts.ExporterSelector))
}

func seriesLabels(m model.Metric) string {
	var names []string
	for n := range m {
		if n != model.MetricNameLabel {
			names = append(names, string(n))
		}
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%q", n, string(m[model.LabelName(n)]))
	}
	b.WriteByte('}')
	return b.String()
}
