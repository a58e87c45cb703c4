// The benchmark's Prometheus client: the shared API client plus a series
// count of query answers and Prometheus's own /metrics.

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/promapi"
)

// prom is the benchmark's Prometheus: the shared API client, and its own
// /metrics.
type prom struct{ *promapi.Client }

// count runs a query (path /api/v1/query or /api/v1/query_range) and
// counts the series of the answer without decoding them: the per-query
// wall times include the client's decoding, kept as it was when
// docs/benchmarks.md was measured.
func (p *prom) count(path string, v url.Values) (int, error) {
	var d struct {
		Result []json.RawMessage `json:"result"`
	}
	err := p.Get(context.Background(), path, v, &d)
	return len(d.Result), err
}

var client = &http.Client{Timeout: 2 * time.Minute}

// selfMetrics sums Prometheus's own metrics by name over their labels.
func (p *prom) selfMetrics() (map[string]float64, error) {
	resp, err := client.Get(p.Base() + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		m[name] += v
	}
	return m, sc.Err()
}

// missedByGroup reads prometheus_rule_group_iterations_missed_total by
// its rule_group label ("file;group"), keyed by the group's name.
func (p *prom) missedByGroup() (map[string]float64, error) {
	resp, err := client.Get(p.Base() + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	const name = "prometheus_rule_group_iterations_missed_total{"
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		g := line
		if i := strings.Index(g, `rule_group="`); i >= 0 {
			g = g[i+len(`rule_group="`):]
			g = g[:strings.IndexByte(g, '"')]
			g = g[strings.LastIndexByte(g, ';')+1:]
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[g] += v
		}
	}
	return m, sc.Err()
}
