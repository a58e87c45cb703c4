package collector

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
)

// benchProcfs writes a /proc with n SGLang scheduler processes, each with a
// numa_maps of about lines mappings shaped like a PyTorch/CUDA serving
// process (libraries mapped 4-5 times, anonymous arenas, bare device
// mappings), copies of the fixture's stat, status, environ and root, and
// others processes that do not match (cmdline and stat only).
func benchProcfs(b *testing.B, n, lines, others int) string {
	b.Helper()
	dir := b.TempDir()
	fix := filepath.Join(fixtureProc, "4311")
	var maps strings.Builder
	libs := []string{"torch/lib/libtorch_cuda.so", "torch/lib/libtorch_cpu.so", "nvidia/nccl/lib/libnccl.so.2",
		"nvidia/cublas/lib/libcublasLt.so.12", "flashinfer/data/libflashinfer.so", "triton/_C/libtriton.so"}
	addr := uint64(0x7f0000000000)
	for i := 0; i < lines; i++ {
		addr += 0x200000
		switch i % 8 {
		case 0, 1, 2, 3:
			fmt.Fprintf(&maps, "%x default file=/usr/local/lib/python3.10/dist-packages/%s mapped=%d mapmax=10 N0=%d N1=%d kernelpagesize_kB=4\n",
				addr, libs[i%len(libs)], 96+i%300, 64+i%200, 32+i%100)
		case 4, 5:
			fmt.Fprintf(&maps, "%x default anon=%d dirty=%d active=0 N0=%d N1=%d kernelpagesize_kB=4\n", addr, 512+i, 512+i, 256+i, 256)
		case 6:
			fmt.Fprintf(&maps, "%x default file=/dev/nvidia%d\n", addr, i%8)
		default:
			fmt.Fprintf(&maps, "%x default\n", addr)
		}
	}
	write := func(p, content string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	read := func(f string) string {
		raw, err := os.ReadFile(filepath.Join(fix, f))
		if err != nil {
			b.Fatal(err)
		}
		return string(raw)
	}
	stat, status, environ := read("stat"), read("status"), read("environ")
	for i := 0; i < n; i++ {
		pid := fmt.Sprint(10000 + i)
		p := filepath.Join(dir, pid)
		write(filepath.Join(p, "cmdline"), fmt.Sprintf("sglang::scheduler_TP%d\x00", i))
		write(filepath.Join(p, "stat"), strings.Replace(stat, "4311 ", pid+" ", 1))
		write(filepath.Join(p, "status"), status)
		write(filepath.Join(p, "environ"), environ)
		write(filepath.Join(p, "numa_maps"), maps.String())
		for _, d := range []string{"uverbs0", "uverbs1", "rdma_cm"} {
			write(filepath.Join(p, "root/dev/infiniband", d), "")
		}
	}
	for i := 0; i < others; i++ {
		pid := fmt.Sprint(20000 + i)
		write(filepath.Join(dir, pid, "cmdline"), "/usr/bin/containerd-shim-runc-v2\x00-namespace\x00k8s.io\x00-id\x00"+pid+"\x00")
		write(filepath.Join(dir, pid, "stat"), strings.Replace(stat, "4311 ", pid+" ", 1))
	}
	return dir
}

func cpuNow() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkProcessCollector: the process collector with 64 selected
// processes of 3000-line numa_maps among 1064 processes. The table is
// refreshed on the poller (internal/procwatch) and a scrape turns the last
// table into samples, so the two are measured apart:
//   - refresh/every-read: --collector.process.numa-maps-interval=0, every
//     numa_maps, cgroup, network namespace and /dev/infiniband read at every
//     refresh;
//   - refresh/default: the default 60 s slow interval and 5 s refresh (the
//     clock advances 5 s per refresh): the slow reads every 12th refresh,
//     command lines with their backoff, averaged;
//   - refresh/between-slow-reads: a refresh that does no slow read (stat and
//     status of the 64 processes, the /proc listing);
//   - scrape: one scrape of the last table (no I/O).
//
// cpu-µs/op is the process's user+system CPU (getrusage) per operation.
func BenchmarkProcessCollector(b *testing.B) {
	procfs := benchProcfs(b, 64, 3000, 1000)
	for _, tc := range []struct {
		name          string
		interval, gap time.Duration
		scrapeOnly    bool
	}{
		{"refresh/every-read", 0, 5 * time.Second, false},
		{"refresh/default", time.Minute, 5 * time.Second, false},
		{"refresh/between-slow-reads", time.Minute, 0, false},
		{"scrape", time.Minute, 0, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			o := processOptions(b, procfs)
			o.Process.NumaMapsInterval = tc.interval
			c, errs, clk := newTestProcess(b, o)
			var batch exposition.Batch
			if err := c.Update(b.Context(), &batch); err != nil {
				b.Fatal(err)
			}
			if n := len(c.w.Snapshot().Procs); n != 64 || errs.Value() != 0 {
				b.Fatalf("%d processes, %v read errors", n, errs.Value())
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuNow()
			for i := 0; i < b.N; i++ {
				clk.advance(tc.gap)
				if tc.scrapeOnly {
					batch.Reset()
					if err := c.export(&batch); err != nil {
						b.Fatal(err)
					}
					continue
				}
				c.refresh(b.Context())
			}
			b.ReportMetric(float64((cpuNow()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			if tc.scrapeOnly {
				b.ReportMetric(float64(batch.Len()), "samples")
			}
		})
	}
}
