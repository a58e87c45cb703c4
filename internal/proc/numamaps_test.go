package proc

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestNumastatSample: the fixture numa_maps of the bash process, summed by
// the parser into numastat -p's rows, prints the real sample's table
// (collector/fixtures/numa_maps/numastat-p-numactl-45-bash-two-nodes.txt).
func TestNumastatSample(t *testing.T) {
	raw, err := os.ReadFile(fixtures + "/proc/98621/numa_maps")
	if err != nil {
		t.Fatal(err)
	}
	var m NumaMaps
	m.Write(raw)
	m.Finish()
	sample, err := os.ReadFile(fixtures + "/numa_maps/numastat-p-numactl-45-bash-two-nodes.txt")
	if err != nil {
		t.Fatal(err)
	}
	mb := func(v uint64) string { return fmt.Sprintf("%.2f", float64(v)/(1<<20)) }
	rows := map[string]int{"Huge": NumaHuge, "Heap": NumaHeap, "Stack": NumaStack, "Private": NumaPrivate}
	checked := 0
	for _, line := range strings.Split(string(sample), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		var got [3]string
		if cat, ok := rows[f[0]]; ok {
			got = [3]string{mb(m.Cats[0][cat]), mb(m.Cats[1][cat]), mb(m.Cats[0][cat] + m.Cats[1][cat])}
		} else if f[0] == "Total" {
			got = [3]string{mb(m.Bytes[0]), mb(m.Bytes[1]), mb(m.Bytes[0] + m.Bytes[1])}
		} else {
			continue
		}
		checked++
		if got != [3]string{f[1], f[2], f[3]} {
			t.Errorf("%s: %v, numastat -p printed %v", f[0], got, f[1:])
		}
	}
	if checked != 5 {
		t.Errorf("compared %d rows of the sample, want 5", checked)
	}
}

// The real numa_maps sample (cubesandbox#272, ends mid-line) sums to
// N0 = 1+1+11 = 13 pages and N1 = 162+2092+150+106+2+18+2+2+2 = 2536 pages.
func TestNumaMapsRealSample(t *testing.T) {
	raw, err := os.ReadFile(fixtures + "/numa_maps/numa_maps-cubesandbox-272-shim-process.txt")
	if err != nil {
		t.Fatal(err)
	}
	var m NumaMaps
	m.Write(raw)
	m.Finish()
	if len(m.Bytes) != 2 || m.Bytes[0] != 13*4096 || m.Bytes[1] != 2536*4096 {
		t.Errorf("per node %v, want [%d %d]", m.Bytes, 13*4096, 2536*4096)
	}
	if m.Cats[0][NumaHeap] != 11*4096 || m.Cats[1][NumaHeap] != 18*4096 {
		t.Errorf("heap %d %d", m.Cats[0][NumaHeap], m.Cats[1][NumaHeap])
	}
}

func TestNumaMapsEdgeCases(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []uint64
	}{
		// 1 GiB huge pages: numastat would multiply by the default huge page size.
		{"7f0000000000 default file=/dev/hugepages1G/kv huge dirty=2 N1=2 kernelpagesize_kB=1048576\n", []uint64{0, 2 << 30}},
		// A file name with spaces that looks like counts: only the trailing counts count.
		{"7f0000000000 default file=/tmp/kv N0=999 cache mapped=4 N1=4 kernelpagesize_kB=4\n", []uint64{0, 4 * 4096}},
		// CRLF, tabs, no trailing newline, a line without pages, garbage.
		{"1 default anon=1 N0=1 kernelpagesize_kB=4\r\n2 default\n3 interleave:0-1 N0=x kernelpagesize_kB=4\n4 default N0=3\tkernelpagesize_kB=4", []uint64{4 * 4096}},
		{"5 default N7=1 kernelpagesize_kB=4\n6 default N2000=1 kernelpagesize_kB=4\n", []uint64{0, 0, 0, 0, 0, 0, 0, 4096}},
		{"", nil},
	} {
		var m NumaMaps
		m.Write([]byte(tc.in))
		m.Finish()
		if fmt.Sprint(m.Bytes) != fmt.Sprint(tc.want) {
			t.Errorf("%q: %v, want %v", tc.in, m.Bytes, tc.want)
		}
	}
}

// FuzzParseNumaMaps: no panic; feeding the text in chunks of any size gives
// the same sums as feeding it at once; the categories add up to the totals.
func FuzzParseNumaMaps(f *testing.F) {
	for _, p := range []string{fixtures + "/numa_maps/numa_maps-cubesandbox-272-shim-process.txt", fixtures + "/proc/4310/numa_maps", fixtures + "/proc/98621/numa_maps"} {
		raw, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw, uint8(7))
	}
	f.Add([]byte("7f00 default huge N1=2 kernelpagesize_kB=1048576"), uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		var whole, parts NumaMaps
		whole.Write(in)
		whole.Finish()
		n := int(chunk) + 1
		for i := 0; i < len(in); i += n {
			parts.Write(in[i:min(i+n, len(in))])
		}
		parts.Finish()
		if fmt.Sprint(whole.Bytes) != fmt.Sprint(parts.Bytes) || fmt.Sprint(whole.Cats) != fmt.Sprint(parts.Cats) {
			t.Fatalf("chunks of %d: %v, whole: %v", n, parts.Bytes, whole.Bytes)
		}
		for node, v := range whole.Bytes {
			var sum uint64
			for _, c := range whole.Cats[node] {
				sum += c
			}
			if sum != v {
				t.Fatalf("node %d: categories %d, total %d", node, sum, v)
			}
		}
	})
}
