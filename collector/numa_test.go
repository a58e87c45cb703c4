package collector

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
)

const numaWant = `
# HELP fabric_numa_numa_hit_total Pages allocated on this NUMA node as intended (numastat numa_hit).
# TYPE fabric_numa_numa_hit_total counter
fabric_numa_numa_hit_total{numa_node="0"} 9.837261843e+09
fabric_numa_numa_hit_total{numa_node="1"} 8.123551028e+09
# HELP fabric_numa_numa_miss_total Pages allocated on this NUMA node although the allocating task preferred another node (numastat numa_miss).
# TYPE fabric_numa_numa_miss_total counter
fabric_numa_numa_miss_total{numa_node="0"} 0
fabric_numa_numa_miss_total{numa_node="1"} 1.28562e+06
# HELP fabric_numa_numa_foreign_total Pages intended for this NUMA node but allocated on another node (numastat numa_foreign).
# TYPE fabric_numa_numa_foreign_total counter
fabric_numa_numa_foreign_total{numa_node="0"} 1.28562e+06
fabric_numa_numa_foreign_total{numa_node="1"} 0
# HELP fabric_numa_interleave_hit_total Interleaved pages allocated on this NUMA node as intended (numastat interleave_hit).
# TYPE fabric_numa_interleave_hit_total counter
fabric_numa_interleave_hit_total{numa_node="0"} 62544
fabric_numa_interleave_hit_total{numa_node="1"} 62502
# HELP fabric_numa_local_node_total Pages allocated on this NUMA node while the allocating task ran on it (numastat local_node).
# TYPE fabric_numa_local_node_total counter
fabric_numa_local_node_total{numa_node="0"} 9.836912571e+09
fabric_numa_local_node_total{numa_node="1"} 8.121908236e+09
# HELP fabric_numa_other_node_total Pages allocated on this NUMA node while the allocating task ran on another node (numastat other_node).
# TYPE fabric_numa_other_node_total counter
fabric_numa_other_node_total{numa_node="0"} 349272
fabric_numa_other_node_total{numa_node="1"} 2.928412e+06
# HELP fabric_numa_memory_total_bytes Memory of the NUMA node (node*/meminfo MemTotal).
# TYPE fabric_numa_memory_total_bytes gauge
fabric_numa_memory_total_bytes{numa_node="0"} 1.081728917504e+12
fabric_numa_memory_total_bytes{numa_node="1"} 1.082331619328e+12
# HELP fabric_numa_memory_free_bytes Free memory of the NUMA node (node*/meminfo MemFree).
# TYPE fabric_numa_memory_free_bytes gauge
fabric_numa_memory_free_bytes{numa_node="0"} 6.2703013888e+11
fabric_numa_memory_free_bytes{numa_node="1"} 7.17949489152e+11
# HELP fabric_numa_node_info A NUMA node and its CPUs (node*/cpulist; "" for a node without CPUs).
# TYPE fabric_numa_node_info gauge
fabric_numa_node_info{cpulist="0-47,96-143",numa_node="0"} 1
fabric_numa_node_info{cpulist="48-95,144-191",numa_node="1"} 1
`

func newTestNuma(t testing.TB, sysfs string) (Collector, *exposition.Counter) {
	t.Helper()
	env, errs := testEnv()
	c, err := newNumaCollector(env, &Options{SysfsPath: sysfs})
	if err != nil {
		t.Fatal(err)
	}
	return c, errs
}

// Values checked by hand against collector/fixtures/sys/devices/system/node:
// MemTotal 1056375896 kB x 1024 = 1081728917504 bytes; MemFree 612334120 kB
// x 1024 = 627030138880.
func TestNumaFixture(t *testing.T) {
	c, errs := newTestNuma(t, fixtureSys)
	compare(t, c, numaWant)
	if errs.Value() != 0 {
		t.Errorf("read errors = %v, want 0", errs.Value())
	}
}

// Without numastat (it is never absent on real kernels, but vmstat carries
// the same counters) the collector falls back to vmstat; a garbage meminfo
// and an unreadable cpulist skip those values and count read errors.
func TestNumaFallbacksAndFaults(t *testing.T) {
	sys := copyTree(t, fixtureSys)
	node := filepath.Join(sys, "devices/system/node")
	if err := os.Remove(filepath.Join(node, "node0/numastat")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(node, "node1/meminfo"), []byte("Node 1 MemTotal: x kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(node, "node1/cpulist"))
	if err := os.Mkdir(filepath.Join(node, "node1/cpulist"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A memory-only node (CXL) with an empty cpulist.
	for f, v := range map[string]string{"numastat": "numa_hit 5\nnuma_miss 0\nnuma_foreign 0\ninterleave_hit 0\nlocal_node 0\nother_node 5\n",
		"meminfo": "Node 2 MemTotal:       268435456 kB\nNode 2 MemFree:        268435456 kB\n", "cpulist": "\n"} {
		p := filepath.Join(node, "node2", f)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, errs := newTestNuma(t, sys)
	compare(t, c, `
# HELP fabric_numa_numa_hit_total Pages allocated on this NUMA node as intended (numastat numa_hit).
# TYPE fabric_numa_numa_hit_total counter
fabric_numa_numa_hit_total{numa_node="0"} 9.837261843e+09
fabric_numa_numa_hit_total{numa_node="1"} 8.123551028e+09
fabric_numa_numa_hit_total{numa_node="2"} 5
# HELP fabric_numa_interleave_hit_total Interleaved pages allocated on this NUMA node as intended (numastat interleave_hit).
# TYPE fabric_numa_interleave_hit_total counter
fabric_numa_interleave_hit_total{numa_node="0"} 62544
fabric_numa_interleave_hit_total{numa_node="1"} 62502
fabric_numa_interleave_hit_total{numa_node="2"} 0
# HELP fabric_numa_memory_total_bytes Memory of the NUMA node (node*/meminfo MemTotal).
# TYPE fabric_numa_memory_total_bytes gauge
fabric_numa_memory_total_bytes{numa_node="0"} 1.081728917504e+12
fabric_numa_memory_total_bytes{numa_node="2"} 2.74877906944e+11
# HELP fabric_numa_node_info A NUMA node and its CPUs (node*/cpulist; "" for a node without CPUs).
# TYPE fabric_numa_node_info gauge
fabric_numa_node_info{cpulist="",numa_node="2"} 1
fabric_numa_node_info{cpulist="0-47,96-143",numa_node="0"} 1
`, "fabric_numa_numa_hit_total", "fabric_numa_interleave_hit_total", "fabric_numa_memory_total_bytes", "fabric_numa_node_info")
	if got := errs.Value(); got != 2 { // node1 meminfo garbage, node1 cpulist unreadable
		t.Errorf("read errors = %v, want 2", got)
	}
}

func TestNumaAbsent(t *testing.T) {
	c, _ := newTestNuma(t, t.TempDir())
	var b exposition.Batch
	if err := c.Update(t.Context(), &b); !errors.Is(err, ErrNoData) || b.Len() != 0 {
		t.Errorf("no devices/system/node: err %v, %d samples; want ErrNoData, none", err, b.Len())
	}
	sys := t.TempDir()
	os.MkdirAll(filepath.Join(sys, "devices/system/node/power"), 0o755)
	c, _ = newTestNuma(t, sys)
	if err := c.Update(t.Context(), &b); !errors.Is(err, ErrNoData) {
		t.Errorf("no node* entries: err %v, want ErrNoData", err)
	}
}
