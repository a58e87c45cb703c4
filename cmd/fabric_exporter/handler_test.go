package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"

	"github.com/fabric-exporter/fabric_exporter/collector"
)

func testHandler(t *testing.T, maxRequests int) *metricsHandler {
	t.Helper()
	opts := &collector.Options{PFC: collector.PFCOptions{EthtoolFixtures: fixtureEth}}
	if err := setupOptions(opts, fixtureSys, "/proc", "/", nil); err != nil {
		t.Fatal(err)
	}
	exp, err := collector.NewExporter([]string{"rdma"}, opts, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	return newMetricsHandler(exp, maxRequests, log.NewNopLogger())
}

func TestHandlerMaxRequests(t *testing.T) {
	h := testHandler(t, 1)
	h.inflight <- struct{}{} // one scrape in flight
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != http.StatusServiceUnavailable {
		t.Errorf("over the limit: %d, want 503", w.Code)
	}
	<-h.inflight
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != 200 {
		t.Errorf("under the limit: %d", w.Code)
	}
	if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
}

func TestHandlerGzip(t *testing.T) {
	h := testHandler(t, 0)
	plain := httptest.NewRecorder()
	h.ServeHTTP(plain, httptest.NewRequest("GET", "/metrics", nil))
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Accept-Encoding", "gzip, deflate")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Header().Get("Content-Encoding") != "gzip" {
		t.Fatalf("Content-Encoding %q", w.Header().Get("Content-Encoding"))
	}
	zlen := w.Body.Len()
	zr, err := gzip.NewReader(w.Body)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	strip := func(s string) string { // drop the per-scrape duration lines
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if !strings.HasPrefix(l, "fabric_scrape_collector_duration_seconds{") && !strings.HasPrefix(l, "fabric_scrape_read_errors_total{") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	if strip(string(b)) != strip(plain.Body.String()) {
		t.Error("gzipped body differs from the plain one")
	}
	if cl := w.Header().Get("Content-Length"); cl != strconv.Itoa(zlen) {
		t.Errorf("Content-Length %q for a %d-byte gzip body", cl, zlen)
	}
	if v := w.Header().Values("Vary"); !slices.Contains(v, "Accept-Encoding") {
		t.Errorf("gzip answer: Vary %q", v)
	}
	if v := plain.Header().Values("Vary"); !slices.Contains(v, "Accept-Encoding") {
		t.Errorf("plain answer: Vary %q", v)
	}
	// The stream is complete, standard gzip: the standard library reads
	// it to its end with the checksum checked, and nothing follows it.
	zr.Multistream(false)
	if rest, _ := io.ReadAll(zr); len(rest) != 0 {
		t.Error("data after the gzip member")
	}

	// Compressed size: within 25 % of compress/gzip at BestSpeed, what the
	// exporter sent before it used klauspost/compress.
	var std bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&std, gzip.BestSpeed)
	zw.Write(b)
	zw.Close()
	if ratio := float64(zlen) / float64(std.Len()); ratio > 1.25 {
		t.Errorf("gzip body %d bytes, %.2f× compress/gzip BestSpeed's %d", zlen, ratio, std.Len())
	}
	t.Logf("body %d bytes, gzip %d bytes (compress/gzip BestSpeed %d)", len(b), zlen, std.Len())
}

