package promapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// server answers every request with the testdata file named by answer
// (from the request) and status; it records the last request's query.
func server(t *testing.T, status int, answer func(r *http.Request) string) (*Client, *http.Request) {
	t.Helper()
	last := new(http.Request)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*last = *r
		body := answer(r)
		if strings.HasSuffix(body, ".json") {
			b, err := os.ReadFile(filepath.Join("testdata", body))
			if err != nil {
				t.Error(err)
			}
			body = string(b)
		}
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return New(srv.URL+"/", 5*time.Second), last
}

func file(name string) func(*http.Request) string { return func(*http.Request) string { return name } }

func TestQueryVector(t *testing.T) {
	c, req := server(t, 200, file("query-vector.json"))
	at := time.Date(2026, 12, 2, 1, 16, 31, 265e6, time.UTC)
	got, err := c.Query(context.Background(), `up`, at)
	if err != nil {
		t.Fatal(err)
	}
	if req.URL.Path != "/api/v1/query" || req.URL.Query().Get("query") != "up" || req.URL.Query().Get("time") != "1796174191.265" {
		t.Errorf("request %s", req.URL)
	}
	want := Sample{Metric: map[string]string{"__name__": "up", "instance": "127.0.0.1:19190", "job": "prometheus"}, Time: at, Value: 1}
	if len(got) != 1 || !got[0].Time.Equal(want.Time) || got[0].Value != 1 || len(got[0].Metric) != 3 || got[0].Metric["instance"] != want.Metric["instance"] {
		t.Errorf("got %+v, want %+v", got, want)
	}
	// Without a time the server's now is used.
	if _, err := c.Query(context.Background(), `up`, time.Time{}); err != nil || req.URL.Query().Has("time") {
		t.Errorf("zero time: %v, request %s", err, req.URL)
	}
}

func TestQueryScalar(t *testing.T) {
	for _, tc := range []struct {
		file string
		want float64
	}{{"query-scalar.json", 1.5}, {"query-inf.json", math.Inf(-1)}} {
		c, _ := server(t, 200, file(tc.file))
		got, err := c.Query(context.Background(), "x", time.Time{})
		if err != nil || len(got) != 1 || got[0].Value != tc.want || len(got[0].Metric) != 0 || got[0].Time.Unix() != 1796174191 {
			t.Errorf("%s: %+v, %v; want one sample %v", tc.file, got, err, tc.want)
		}
	}
}

func TestQueryEmpty(t *testing.T) {
	c, _ := server(t, 200, file("query-empty.json"))
	got, err := c.Query(context.Background(), `up{job="none"}`, time.Time{})
	if err != nil || got == nil || len(got) != 0 {
		t.Errorf("got %#v, %v; want an empty vector and no error", got, err)
	}
}

// An instant query that returns a matrix (a range selector) is an error
// naming the query, not an empty vector.
func TestQueryMatrixIsError(t *testing.T) {
	c, _ := server(t, 200, file("query-matrix-instant.json"))
	_, err := c.Query(context.Background(), `up[5s]`, time.Time{})
	if err == nil || !strings.Contains(err.Error(), `"up[5s]"`) || !strings.Contains(err.Error(), `"matrix"`) {
		t.Errorf("err = %v", err)
	}
}

func TestQueryRange(t *testing.T) {
	c, req := server(t, 200, file("query-range.json"))
	end := time.Unix(1796174191, 0)
	got, err := c.QueryRange(context.Background(), "job:up:sum", end.Add(-4*time.Second), end, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	q := req.URL.Query()
	if req.URL.Path != "/api/v1/query_range" || q.Get("start") != "1796174187.000" || q.Get("end") != "1796174191.000" || q.Get("step") != "2" {
		t.Errorf("request %s", req.URL)
	}
	if len(got) != 1 || got[0].Metric["job"] != "prometheus" || len(got[0].Points) != 3 {
		t.Fatalf("got %+v", got)
	}
	for i, p := range got[0].Points {
		if p.Value != 1 || p.Time.Unix() != 1796174187+2*int64(i) {
			t.Errorf("point %d: %+v", i, p)
		}
	}
	// A range query needs a matrix.
	c, _ = server(t, 200, file("query-vector.json"))
	if _, err := c.QueryRange(context.Background(), "up", end, end, time.Second); err == nil {
		t.Error("a vector answer to a range query passed")
	}
}

// An error answer of the API: the error names the query, the HTTP status,
// the error type and Prometheus' message.
func TestErrorStatus(t *testing.T) {
	c, _ := server(t, 400, file("query-bad.json"))
	_, err := c.Query(context.Background(), `sum(up`, time.Time{})
	var e *Error
	if !errors.As(err, &e) || e.Status != 400 || e.Type != "bad_data" || e.Query != "sum(up" {
		t.Fatalf("err = %#v", err)
	}
	for _, s := range []string{"/api/v1/query", `"sum(up"`, "HTTP 400", "bad_data", "unclosed left parenthesis"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q lacks %q", err, s)
		}
	}
	// A range query, the alerts and the rules fail the same way.
	if _, err := c.QueryRange(context.Background(), "sum(up", time.Unix(0, 0), time.Unix(1, 0), time.Second); err == nil || !strings.Contains(err.Error(), "/api/v1/query_range query \"sum(up\": HTTP 400") {
		t.Errorf("range: %v", err)
	}
	if _, err := c.Alerts(context.Background()); err == nil || !strings.Contains(err.Error(), "/api/v1/alerts: HTTP 400") {
		t.Errorf("alerts: %v", err)
	}
	if _, err := c.Rules(context.Background()); err == nil || !strings.Contains(err.Error(), "/api/v1/rules: HTTP 400") {
		t.Errorf("rules: %v", err)
	}
}

