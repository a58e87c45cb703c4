// Package promapi is the one client of the Prometheus HTTP API that the
// tests and tools share (e2e, tools/gpudrill, tools/fleetbench): instant
// and range queries with typed results, /api/v1/alerts, /api/v1/rules,
// readiness, and the payload of Alertmanager's webhook notifications. It
// speaks to Prometheus and to servers with the same API (VictoriaMetrics).
//
// Standard library only. client_golang's api/prometheus/v1 (which
// fabric_analyze uses) was not taken here: its RuleGroup has no group
// evaluationTime/lastEvaluation (what tools/fleetbench measures), it has no
// readiness call, and its results are model.Value interfaces that each
// caller would assert to a vector or matrix.
//
// Every failure is an *Error naming the endpoint, the query and, when
// the server answered, the HTTP status and the start of the body.
package promapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client queries one server. Its methods are safe for concurrent use.
type Client struct {
	base string
	hc   *http.Client
}

// New returns a client of the server at base ("http://127.0.0.1:9090").
// timeout bounds each request (0: only the context does).
func New(base string, timeout time.Duration) *Client {
	return &Client{base: strings.TrimSuffix(base, "/"), hc: &http.Client{Timeout: timeout}}
}

// Base is the server's base URL.
func (c *Client) Base() string { return c.base }

// Sample is one element of an instant vector (or a scalar, without labels).
type Sample struct {
	Metric map[string]string
	Time   time.Time
	Value  float64
}

// Point is one value of a range-query series.
type Point struct {
	Time  time.Time
	Value float64
}

// Series is one element of a range query's matrix.
type Series struct {
	Metric map[string]string
	Points []Point
}

// Alert is an active alert: of /api/v1/alerts, or of an alerting rule in
// /api/v1/rules.
type Alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"` // "pending" or "firing"
	ActiveAt    *time.Time        `json:"activeAt"`
	Value       string            `json:"value"`
}

// RuleGroup is one group of /api/v1/rules.
type RuleGroup struct {
	Name     string  `json:"name"`
	File     string  `json:"file"`
	Interval float64 `json:"interval"` // seconds
	Rules    []Rule  `json:"rules"`
	// EvaluationTime is the last evaluation's duration in seconds.
	EvaluationTime float64   `json:"evaluationTime"`
	LastEvaluation time.Time `json:"lastEvaluation"`
}

// Rule is a recording or alerting rule of a RuleGroup.
type Rule struct {
	Type           string    `json:"type"` // "recording" or "alerting"
	Name           string    `json:"name"`
	Query          string    `json:"query"`
	Health         string    `json:"health"`
	LastError      string    `json:"lastError"`
	EvaluationTime float64   `json:"evaluationTime"` // seconds
	LastEvaluation time.Time `json:"lastEvaluation"`
	State          string    `json:"state"` // alerting rules: "inactive", "pending", "firing"
	Alerts         []Alert   `json:"alerts"`
}

