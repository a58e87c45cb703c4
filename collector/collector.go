// Package collector holds fabric_exporter's collectors, the table that lists
// them and the Exporter that runs the enabled ones for every scrape.
package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/procwatch"
)

// Namespace is the prefix of every metric this exporter writes.
const Namespace = "fabric"

// Collector reads one source and adds samples to a Batch. Update is called
// once per scrape; the Exporter serialises calls to one Collector, so an
// implementation may keep caches without its own locking. On error the
// samples already added are kept.
type Collector interface {
	Update(ctx context.Context, b *exposition.Batch) error
}

// ErrNoData is returned by a collector whose source is absent on this host
// (no /sys/class/infiniband, no rails): the scrape reports success 0 and the
// exporter logs at debug level only.
var ErrNoData = errors.New("collector returned no data")

// Env is what the Exporter hands to each collector it builds.
type Env struct {
	Logger log.Logger
	// Families is the exporter's registry, where collectors declare their
	// metric families.
	Families *exposition.Registry
	// ReadErrors counts values or devices a collector skipped because they
	// could not be read or parsed (fabric_scrape_read_errors_total).
	ReadErrors *exposition.Counter
	// Once logs a message once per key until the key is cleared.
	Once *OnceLogger

	// GPUs is the gpu collector's view of the host's GPUs, for the
	// collectors that consume it (process selects the PIDs on the GPUs,
	// kubernetes joins the kubelet's device IDs to the gpu label); nil
	// when the gpu collector is not enabled. NewExporter wires it.
	GPUs GPUInventory
	// Processes is the process collector's view of the serving
	// processes, for the collectors that consume it (nccl-ras queries
	// their RAS services and joins its ranks to them); nil when the
	// process collector is not enabled.
	// NewExporter wires it.
	Processes ProcessInventory
}

// ProcessInventory is what the process collector produces for other
// collectors. Its methods may be called at any time, concurrently with
// every collector (nccl-ras calls them from its background poll), and
// return quickly: they read the last refresh of the process table.
type ProcessInventory interface {
	// RASTargets returns the RAS services of the selected processes whose
	// RAS is on (NCCL_RAS_ENABLE not 0), each once, sorted: their
	// NCCL_RAS_ADDR in the exporter's network namespace, and how to reach
	// those of processes in other network namespaces (process_ras.go).
	// Nil before the first refresh.
	RASTargets() []RASTarget
	// Table returns the last process table (nil before the first
	// refresh): the processes the nccl-ras collector joins ranks to.
	Table() *procwatch.Snapshot
	// Nudge asks for the evidence of RDMA use of these processes (fds,
	// queue pairs) to be re-read now, in the background.
	Nudge(pids ...int)
}

// GPUInventory is what the gpu collector produces for other collectors.
// Its methods may be called once per scrape, concurrently with other
// collectors, and return quickly (cached, nil without a GPU source).
type GPUInventory interface {
	// PIDs returns the PIDs of the compute processes on the host's GPUs,
	// in the PID namespace of --path.procfs (the host's, with hostPID).
	PIDs(ctx context.Context) []int
	// Devices returns the GPUs' index and UUID as last seen.
	Devices(ctx context.Context) []GPUDevice
}

// Spec is one row of the collector table.
type Spec struct {
	Name    string
	Default bool
	Help    string
	// Flags registers the collector's --collector.<name>.* flags, bound to
	// its part of Options (optional).
	Flags func(app *kingpin.Application, o *Options)
	// New builds the collector. It must not fail because hardware is
	// absent; it may fail on bad configuration.
	New func(env Env, o *Options) (Collector, error)
}

