package kmsg

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// burst writes a recording of n records: one in 100 an event (the lines of
// lines.txt in turn), the rest the noise of a booting GPU server (the H200
// recording's messages, with their dictionaries).
func burst(b *testing.B, n int) string {
	b.Helper()
	noise, err := os.ReadFile("testdata/h200-boot.kmsg")
	if err != nil {
		b.Fatal(err)
	}
	var recs []string
	for _, r := range strings.SplitAfter(string(noise), "\n") {
		if r != "" && r[0] != ' ' {
			recs = append(recs, "")
		}
		if len(recs) > 0 {
			recs[len(recs)-1] += r
		}
	}
	var events []string
	for _, l := range readLines(b) {
		if l.want != nil {
			events = append(events, l.msg)
		}
	}
	var sb strings.Builder
	for i := 0; i < n; i++ {
		if i%100 == 99 {
			fmt.Fprintf(&sb, "3,%d,%d,-;%s\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n", i, i*10, events[(i/100)%len(events)])
			continue
		}
		_, body, _ := strings.Cut(recs[i%len(recs)], ";")
		fmt.Fprintf(&sb, "6,%d,%d,-;%s", i, i*10, body)
	}
	p := filepath.Join(b.TempDir(), "burst.kmsg")
	if err := os.WriteFile(p, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkReaderBurst reads and classifies a burst of 10,000 records, as
// a poll does after a storm of kernel messages; ns/op is per burst.
func BenchmarkReaderBurst(b *testing.B) {
	p := burst(b, 10000)
	b.ReportAllocs()
	events := 0
	for b.Loop() {
		r, err := Open(p, false)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Poll(1<<20, func(rec *Record) {
			if _, ok := Classify(rec); ok {
				events++
			}
		}); err != nil {
			b.Fatal(err)
		}
		r.Close()
	}
	b.ReportMetric(float64(events)/float64(b.N), "events/op")
}

// BenchmarkClassifyNoise is one line that is no event (the common case).
func BenchmarkClassifyNoise(b *testing.B) {
	msg := []byte("virtio-pci 0000:00:01.0: enabling device (0000 -> 0002)")
	dict := []byte("0000:00:01.0")
	b.ReportAllocs()
	for b.Loop() {
		ClassifyMessage(msg, dict)
	}
}

// BenchmarkClassifyEvent is one mlx5 command timeout.
func BenchmarkClassifyEvent(b *testing.B) {
	msg := []byte("mlx5_core 0000:18:00.0: wait_func:1155:(pid 1967079): TEARDOWN_HCA(0x103) timeout. Will cause a leak of a command resource")
	b.ReportAllocs()
	for b.Loop() {
		ClassifyMessage(msg, nil)
	}
}