// An answer that is not the API's JSON (a proxy's error page, a 404): the
// error carries the status and the start of the body.
func TestBadJSON(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
	}{
		{502, "<html><body>502 Bad Gateway</body></html>"},
		{404, "404 page not found\n"},
		{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"x"]}]}}`},
		{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{}}]}}`},
		{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":"1"}]}}`},
		{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1]}]}}`},
		{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"\u0031"]}]}}`},
		{200, `{"status":"success","data":{"resultType":"vector","result":{}}}`},
		{200, `{"status":"success","data"`},
	} {
		c, _ := server(t, tc.status, file(tc.body))
		_, err := c.Query(context.Background(), "up", time.Time{})
		var e *Error
		if !errors.As(err, &e) || e.Status != tc.status || !strings.Contains(err.Error(), `query "up"`) {
			t.Errorf("%d %q: err = %v", tc.status, tc.body, err)
			continue
		}
		if tc.status != 200 && !strings.Contains(err.Error(), strings.TrimSpace(tc.body)) {
			t.Errorf("%q lacks the body", err)
		}
		t.Logf("%v", err)
	}
	// A long body is cut.
	c, _ := server(t, 500, file(strings.Repeat("x", 10000)))
	if _, err := c.Query(context.Background(), "up", time.Time{}); err == nil || len(err.Error()) > 1000 {
		t.Errorf("err of %d bytes", len(err.Error()))
	}
}

func TestAlerts(t *testing.T) {
	c, req := server(t, 200, file("alerts.json"))
	got, err := c.Alerts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if req.URL.Path != "/api/v1/alerts" {
		t.Errorf("path %s", req.URL.Path)
	}
	if len(got) != 1 {
		t.Fatalf("%+v", got)
	}
	a := got[0]
	if a.Labels["alertname"] != "AlwaysFiring" || a.Labels["severity"] != "page" || a.Annotations["summary"] != "always firing" ||
		a.State != "firing" || a.ActiveAt == nil || a.ActiveAt.Unix() != 1796174176 || a.Value != "1e+00" {
		t.Errorf("%+v", a)
	}
}

func TestRules(t *testing.T) {
	c, req := server(t, 200, file("rules.json"))
	got, err := c.Rules(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if req.URL.Path != "/api/v1/rules" {
		t.Errorf("path %s", req.URL.Path)
	}
	if len(got) != 1 || len(got[0].Rules) != 2 {
		t.Fatalf("%+v", got)
	}
	g := got[0]
	if g.Name != "capture" || g.Interval != 1 || g.EvaluationTime != 0.001595675 || g.LastEvaluation.UnixNano() != 1796174191540362892 {
		t.Errorf("group %+v", g)
	}
	rec, alert := g.Rules[0], g.Rules[1]
	if rec.Type != "recording" || rec.Name != "job:up:sum" || rec.Query != "sum by (job) (up)" || rec.Health != "ok" || rec.EvaluationTime != 0.001224682 {
		t.Errorf("recording rule %+v", rec)
	}
	if alert.Type != "alerting" || alert.Name != "AlwaysFiring" || alert.State != "firing" || len(alert.Alerts) != 1 || alert.Alerts[0].Labels["severity"] != "page" {
		t.Errorf("alerting rule %+v", alert)
	}
}

// A server that does not answer in time: the client's timeout ends the
// call with an error naming the query.
func TestTimeout(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(block)
	c := New(srv.URL, 50*time.Millisecond)
	_, err := c.Query(context.Background(), "up", time.Time{})
	if err == nil || !strings.Contains(err.Error(), `query "up"`) || !strings.Contains(err.Error(), "Client.Timeout") {
		t.Errorf("client timeout: %v", err)
	}
	// The context's deadline, too.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = New(srv.URL, 0).Rules(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("context deadline: %v", err)
	}
}

