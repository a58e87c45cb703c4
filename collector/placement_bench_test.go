package collector

import (
	"testing"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
)

// BenchmarkNumaCollector and BenchmarkTopologyCollector: one scrape of the
// numa and topology collectors on the bundled fixture (2 NUMA nodes; 8 GPUs,
// 4 RDMA devices, 4 PCI NICs, 104 series). The topology is built once; a
// scrape lists three directories to see whether it changed.
func BenchmarkNumaCollector(b *testing.B) {
	c, _ := newTestNuma(b, fixtureSys)
	benchUpdate(b, c)
}

func BenchmarkTopologyCollector(b *testing.B) {
	c, _ := newTestTopology(b, fixtureSys)
	benchUpdate(b, c)
}

func benchUpdate(b *testing.B, c Collector) {
	var batch exposition.Batch
	if err := c.Update(b.Context(), &batch); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuNow()
	for i := 0; i < b.N; i++ {
		batch.Reset()
		if err := c.Update(b.Context(), &batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuNow()-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/scrape")
	b.ReportMetric(float64(batch.Len()), "samples")
}
