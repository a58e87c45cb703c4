// What the long view (-backfill, backfill.go) gives promtool: the fleet's
// history as OpenMetrics, and the recording rules cut into passes by the
// level of the records they read.

package main

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// writeOpenMetrics writes span of every node's series at interval, ending
// at end, one metric family after another (OpenMetrics keeps a family's
// samples together) and every series' samples in time order, with the
// labels a scrape adds (cluster, instance, job) and up. Values move as the
// served fleet's do (fleet.go): counters by rate·Δt·U(0.8,1.2), gauges
// ±10 % around their template value.
//
// Nodes from index full on get one sample per series, at the last step:
// the index of a larger fleet (every series a real server holds, so the
// one-node queries look their node up among all of them) at the cost of
// one sample each.
func writeOpenMetrics(path string, f *fleet, full int, end time.Time, span, interval time.Duration) (int64, error) {
	out, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer out.Close()
	w := bufio.NewWriterSize(out, 1<<20)
	// The families in the order they first appear on any node.
	var families []string
	seen := map[string]bool{}
	for _, name := range f.names {
		for _, s := range f.nodes[name].series {
			if !seen[s.name] {
				seen[s.name] = true
				families = append(families, s.name)
			}
		}
	}
	steps := int(span / interval)
	start := end.Add(-time.Duration(steps) * interval)
	var n int64
	var b []byte
	emit := func(prefix string, from int, value func(int) float64) {
		for k := from; k < steps; k++ {
			b = append(b[:0], prefix...)
			b = strconv.AppendFloat(b, value(k), 'g', -1, 64)
			b = append(b, ' ')
			b = strconv.AppendInt(b, start.Add(time.Duration(k)*interval).Unix(), 10)
			b = append(b, '\n')
			w.Write(b)
		}
		n += int64(steps - from)
	}
	dt := interval.Seconds()
	for _, fam := range families {
		for i, name := range f.names {
			nd := f.nodes[name]
			from := 0
			if i >= full {
				from = steps - 1
			}
			for _, s := range nd.series {
				if s.name != fam {
					continue
				}
				extra := fmt.Sprintf(`cluster="fleet",instance=%q,job="fabric"`, name)
				lbl := "{" + extra + "}"
				if s.labels != "" {
					lbl = "{" + extra + "," + s.labels[1:]
				}
				v := s.value
				emit(s.name+lbl+" ", from, func(int) float64 {
					switch {
					case s.rate > 0:
						v += s.rate * dt * (0.8 + 0.4*nd.rnd.Float64())
						return v
					case s.gauge:
						return s.value * (0.9 + 0.2*nd.rnd.Float64())
					}
					return s.value
				})
			}
		}
	}
	for i, name := range f.names {
		from := 0
		if i >= full {
			from = steps - 1
		}
		emit(fmt.Sprintf(`up{cluster="fleet",instance=%q,job="fabric"} `, name), from, func(int) float64 { return 1 })
	}
	w.WriteString("# EOF\n")
	if err := w.Flush(); err != nil {
		return n, err
	}
	return n, out.Close()
}

type ruleDoc struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval,omitempty"`
		Rules    []struct {
			Record string            `yaml:"record,omitempty"`
			Alert  string            `yaml:"alert,omitempty"`
			Expr   string            `yaml:"expr"`
			Labels map[string]string `yaml:"labels,omitempty"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// recordPasses splits a rules file's recording rules by level: level 0
// reads only raw series, level k reads a record of level k-1 (and none
// higher). `promtool tsdb create-blocks-from rules` evaluates every rule
// against the server's data, so a record that reads another record gets
// data only once that record's blocks are in: one pass per level, in
// order. Alerts are left out (their state is not stored as blocks). Each
// pass is a rules file's text, its groups keeping name and interval.
func recordPasses(b []byte) ([][]byte, int, error) {
	var doc ruleDoc
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, 0, err
	}
	level := map[string]int{}
	var names []string
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r.Record != "" && level[r.Record] == 0 {
				level[r.Record] = -1 // not computed
				names = append(names, r.Record)
			}
		}
	}
	uses := map[string][]string{}
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r.Record == "" {
				continue
			}
			for _, other := range names {
				if other != r.Record && refersTo(r.Expr, other) {
					uses[r.Record] = append(uses[r.Record], other)
				}
			}
		}
	}
	var depth func(string, int) (int, error)
	depth = func(r string, guard int) (int, error) {
		if guard > len(names) {
			return 0, fmt.Errorf("records read each other in a cycle through %s", r)
		}
		if level[r] >= 0 {
			return level[r], nil
		}
		d := 0
		for _, u := range uses[r] {
			du, err := depth(u, guard+1)
			if err != nil {
				return 0, err
			}
			d = max(d, du+1)
		}
		level[r] = d
		return d, nil
	}
	top := 0
	for _, r := range names {
		d, err := depth(r, 0)
		if err != nil {
			return nil, 0, err
		}
		top = max(top, d)
	}
	var passes [][]byte
	for d := 0; d <= top; d++ {
		var pass ruleDoc
		for _, g := range doc.Groups {
			ng := g
			ng.Rules = nil
			for _, r := range g.Rules {
				if r.Record != "" && level[r.Record] == d {
					ng.Rules = append(ng.Rules, r)
				}
			}
			if len(ng.Rules) > 0 {
				pass.Groups = append(pass.Groups, ng)
			}
		}
		out, err := yaml.Marshal(pass)
		if err != nil {
			return nil, 0, err
		}
		passes = append(passes, out)
	}
	return passes, len(names), nil
}

// refersTo: expr names the series name (as a whole name, not a part of a
// longer one).
func refersTo(expr, name string) bool {
	re := regexp.MustCompile(`(^|[^a-zA-Z0-9_:])` + regexp.QuoteMeta(name) + `($|[^a-zA-Z0-9_:])`)
	return re.MatchString(expr)
}