// specs is the table of all collectors, sorted by name.
var specs = [...]Spec{
	{Name: "devlink", Default: true, Help: "Driver health of every RDMA HCA on PCI through devlink generic netlink, read in the background: the health reporters (mlx5: fw, fw_fatal, vnic, tx, rx) with state, error and recovery counts, whether the device answers at all (a wedged driver), driver and firmware versions. Needs the host network namespace.", Flags: devlinkFlags, New: newDevlinkCollector},
	{Name: "gpu", Default: true, Help: "GPU activity (DCGM profiling fields 1001-1005, 1009, 1010, or NVML GPM), inventory, compute processes and NVLink state, errors and traffic (NVML).", Flags: gpuFlags, New: newGPUCollector},
	{Name: "kernel-events", Default: false, Help: "Kernel log events no counter shows (/dev/kmsg, followed in the background from the exporter's start): mlx5 health, firmware and command timeouts, transmit queue timeouts, port module (cable) events, PCIe AER, hot-plug link loss and DPC, NVIDIA Xid and GPUs fallen off the bus, per device with its rails and GPUs. Needs CAP_SYSLOG where kernel.dmesg_restrict is 1, so off by default.", Flags: kernelEventsFlags, New: newKernelEventsCollector},
	{Name: "kubernetes", Default: true, Help: "Kubernetes device allocation from the kubelet's pod-resources API (--collector.kubernetes.pod-resources-socket): devices (GPUs, RDMA) per pod and container, allocatable devices, GPUs per pod. Without the socket it reports no data.", Flags: kubernetesFlags, New: newKubernetesCollector},
	{Name: "nccl", Default: true, Help: "NCCL INFO logs (--collector.nccl.log-path): the network and transports each NCCL process uses (IB/RoCE with GPU Direct RDMA or the TCP socket fallback), its devices, version and warnings. Without a log path it reports no data.", Flags: ncclFlags, New: newNCCLCollector},
	{Name: "nccl-inspector", Default: true, Help: "NCCL Inspector profiler plugin output (--collector.nccl-inspector.dump-dir, JSON or Prometheus mode): bus bandwidth and operations per NCCL process and communicator, live. Without the directory it reports no data.", Flags: ncclInspectorFlags, New: newNCCLInspectorCollector},
	{Name: "nccl-ras", Default: true, Help: "NCCL's RAS service (--collector.nccl-ras.address, localhost:28028 by default, and the serving processes' local NCCL_RAS_ADDR; NCCL 2.24+, no debug logs needed), queried in the background: communicators, missing or dead ranks, asynchronous errors and aborts, collective counts per rank of this host. Nothing listening: no data.", Flags: ncclRASFlags, New: newNCCLRASCollector},
	{Name: "netdev", Default: true, Help: "Network interface statistics, link state and speed from sysfs class/net (rail netdevs and physical NICs).", Flags: netdevFlags, New: newNetdevCollector},
	{Name: "numa", Default: true, Help: "Per NUMA node: numastat allocation counters, memory total/free and CPUs from sysfs devices/system/node.", New: newNumaCollector},
	{Name: "pcie", Default: true, Help: "PCIe link health on the path of every GPU and RDMA device up to its root port: current, maximum and supported link speed and width, AER error counters, from sysfs.", Flags: pcieFlags, New: newPCIeCollector},
	{Name: "pfc", Default: true, Help: "PFC and pause counters, pause storms, PHY discards and vport RDMA bytes from ethtool -S of rail netdevs.", Flags: pfcFlags, New: newPFCCollector},
	{Name: "phy", Default: true, Help: "Physical layer of the rail netdevs through ethtool netlink: FEC mode and statistics (every scrape), and the optical module's identity, DOM monitors and thresholds (SFF-8636, CMIS; read in the background).", Flags: phyFlags, New: newPhyCollector},
	{Name: "process", Default: true, Help: "Serving processes (SGLang by default, and GPU processes): NUMA placement of their memory, CPU, allowed NUMA nodes, allow-listed NCCL environment variables and whether the rail RDMA devices are visible in their container, from /proc.", Flags: processFlags, New: newProcessCollector},
	{Name: "rdma", Default: true, Help: "RDMA ports: counters, every hw_counter, link state, rate, device info and rails from sysfs class/infiniband.", Flags: rdmaFlags, New: newRDMACollector},
	{Name: "topology", Default: true, Help: "GPUs, RDMA devices and PCI NICs in the sysfs PCI tree, and the nvidia-smi path class (PIX/PXB/PHB/NODE/SYS) between each GPU and RDMA device and between GPUs.", New: newTopologyCollector},
}

// Specs returns the table of all collectors, sorted by name (a copy).
// cmd/fabric_exporter generates --[no-]collector.<name> flags from it.
func Specs() []Spec { return slices.Clone(specs[:]) }

