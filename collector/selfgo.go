package collector

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// goMetrics writes the Go runtime metrics under the names, types and help
// of client_golang's collectors.NewGoCollector() (its default set), read
// from runtime/metrics as that collector documents for each name. Reading
// the dozen samples it needs costs a fraction of that collector, which
// reads every runtime metric and encodes through protobuf structs
// (BenchmarkSelfMetrics in cmd/fabric_exporter). go_gc_duration_seconds, a
// summary, is GCDurationCollector.
type goMetrics struct {
	rm     []metrics.Sample
	idx    map[string]int
	info   *Series
	series []goSeries
	thread *Series
}

// goSeries is one go_* series: the sum of some runtime/metrics samples.
type goSeries struct {
	s    *Series
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

func newGoMetrics() *goMetrics {
	g := &goMetrics{idx: map[string]int{}}
	for _, d := range goDefs {
		gs := goSeries{s: NewFamily(d.name, d.help, d.typ).With()}
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
	g.info = NewFamily("go_info", "Information about the Go environment.", prometheus.GaugeValue, "version").With(runtime.Version())
	g.thread = NewFamily("go_threads", "Number of OS threads created.", prometheus.GaugeValue).With()
	return g
}

// add reads the samples and adds the series; the caller serialises calls.
func (g *goMetrics) add(b *Batch) {
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
}

// GCDurationCollector is client_golang's go_gc_duration_seconds summary
// (GC pause quantiles 0, 0.25, 0.5, 0.75, 1 from debug.ReadGCStats) and
// go_memstats_last_gc_time_seconds, for a registry next to the Exporter.
type GCDurationCollector struct {
	mu        sync.Mutex
	stats     debug.GCStats
	dur, last *prometheus.Desc
}

// NewGCDurationCollector returns the collector.
func NewGCDurationCollector() *GCDurationCollector {
	return &GCDurationCollector{
		stats: debug.GCStats{PauseQuantiles: make([]time.Duration, 5)},
		dur:   prometheus.NewDesc("go_gc_duration_seconds", "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.", nil, nil),
		last:  prometheus.NewDesc("go_memstats_last_gc_time_seconds", "Number of seconds since 1970 of last garbage collection.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *GCDurationCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.dur; ch <- c.last }

// Collect implements prometheus.Collector.
func (c *GCDurationCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	debug.ReadGCStats(&c.stats)
	q := map[float64]float64{}
	for i, p := range c.stats.PauseQuantiles {
		q[float64(i)/4] = p.Seconds()
	}
	n, total, last := uint64(c.stats.NumGC), c.stats.PauseTotal.Seconds(), float64(c.stats.LastGC.UnixNano())/1e9
	c.mu.Unlock()
	ch <- prometheus.MustNewConstSummary(c.dur, n, total, q)
	ch <- prometheus.MustNewConstMetric(c.last, prometheus.GaugeValue, last)
}