// Error is a failed API call.
type Error struct {
	Endpoint string // "/api/v1/query"
	Query    string // the PromQL expression, if any
	Status   int    // the HTTP status; 0 when no answer came
	Body     string // the start of the answer's body
	Type     string // the API's errorType ("bad_data", "execution", …)
	Msg      string // the API's error, or what went wrong here
	Err      error  // the transport or decoding error, if any
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("promapi: ")
	b.WriteString(e.Endpoint)
	if e.Query != "" {
		fmt.Fprintf(&b, " query %q", e.Query)
	}
	if e.Status != 0 {
		fmt.Fprintf(&b, ": HTTP %d", e.Status)
	}
	if e.Type != "" {
		b.WriteString(": " + e.Type)
	}
	if e.Msg != "" {
		b.WriteString(": " + e.Msg)
	}
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	if e.Body != "" && e.Type == "" {
		fmt.Fprintf(&b, " (body: %q)", e.Body)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// bodyLimit is how much of a failed answer's body an Error keeps.
const bodyLimit = 512

// get calls endpoint and decodes the "data" of a successful answer into out.
func (c *Client) get(ctx context.Context, endpoint, query string, v url.Values, out any) error {
	fail := func(status int, body []byte, typ, msg string, err error) *Error {
		if len(body) > bodyLimit {
			body = body[:bodyLimit]
		}
		return &Error{Endpoint: endpoint, Query: query, Status: status, Body: string(bytes.TrimSpace(body)), Type: typ, Msg: msg, Err: err}
	}
	u := c.base + endpoint
	if len(v) > 0 {
		u += "?" + v.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fail(0, nil, "", "", err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fail(0, nil, "", "", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fail(resp.StatusCode, body, "", "reading the answer", err)
	}
	// Two passes, the envelope then "data", as tools/fleetbench decoded
	// answers when the wall times in docs/benchmarks.md were measured (they
	// include this decoding).
	var env struct {
		Status    string          `json:"status"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
		Data      json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fail(resp.StatusCode, body, "", "decoding the answer", err)
	}
	if env.Status != "success" || resp.StatusCode/100 != 2 {
		msg := env.Error
		if msg == "" {
			msg = fmt.Sprintf("status %q", env.Status)
		}
		return fail(resp.StatusCode, body, env.ErrorType, msg, nil)
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		return fail(resp.StatusCode, body, "", "decoding the data", err)
	}
	return nil
}

// Get calls endpoint with the parameters v and decodes the "data" of a
// successful answer into out: for what the typed calls do not cover.
func (c *Client) Get(ctx context.Context, endpoint string, v url.Values, out any) error {
	return c.get(ctx, endpoint, v.Get("query"), v, out)
}

// value is a [time, "value"] pair of the API, decoded by hand rather than
// with a json.Unmarshal per part: a large matrix is mostly points
// (BenchmarkQueryRange measures its decoding).
type value struct {
	t time.Time
	f float64
}

func (p *value) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' {
		return fmt.Errorf("sample %s: want [time, \"value\"]", s)
	}
	ts, v, ok := strings.Cut(s[1:len(s)-1], ",")
	if !ok {
		return fmt.Errorf("sample %s: want [time, \"value\"]", s)
	}
	v = strings.TrimSpace(v)
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' || strings.ContainsAny(v[1:len(v)-1], `"\\`) {
		return fmt.Errorf("sample %s: the value is not a plain string", s)
	}
	t, err := parseTime(strings.TrimSpace(ts))
	if err != nil {
		return err
	}
	f, err := strconv.ParseFloat(v[1:len(v)-1], 64)
	if err != nil {
		return fmt.Errorf("value %s: %w", v, err)
	}
	p.t, p.f = t, f
	return nil
}

// parseTime reads the API's Unix seconds ("1796174191.265") exactly.
func parseTime(s string) (time.Time, error) {
	sec, frac, _ := strings.Cut(s, ".")
	n, err := strconv.ParseInt(sec, 10, 64)
	if err == nil && len(frac) <= 9 {
		var ns int64
		if frac != "" {
			ns, err = strconv.ParseInt((frac + "00000000")[:9], 10, 64)
		}
		if err == nil && ns >= 0 && !strings.HasPrefix(sec, "-") {
			return time.Unix(n, ns).UTC(), nil
		}
	}
	f, ferr := strconv.ParseFloat(s, 64) // exponent form
	if ferr != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return time.Time{}, fmt.Errorf("timestamp %s: not a number of seconds", s)
	}
	whole, part := math.Modf(f)
	return time.Unix(int64(whole), int64(math.Round(part*1e9))).UTC(), nil
}

type result struct {
	ResultType string          `json:"resultType"`
	Result     json.RawMessage `json:"result"`
}

// Query evaluates q at instant at (zero: the server's now). A vector
// comes back as its samples, a scalar as one sample without labels;
// another result type is an error.
func (c *Client) Query(ctx context.Context, q string, at time.Time) ([]Sample, error) {
	v := url.Values{"query": {q}}
	if !at.IsZero() {
		v.Set("time", formatTime(at))
	}
	const endpoint = "/api/v1/query"
	var r result
	if err := c.get(ctx, endpoint, q, v, &r); err != nil {
		return nil, err
	}
	bad := func(err error) error {
		return &Error{Endpoint: endpoint, Query: q, Status: http.StatusOK, Msg: "decoding the " + r.ResultType, Err: err}
	}
	switch r.ResultType {
	case "vector":
		var raw []struct {
			Metric map[string]string `json:"metric"`
			Value  *value            `json:"value"`
		}
		if err := json.Unmarshal(r.Result, &raw); err != nil {
			return nil, bad(err)
		}
		out := make([]Sample, 0, len(raw))
		for _, s := range raw {
			if s.Value == nil {
				return nil, bad(errors.New("a sample without a float value (native histograms are not read)"))
			}
			out = append(out, Sample{Metric: s.Metric, Time: s.Value.t, Value: s.Value.f})
		}
		return out, nil
	case "scalar":
		var raw value
		if err := json.Unmarshal(r.Result, &raw); err != nil {
			return nil, bad(err)
		}
		return []Sample{{Metric: map[string]string{}, Time: raw.t, Value: raw.f}}, nil
	default:
		return nil, &Error{Endpoint: endpoint, Query: q, Status: http.StatusOK, Msg: fmt.Sprintf("result type %q, want vector or scalar", r.ResultType)}
	}
}

// QueryRange evaluates q from start to end every step.
func (c *Client) QueryRange(ctx context.Context, q string, start, end time.Time, step time.Duration) ([]Series, error) {
	v := url.Values{"query": {q}, "start": {formatTime(start)}, "end": {formatTime(end)},
		"step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)}}
	const endpoint = "/api/v1/query_range"
	var r result
	if err := c.get(ctx, endpoint, q, v, &r); err != nil {
		return nil, err
	}
	if r.ResultType != "matrix" {
		return nil, &Error{Endpoint: endpoint, Query: q, Status: http.StatusOK, Msg: fmt.Sprintf("result type %q, want matrix", r.ResultType)}
	}
	var raw []struct {
		Metric map[string]string `json:"metric"`
		Values []value           `json:"values"`
	}
	if err := json.Unmarshal(r.Result, &raw); err != nil {
		return nil, &Error{Endpoint: endpoint, Query: q, Status: http.StatusOK, Msg: "decoding the matrix", Err: err}
	}
	out := make([]Series, 0, len(raw))
	for _, s := range raw {
		ser := Series{Metric: s.Metric, Points: make([]Point, 0, len(s.Values))}
		for _, p := range s.Values {
			ser.Points = append(ser.Points, Point{Time: p.t, Value: p.f})
		}
		out = append(out, ser)
	}
	return out, nil
}

// Alerts returns the server's active (pending and firing) alerts.
func (c *Client) Alerts(ctx context.Context) ([]Alert, error) {
	var d struct {
		Alerts []Alert `json:"alerts"`
	}
	err := c.get(ctx, "/api/v1/alerts", "", nil, &d)
	return d.Alerts, err
}

// Rules returns the server's rule groups.
func (c *Client) Rules(ctx context.Context) ([]RuleGroup, error) {
	var d struct {
		Groups []RuleGroup `json:"groups"`
	}
	err := c.get(ctx, "/api/v1/rules", "", nil, &d)
	return d.Groups, err
}

// WaitReady waits until the server's /-/ready answers 200 OK (Prometheus,
// Alertmanager).
func (c *Client) WaitReady(ctx context.Context) error {
	return WaitReady(ctx, c.hc, c.base+"/-/ready", nil)
}

// WaitReady polls u every 100 ms until it answers 200 OK. It gives up
// when ctx ends, or as soon as alive (if not nil) returns an error: the
// process that should answer has exited. hc nil: http.DefaultClient.
func WaitReady(ctx context.Context, hc *http.Client, u string, alive func() error) error {
	if hc == nil {
		hc = http.DefaultClient
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := "no answer"
	for {
		if alive != nil {
			if err := alive(); err != nil {
				return fmt.Errorf("%s: %w", u, err)
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else if ctx.Err() == nil {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready (%s): %w", u, last, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// formatTime writes t as the API's Unix seconds with milliseconds.
func formatTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1e3, 'f', 3, 64)
}

// WebhookMessage is the JSON body of an Alertmanager webhook notification
// (version 4); decode a request's body into it.
type WebhookMessage struct {
	Receiver string            `json:"receiver"`
	Status   string            `json:"status"`
	Alerts   []WebhookAlert    `json:"alerts"`
	Group    map[string]string `json:"groupLabels"`
}

// WebhookAlert is one alert of a WebhookMessage.
type WebhookAlert struct {
	Status      string            `json:"status"` // "firing" or "resolved"
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	EndsAt      time.Time         `json:"endsAt"`
}