// SpecByName returns the table row of a collector.
func SpecByName(name string) (Spec, bool) {
	for _, s := range specs {
		if s.Name == name {
			return s, true
		}
	}
	return Spec{}, false
}

// exporterFamilies are the series the Exporter adds for every collector.
type exporterFamilies struct {
	duration, success, readErrors, state *exposition.Family
}

func newExporterFamilies(r *exposition.Registry) exporterFamilies {
	return exporterFamilies{
		duration: r.NewFamily("fabric_scrape_collector_duration_seconds",
			"Duration of a collector's update during this scrape.", prometheus.GaugeValue, "collector"),
		success: r.NewFamily("fabric_scrape_collector_success",
			"1 if the collector worked in this scrape (state ok, not_configured or no_hardware), 0 if it failed or a configured source is missing (state failed or source_missing; see fabric_collector_state_info).", prometheus.GaugeValue, "collector"),
		readErrors: r.NewFamily("fabric_scrape_read_errors_total",
			"Values, files or devices a collector skipped because they could not be read or parsed; the rest of the scrape went on.", prometheus.CounterValue, "collector"),
		state: r.NewFamily("fabric_collector_state_info",
			"The state of each enabled collector in this scrape (ok, not_configured, no_hardware, source_missing, failed) and why (\"\" when ok).",
			prometheus.GaugeValue, "collector", "state", "reason"),
	}
}

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
	name       string
	sem        chan struct{} // one Update at a time per collector
	c          Collector
	readErrors *exposition.Counter
	meta       [3]*exposition.Series // duration, success, read errors
	state      stateTracker
}

func newNamedCollector(name string, c Collector, l log.Logger, f exporterFamilies) *namedCollector {
	return &namedCollector{name: name, c: c, readErrors: &exposition.Counter{}, sem: make(chan struct{}, 1),
		meta:  [3]*exposition.Series{f.duration.With(name), f.success.With(name), f.readErrors.With(name)},
		state: stateTracker{name: name, logger: l, family: f.state}}
}

// Exporter runs every enabled collector concurrently on each scrape and adds
// per-collector success, duration and read errors. WriteText writes a
// scrape in the text format; Collect makes it a prometheus.Collector.
type Exporter struct {
	collectors []*namedCollector
	logger     log.Logger
	timeout    time.Duration
	nextID     atomic.Uint64
	pool       sync.Pool // *scrape
	self       SelfMetrics
	families   *exposition.Registry
}

// Families returns the exporter's metric family registry (for the
// self-metrics, which share the scrape).
func (e *Exporter) Families() *exposition.Registry { return e.families }

// SelfMetrics adds the exporter's own process, Go and build metrics to a
// scrape (internal/selfmetrics).
type SelfMetrics interface {
	Add(b *exposition.Batch)
}

// SetSelfMetrics adds the exporter's own metrics to every scrape; their
// families must be declared in e.Families(). Call before serving.
func (e *Exporter) SetSelfMetrics(s SelfMetrics) { e.self = s }

// NewExporter builds the enabled collectors. A constructor must not fail
// because hardware is absent; it may fail on bad configuration.
func NewExporter(enabled []string, o *Options, logger log.Logger) (*Exporter, error) {
	e := &Exporter{logger: logger, timeout: o.ScrapeTimeout, families: exposition.NewRegistry()}
	fams := newExporterFamilies(e.families)
	names := append([]string(nil), enabled...)
	sort.Strings(names)
	// Producers before consumers: the gpu collector is built first and its
	// GPU inventory handed to every later collector (Env.GPUs), then the
	// process collector (a consumer of GPUs) and its process inventory
	// (Env.Processes, for nccl-ras); these are the only dependencies
	// between collectors, and they do not rest on the order of their names.
	var gpus GPUInventory
	var procs ProcessInventory
	built := make(map[string]*namedCollector, len(names))
	order := make([]string, 0, len(names))
	for _, p := range producers {
		if slices.Contains(names, p) {
			order = append(order, p)
		}
	}
	for _, n := range names {
		if !slices.Contains(producers[:], n) {
			order = append(order, n)
		}
	}
	for _, name := range order {
		spec, ok := SpecByName(name)
		if !ok {
			return nil, fmt.Errorf("unknown collector %q", name)
		}
		l := log.With(logger, "collector", name)
		nc := newNamedCollector(name, nil, l, fams)
		env := Env{Logger: l, Families: e.families, ReadErrors: nc.readErrors, Once: NewOnceLogger(l, 1024), GPUs: gpus, Processes: procs}
		c, err := spec.New(env, o)
		if err != nil {
			e.closeBuilt(built)
			return nil, fmt.Errorf("collector %s: %w", name, err)
		}
		nc.c = c
		built[name] = nc
		if inv, ok := c.(GPUInventory); ok && name == gpuProducer {
			gpus = inv
		}
		if inv, ok := c.(ProcessInventory); ok && name == processProducer {
			procs = inv
		}
	}
	for _, name := range names { // scrape order: by name
		e.collectors = append(e.collectors, built[name])
	}
	return e, nil
}

