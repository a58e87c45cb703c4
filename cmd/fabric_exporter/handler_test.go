package main

import (
	"compress/gzip"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
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
	return newMetricsHandler(exp, nil, maxRequests, slog.New(slog.DiscardHandler))
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
	if acceptsGzip("gzip;q=0") || !acceptsGzip("br, gzip;q=0.8") || acceptsGzip("identity") {
		t.Error("acceptsGzip is wrong")
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
