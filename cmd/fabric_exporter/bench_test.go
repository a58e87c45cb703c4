package main

import (
	"bytes"
	stdgzip "compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-kit/log"
	kgzip "github.com/klauspost/compress/gzip"

	"github.com/fabric-exporter/fabric_exporter/collector"
	"github.com/fabric-exporter/fabric_exporter/internal/fixturetree"
)

// benchServer serves the exporter's mux on an n-HCA copy of the fixture
// with only the rdma collector (the part node_exporter's infiniband
// collector can be compared with) or all collectors.
func benchServer(b *testing.B, hcas int, names ...string) http.Handler {
	b.Helper()
	sys := b.TempDir()
	if err := fixturetree.HCAs(fixtureSys, sys, hcas); err != nil {
		b.Fatal(err)
	}
	opts := &collector.Options{PFC: collector.PFCOptions{EthtoolFixtures: fixtureEth}}
	if err := setupOptions(opts, sys, "/proc", "/", nil); err != nil {
		b.Fatal(err)
	}
	exp, err := collector.NewExporter(names, opts, log.NewNopLogger())
	if err != nil {
		b.Fatal(err)
	}
	return newMux(exp, opts, "/metrics", 0, true, log.NewNopLogger(), false)
}

// BenchmarkScrapeHTTP is one full scrape over loopback HTTP (client
// allocations included), uncompressed as in the side-by-side comparison.
func BenchmarkScrapeHTTP(b *testing.B) {
	for _, hcas := range []int{2, 8} {
		for _, set := range [][]string{{"rdma"}, {"rdma", "netdev", "pfc"}} {
			b.Run(fmt.Sprintf("hcas=%d/collectors=%d", hcas, len(set)), func(b *testing.B) {
				srv := httptest.NewServer(benchServer(b, hcas, set...))
				defer srv.Close()
				client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
				scrape := func() {
					resp, err := client.Get(srv.URL + "/metrics")
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				scrape()
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					scrape()
				}
			})
		}
	}
}

// BenchmarkScrapeHandler is the server side of a scrape only, uncompressed
// and gzipped as Prometheus asks.
func BenchmarkScrapeHandler(b *testing.B) {
	for _, hcas := range []int{2, 8} {
		for _, enc := range []string{"identity", "gzip"} {
			b.Run(fmt.Sprintf("hcas=%d/%s", hcas, enc), func(b *testing.B) {
				h := benchServer(b, hcas, "rdma")
				req := httptest.NewRequest("GET", "/metrics", nil)
				req.Header.Set("Accept-Encoding", enc)
				b.ReportAllocs()
				for b.Loop() {
					w := httptest.NewRecorder()
					h.ServeHTTP(w, req)
					if w.Code != 200 || (enc == "gzip") != (w.Header().Get("Content-Encoding") == "gzip") {
						b.Fatal(w.Code, w.Header())
					}
				}
			})
		}
	}
}

// BenchmarkCompression compresses one 8-HCA rdma scrape body with the
// candidates for the gzip answer; "bytes" is the compressed size.
func BenchmarkCompression(b *testing.B) {
	w := httptest.NewRecorder()
	benchServer(b, 8, "rdma").ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body := w.Body.Bytes()
	type compressor interface {
		io.WriteCloser
		Reset(io.Writer)
	}
	for _, c := range []struct {
		name string
		new  func(io.Writer) compressor
	}{
		{"compress-gzip-1", func(w io.Writer) compressor { z, _ := stdgzip.NewWriterLevel(w, 1); return z }},
		{"compress-gzip-6", func(w io.Writer) compressor { z, _ := stdgzip.NewWriterLevel(w, 6); return z }},
		{"klauspost-1", func(w io.Writer) compressor { z, _ := kgzip.NewWriterLevel(w, 1); return z }},
		{"klauspost-3", func(w io.Writer) compressor { z, _ := kgzip.NewWriterLevel(w, 3); return z }},
		{"klauspost-6", func(w io.Writer) compressor { z, _ := kgzip.NewWriterLevel(w, 6); return z }},
		{"klauspost-stateless", func(w io.Writer) compressor { z, _ := kgzip.NewWriterLevel(w, kgzip.StatelessCompression); return z }},
	} {
		b.Run(c.name, func(b *testing.B) {
			var out bytes.Buffer
			z := c.new(&out)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				out.Reset()
				z.Reset(&out)
				z.Write(body)
				z.Close()
			}
			b.ReportMetric(float64(out.Len()), "bytes")
		})
	}
}

// BenchmarkSelfMetrics is a scrape of the exporter's own metrics only (no
// collector): the cost of go_*, process_*, promhttp_* and the build info.
func BenchmarkSelfMetrics(b *testing.B) {
	exp, err := collector.NewExporter(nil, &collector.Options{}, log.NewNopLogger())
	if err != nil {
		b.Fatal(err)
	}
	h := newMux(exp, &collector.Options{}, "/metrics", 0, true, log.NewNopLogger(), false)
	req := httptest.NewRequest("GET", "/metrics", nil)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatal(w.Code)
		}
	}
}