// gpuProducer and processProducer are the collectors whose output others
// consume (Env.GPUs, Env.Processes); NewExporter builds them first, in the
// order of producers (process consumes the GPUs).
const (
	gpuProducer     = "gpu"
	processProducer = "process"
)

var producers = [...]string{gpuProducer, processProducer} // an array, never written

// closeBuilt stops the background work of collectors built before a later
// constructor failed.
func (e *Exporter) closeBuilt(built map[string]*namedCollector) {
	for _, nc := range built {
		if cl, ok := nc.c.(interface{ Close() }); ok {
			cl.Close()
		}
	}
}

// Names lists the enabled collectors.
func (e *Exporter) Names() []string {
	out := make([]string, 0, len(e.collectors))
	for _, c := range e.collectors {
		out = append(out, c.name)
	}
	return out
}

// scrape holds the batches of one scrape, reused through a pool.
type scrape struct {
	batches []*exposition.Batch
}

// run updates every collector concurrently, each into its own batch. With
// a scrape timeout, a collector still running at the deadline is reported
// failed ("deadline exceeded") and left to finish on its own: its batch is
// abandoned and the scrape returns what the others produced.
func (e *Exporter) run(limit time.Duration) *scrape {
	sc, _ := e.pool.Get().(*scrape)
	if sc == nil || len(sc.batches) != len(e.collectors)+1 {
		sc = &scrape{batches: make([]*exposition.Batch, len(e.collectors)+1)}
		for i := range sc.batches {
			sc.batches[i] = &exposition.Batch{}
		}
	}
	ctx := context.WithValue(context.Background(), scrapeIDKey{}, e.nextID.Add(1))
	timeout, why := e.deadline(limit)
	ctx = context.WithValue(ctx, deadlineWhyKey{}, why)
	if timeout <= 0 {
		var wg sync.WaitGroup
		for i, c := range e.collectors {
			b := sc.batches[i]
			b.Reset()
			if len(e.collectors) == 1 {
				e.finish(c, b, e.execute(ctx, c, b))
				break
			}
			wg.Go(func() { e.finish(c, b, e.execute(ctx, c, b)) })
		}
		wg.Wait()
	} else {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		done := make(chan result, len(e.collectors))
		for i, c := range e.collectors {
			b := sc.batches[i]
			b.Reset()
			go func() {
				r := e.execute(ctx, c, b)
				r.index = i
				done <- r
			}()
		}
		finished := make([]bool, len(e.collectors))
		for n := 0; n < len(e.collectors); n++ {
			select {
			case r := <-done:
				finished[r.index] = true
				e.finish(e.collectors[r.index], sc.batches[r.index], r)
				continue
			case <-ctx.Done():
			}
			break
		}
	drain: // results that arrived together with the deadline
		for {
			select {
			case r := <-done:
				finished[r.index] = true
				e.finish(e.collectors[r.index], sc.batches[r.index], r)
			default:
				break drain
			}
		}
		for i, c := range e.collectors {
			if finished[i] {
				continue
			}
			// The collector's goroutine still owns its batch: give this
			// scrape (and the pool) a new one.
			b := &exposition.Batch{}
			sc.batches[i] = b
			e.finish(c, b, result{err: fmt.Errorf("deadline exceeded (%s)", why), duration: timeout.Seconds()})
		}
	}
	self := sc.batches[len(e.collectors)]
	self.Reset()
	if e.self != nil {
		e.self.Add(self)
	}
	return sc
}

