package collector

import (
	"bytes"
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/version"
	"golang.org/x/sys/unix"
)

// SelfMetrics writes the exporter's own process and Go runtime metrics and
// its build info. It replaces client_golang's process and Go collectors,
// which re-read /proc/stat and /proc/self/net/* on every scrape and cost
// more CPU than all RDMA counters of a node (docs/benchmarks.md); the
// names and meanings of the series kept here are the same.
type SelfMetrics struct {
	reader    *sysReader
	procfs    string
	start     float64
	pageSize  float64
	rm        []metrics.Sample
	buildInfo *Series
	mu        sync.Mutex // guards fds, fdsAt
	fds       float64
	fdsAt     time.Time

	cpu, rss, vsz, startTime, openFDs, maxFDs, goroutines, heap, goSys, gcCycles, threads *Series
}

// NewSelfMetrics returns the self-metrics writer; procfs is the proc mount
// of this process (normally /proc).
func NewSelfMetrics(procfs string) *SelfMetrics {
	g := prometheus.GaugeValue
	c := prometheus.CounterValue
	one := func(name, help string, typ prometheus.ValueType) *Series { return NewFamily(name, help, typ).With() }
	s := &SelfMetrics{
		reader:   newSysReader(),
		procfs:   procfs,
		start:    float64(time.Now().UnixNano()) / 1e9,
		pageSize: float64(os.Getpagesize()),
		rm: []metrics.Sample{
			{Name: "/sched/goroutines:goroutines"},
			{Name: "/memory/classes/heap/objects:bytes"},
			{Name: "/memory/classes/total:bytes"},
			{Name: "/gc/cycles/total:gc-cycles"},
		},
		cpu:        one("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", c),
		rss:        one("process_resident_memory_bytes", "Resident memory size in bytes.", g),
		vsz:        one("process_virtual_memory_bytes", "Virtual memory size in bytes.", g),
		startTime:  one("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", g),
		openFDs:    one("process_open_fds", "Number of open file descriptors (the exporter keeps sysfs counter files open).", g),
		maxFDs:     one("process_max_fds", "Maximum number of open file descriptors.", g),
		goroutines: one("go_goroutines", "Number of goroutines that currently exist.", g),
		heap:       one("go_memstats_heap_alloc_bytes", "Number of heap bytes allocated and currently in use.", g),
		goSys:      one("go_memstats_sys_bytes", "Number of bytes obtained from system.", g),
		gcCycles:   one("go_gc_cycles_total", "Completed GC cycles.", c),
		threads:    one("go_threads", "Number of OS threads created.", g),
	}
	bi := NewFamily("fabric_exporter_build_info",
		"A metric with a constant '1' value labeled by version, revision, branch, goversion from which fabric_exporter was built, and the goos and goarch for the build.",
		g, "version", "revision", "branch", "goversion", "goos", "goarch", "tags")
	rev, tags := version.GetRevision(), version.GetTags()
	s.buildInfo = bi.With(version.Version, rev, version.Branch, runtime.Version(), runtime.GOOS, runtime.GOARCH, tags)
	return s
}

// fdCountInterval bounds how often process_open_fds is recounted.
const fdCountInterval = 15 * time.Second

// Add adds the current values to b.
func (s *SelfMetrics) Add(b *Batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b.Add(s.buildInfo, 1)
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) == nil {
		b.Add(s.cpu, float64(ru.Utime.Nano()+ru.Stime.Nano())/1e9)
	}
	var buf [256]byte
	if raw, err := s.reader.read(s.procfs+"/self/statm", buf[:]); err == nil {
		f := bytes.Fields(raw)
		if len(f) >= 2 {
			if v, err := parseSysfsUint(f[0]); err == nil {
				b.Add(s.vsz, float64(v)*s.pageSize)
			}
			if v, err := parseSysfsUint(f[1]); err == nil {
				b.Add(s.rss, float64(v)*s.pageSize)
			}
		}
	}
	b.Add(s.startTime, s.start)
	// Counting /proc/self/fd costs as much as reading ~200 counters when
	// hundreds of counter files are kept open, so the count is refreshed at
	// most every fdCountInterval.
	if now := time.Now(); now.Sub(s.fdsAt) >= fdCountInterval {
		if n, err := countDir(s.procfs + "/self/fd"); err == nil {
			s.fds, s.fdsAt = float64(n), now
		}
	}
	if !s.fdsAt.IsZero() {
		b.Add(s.openFDs, s.fds)
	}
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil {
		b.Add(s.maxFDs, float64(rl.Cur))
	}
	metrics.Read(s.rm)
	for i, dst := range []*Series{s.goroutines, s.heap, s.goSys, s.gcCycles} {
		if v := s.rm[i].Value; v.Kind() == metrics.KindUint64 {
			b.Add(dst, float64(v.Uint64()))
		}
	}
	n, _ := runtime.ThreadCreateProfile(nil)
	b.Add(s.threads, float64(n))
}

// countDir counts the entries of a directory with raw getdents calls.
func countDir(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	var buf [16 << 10]byte
	n := 0
	for {
		m, err := unix.Getdents(fd, buf[:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if m <= 0 {
			return n, nil
		}
		for off := 0; off < m; {
			reclen := int(buf[off+16]) | int(buf[off+17])<<8
			name := buf[off+19 : off+reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if s := string(name); s != "." && s != ".." {
				n++
			}
			off += reclen
		}
	}
}
