// An exporter under measurement: the child process, its start-up, warm-up
// and scrapes over one keep-alive connection, what one scrape holds, and
// its CPU time and memory from /proc.

package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// child is a running exporter.
type child struct {
	cmd    *exec.Cmd
	log    string
	exited chan struct{} // closed when the process has exited
	err    error         // Wait's result, valid after exited is closed
}

// startChild starts bin with the arguments args(address) on a free port.
func startChild(tmp, name, bin string, args func(addr string) []string) (*child, string, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	logf, err := os.CreateTemp(tmp, name+"-*.log")
	if err != nil {
		return nil, "", err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args(addr)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The child dies with the benchmark even if it is killed hard.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("starting %s: %w", name, err)
	}
	c := &child{cmd: cmd, log: logf.Name(), exited: make(chan struct{})}
	go func() { c.err = cmd.Wait(); close(c.exited) }()
	return c, addr, nil
}

// stop kills the child and waits for it.
func (c *child) stop() {
	c.cmd.Process.Kill()
	<-c.exited
}

// logTail returns the end of the child's output, for error messages.
func (c *child) logTail() string {
	b, _ := os.ReadFile(c.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// lastError returns the last line of log that carries an err= field,
// shortened; the exporters log a failing collector on every scrape.
func lastError(log string) string {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if _, e, ok := strings.Cut(lines[i], "err="); ok {
			if len(e) > 200 {
				e = e[:200] + "…"
			}
			return "err=" + e
		}
	}
	return ""
}

// freeAddr returns a 127.0.0.1 address with a port that was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startTarget starts an exporter, waits for it, warms it up with the
// given encoding and inspects one scrape. Series whose name starts with
// one of prefixes are counted as the collector's own (as opposed to go_*,
// process_* and scrape metadata).
func startTarget(ctx context.Context, cfg *config, tmp, name, bin, encoding string, prefixes []string, args func(addr string) []string) (*target, error) {
	c, addr, err := startChild(tmp, name, bin, args)
	if err != nil {
		return nil, err
	}
	url := "http://" + addr + "/metrics"

	// One client, one keep-alive connection; no transparent decompression:
	// the body is read as sent.
	tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	res := &result{name: name, encoding: encoding, lat: make([]time.Duration, 0, cfg.n*cfg.rounds)}
	t := &target{res: res, c: c, client: tr}
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if !info.Reused {
			res.conns++
		}
	}}
	t.scrape = func(keep *[]byte) error {
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Accept-Encoding", encoding)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var n int64
		if keep != nil {
			*keep, err = io.ReadAll(resp.Body)
			n = int64(len(*keep))
		} else {
			n, err = io.Copy(io.Discard, resp.Body)
		}
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: HTTP %s", url, resp.Status)
		}
		if n == 0 {
			return fmt.Errorf("%s: empty body", url)
		}
		if ce := resp.Header.Get("Content-Encoding"); (encoding == "gzip") != (ce == "gzip") {
			return fmt.Errorf("%s: asked for %s, got Content-Encoding %q", url, encoding, ce)
		}
		return nil
	}
	ok := false
	defer func() {
		if !ok {
			tr.CloseIdleConnections()
			c.stop()
		}
	}()

	// Wait until /metrics answers (or the child dies).
	deadline := time.Now().Add(cfg.startTimeout)
	for {
		err := t.scrape(nil)
		if err == nil {
			break
		}
		select {
		case <-c.exited:
			return nil, fmt.Errorf("%s exited during start-up (%v):\n%s", name, c.err, c.logTail())
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: %s did not answer within %s (%v):\n%s", name, url, cfg.startTimeout, err, c.logTail())
		}
	}

	// Warm-up, the memory after it, then one scrape whose body is kept for
	// size and series.
	for range cfg.warmup {
		if err := t.scrape(nil); err != nil {
			return nil, fmt.Errorf("%s warm-up: %w", name, err)
		}
	}
	if res.rss200, _, err = procMemory(c.cmd.Process.Pid); err != nil {
		return nil, err
	}
	var body []byte
	if err := t.scrape(&body); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	res.body = len(body)
	if encoding == "gzip" {
		// The whole stream must be valid gzip (checksum included).
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err == nil {
			body, err = io.ReadAll(zr)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: gzip answer: %w", name, err)
		}
	}
	res.plain = len(body)
	res.series, res.own, res.failed = inspectBody(body, prefixes)
	res.conns = 0
	ok = true
	return t, nil
}

// measure runs one round of n scrapes; only the child's CPU time counts.
func (t *target) measure(ctx context.Context, n int) error {
	pid := t.c.cmd.Process.Pid
	// One unmeasured scrape first: the keep-alive connection may have hit
	// the server's idle timeout while the other children were measured.
	// Only connections opened during the measured scrapes are counted.
	conns := t.res.conns
	if err := t.scrape(nil); err != nil {
		return fmt.Errorf("%s: %w", t.res.name, err)
	}
	t.res.conns = conns
	before, err := procCPU(pid)
	if err != nil {
		return err
	}
	for range n {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		start := time.Now()
		if err := t.scrape(nil); err != nil {
			return fmt.Errorf("%s: %w", t.res.name, err)
		}
		t.res.lat = append(t.res.lat, time.Since(start))
	}
	after, err := procCPU(pid)
	if err != nil {
		return err
	}
	t.res.rounds = append(t.res.rounds, (after-before)/time.Duration(n))
	return nil
}

// inspectBody reads one text exposition. It counts the samples (non-empty
// lines that are not # HELP or # TYPE comments), the samples whose metric
// name starts with one of prefixes, and lists the collectors that reported
// failure through a *_scrape_collector_success{collector="X"} 0 sample:
// such a scrape skips most of the work and is not comparable.
func inspectBody(body []byte, prefixes []string) (series, own int, failed []string) {
	for line := range strings.Lines(string(body)) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		series++
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				own++
				break
			}
		}
		name, rest, ok := strings.Cut(line, "{")
		if !ok || !strings.HasSuffix(name, "_scrape_collector_success") {
			continue
		}
		labels, value, _ := strings.Cut(rest, "}")
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil && v == 0 {
			failed = append(failed, labels)
		}
	}
	return series, own, failed
}

// procCPU returns utime+stime of process pid (all its threads) from
// /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may contain spaces;
	// the fields after it start with field 3, state.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	const utime, stime = 14 - 3, 15 - 3
	if len(f) <= stime {
		return 0, fmt.Errorf("/proc/%d/stat: only %d fields", pid, len(f)+2)
	}
	u, err1 := strconv.ParseInt(f[utime], 10, 64)
	s, err2 := strconv.ParseInt(f[stime], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(u+s) * time.Second / clockTicksPerSecond, nil
}

// procMemory returns VmRSS and VmHWM of process pid in KiB.
func procMemory(pid int) (rss, hwm int64, err error) {
	m, err := procStatus(pid)
	return m["VmRSS"], m["VmHWM"], err
}

// procStatus returns the "kB" fields of /proc/PID/status (VmRSS, VmHWM,
// RssAnon, RssFile, …) in KiB.
func procStatus(pid int) (map[string]int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	m := map[string]int64{}
	for line := range strings.Lines(string(b)) {
		key, val, ok := strings.Cut(line, ":")
		f := strings.Fields(val) // "12345 kB"
		if !ok || len(f) != 2 || f[1] != "kB" {
			continue
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("/proc/%d/status: bad %s line %q", pid, key, line)
		}
		m[key] = v
	}
	if _, ok := m["VmRSS"]; !ok {
		return nil, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
	}
	return m, nil
}
