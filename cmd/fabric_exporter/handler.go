package main

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/common/expfmt"

	"github.com/fabric-exporter/fabric_exporter/collector"
)

// metricsHandler serves one scrape: the collectors' samples and the
// exporter's own metrics, written straight to the text format by the
// Exporter. Requests beyond maxRequests in flight get 503. Responses are gzipped when the
// client asks for it (Prometheus does).
type metricsHandler struct {
	exp      *collector.Exporter
	logger   log.Logger
	offset   time.Duration // --web.scrape-timeout-offset
	inflight chan struct{}
	bufs     sync.Pool
	gzips    sync.Pool
}

func newMetricsHandler(exp *collector.Exporter, maxRequests int, logger log.Logger) *metricsHandler {
	h := &metricsHandler{exp: exp, logger: logger}
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
	buf := h.getBuf()
	defer h.putBuf(buf)

	if err := h.exp.WriteTextWithin(buf, scrapeLimit(r.Header, h.offset)); err != nil {
		level.Error(h.logger).Log("msg", "writing metrics", "err", err)
	}

	header := w.Header()
	header.Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	// The answer depends on Accept-Encoding, so caches must key on it
	// whichever encoding this one gets.
	header.Add("Vary", "Accept-Encoding")
	body := buf.Bytes()
	if negotiateGzip(r.Header.Values("Accept-Encoding")) {
		zbuf := h.getBuf()
		defer h.putBuf(zbuf)
		gz, _ := h.gzips.Get().(*gzip.Writer)
		if gz == nil {
			// Level 1 of klauspost/compress: a tenth of the body's size like
			// compress/gzip's BestSpeed, at about half its CPU
			// (docs/benchmarks.md, "Compression").
			gz, _ = gzip.NewWriterLevel(zbuf, gzip.BestSpeed)
		} else {
			gz.Reset(zbuf)
		}
		_, err := gz.Write(body)
		if cerr := gz.Close(); err == nil {
			err = cerr
		}
		h.gzips.Put(gz)
		if err != nil { // cannot happen with a bytes.Buffer; never send a broken stream
			level.Error(h.logger).Log("msg", "compressing metrics", "err", err)
		} else {
			header.Set("Content-Encoding", "gzip")
			body = zbuf.Bytes()
		}
	}
	header.Set("Content-Length", strconv.Itoa(len(body)))
	if _, err := w.Write(body); err != nil {
		level.Debug(h.logger).Log("msg", "writing response", "err", err)
	}
}

// scrapeLimit is the bound of a scrape from its request: Prometheus says
// how long it waits in X-Prometheus-Scrape-Timeout-Seconds (its
// scrape_timeout, 10 s by default); the collectors get that less offset,
// so that a slow collector is reported failed and the rest arrives before
// Prometheus gives up on the whole target. Never less than half the
// scrape's timeout; 0 (no bound from the request) without the header or
// with a value that is not a positive number of seconds.
func scrapeLimit(h http.Header, offset time.Duration) time.Duration {
	v := h.Get("X-Prometheus-Scrape-Timeout-Seconds")
	if v == "" {
		return 0
	}
	secs, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || !(secs > 0) || secs > 1e6 {
		return 0
	}
	d := time.Duration(secs * float64(time.Second))
	if d-offset < d/2 {
		return d / 2
	}
	return d - offset
}

func (h *metricsHandler) getBuf() *bytes.Buffer {
	buf, _ := h.bufs.Get().(*bytes.Buffer)
	if buf == nil {
		buf = &bytes.Buffer{}
	}
	buf.Reset()
	return buf
}

func (h *metricsHandler) putBuf(buf *bytes.Buffer) {
	if buf.Cap() <= 4<<20 {
		h.bufs.Put(buf)
	}
}

// negotiateGzip reports whether the Accept-Encoding field lines ask for a
// gzip answer, read as RFC 9110 section 12.5.3 says: a comma-separated list
// of codings, each with an optional weight ";q=" from 0 to 1 (0: not
// acceptable); codings and parameter names are case-insensitive, "x-gzip"
// is gzip, "*" stands for every coding not listed, and whitespace may
// surround every separator. gzip is chosen when its weight is above 0 and
// not below identity's (identity, when not listed, weighs what "*" does,
// or less than any coding named). No field, or an empty one, means no
// coding. An element that does not parse (a bad weight) is ignored. When
// neither is acceptable ("gzip;q=0, identity;q=0") the answer is
// uncompressed, as the RFC says a server should do when no coding it has
// is acceptable.
func negotiateGzip(fields []string) bool {
	gzipQ, identityQ, anyQ := -1, -1, -1 // weights in thousandths; -1: not listed
	for _, field := range fields {
		for elem := range strings.SplitSeq(field, ",") {
			coding, params, _ := strings.Cut(elem, ";")
			coding = strings.TrimSpace(coding)
			if coding == "" {
				continue
			}
			q, ok := qvalue(params)
			if !ok {
				continue
			}
			var dst *int
			switch {
			case strings.EqualFold(coding, "gzip"), strings.EqualFold(coding, "x-gzip"):
				dst = &gzipQ
			case strings.EqualFold(coding, "identity"):
				dst = &identityQ
			case coding == "*":
				dst = &anyQ
			default:
				continue
			}
			// A coding listed twice: the higher weight counts.
			*dst = max(*dst, q)
		}
	}
	if gzipQ < 0 {
		gzipQ = max(anyQ, 0)
	}
	if identityQ < 0 {
		// Not listed: acceptable, at the weight of "*" if there is one,
		// else below every coding the client names.
		identityQ = max(anyQ, 0)
	}
	return gzipQ > 0 && gzipQ >= identityQ
}

// qvalue returns the weight of one Accept-Encoding element's parameters
// (";q=0.8"), in thousandths, 1000 when there is none. RFC 9110:
// weight = OWS ";" OWS "q=" qvalue; qvalue = ( "0" [ "." 0*3DIGIT ] ) /
// ( "1" [ "." 0*3("0") ] ). Other parameters are ignored.
func qvalue(params string) (int, bool) {
	q := 1000
	for params != "" {
		var p string
		p, params, _ = strings.Cut(params, ";")
		name, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(name), "q") {
			continue
		}
		v = strings.TrimSpace(v)
		if v == "" || len(v) > 5 || (v[0] != '0' && v[0] != '1') {
			return 0, false
		}
		n := int(v[0]-'0') * 1000
		if len(v) > 1 {
			if v[1] != '.' {
				return 0, false
			}
			scale := 100
			for _, c := range []byte(v[2:]) {
				if c < '0' || c > '9' {
					return 0, false
				}
				n += int(c-'0') * scale
				scale /= 10
			}
		}
		if n > 1000 {
			return 0, false
		}
		q = n
	}
	return q, true
}
