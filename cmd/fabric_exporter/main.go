// Command fabric_exporter exports RDMA/RoCE rail, netdev and PFC metrics of
// GPU servers for Prometheus. main only wires flags, logging and HTTP.
package main

import (
	"context"
	"fmt"
	"html"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"
	sloggokit "github.com/tjhop/slog-gokit"

	"github.com/fabric-exporter/fabric_exporter/collector"
	"github.com/fabric-exporter/fabric_exporter/internal/selfmetrics"
)

// defaultAddress is outside the 9100-9999 exporter range, which the
// Prometheus default-port list marks as exhausted.
const defaultAddress = ":10470"

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	app := kingpin.New("fabric_exporter", "Prometheus exporter for RDMA/RoCE rails, NIC pause counters and network interfaces of multi-node GPU inference servers.")
	var (
		sysfs         = app.Flag("path.sysfs", "sysfs mount point.").Default("/sys").String()
		procfs        = app.Flag("path.procfs", "procfs mount point.").Default("/proc").String()
		rootfs        = app.Flag("path.rootfs", "The host's root filesystem as the exporter sees it (a container mounting the host's / at /host: /host); the default kubelet pod-resources socket is read under it.").Default("/").String()
		rails         = app.Flag("rail", "A rail as NAME=DEVICE[:PORT] (repeatable), e.g. --rail=rail0=mlx5_0:1. Default: one rail per Ethernet-link-layer RDMA port, named after its device.").PlaceHolder("NAME=DEVICE[:PORT]").Strings()
		disableDef    = app.Flag("collector.disable-defaults", "Disable every collector that is not explicitly enabled.").Default("false").Bool()
		metricsPath   = app.Flag("web.telemetry-path", "Path under which to expose metrics.").Default("/metrics").String()
		noExpMetrics  = app.Flag("web.disable-exporter-metrics", "Exclude metrics about the exporter itself (go_*, process_*, fabric_exporter_build_info).").Bool()
		maxRequests   = app.Flag("web.max-requests", "Maximum number of parallel scrape requests; more get HTTP 503. 0 disables the limit.").Default("40").Int()
		scrapeTimeout = app.Flag("web.scrape-timeout", "Upper bound for one scrape's collectors: a collector still running then is reported failed (\"deadline exceeded\") and the scrape returns what the others produced. A scrape that says its own timeout (Prometheus's X-Prometheus-Scrape-Timeout-Seconds) is bounded by the smaller of the two (see --web.scrape-timeout-offset). 0 = no bound but the scrape's own.").Default("30s").Duration()
		scrapeOffset  = app.Flag("web.scrape-timeout-offset", "Subtracted from the timeout a scrape says it has (X-Prometheus-Scrape-Timeout-Seconds) to bound its collectors, so that the answer, with a slow collector marked failed, reaches Prometheus before it gives up on the target (never below half that timeout).").Default("500ms").Duration()
		enablePprof   = app.Flag("web.enable-pprof", "Serve Go profiling (net/http/pprof) at /debug/pprof/.").Default("false").Bool()
		maxProcs      = app.Flag("runtime.gomaxprocs", "The target number of CPUs Go will run on (GOMAXPROCS). A scrape is many tiny sysfs reads; one CPU avoids the scheduler's spinning and costs about a third less CPU per scrape (docs/benchmarks.md).").Envar("GOMAXPROCS").Default("1").Int()
		logLevel      = app.Flag("log.level", "Only log messages with the given severity or above. One of: [debug, info, warn, error]").Default("info").Enum("debug", "info", "warn", "error")
		logFormat     = app.Flag("log.format", "Output format of log messages. One of: [logfmt, json]").Default("logfmt").Enum("logfmt", "json")
	)
	opts := &collector.Options{}
	enabled := map[string]*bool{}
	explicit := map[string]bool{}
	for _, s := range collector.Specs() {
		if s.Flags != nil {
			s.Flags(app, opts)
		}
		state := "enabled"
		if !s.Default {
			state = "disabled"
		}
		name := s.Name
		enabled[name] = app.Flag("collector."+name, fmt.Sprintf("Enable the %s collector (default: %s). %s", name, state, s.Help)).
			Default(fmt.Sprint(s.Default)).Action(func(*kingpin.ParseContext) error { explicit[name] = true; return nil }).Bool()
	}
	toolkitFlags := kingpinflag.AddFlags(app, defaultAddress)
	// Commands: serving is the default, so that every existing invocation
	// (flags only, no command) keeps running the exporter.
	app.Command("serve", "Run the exporter (the default when no command is given).").Default()
	dumpACS := app.Command("dump-acs", "Write the ACS registers of every PCI bridge under --path.sysfs to a file for --collector.pcie.acs-file, then exit. Reading them needs CAP_SYS_ADMIN (a privileged init container or sidecar; the serving exporter does not need it then).")
	dumpOut := dumpACS.Flag("output", "The file to write (replaced atomically, mode 0644).").Required().String()
	dumpEvery := dumpACS.Flag("interval", "Write it again every interval until stopped (a sidecar that follows ACS changes and PCI hot-plug); 0: once.").Default("0s").Duration()
	relayKmsg := app.Command("relay-kmsg", "Copy the kernel log, from now on, record by record into a FIFO that an exporter without the privilege reads (--collector.kernel-events.path=FIFO), until stopped; the exporter may restart meanwhile. Opening /dev/kmsg needs CAP_SYSLOG where kernel.dmesg_restrict is 1 and, in a container, the device: a privileged sidecar (deploy/kubernetes/components/kernel-events; the serving exporter does not need it then).")
	relayIn := relayKmsg.Flag("input", "The kernel log device (a recording of it, a regular file or FIFO, for tests).").Default("/dev/kmsg").String()
	relayOut := relayKmsg.Flag("output", "The FIFO to write, made mode 0644 where nothing is (anything else there is an error); writing waits until a reader opens it.").Required().String()
	app.Version(version.Print("fabric_exporter"))
	app.HelpFlag.Short('h')
	if len(args) > 0 && args[0] == "analyze" {
		fmt.Fprintln(os.Stderr, "fabric_exporter: the benchmark analysis is its own command now: fabric_analyze (same flags; make build-analyze)")
		return 2
	}
	cmd, err := app.Parse(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fabric_exporter: %v\n", flagError(app, args, err))
		return 2
	}

	logger := newLogger(*logLevel, *logFormat)
	switch cmd {
	case dumpACS.FullCommand():
		return runDumpACS(*sysfs, *dumpOut, *dumpEvery, logger)
	case relayKmsg.FullCommand():
		return runRelayKmsg(*relayIn, *relayOut, logger)
	}
	if *maxProcs > 0 {
		runtime.GOMAXPROCS(*maxProcs)
	}
	// The one bridge between logging styles: exporter-toolkit logs through
	// slog, into the go-kit logger everything else uses; the go-kit logger
	// stamps ts=, so the slog record's own time is dropped (one timestamp
	// per line).
	slogger := slog.New(noTimeHandler{sloggokit.NewGoKitHandler(logger, nil)})

	var names []string
	for _, s := range collector.Specs() {
		on := *enabled[s.Name]
		if *disableDef && !explicit[s.Name] {
			on = false
		}
		if on {
			names = append(names, s.Name)
		}
	}

	if err := setupOptions(opts, *sysfs, *procfs, *rootfs, *rails); err != nil {
		level.Error(logger).Log("msg", "invalid configuration", "err", err)
		return 1
	}
	opts.ScrapeTimeout, opts.ScrapeTimeoutOffset = *scrapeTimeout, *scrapeOffset
	exp, err := collector.NewExporter(names, opts, logger)
	if err != nil {
		level.Error(logger).Log("msg", "cannot create collectors", "err", err)
		return 1
	}

	level.Info(logger).Log("msg", "starting fabric_exporter", "version", version.Info(), "build_context", version.BuildContext())
	level.Info(logger).Log("msg", "enabled collectors", "collectors", strings.Join(exp.Names(), ","))
	if fi, err := os.Stat(*rootfs); err != nil || !fi.IsDir() {
		level.Warn(logger).Log("msg", "--path.rootfs does not exist (the kubernetes collector's default pod-resources socket is read under it)", "path", *rootfs,
			"fix", "mount the host's / there (docker run -v /:/host/root:ro --path.rootfs=/host/root) or correct --path.rootfs")
	}
	// One scrape now, so that every collector's state is known and logged
	// at startup (and shown on the landing page).
	exp.Probe()
	if opts.Rails.Static() {
		level.Info(logger).Log("msg", "rails from flags", "rails", strings.Join(*rails, ","))
		for _, w := range opts.Rails.StartupWarnings() {
			level.Warn(logger).Log("msg", "rail missing at start-up: it pages as RailLinkDown (fabric_rail_device_present 0) until it appears", "err", w)
		}
	}
	mux := newMux(exp, opts, *metricsPath, *maxRequests, !*noExpMetrics, logger, *enablePprof)
	if *enablePprof {
		level.Info(logger).Log("msg", "serving Go profiling at /debug/pprof/")
	}
	server := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      2 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	// The web configuration and the listen addresses are checked before
	// the server starts, so that a mistake names the flag and the file
	// rather than a server that never ran.
	if f := *toolkitFlags.WebConfigFile; f != "" {
		if err := web.Validate(f); err != nil {
			level.Error(logger).Log("msg", "invalid --web.config.file: fix the file or the flag", "file", f, "err", err)
			return 1
		}
	}
	if toolkitFlags.WebListenAddresses != nil && (toolkitFlags.WebSystemdSocket == nil || !*toolkitFlags.WebSystemdSocket) {
		for _, a := range *toolkitFlags.WebListenAddresses {
			ln, err := net.Listen("tcp", a)
			if err != nil {
				level.Error(logger).Log("msg", "cannot listen on --web.listen-address: another process holds the port, or the address is not this host's", "address", a, "err", err)
				return 1
			}
			ln.Close()
		}
	}
	if err := web.ListenAndServe(server, toolkitFlags, slogger); err != nil {
		level.Error(logger).Log("msg", "the HTTP server failed", "err", err)
		return 1
	}
	return 0
}

