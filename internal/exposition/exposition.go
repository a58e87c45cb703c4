// Package exposition holds metric families, series and batches, and writes
// them in the Prometheus text format.
//
// A collector declares its metric families once in a Registry, binds label
// values to a Series once per device (the series caches its rendered name
// and labels), and on each scrape adds (series, value) samples to a Batch.
// The exporter then writes the batches straight to the text exposition
// format (Registry.WriteText), or turns them into client_golang const
// metrics (Batch.Collect) for tests and embedding. Both outputs come from
// the same samples; the collector package's agreement test checks that
// they parse to the same families for every collector.
package exposition

import (
	"fmt"
	"io"
	"iter"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// Family is one metric family: name, help, type and label names.
type Family struct {
	name, help string
	typ        prometheus.ValueType
	labels     []string
	sorted     []int  // label indexes in name order, as the text format is written
	header     []byte // "# HELP …\n# TYPE …\n"
	desc       *prometheus.Desc
	summary    bool // a summary: series by quantile, plus _sum and _count
}

// Name returns the family's metric name.
func (f *Family) Name() string { return f.name }

// maxFamilies bounds the number of distinct families a registry holds
// (hw_counters names come from firmware and are not a fixed list).
const maxFamilies = 4096

// Registry is the set of families of one exporter: it deduplicates
// declarations and orders families by name for writing. It is safe for
// concurrent use.
type Registry struct {
	mu     sync.Mutex
	byName map[string]*Family
	order  atomic.Pointer[familyOrder] // families sorted by name, for writing
}

type familyOrder struct {
	rank map[*Family]int
	n    int
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	r := &Registry{byName: map[string]*Family{}}
	r.order.Store(&familyOrder{rank: map[*Family]int{}})
	return r
}

// NewFamily returns the family of that name, creating it on first use. A
// second declaration must match the first (a programming error otherwise).
// It returns nil once maxFamilies distinct families exist.
func (r *Registry) NewFamily(name, help string, typ prometheus.ValueType, labels ...string) *Family {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.byName[name]; ok {
		if f.typ != typ || strings.Join(f.labels, ",") != strings.Join(labels, ",") {
			panic(fmt.Sprintf("metric family %s declared twice with different type or labels", name))
		}
		return f
	}
	if len(r.byName) >= maxFamilies {
		return nil
	}
	typName := "gauge"
	if typ == prometheus.CounterValue {
		typName = "counter"
	}
	f := &Family{
		name: name, help: help, typ: typ, labels: labels,
		header: fmt.Appendf(nil, "# HELP %s %s\n# TYPE %s %s\n", name, escapeHelp(help), name, typName),
		desc:   prometheus.NewDesc(name, help, labels, nil),
	}
	f.sorted = make([]int, len(labels))
	for i := range f.sorted {
		f.sorted[i] = i
	}
	sort.Slice(f.sorted, func(i, j int) bool { return labels[f.sorted[i]] < labels[f.sorted[j]] })
	r.byName[name] = f
	names := make([]*Family, 0, len(r.byName))
	for _, g := range r.byName {
		names = append(names, g)
	}
	sort.Slice(names, func(i, j int) bool { return names[i].name < names[j].name })
	o := &familyOrder{rank: make(map[*Family]int, len(names)), n: len(names)}
	for i, g := range names {
		o.rank[g] = i
	}
	r.order.Store(o)
	return f
}

// NewSummaryFamily returns a summary family (label quantile) for values
// computed elsewhere (go_gc_duration_seconds): bind its quantile series
// with With, its _sum and _count series with Sum and Count.
func (r *Registry) NewSummaryFamily(name, help string) *Family {
	f := r.NewFamily(name, help, prometheus.UntypedValue, "quantile")
	if f != nil && !f.summary {
		r.mu.Lock()
		f.summary = true
		f.header = fmt.Appendf(nil, "# HELP %s %s\n# TYPE %s summary\n", name, escapeHelp(help), name)
		r.mu.Unlock()
	}
	return f
}

// Sum and Count return the _sum and _count series of a summary family.
func (f *Family) Sum() *Series {
	return &Series{fam: f, part: partSum, prefix: []byte(f.name + "_sum ")}
}
func (f *Family) Count() *Series {
	return &Series{fam: f, part: partCount, prefix: []byte(f.name + "_count ")}
}

// Series parts of a summary.
const (
	partValue = iota // a plain series, or a summary's quantile
	partSum
	partCount
)

// Series is a family with its label values bound.
type Series struct {
	fam    *Family
	values []string
	prefix []byte // `name{a="x",b="y"} `
	part   uint8
}

// With binds label values (one per label name).
func (f *Family) With(values ...string) *Series {
	if len(values) != len(f.labels) {
		panic(fmt.Sprintf("%s: %d label values for %d labels", f.name, len(values), len(f.labels)))
	}
	s := &Series{fam: f, values: make([]string, len(values))}
	p := append(make([]byte, 0, len(f.name)+2+len(values)*24), f.name...)
	for i, v := range values {
		s.values[i] = boundValue(strings.ToValidUTF8(v, "\uFFFD"))
	}
	if len(values) > 0 {
		p = append(p, '{')
		for n, i := range f.sorted {
			if n > 0 {
				p = append(p, ',')
			}
			p = append(p, f.labels[i]...)
			p = append(p, '=', '"')
			p = appendEscapedLabel(p, s.values[i])
			p = append(p, '"')
		}
		p = append(p, '}')
	}
	s.prefix = append(p, ' ')
	return s
}

// maxLabelValue bounds a label value in bytes: values come from sysfs,
// /proc, log files and GPU drivers, and a hostile or broken source must not
// blow up a series.
const maxLabelValue = 256

// boundValue cuts v to maxLabelValue bytes on a UTF-8 boundary.
func boundValue(v string) string {
	if len(v) <= maxLabelValue {
		return v
	}
	i := maxLabelValue
	for i > 0 && !utf8.RuneStart(v[i]) {
		i--
	}
	return v[:i]
}

// Batch is one collector's samples for one scrape.
type Batch struct {
	samples []sample
}

type sample struct {
	s *Series
	v float64
}

// Add records a value of a prepared series.
func (b *Batch) Add(s *Series, v float64) {
	if s != nil {
		b.samples = append(b.samples, sample{s, v})
	}
}

// AddWith binds label values and records a value (for series whose labels
// change, like info metrics).
func (b *Batch) AddWith(f *Family, v float64, values ...string) {
	if f != nil {
		b.samples = append(b.samples, sample{f.With(values...), v})
	}
}

// Len returns the number of samples.
func (b *Batch) Len() int { return len(b.samples) }

// Reset empties the batch for reuse, keeping its buffer.
func (b *Batch) Reset() { b.samples = b.samples[:0] }

// Cap returns how many samples the batch holds without growing.
func (b *Batch) Cap() int { return cap(b.samples) }

// textScratch is the reusable working memory of writeText.
type textScratch struct {
	counts, ranks []int
	sorted        []sample
	buf           []byte
}

var scratchPool = sync.Pool{New: func() any { return &textScratch{buf: make([]byte, 0, 64<<10)} }}

// WriteText writes the batches' samples grouped by family (families in
// name order, series in the order they were added) in the Prometheus text
// format 0.0.4. Every family must come from r.
func (r *Registry) WriteText(w io.Writer, batches []*Batch) error {
	sc := scratchPool.Get().(*textScratch)
	defer scratchPool.Put(sc)
	var order *familyOrder
	n := 0
	for _, b := range batches {
		n += len(b.samples)
	}
	for {
		order = r.order.Load()
		sc.counts = resize(sc.counts, order.n+1)
		clear(sc.counts)
		sc.ranks = sc.ranks[:0]
		complete := true
		for _, b := range batches {
			for _, s := range b.samples {
				r, ok := order.rank[s.s.fam]
				if !ok { // a family registered after order was loaded
					complete = false
					break
				}
				sc.ranks = append(sc.ranks, r)
				sc.counts[r+1]++
			}
		}
		if complete {
			break
		}
	}
	// Counting sort of the samples by family rank.
	counts := sc.counts
	for i := 1; i < len(counts); i++ {
		counts[i] += counts[i-1]
	}
	sc.sorted = resize(sc.sorted, n)
	i := 0
	for _, b := range batches {
		for _, s := range b.samples {
			r := sc.ranks[i]
			sc.sorted[counts[r]] = s
			counts[r]++
			i++
		}
	}
	buf := sc.buf[:0]
	defer func() {
		if cap(buf) <= 1<<20 {
			sc.buf = buf[:0]
		}
	}()
	var last *Family
	for _, s := range sc.sorted {
		if s.s.fam != last {
			last = s.s.fam
			buf = append(buf, last.header...)
		}
		buf = append(buf, s.s.prefix...)
		buf = appendFloat(buf, s.v)
		buf = append(buf, '\n')
	}
	clear(sc.sorted) // drop references to series
	_, err := w.Write(buf)
	return err
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// appendFloat formats a value like the client_golang text encoder.
func appendFloat(b []byte, f float64) []byte {
	switch {
	case f == 1:
		return append(b, '1')
	case f == 0:
		return append(b, '0')
	case f == -1:
		return append(b, '-', '1')
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, +1):
		return append(b, "+Inf"...)
	case math.IsInf(f, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}

func appendEscapedLabel(b []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\':
			b = append(b, '\\', '\\')
		case '"':
			b = append(b, '\\', '"')
		case '\n':
			b = append(b, '\\', 'n')
		default:
			b = append(b, c)
		}
	}
	return b
}

func escapeHelp(h string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(h)
}

// Collect sends the batch's samples as client_golang const metrics; the
// samples of a summary family become one const summary.
func (b *Batch) Collect(ch chan<- prometheus.Metric) {
	type acc struct {
		q     map[float64]float64
		sum   float64
		count uint64
	}
	var sums map[*Family]*acc
	for _, s := range b.samples {
		f := s.s.fam
		if !f.summary {
			ch <- prometheus.MustNewConstMetric(f.desc, f.typ, s.v, s.s.values...)
			continue
		}
		if sums == nil {
			sums = map[*Family]*acc{}
		}
		a := sums[f]
		if a == nil {
			a = &acc{q: map[float64]float64{}}
			sums[f] = a
		}
		switch s.s.part {
		case partSum:
			a.sum = s.v
		case partCount:
			a.count = uint64(s.v)
		default:
			if q, err := strconv.ParseFloat(s.s.values[0], 64); err == nil {
				a.q[q] = s.v
			}
		}
	}
	for f, a := range sums {
		ch <- prometheus.MustNewConstSummary(prometheus.NewDesc(f.name, f.help, nil, nil), a.count, a.sum, a.q)
	}
}

// Counter is a monotonic counter a collector increments.
type Counter struct{ v atomic.Uint64 }

// Inc adds one.
func (c *Counter) Inc() { c.v.Add(1) }

// Value returns the count.
func (c *Counter) Value() float64 { return float64(c.v.Load()) }

// Family returns the series' family.
func (s *Series) Family() *Family { return s.fam }

// Values returns the series' label values, in the family's label order.
// The slice must not be modified.
func (s *Series) Values() []string { return s.values }

// All yields the batch's samples in the order they were added.
func (b *Batch) All() iter.Seq2[*Series, float64] {
	return func(yield func(*Series, float64) bool) {
		for _, s := range b.samples {
			if !yield(s.s, s.v) {
				return
			}
		}
	}
}

// MaxLabelValue is the longest label value a series keeps, in bytes.
const MaxLabelValue = maxLabelValue
