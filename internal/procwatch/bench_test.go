package procwatch

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func cpuNow() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkNumaMapsKernel measures what a numa_maps read costs the kernel:
// this process maps and touches 1 GiB of anonymous memory in 4 KiB pages
// (THP off for the range: the worst case) or in transparent huge pages,
// then reads and parses its own /proc/self/numa_maps. The kernel walks the
// page tables of every mapping, under the process's mmap lock.
func BenchmarkNumaMapsKernel(b *testing.B) {
	if testing.Short() {
		b.Skip("maps 1 GiB")
	}
	for _, thp := range []bool{false, true} {
		b.Run(fmt.Sprintf("1GiB/thp=%v", thp), func(b *testing.B) {
			const size = 1 << 30
			mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				b.Skip(err)
			}
			defer unix.Munmap(mem)
			advice := unix.MADV_NOHUGEPAGE
			if thp {
				advice = unix.MADV_HUGEPAGE
			}
			unix.Madvise(mem, advice)
			for i := 0; i < size; i += 4096 {
				mem[i] = 1
			}
			c := New(Options{Procfs: "/proc", Max: 1}, Sources{})
			st := &procState{dir: "/proc/self"}
			c.readNumaMaps(st)
			var total uint64
			for _, v := range c.nm.Bytes {
				total += v
			}
			if total < size {
				b.Fatalf("numa_maps shows %d bytes, want at least %d", total, size)
			}
			b.ResetTimer()
			cpu0 := cpuNow()
			for i := 0; i < b.N; i++ {
				c.readNumaMaps(st)
			}
			b.ReportMetric(float64((cpuNow()-cpu0).Microseconds())/float64(b.N), "cpu-µs/read")
		})
	}
}