// setupOptions fills the core options and resolves the rails.
func setupOptions(o *collector.Options, sysfs, procfs, rootfs string, rails []string) error {
	o.SysfsPath, o.ProcfsPath, o.RootfsPath = sysfs, procfs, rootfs
	var cfgs []collector.RailConfig
	for _, r := range rails {
		rc, err := collector.ParseRail(r)
		if err != nil {
			return fmt.Errorf("--rail: %w", err)
		}
		cfgs = append(cfgs, rc)
	}
	var err error
	if o.Rails, err = collector.NewRails(sysfs, cfgs); err != nil {
		return fmt.Errorf("--rail: %w", err)
	}
	return nil
}

func newLogger(lvl, format string) log.Logger {
	var l log.Logger
	if format == "json" {
		l = log.NewJSONLogger(log.NewSyncWriter(os.Stderr))
	} else {
		l = log.NewLogfmtLogger(log.NewSyncWriter(os.Stderr))
	}
	l = log.With(l, "ts", log.DefaultTimestampUTC)
	return level.NewFilter(l, level.Allow(level.ParseDefault(lvl, level.InfoValue())))
}

// newMux serves the metrics of exp (plus, unless disabled, the exporter's
// own build, Go and process metrics) and the landing page.
func newMux(exp *collector.Exporter, opts *collector.Options, metricsPath string, maxRequests int, exporterMetrics bool, logger log.Logger, pprofOn bool) *http.ServeMux {
	mh := newMetricsHandler(exp, maxRequests, logger)
	mh.offset = opts.ScrapeTimeoutOffset
	var handler http.Handler = mh
	if exporterMetrics {
		// Process, Go and handler metrics under client_golang's names,
		// written by the exporter: client_golang's collectors cost several
		// times more per scrape (BenchmarkSelfMetrics).
		self := selfmetrics.New(exp.Families(), "/proc")
		self.Handler = selfmetrics.NewHandlerMetrics(exp.Families())
		exp.SetSelfMetrics(self)
		handler = instrument(self.Handler, handler)
	}
	mux := http.NewServeMux()
	mux.Handle(metricsPath, handler)
	if pprofOn {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	if metricsPath != "/" {
		mux.Handle("/", landingPage(metricsPath, exp, opts, pprofOn))
	}
	return mux
}

// instrument counts the scrapes of h in hm (promhttp_metric_handler_*).
func instrument(hm *selfmetrics.HandlerMetrics, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hm.Begin()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		defer func() { hm.End(sw.code) }()
		h.ServeHTTP(sw, r)
	})
}