// Accept-Encoding as RFC 9110 section 12.5.3 defines it, end to end through
// the handler: which requests get a gzip answer.
func TestHandlerAcceptEncoding(t *testing.T) {
	h := testHandler(t, 0)
	for _, tc := range []struct {
		fields []string // Accept-Encoding field lines; nil: none
		gzip   bool
	}{
		{nil, false},
		{[]string{""}, false},
		{[]string{"gzip"}, true},
		{[]string{"GZIP"}, true},
		{[]string{"GZip"}, true},
		{[]string{"x-gzip"}, true},
		{[]string{"gzip, deflate, br"}, true}, // Go's and curl's default
		{[]string{"gzip;q=1.0"}, true},
		{[]string{"gzip;q=1.000"}, true},
		{[]string{"gzip; q=0.5"}, true},
		{[]string{"gzip ;Q=0.001"}, true},
		{[]string{"  gzip  ;  q=0.8  ,  identity ; q=0.5 "}, true},
		{[]string{"gzip;q=0"}, false},
		{[]string{"gzip;q=0.0"}, false},
		{[]string{"gzip;q=0.000"}, false},
		{[]string{"GZIP;Q=0"}, false},
		{[]string{"gzip ; q = 0"}, false},
		{[]string{"gzip;q=0, *"}, false}, // an explicit entry beats *
		{[]string{"*"}, true},
		{[]string{"*;q=0.5"}, true},
		{[]string{"*;q=0"}, false},
		{[]string{"*;q=0, gzip"}, true},
		{[]string{"identity"}, false},
		{[]string{"identity;q=0"}, false}, // nothing acceptable that we have: uncompressed
		{[]string{"identity;q=0, gzip;q=0.1"}, true},
		{[]string{"gzip;q=0.5, identity"}, false}, // identity preferred
		{[]string{"gzip;q=0.5"}, true},            // identity not named: below gzip
		{[]string{"gzip;q=0.5, identity;q=0.5"}, true},
		{[]string{"gzip;q=0.5, *;q=0.8"}, false}, // identity falls under * at 0.8
		{[]string{"br, zstd"}, false},
		{[]string{"br", "gzip"}, true}, // several field lines form one list
		{[]string{"gzip;q=2"}, false},  // a bad weight drops the element
		{[]string{"gzip;q=1.5"}, false},
		{[]string{"gzip;q=0.1234"}, false},
		{[]string{"gzip;q=abc"}, false},
		{[]string{"gzip;q="}, false},
		{[]string{"gzip;level=1"}, true}, // other parameters are ignored
		{[]string{"gzipx"}, false},
		{[]string{",,gzip,,"}, true},
		{[]string{"gzip;q=0, gzip;q=0.5"}, true}, // listed twice: the higher weight
	} {
		req := httptest.NewRequest("GET", "/metrics", nil)
		for _, f := range tc.fields {
			req.Header.Add("Accept-Encoding", f)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		got := w.Header().Get("Content-Encoding") == "gzip"
		if got != tc.gzip {
			t.Errorf("Accept-Encoding %q: gzip %t, want %t", tc.fields, got, tc.gzip)
			continue
		}
		body := w.Body.Bytes()
		if got {
			zr, err := gzip.NewReader(w.Body)
			if err != nil {
				t.Fatalf("%q: %v", tc.fields, err)
			}
			if body, err = io.ReadAll(zr); err != nil {
				t.Fatalf("%q: %v", tc.fields, err)
			}
		}
		if !bytes.Contains(body, []byte(`fabric_scrape_collector_success{collector="rdma"} 1`)) {
			t.Errorf("%q: body lacks the rdma collector's success", tc.fields)
		}
	}
}

// A client that sends a partial request and nothing more (slowloris) is cut
// off by the server's ReadHeaderTimeout instead of holding a connection.
func TestSlowHeadersAreCutOff(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: waits for the 10 s header timeout")
	}
	addr, _ := startExporter(t, "--path.sysfs="+fixtureSys, "--collector.disable-defaults", "--collector.rdma")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = io.ReadAll(conn)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("connection not closed by the server: %v after %s", err, elapsed)
	}
	if elapsed < 9*time.Second || elapsed > 20*time.Second {
		t.Errorf("server closed the slow connection after %s, want about 10 s", elapsed)
	}
}

func TestScrapeLimit(t *testing.T) {
	for _, c := range []struct {
		header string
		want   time.Duration
	}{
		{"", 0},
		{"10", 9500 * time.Millisecond},
		{"10.000000", 9500 * time.Millisecond},
		{" 2.5 ", 2 * time.Second},
		{"0.6", 300 * time.Millisecond}, // never below half
		{"0", 0}, {"-3", 0}, {"NaN", 0}, {"+Inf", 0}, {"soon", 0}, {"1e9", 0},
	} {
		h := http.Header{}
		if c.header != "" {
			h.Set("X-Prometheus-Scrape-Timeout-Seconds", c.header)
		}
		if got := scrapeLimit(h, 500*time.Millisecond); got != c.want {
			t.Errorf("%q: %s, want %s", c.header, got, c.want)
		}
	}
}
