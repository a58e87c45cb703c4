// Package selfmetrics writes the exporter's own process_*, go_* and
// promhttp_* metrics (the names, types and help of client_golang's process,
// Go and handler collectors, which a test in cmd/fabric_exporter compares
// both ways) and fabric_exporter_build_info, into exposition batches.
package selfmetrics

import (
	"bytes"
	"errors"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/version"
	"golang.org/x/sys/unix"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// SelfMetrics writes the exporter's own process and Go runtime metrics
// (goMetrics) and its build info. It replaces client_golang's process collector, which re-reads
// /proc/self/stat, limits and net/* and counts /proc/self/fd on every scrape
// and costs more CPU than all RDMA counters of a node (docs/benchmarks.md);
// it writes the same names, types and meanings (a test compares them with
// collectors.NewProcessCollector).
type SelfMetrics struct {
	reader    *sysfs.Reader
	procfs    string
	start     float64
	pageSize  float64
	buildInfo *exposition.Series
	mu        sync.Mutex // guards fds, fdsAt, net, netAt, netBuf
	fds       float64
	fdsAt     time.Time
	netRx     float64
	netTx     float64
	netAt     time.Time
	netOK     bool
	netBuf    []byte

	cpu, rss, vsz, vszMax, startTime, openFDs, maxFDs, rx, tx *exposition.Series
	goMetrics                                                 *goMetrics
	// Handler, when set, adds the metrics handler's promhttp_* series.
	Handler *HandlerMetrics
}

// New returns the self-metrics writer, its families declared in
// r; procfs is the proc mount of this process (normally /proc).
func New(r *exposition.Registry, procfs string) *SelfMetrics {
	g := prometheus.GaugeValue
	c := prometheus.CounterValue
	one := func(name, help string, typ prometheus.ValueType) *exposition.Series {
		return r.NewFamily(name, help, typ).With()
	}
	s := &SelfMetrics{
		reader:    sysfs.NewReader(),
		procfs:    procfs,
		start:     float64(time.Now().UnixNano()) / 1e9,
		pageSize:  float64(os.Getpagesize()),
		netBuf:    make([]byte, 64<<10),
		goMetrics: newGoMetrics(r),
		cpu:       one("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", c),
		rss:       one("process_resident_memory_bytes", "Resident memory size in bytes.", g),
		vsz:       one("process_virtual_memory_bytes", "Virtual memory size in bytes.", g),
		vszMax:    one("process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.", g),
		startTime: one("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", g),
		openFDs:   one("process_open_fds", "Number of open file descriptors (recounted at most every 15 s; the exporter keeps sysfs counter files open).", g),
		maxFDs:    one("process_max_fds", "Maximum number of open file descriptors.", g),
		rx:        one("process_network_receive_bytes_total", "Number of bytes received by the process over the network (all interfaces of its network namespace, /proc/self/net/dev; re-read at most every 15 s).", c),
		tx:        one("process_network_transmit_bytes_total", "Number of bytes sent by the process over the network (all interfaces of its network namespace, /proc/self/net/dev; re-read at most every 15 s).", c),
	}
	bi := r.NewFamily("fabric_exporter_build_info",
		"A metric with a constant '1' value labeled by version, revision, branch, goversion from which fabric_exporter was built, and the goos and goarch for the build.",
		g, "version", "revision", "branch", "goversion", "goos", "goarch", "tags")
	rev, tags := version.GetRevision(), version.GetTags()
	s.buildInfo = bi.With(version.Version, rev, version.Branch, runtime.Version(), runtime.GOOS, runtime.GOARCH, tags)
	return s
}

// fdCountInterval bounds how often process_open_fds is recounted.
const fdCountInterval = 15 * time.Second

// Add adds the current values to b.
func (s *SelfMetrics) Add(b *exposition.Batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b.Add(s.buildInfo, 1)
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) == nil {
		b.Add(s.cpu, float64(ru.Utime.Nano()+ru.Stime.Nano())/1e9)
	}
	var buf [256]byte
	if raw, err := s.reader.Read(s.procfs+"/self/statm", buf[:]); err == nil {
		f := bytes.Fields(raw)
		if len(f) >= 2 {
			if v, err := sysfs.ParseUint(f[0]); err == nil {
				b.Add(s.vsz, float64(v)*s.pageSize)
			}
			if v, err := sysfs.ParseUint(f[1]); err == nil {
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
	if unix.Getrlimit(unix.RLIMIT_AS, &rl) == nil {
		b.Add(s.vszMax, float64(rl.Cur))
	}
	// /proc/self/net/dev lists every interface of the namespace (all of the
	// host's with host networking): re-read at most every fdCountInterval.
	if now := time.Now(); now.Sub(s.netAt) >= fdCountInterval {
		s.netAt = now
		if rx, tx, err := s.readNetDev(); err == nil {
			s.netRx, s.netTx, s.netOK = rx, tx, true
		}
	}
	if s.netOK {
		b.Add(s.rx, s.netRx)
		b.Add(s.tx, s.netTx)
	}
	s.goMetrics.add(b)
	if s.Handler != nil {
		s.Handler.add(b)
	}
}

// readNetDev sums the received and transmitted bytes of every interface in
// /proc/self/net/dev.
func (s *SelfMetrics) readNetDev() (rx, tx float64, err error) {
	f, err := sysfs.Open(s.procfs + "/self/net/dev")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	n := 0
	for n < len(s.netBuf) {
		m, err := f.(sysfs.FD).Read(s.netBuf[n:])
		if err != nil {
			return 0, 0, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	if n == len(s.netBuf) {
		return 0, 0, errBadNetDev // longer than the buffer: not summed
	}
	return parseNetDev(s.netBuf[:n])
}

// parseNetDev sums the bytes columns of /proc/net/dev: after "iface:",
// received bytes are the 1st field and transmitted bytes the 9th.
func parseNetDev(b []byte) (rx, tx float64, err error) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		colon := bytes.IndexByte(line, ':')
		if colon < 0 {
			continue // header lines
		}
		f := bytes.Fields(line[colon+1:])
		if len(f) < 16 {
			return 0, 0, errBadNetDev
		}
		r, err1 := sysfs.ParseUint(f[0])
		t, err2 := sysfs.ParseUint(f[8])
		if err1 != nil || err2 != nil {
			return 0, 0, errBadNetDev
		}
		rx += float64(r)
		tx += float64(t)
	}
	return rx, tx, nil
}

var errBadNetDev = errors.New("malformed /proc/self/net/dev")

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