// statusWriter remembers the status code of a response.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// noTimeHandler drops the time of slog records, which the go-kit logger
// behind it stamps itself (ts=).
type noTimeHandler struct{ slog.Handler }

func (h noTimeHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Time = time.Time{}
	return h.Handler.Handle(ctx, r)
}

func (h noTimeHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return noTimeHandler{h.Handler.WithAttrs(attrs)}
}

func (h noTimeHandler) WithGroup(name string) slog.Handler {
	return noTimeHandler{h.Handler.WithGroup(name)}
}

// landingPage lists the enabled collectors with their state and the rails
// as resolved now; it links the profiles only when they are served.
func landingPage(metricsPath string, exp *collector.Exporter, o *collector.Options, pprofOn bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		var b strings.Builder
		b.WriteString("<h2>Collectors</h2><table><tr><th>collector</th><th>state</th><th>reason</th></tr>")
		for _, st := range exp.States() {
			state := string(st.State)
			if state == "" {
				state = "not scraped yet"
			}
			fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td><td>%s</td></tr>",
				html.EscapeString(st.Name), html.EscapeString(state), html.EscapeString(st.Reason))
		}
		b.WriteString("</table><h2>Rails</h2>")
		rails := o.Rails.Current(r.Context())
		if len(rails) == 0 {
			b.WriteString("<p>No rail found: no Ethernet-link-layer RDMA port under " + html.EscapeString(o.SysfsPath) + "/class/infiniband and no --rail flag.</p>")
		} else {
			b.WriteString("<table><tr><th>rail</th><th>RDMA port</th><th>netdev</th><th>present</th></tr>")
			for _, rl := range rails {
				fmt.Fprintf(&b, "<tr><td>%s</td><td>%s:%s</td><td>%s</td><td>%t</td></tr>",
					html.EscapeString(rl.Name), html.EscapeString(rl.Device), html.EscapeString(rl.Port), html.EscapeString(rl.Netdev), rl.Present)
			}
			b.WriteString("</table>")
		}
		lp, err := web.NewLandingPage(web.LandingConfig{
			Name:        "fabric_exporter",
			Description: "RDMA/RoCE rails, PFC and NIC metrics for multi-node GPU inference",
			Version:     version.Info(),
			Links:       []web.LandingLinks{{Address: metricsPath, Text: "Metrics"}},
			Profiling:   fmt.Sprint(pprofOn),
			ExtraHTML:   b.String(),
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		lp.ServeHTTP(w, r)
	})
}

// flagError names the flag whose value kingpin could not take (its own
// error for a bad value says only what the parser said: `time: invalid
// duration "fast"`), with what it expects.
func flagError(app *kingpin.Application, args []string, err error) error {
	for i, a := range args {
		name, val, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") {
			continue
		}
		f := app.GetFlag(name)
		if f == nil {
			continue
		}
		if !ok {
			if f.Model().IsBoolFlag() || i+1 >= len(args) {
				continue
			}
			val = args[i+1]
		}
		if serr := f.Model().Value.Set(val); serr != nil {
			hint := ""
			if strings.Contains(serr.Error(), "invalid duration") {
				hint = " (a duration: 500ms, 15s, 1m)"
			}
			return fmt.Errorf("--%s=%q: %v%s", name, val, serr, hint)
		}
	}
	return err
}