// deadlineWhy says what set the deadline of a scrape's context.
func deadlineWhy(ctx context.Context) string {
	if s, ok := ctx.Value(deadlineWhyKey{}).(string); ok {
		return s
	}
	return "the scrape's deadline"
}

// result is the outcome of one collector's update.
type result struct {
	index    int
	err      error
	duration float64
}

func (e *Exporter) release(sc *scrape) {
	for i, b := range sc.batches {
		if b.Cap() > 1<<16 { // do not keep outsized buffers
			sc.batches[i] = &exposition.Batch{}
		}
		b.Reset()
	}
	e.pool.Put(sc)
}

// deadlineWhyKey carries what set a scrape's deadline, for its errors.
type deadlineWhyKey struct{}

// deadline returns a scrape's bound: the smaller of --web.scrape-timeout
// and limit (the scrape's own, from the request; 0: none), and what set it.
func (e *Exporter) deadline(limit time.Duration) (time.Duration, string) {
	if limit > 0 && (e.timeout <= 0 || limit < e.timeout) {
		return limit, fmt.Sprintf("the scrape's X-Prometheus-Scrape-Timeout-Seconds less --web.scrape-timeout-offset: %s", limit)
	}
	return e.timeout, fmt.Sprintf("--web.scrape-timeout %s", e.timeout)
}

// WriteText runs one scrape and writes it in the Prometheus text format.
func (e *Exporter) WriteText(w io.Writer) error { return e.WriteTextWithin(w, 0) }

// WriteTextWithin runs one scrape bounded by limit as well as by
// --web.scrape-timeout (the smaller wins; 0: the flag alone) and writes
// it: a collector still running then is reported failed and the others'
// samples are written.
func (e *Exporter) WriteTextWithin(w io.Writer, limit time.Duration) error {
	sc := e.run(limit)
	defer e.release(sc)
	return e.families.WriteText(w, sc.batches)
}

// Describe sends nothing: the collectors' metrics are dynamic (hw_counters
// depend on the firmware), so the Exporter is an unchecked collector.
func (e *Exporter) Describe(chan<- *prometheus.Desc) {}

// Collect runs one scrape and sends it as const metrics.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	sc := e.run(0)
	defer e.release(sc)
	for _, b := range sc.batches {
		b.Collect(ch)
	}
}

// execute runs one collector's update into b. It waits for the
// collector's previous update (another scrape) at most until ctx's deadline.
func (e *Exporter) execute(ctx context.Context, c *namedCollector, b *exposition.Batch) result {
	begin := time.Now()
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return result{err: fmt.Errorf("deadline exceeded waiting for the previous update (%s)", deadlineWhy(ctx)), duration: time.Since(begin).Seconds()}
	}
	err := c.c.Update(ctx, b)
	<-c.sem
	if err != nil && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("deadline exceeded (%s)", deadlineWhy(ctx))
	}
	return result{err: err, duration: time.Since(begin).Seconds()}
}

// finish adds a collector's success, duration, read errors and state to b
// and logs state changes.
func (e *Exporter) finish(c *namedCollector, b *exposition.Batch, r result) {
	stateSeries, st := c.state.record(r.err)
	b.Add(c.meta[0], r.duration)
	b.Add(c.meta[1], b2f(st.Success()))
	b.Add(c.meta[2], c.readErrors.Value())
	b.Add(stateSeries, 1)
}

// States returns every enabled collector's latest state, in name order.
// Before the first scrape the state is "" (see Probe).
func (e *Exporter) States() []CollectorState {
	out := make([]CollectorState, 0, len(e.collectors))
	for _, c := range e.collectors {
		out = append(out, c.state.get())
	}
	return out
}

// Probe runs one scrape and discards it, so that every collector's state
// is known (and logged) at startup.
func (e *Exporter) Probe() {
	e.release(e.run(0))
}

// Close stops the background work of the collectors that have some (the
// nccl follower).
func (e *Exporter) Close() {
	for _, c := range e.collectors {
		if cl, ok := c.c.(interface{ Close() }); ok {
			cl.Close()
		}
	}
}