func TestWaitReady(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/-/ready" {
			http.NotFound(w, r)
			return
		}
		if calls.Add(1) < 3 {
			http.Error(w, "Service Unavailable", 503)
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := New(srv.URL, time.Second).WaitReady(ctx); err != nil || calls.Load() != 3 {
		t.Errorf("WaitReady: %v after %d calls, want ready at the third", err, calls.Load())
	}

	// Never ready: the context ends the wait, and the error says what the
	// server last answered.
	short, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	err := WaitReady(short, nil, srv.URL+"/nope", nil)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "404") {
		t.Errorf("never ready: %v", err)
	}

	// The process that should answer exited: give up at once.
	exited := errors.New("exited")
	err = WaitReady(ctx, nil, srv.URL+"/nope", func() error { return exited })
	if !errors.Is(err, exited) {
		t.Errorf("exited: %v", err)
	}
}

func TestWebhookMessage(t *testing.T) {
	b, err := os.ReadFile("testdata/webhook.json")
	if err != nil {
		t.Fatal(err)
	}
	var m WebhookMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Receiver != "hook" || m.Status != "firing" || len(m.Alerts) != 1 {
		t.Fatalf("%+v", m)
	}
	a := m.Alerts[0]
	if a.Status != "firing" || a.Labels["alertname"] != "Manual" || a.Labels["instance"] != "node1" || a.Annotations["summary"] != "by amtool" ||
		a.StartsAt.Unix() != 1796174202 || !a.EndsAt.IsZero() {
		t.Errorf("%+v", a)
	}
}

// Timestamps are read exactly (a float64 would turn .265 into .265000105).
func TestParseTime(t *testing.T) {
	for s, want := range map[string]time.Time{
		"1796174191.265":       time.Unix(1796174191, 265e6),
		"1796174187":           time.Unix(1796174187, 0),
		"1.000000001":          time.Unix(1, 1),
		"1.7e9":                time.Unix(17e8, 0),
		"-1.5":                 time.Unix(-2, 5e8),
		"1796174191.123456789": time.Unix(1796174191, 123456789),
	} {
		if got, err := parseTime(s); err != nil || !got.Equal(want) {
			t.Errorf("%s: %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"x", `"1"`, "NaN", "1.2.3"} {
		if got, err := parseTime(s); err == nil {
			t.Errorf("%s: %v, want an error", s, got)
		}
	}
}

// BenchmarkQueryRange: what the typed decoding costs the caller on a large
// answer, against counting the series of the same answer undecoded through
// Get (what tools/fleetbench does for its per-query wall times): 1000 series (500 nodes × 2 rails) of 21
// points (5 minutes at 15 s), through a local HTTP server.
//
//	go test -run '^$' -bench QueryRange -benchmem ./internal/promapi
func BenchmarkQueryRange(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"status":"success","data":{"resultType":"matrix","result":[`)
	for i := range 1000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"metric":{"__name__":"rail:fabric_rdma_bits:rate1m","cluster":"fleet","instance":"node%04d","rail":"mlx5_%d"},"values":[`, i/2, 3*(i%2))
		for j := range 21 {
			if j > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `[%d,"%g"]`, 1796174191+15*j, 2.0147e10+float64(i*j))
		}
		sb.WriteString(`]}`)
	}
	sb.WriteString(`]}}`)
	body := sb.String()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
	defer srv.Close()
	c := New(srv.URL, time.Minute)
	end := time.Unix(1796174491, 0)
	b.Run("typed", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if m, err := c.QueryRange(context.Background(), "q", end.Add(-5*time.Minute), end, 15*time.Second); err != nil || len(m) != 1000 {
				b.Fatal(len(m), err)
			}
		}
	})
	b.Run("count", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var d struct {
				Result []json.RawMessage `json:"result"`
			}
			if err := c.Get(context.Background(), "/api/v1/query_range", nil, &d); err != nil || len(d.Result) != 1000 {
				b.Fatal(len(d.Result), err)
			}
		}
	})
}
