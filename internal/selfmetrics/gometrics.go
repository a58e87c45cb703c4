package selfmetrics

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
)

// goMetrics writes the Go runtime metrics under the names, types and help
// of client_golang's collectors.NewGoCollector() (its default set), read
// from runtime/metrics as that collector documents for each name. Reading
// the dozen samples it needs costs a fraction of that collector, which
// reads every runtime metric and encodes through protobuf structs
// (BenchmarkSelfMetrics in cmd/fabric_exporter). go_gc_duration_seconds
// is gcStats.
type goMetrics struct {
	rm     []metrics.Sample
	idx    map[string]int
	info   *exposition.Series
	series []goSeries
	thread *exposition.Series
	gc     *gcStats
}

// goSeries is one go_* series: the sum of some runtime/metrics samples.
type goSeries struct {
	s    *exposition.Series
	from []int
}

// goDefs lists the go_* metrics: name, help, type and the runtime/metrics
// samples summed into it.
var goDefs = []struct {
	name, help string
	typ        prometheus.ValueType
	from       []string
}{
	{"go_gc_gogc_percent", "Heap size target percentage configured by the user, otherwise 100. This value is set by the GOGC environment variable, and the runtime/debug.SetGCPercent function. Sourced from /gc/gogc:percent.", prometheus.GaugeValue, []string{"/gc/gogc:percent"}},
	{"go_gc_gomemlimit_bytes", "Go runtime memory limit configured by the user, otherwise math.MaxInt64. This value is set by the GOMEMLIMIT environment variable, and the runtime/debug.SetMemoryLimit function. Sourced from /gc/gomemlimit:bytes.", prometheus.GaugeValue, []string{"/gc/gomemlimit:bytes"}},
	{"go_goroutines", "Number of goroutines that currently exist.", prometheus.GaugeValue, []string{"/sched/goroutines:goroutines"}},
	{"go_memstats_alloc_bytes", "Number of bytes allocated in heap and currently in use. Equals to /memory/classes/heap/objects:bytes.", prometheus.GaugeValue, []string{"/memory/classes/heap/objects:bytes"}},
	{"go_memstats_alloc_bytes_total", "Total number of bytes allocated in heap until now, even if released already. Equals to /gc/heap/allocs:bytes.", prometheus.CounterValue, []string{"/gc/heap/allocs:bytes"}},
	{"go_memstats_buck_hash_sys_bytes", "Number of bytes used by the profiling bucket hash table. Equals to /memory/classes/profiling/buckets:bytes.", prometheus.GaugeValue, []string{"/memory/classes/profiling/buckets:bytes"}},
	{"go_memstats_frees_total", "Total number of heap objects frees. Equals to /gc/heap/frees:objects + /gc/heap/tiny/allocs:objects.", prometheus.CounterValue, []string{"/gc/heap/frees:objects", "/gc/heap/tiny/allocs:objects"}},
	{"go_memstats_gc_sys_bytes", "Number of bytes used for garbage collection system metadata. Equals to /memory/classes/metadata/other:bytes.", prometheus.GaugeValue, []string{"/memory/classes/metadata/other:bytes"}},
	{"go_memstats_heap_alloc_bytes", "Number of heap bytes allocated and currently in use, same as go_memstats_alloc_bytes. Equals to /memory/classes/heap/objects:bytes.", prometheus.GaugeValue, []string{"/memory/classes/heap/objects:bytes"}},
	{"go_memstats_heap_idle_bytes", "Number of heap bytes waiting to be used. Equals to /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", prometheus.GaugeValue, []string{"/memory/classes/heap/released:bytes", "/memory/classes/heap/free:bytes"}},
	{"go_memstats_heap_inuse_bytes", "Number of heap bytes that are in use. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes", prometheus.GaugeValue, []string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes"}},
	{"go_memstats_heap_objects", "Number of currently allocated objects. Equals to /gc/heap/objects:objects.", prometheus.GaugeValue, []string{"/gc/heap/objects:objects"}},
	{"go_memstats_heap_released_bytes", "Number of heap bytes released to OS. Equals to /memory/classes/heap/released:bytes.", prometheus.GaugeValue, []string{"/memory/classes/heap/released:bytes"}},
	{"go_memstats_heap_sys_bytes", "Number of heap bytes obtained from system. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes + /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", prometheus.GaugeValue, []string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes", "/memory/classes/heap/released:bytes", "/memory/classes/heap/free:bytes"}},
	{"go_memstats_mallocs_total", "Total number of heap objects allocated, both live and gc-ed. Semantically a counter version for go_memstats_heap_objects gauge. Equals to /gc/heap/allocs:objects + /gc/heap/tiny/allocs:objects.", prometheus.CounterValue, []string{"/gc/heap/allocs:objects", "/gc/heap/tiny/allocs:objects"}},
	{"go_memstats_mcache_inuse_bytes", "Number of bytes in use by mcache structures. Equals to /memory/classes/metadata/mcache/inuse:bytes.", prometheus.GaugeValue, []string{"/memory/classes/metadata/mcache/inuse:bytes"}},
	{"go_memstats_mcache_sys_bytes", "Number of bytes used for mcache structures obtained from system. Equals to /memory/classes/metadata/mcache/inuse:bytes + /memory/classes/metadata/mcache/free:bytes.", prometheus.GaugeValue, []string{"/memory/classes/metadata/mcache/inuse:bytes", "/memory/classes/metadata/mcache/free:bytes"}},
	{"go_memstats_mspan_inuse_bytes", "Number of bytes in use by mspan structures. Equals to /memory/classes/metadata/mspan/inuse:bytes.", prometheus.GaugeValue, []string{"/memory/classes/metadata/mspan/inuse:bytes"}},
	{"go_memstats_mspan_sys_bytes", "Number of bytes used for mspan structures obtained from system. Equals to /memory/classes/metadata/mspan/inuse:bytes + /memory/classes/metadata/mspan/free:bytes.", prometheus.GaugeValue, []string{"/memory/classes/metadata/mspan/inuse:bytes", "/memory/classes/metadata/mspan/free:bytes"}},
	{"go_memstats_next_gc_bytes", "Number of heap bytes when next garbage collection will take place. Equals to /gc/heap/goal:bytes.", prometheus.GaugeValue, []string{"/gc/heap/goal:bytes"}},
	{"go_memstats_other_sys_bytes", "Number of bytes used for other system allocations. Equals to /memory/classes/other:bytes.", prometheus.GaugeValue, []string{"/memory/classes/other:bytes"}},
	{"go_memstats_stack_inuse_bytes", "Number of bytes obtained from system for stack allocator in non-CGO environments. Equals to /memory/classes/heap/stacks:bytes.", prometheus.GaugeValue, []string{"/memory/classes/heap/stacks:bytes"}},
	{"go_memstats_stack_sys_bytes", "Number of bytes obtained from system for stack allocator. Equals to /memory/classes/heap/stacks:bytes + /memory/classes/os-stacks:bytes.", prometheus.GaugeValue, []string{"/memory/classes/heap/stacks:bytes", "/memory/classes/os-stacks:bytes"}},
	{"go_memstats_sys_bytes", "Number of bytes obtained from system. Equals to /memory/classes/total:byte.", prometheus.GaugeValue, []string{"/memory/classes/total:bytes"}},
	{"go_sched_gomaxprocs_threads", "The current runtime.GOMAXPROCS setting, or the number of operating system threads that can execute user-level Go code simultaneously. Sourced from /sched/gomaxprocs:threads.", prometheus.GaugeValue, []string{"/sched/gomaxprocs:threads"}},
}

func newGoMetrics(r *exposition.Registry) *goMetrics {
	g := &goMetrics{idx: map[string]int{}}
	for _, d := range goDefs {
		gs := goSeries{s: r.NewFamily(d.name, d.help, d.typ).With()}
		for _, name := range d.from {
			i, ok := g.idx[name]
			if !ok {
				i = len(g.rm)
				g.idx[name] = i
				g.rm = append(g.rm, metrics.Sample{Name: name})
			}
			gs.from = append(gs.from, i)
		}
		g.series = append(g.series, gs)
	}
	g.info = r.NewFamily("go_info", "Information about the Go environment.", prometheus.GaugeValue, "version").With(runtime.Version())
	g.thread = r.NewFamily("go_threads", "Number of OS threads created.", prometheus.GaugeValue).With()
	g.gc = newGCStats(r)
	return g
}

// add reads the samples and adds the series; the caller serialises calls.
func (g *goMetrics) add(b *exposition.Batch) {
	metrics.Read(g.rm)
	for _, s := range g.series {
		sum, ok := 0.0, true
		for _, i := range s.from {
			switch v := g.rm[i].Value; v.Kind() {
			case metrics.KindUint64:
				sum += float64(v.Uint64())
			case metrics.KindFloat64:
				sum += v.Float64()
			default:
				ok = false // not supported by this Go version
			}
		}
		if ok {
			b.Add(s.s, sum)
		}
	}
	b.Add(g.info, 1)
	n, _ := runtime.ThreadCreateProfile(nil)
	b.Add(g.thread, float64(n))
	g.gc.add(b)
}

// HandlerMetrics counts the scrapes of the metrics handler under the names
// of promhttp.InstrumentMetricHandler: promhttp_metric_handler_requests_total
// by status code (completed scrapes; 200, 500 and 503 start at 0) and
// promhttp_metric_handler_requests_in_flight.
type HandlerMetrics struct {
	inFlight atomic.Int64
	mu       sync.Mutex
	codes    map[int]*handlerCode
	order    []*handlerCode
	flight   *exposition.Series
	requests *exposition.Family
}

type handlerCode struct {
	n atomic.Uint64
	s *exposition.Series
}

// NewHandlerMetrics returns the counters, their families declared in r.
func NewHandlerMetrics(r *exposition.Registry) *HandlerMetrics {
	h := &HandlerMetrics{codes: map[int]*handlerCode{},
		requests: r.NewFamily("promhttp_metric_handler_requests_total", "Total number of scrapes by HTTP status code.", prometheus.CounterValue, "code"),
		flight:   r.NewFamily("promhttp_metric_handler_requests_in_flight", "Current number of scrapes being served.", prometheus.GaugeValue).With()}
	for _, c := range []int{200, 500, 503} {
		h.code(c)
	}
	return h
}

func (h *HandlerMetrics) code(c int) *handlerCode {
	h.mu.Lock()
	defer h.mu.Unlock()
	hc := h.codes[c]
	if hc == nil {
		if len(h.codes) >= 64 { // bound the series
			return nil
		}
		hc = &handlerCode{s: h.requests.With(strconv.Itoa(c))}
		h.codes[c] = hc
		h.order = append(h.order, hc)
	}
	return hc
}

// Begin marks a scrape in flight.
func (h *HandlerMetrics) Begin() { h.inFlight.Add(1) }

// End marks a scrape done with its HTTP status code.
func (h *HandlerMetrics) End(code int) {
	h.inFlight.Add(-1)
	if hc := h.code(code); hc != nil {
		hc.n.Add(1)
	}
}

func (h *HandlerMetrics) add(b *exposition.Batch) {
	b.Add(h.flight, float64(h.inFlight.Load()))
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, hc := range h.order {
		b.Add(hc.s, float64(hc.n.Load()))
	}
}

// gcStats writes client_golang's go_gc_duration_seconds summary (GC pause
// quantiles 0, 0.25, 0.5, 0.75, 1, total pause and GC count from
// debug.ReadGCStats) and go_memstats_last_gc_time_seconds.
type gcStats struct {
	stats      debug.GCStats
	quantiles  [5]*exposition.Series
	sum, count *exposition.Series
	last       *exposition.Series
}

func newGCStats(r *exposition.Registry) *gcStats {
	g := &gcStats{stats: debug.GCStats{PauseQuantiles: make([]time.Duration, 5)}}
	f := r.NewSummaryFamily("go_gc_duration_seconds", "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.")
	for i, q := range []string{"0", "0.25", "0.5", "0.75", "1"} {
		g.quantiles[i] = f.With(q)
	}
	g.sum, g.count = f.Sum(), f.Count()
	g.last = r.NewFamily("go_memstats_last_gc_time_seconds", "Number of seconds since 1970 of last garbage collection.", prometheus.GaugeValue).With()
	return g
}

// add reads the GC statistics; the caller serialises calls.
func (g *gcStats) add(b *exposition.Batch) {
	debug.ReadGCStats(&g.stats)
	for i, s := range g.quantiles {
		b.Add(s, g.stats.PauseQuantiles[i].Seconds())
	}
	b.Add(g.sum, g.stats.PauseTotal.Seconds())
	b.Add(g.count, float64(g.stats.NumGC))
	b.Add(g.last, float64(g.stats.LastGC.UnixNano())/1e9)
}
