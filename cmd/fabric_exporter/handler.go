package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/fabric-exporter/fabric_exporter/collector"
)

// metricsHandler serves one scrape: the collectors' samples written
// straight to the text format by the Exporter, then the client_golang
// registry (build info, Go and process metrics) through expfmt. Requests
// beyond maxRequests in flight get 503. Responses are gzipped when the
// client asks for it (Prometheus does).
type metricsHandler struct {
	exp      *collector.Exporter
	extra    prometheus.Gatherer
	logger   *slog.Logger
	inflight chan struct{}
	bufs     sync.Pool
	gzips    sync.Pool
}

func newMetricsHandler(exp *collector.Exporter, extra prometheus.Gatherer, maxRequests int, logger *slog.Logger) *metricsHandler {
	h := &metricsHandler{exp: exp, extra: extra, logger: logger}
	if maxRequests > 0 {
		h.inflight = make(chan struct{}, maxRequests)
	}
	return h
}

func (h *metricsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.inflight != nil {
		select {
		case h.inflight <- struct{}{}:
			defer func() { <-h.inflight }()
		default:
			http.Error(w, "Limit of concurrent requests reached, try again later.", http.StatusServiceUnavailable)
			return
		}
	}
	buf, _ := h.bufs.Get().(*bytes.Buffer)
	if buf == nil {
		buf = &bytes.Buffer{}
	}
	buf.Reset()
	defer func() {
		if buf.Cap() <= 4<<20 {
			h.bufs.Put(buf)
		}
	}()

	if err := h.exp.WriteText(buf); err != nil {
		h.logger.Error("writing metrics", "err", err)
	}
	if h.extra != nil {
		mfs, err := h.extra.Gather()
		if err != nil {
			h.logger.Error("gathering exporter metrics", "err", err)
		}
		enc := expfmt.NewEncoder(buf, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				h.logger.Error("encoding exporter metrics", "err", err)
			}
		}
	}

	header := w.Header()
	header.Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	var out io.Writer = w
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		header.Set("Content-Encoding", "gzip")
		header.Add("Vary", "Accept-Encoding")
		gz, _ := h.gzips.Get().(*gzip.Writer)
		if gz == nil {
			gz, _ = gzip.NewWriterLevel(w, gzip.BestSpeed)
		} else {
			gz.Reset(w)
		}
		defer func() {
			gz.Close()
			h.gzips.Put(gz)
		}()
		out = gz
	} else {
		header.Set("Content-Length", strconv.Itoa(buf.Len()))
	}
	if _, err := out.Write(buf.Bytes()); err != nil {
		h.logger.Debug("writing response", "err", err)
	}
}

func acceptsGzip(header string) bool {
	for _, part := range strings.Split(header, ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(enc) == "gzip" && strings.ReplaceAll(strings.TrimSpace(params), " ", "") != "q=0" {
			return true
		}
	}
	return false
}
