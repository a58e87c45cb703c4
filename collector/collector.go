// Package collector holds fabric_exporter's collectors, the table that lists
// them and the Exporter that runs the enabled ones for every scrape.
package collector

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
)

// Namespace is the prefix of every metric this exporter writes.
const Namespace = "fabric"

// Collector reads one source and sends const metrics. Update is called once
// per scrape; the Exporter serialises calls to one Collector, so an
// implementation may keep caches without its own locking.
type Collector interface {
	Update(ctx context.Context, ch chan<- prometheus.Metric) error
}

// ErrNoData is returned by a collector whose source is absent on this host
// (no /sys/class/infiniband, no rails): the scrape reports success 0 and the
// exporter logs at debug level only.
var ErrNoData = errors.New("collector returned no data")

// Env is what the Exporter hands to each collector it builds.
type Env struct {
	Logger log.Logger
	// ReadErrors counts values or devices a collector skipped because they
	// could not be read or parsed (fabric_scrape_read_errors_total).
	ReadErrors prometheus.Counter
	// Once logs a message once per key until the key is cleared.
	Once *OnceLogger
}

// Spec is one row of the collector table.
type Spec struct {
	Name    string
	Default bool
	Help    string
	New     func(env Env, o *Options) (Collector, error)
}

// Specs is the table of all collectors, sorted by name. cmd/fabric_exporter
// generates --[no-]collector.<name> flags from it.
var Specs = []Spec{
	{Name: "netdev", Default: true, Help: "Network interface statistics, link state and speed from sysfs class/net (rail netdevs and physical NICs).", New: newNetdevCollector},
	{Name: "pfc", Default: true, Help: "PFC and pause counters, pause storms, PHY discards and vport RDMA bytes from ethtool -S of rail netdevs.", New: newPFCCollector},
	{Name: "rdma", Default: true, Help: "RDMA ports: counters, every hw_counter, link state, rate, device info and rails from sysfs class/infiniband.", New: newRDMACollector},
}

// SpecByName returns the table row of a collector.
func SpecByName(name string) (Spec, bool) {
	for _, s := range Specs {
		if s.Name == name {
			return s, true
		}
	}
	return Spec{}, false
}

var (
	scrapeDurationDesc = prometheus.NewDesc(
		prometheus.BuildFQName(Namespace, "scrape", "collector_duration_seconds"),
		"Duration of a collector's last update during this scrape.",
		[]string{"collector"}, nil)
	scrapeSuccessDesc = prometheus.NewDesc(
		prometheus.BuildFQName(Namespace, "scrape", "collector_success"),
		"1 if the collector's update succeeded in this scrape, 0 if it failed or its source is absent on this host.",
		[]string{"collector"}, nil)
)

type scrapeIDKey struct{}

// scrapeID returns the identifier of the scrape a context belongs to, 0 when
// the context does not come from Exporter.Collect.
func scrapeID(ctx context.Context) uint64 {
	if v, ok := ctx.Value(scrapeIDKey{}).(uint64); ok {
		return v
	}
	return 0
}

type namedCollector struct {
	name string
	mu   sync.Mutex // one Update at a time per collector
	c    Collector
}

// Exporter runs every enabled collector concurrently on each scrape and adds
// per-collector success and duration. It implements prometheus.Collector.
type Exporter struct {
	collectors []*namedCollector
	logger     log.Logger
	readErrors *prometheus.CounterVec
	timeout    time.Duration
	nextID     atomic.Uint64
}

// NewExporter builds the enabled collectors. A constructor must not fail
// because hardware is absent; it may fail on bad configuration.
func NewExporter(enabled []string, o *Options, logger log.Logger) (*Exporter, error) {
	e := &Exporter{
		logger: logger,
		readErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "scrape", Name: "read_errors_total",
			Help: "Values, files or devices a collector skipped because they could not be read or parsed; the rest of the scrape went on.",
		}, []string{"collector"}),
		timeout: o.ScrapeTimeout,
	}
	names := append([]string(nil), enabled...)
	sort.Strings(names)
	for _, name := range names {
		spec, ok := SpecByName(name)
		if !ok {
			return nil, fmt.Errorf("unknown collector %q", name)
		}
		l := log.With(logger, "collector", name)
		env := Env{Logger: l, ReadErrors: e.readErrors.WithLabelValues(name), Once: NewOnceLogger(l, 1024)}
		c, err := spec.New(env, o)
		if err != nil {
			return nil, fmt.Errorf("collector %s: %w", name, err)
		}
		e.collectors = append(e.collectors, &namedCollector{name: name, c: c})
	}
	return e, nil
}

// Names lists the enabled collectors.
func (e *Exporter) Names() []string {
	out := make([]string, 0, len(e.collectors))
	for _, c := range e.collectors {
		out = append(out, c.name)
	}
	return out
}

// Describe sends nothing: the collectors' metrics are dynamic (hw_counters
// depend on the firmware), so the Exporter is an unchecked collector.
func (e *Exporter) Describe(chan<- *prometheus.Desc) {}

// Collect runs every collector in its own goroutine.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	ctx := context.WithValue(context.Background(), scrapeIDKey{}, e.nextID.Add(1))
	if e.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.timeout)
		defer cancel()
	}
	var wg sync.WaitGroup
	wg.Add(len(e.collectors))
	for _, c := range e.collectors {
		go func(c *namedCollector) {
			defer wg.Done()
			e.execute(ctx, c, ch)
		}(c)
	}
	wg.Wait()
	e.readErrors.Collect(ch)
}

func (e *Exporter) execute(ctx context.Context, c *namedCollector, ch chan<- prometheus.Metric) {
	begin := time.Now()
	c.mu.Lock()
	err := c.c.Update(ctx, ch)
	c.mu.Unlock()
	duration := time.Since(begin).Seconds()
	success := 1.0
	if err != nil {
		success = 0
		if errors.Is(err, ErrNoData) {
			level.Debug(e.logger).Log("msg", "collector returned no data", "collector", c.name, "duration_seconds", duration, "err", err)
		} else {
			level.Error(e.logger).Log("msg", "collector failed", "collector", c.name, "duration_seconds", duration, "err", err)
		}
	}
	ch <- prometheus.MustNewConstMetric(scrapeDurationDesc, prometheus.GaugeValue, duration, c.name)
	ch <- prometheus.MustNewConstMetric(scrapeSuccessDesc, prometheus.GaugeValue, success, c.name)
}
