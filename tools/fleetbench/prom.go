// The benchmark's Prometheus client: the shared API client plus a series
// count of query answers and Prometheus's own /metrics.

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
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

// scanMetrics reads Prometheus's own /metrics and calls fn for every
// sample: its name, its labels ("" or "{...}") and its value.
func (p *prom) scanMetrics(fn func(name, labels string, v float64)) error {
	resp, err := client.Get(p.Base() + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
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
		name, labels := line[:i], ""
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name, labels = name[:j], name[j:]
		}
		fn(name, labels, v)
	}
	return sc.Err()
}

// selfMetrics sums Prometheus's own metrics by name over their labels.
func (p *prom) selfMetrics() (map[string]float64, error) {
	m := map[string]float64{}
	err := p.scanMetrics(func(name, _ string, v float64) { m[name] += v })
	return m, err
}

// missedByGroup reads prometheus_rule_group_iterations_missed_total by
// its rule_group label ("file;group"), keyed by the group's name.
func (p *prom) missedByGroup() (map[string]float64, error) {
	m := map[string]float64{}
	err := p.scanMetrics(func(name, labels string, v float64) {
		if name != "prometheus_rule_group_iterations_missed_total" {
			return
		}
		g := labels
		if i := strings.Index(g, `rule_group="`); i >= 0 {
			g = g[i+len(`rule_group="`):]
			g = g[:strings.IndexByte(g, '"')]
			g = g[strings.LastIndexByte(g, ';')+1:]
		}
		m[g] += v
	})
	return m, err
}

// server is a Prometheus process the benchmark runs: started, stopped,
// started again on the same data.
type server struct {
	bin  string
	args []string
	log  io.Writer
	api  *prom
	cmd  *exec.Cmd
}

// start starts it and waits until it is ready (a restart replays the WAL
// of every series first: minutes at thousands of nodes).
func (s *server) start() error {
	s.cmd = exec.Command(s.bin, s.args...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := s.api.WaitReady(ctx); err != nil {
		return fmt.Errorf("prometheus not ready: %w", err)
	}
	return nil
}

// stop sends SIGTERM and waits, killing the process after two minutes (a
// large head takes a while to close); nothing when it is not running.
func (s *server) stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		s.cmd.Process.Kill()
		<-done
	}
	s.cmd = nil
}
