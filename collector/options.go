package collector

import (
	"fmt"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
)

// Options is the typed configuration that cmd/fabric_exporter builds from
// flags once at startup. Collectors get it in their constructors and never
// change it; what one collector hands another travels in Env (NewExporter).
type Options struct {
	SysfsPath  string // --path.sysfs, default /sys
	ProcfsPath string // --path.procfs, default /proc
	RootfsPath string // --path.rootfs, default /

	// Rails resolves rail names to RDMA ports and netdevs.
	Rails *Rails

	// Per-collector settings, filled by the flags each Spec registers.
	GPU     GPUOptions
	RDMA    RDMAOptions
	Netdev  NetdevOptions
	PFC     PFCOptions
	Process ProcessOptions
	NCCL    NCCLOptions
	Phy     PhyOptions
	PCIe    PCIeOptions
	// NCCLInspector configures the nccl-inspector collector.
	NCCLInspector NCCLInspectorOptions
	Kubernetes    KubernetesOptions
	// NCCLRAS configures the nccl-ras collector.
	NCCLRAS NCCLRASOptions
	Devlink DevlinkOptions // the devlink collector

	// ScrapeTimeout bounds one scrape's collectors (0 = none).
	ScrapeTimeout time.Duration
	// ScrapeTimeoutOffset is taken from a scrape's own timeout (its
	// request's X-Prometheus-Scrape-Timeout-Seconds) to bound it.
	ScrapeTimeoutOffset time.Duration

	// KernelEvents configures the kernel-events collector.
	KernelEvents KernelEventsOptions
}

// sysPath joins elements under the sysfs root.
func (o *Options) sysPath(elem ...string) string {
	return filepath.Join(append([]string{o.SysfsPath}, elem...)...)
}

// Filter selects device names with an include or an exclude regexp (not both).
type Filter struct {
	include, exclude *regexp.Regexp
}

// NewFilter compiles the include and exclude patterns. Both empty accepts all.
func NewFilter(include, exclude string) (Filter, error) {
	var f Filter
	if include != "" && exclude != "" {
		return f, fmt.Errorf("device-include and device-exclude are mutually exclusive")
	}
	var err error
	// The pattern alone first: its error then shows what the user typed,
	// not the anchoring added around it.
	if include != "" {
		if _, err = regexp.Compile(include); err == nil {
			f.include, err = regexp.Compile("^(?:" + include + ")$")
		}
		if err != nil {
			return f, fmt.Errorf("device-include %q: %w", include, err)
		}
	}
	if exclude != "" {
		if _, err = regexp.Compile(exclude); err == nil {
			f.exclude, err = regexp.Compile("^(?:" + exclude + ")$")
		}
		if err != nil {
			return f, fmt.Errorf("device-exclude %q: %w", exclude, err)
		}
	}
	return f, nil
}

// Ignored reports whether name is filtered out.
func (f Filter) Ignored(name string) bool {
	if f.include != nil {
		return !f.include.MatchString(name)
	}
	if f.exclude != nil {
		return f.exclude.MatchString(name)
	}
	return false
}

// HasInclude reports whether an include pattern was set.
func (f Filter) HasInclude() bool { return f.include != nil }

// OnceLogger logs a message once per key, at debug level, until the key is
// cleared (the condition went away), so a broken file is reported once and
// not on every scrape. The number of remembered keys is bounded.
type OnceLogger struct {
	mu     sync.Mutex
	logger log.Logger
	seen   map[string]struct{}
	max    int
	n      atomic.Int64 // len(seen), read without the lock by Clear
}

// NewOnceLogger returns a OnceLogger remembering at most max keys.
func NewOnceLogger(l log.Logger, max int) *OnceLogger {
	return &OnceLogger{logger: l, seen: map[string]struct{}{}, max: max}
}

// Debug logs keyvals at debug level the first time key is seen.
func (o *OnceLogger) Debug(key string, keyvals ...any) { o.log(level.Debug, key, keyvals) }

// Warn logs keyvals at warn level the first time key is seen.
func (o *OnceLogger) Warn(key string, keyvals ...any) { o.log(level.Warn, key, keyvals) }

func (o *OnceLogger) log(lvl func(log.Logger) log.Logger, key string, keyvals []any) {
	o.mu.Lock()
	_, dup := o.seen[key]
	if !dup && len(o.seen) < o.max {
		o.seen[key] = struct{}{}
		o.n.Store(int64(len(o.seen)))
	}
	o.mu.Unlock()
	if !dup {
		lvl(o.logger).Log(keyvals...)
	}
}

// Clear forgets key so that the next failure is logged again. It reports
// whether key was set.
func (o *OnceLogger) Clear(key string) bool {
	if o.n.Load() == 0 {
		return false
	}
	o.mu.Lock()
	_, had := o.seen[key]
	delete(o.seen, key)
	o.n.Store(int64(len(o.seen)))
	o.mu.Unlock()
	return had
}

// atLeastDuration and atLeastInt are flag actions that refuse a value
// below min when the flags are parsed. The constructors read 0 as "the
// default" (Options built in code), so without them --flag=0 would
// silently mean the default.
func atLeastDuration(flag string, v *time.Duration, min time.Duration) kingpin.Action {
	return func(*kingpin.ParseContext) error {
		if *v < min {
			return fmt.Errorf("--%s %s: must be at least %s", flag, *v, min)
		}
		return nil
	}
}

func atLeastInt(flag string, v *int, min int) kingpin.Action {
	return func(*kingpin.ParseContext) error {
		if *v < min {
			return fmt.Errorf("--%s %d: must be at least %d", flag, *v, min)
		}
		return nil
	}
}
