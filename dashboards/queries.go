package dashboards

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"

	"github.com/fabric-exporter/fabric_exporter/alerts"
)

// Query is one PromQL expression of a dashboard: a panel target or an
// annotation.
type Query struct {
	Dashboard string // dashboard title, e.g. "Fabric overview"
	UID       string // dashboard UID, e.g. "fabric-overview"
	Panel     string // panel title; "annotation: <name>" for annotations
	RefID     string // the target's refId within the panel (A, B, …)
	Template  string // the expression as stored in the dashboard, with $variables
	Expr      string // Template with DefaultValues substituted: plain PromQL
	Instant   bool   // an instant query (tables); otherwise a range query
}

// DefaultValues are the values Queries substitutes for the dashboard
// variables: every cluster, instance, rail and GPU, and the interval
// variables Grafana would set for the default 15-minute range.
func DefaultValues() map[string]string {
	return map[string]string{
		"cluster":         ".*",
		"instance":        ".*",
		"rail":            ".*",
		"gpu":             ".*",
		"__rate_interval": "1m",
		"__interval":      "5s",
		"__range":         "15m",
	}
}

// varRef matches $name and ${name}.
var varRef = regexp.MustCompile(`\$(?:\{(\w+)\}|(\w+))`)

// Expand substitutes values for the variables ($name or ${name}) in a
// dashboard expression. A variable without a value is an error.
func Expand(template string, values map[string]string) (string, error) {
	var missing []string
	out := varRef.ReplaceAllStringFunc(template, func(ref string) string {
		m := varRef.FindStringSubmatch(ref)
		name := m[1] + m[2]
		v, ok := values[name]
		if !ok {
			missing = append(missing, name)
			return ref
		}
		return v
	})
	if len(missing) > 0 {
		sort.Strings(missing)
		return out, fmt.Errorf("no value for $%s in %q", strings.Join(missing, ", $"), template)
	}
	return out, nil
}

// Queries returns every PromQL expression of every dashboard (panel targets
// in layout order, then the Prometheus annotations), with DefaultValues
// substituted in Expr. Use Expand on Template for other values.
//
// The result is the same as what the committed JSON holds (a test checks
// it); it panics only if the dashboards fail to build, which the tests catch.
func Queries() []Query {
	qs, err := queries(alerts.DefaultConfig(), DefaultValues())
	if err != nil {
		panic(err)
	}
	return qs
}

func queries(c alerts.Config, values map[string]string) ([]Query, error) {
	var out []Query
	add := func(d dashboard.Dashboard, panel string, t any) error {
		q, ok := t.(prometheus.Dataquery)
		if !ok {
			return fmt.Errorf("%s / %s: target of type %T, not Prometheus", *d.Title, panel, t)
		}
		expr, err := Expand(q.Expr, values)
		if err != nil {
			return fmt.Errorf("%s / %s: %w", *d.Title, panel, err)
		}
		out = append(out, Query{
			Dashboard: *d.Title, UID: *d.Uid, Panel: panel, RefID: deref(q.RefId),
			Template: q.Expr, Expr: expr, Instant: q.Instant != nil && *q.Instant,
		})
		return nil
	}
	for _, s := range specs {
		d, err := s.Build(c)
		if err != nil {
			return nil, err
		}
		for _, p := range d.Panels {
			if p.Panel == nil {
				continue
			}
			for _, t := range p.Panel.Targets {
				if err := add(d, deref(p.Panel.Title), t); err != nil {
					return nil, err
				}
			}
		}
		for _, a := range d.Annotations.List {
			if a.Expr == nil {
				continue // Grafana's built-in annotations
			}
			if err := add(d, "annotation: "+a.Name, a.Target); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
