// What the two-node trials measure and keep besides pages: the
// exporter's cost over a window, the cost of one RAS query, RAS's answers
// as written, NCCL log lines and per-process values.

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/ncclras"
	"github.com/fabric-exporter/fabric_exporter/internal/promapi"
)

// exporterCost reports node 0's exporter's CPU per scrape from since to
// now and what its nccl-ras collector's queries took.
func exporterCost(cfg Config, res *Result, name string, st *stack, cpu0 float64, since time.Time) {
	sel := fmt.Sprintf(`instance=%q`, nodeName(0))
	cpu1, rss, _, err := procStat(st.exporter.cmd.Process.Pid)
	win := time.Since(since)
	w := int(win.Seconds())
	if err != nil || w < 1 {
		return
	}
	sc, _ := query(cfg.PrometheusPort, fmt.Sprintf(`count_over_time(up{job="fabric",%s}[%ds])`, sel, w))
	scrapes := 0.0
	if len(sc) == 1 {
		scrapes = sc[0].Value
	}
	line := fmt.Sprintf("%s: exporter over %.0f s (%.0f scrapes): CPU %.2f%% of one core", name, win.Seconds(), scrapes, 100*(cpu1-cpu0)/win.Seconds())
	if scrapes > 0 {
		line += fmt.Sprintf(", %.1f ms CPU per scrape (its background work, RAS polls and GPU sampling, included)", 1e3*(cpu1-cpu0)/scrapes)
	}
	res.printf("%s, RSS %.1f MiB", line, float64(rss)/(1<<20))
	var parts []string
	for _, q := range []struct{ label, expr string }{
		{"fabric_nccl_ras_query_duration_seconds", "fabric_nccl_ras_query_duration_seconds{" + sel + "}"},
		{`fabric_scrape_collector_duration_seconds{collector="nccl-ras"}`, `fabric_scrape_collector_duration_seconds{collector="nccl-ras",` + sel + "}"},
	} {
		var mm []string
		for _, f := range []string{"min", "avg", "max"} {
			if v, err := query(cfg.PrometheusPort, fmt.Sprintf("%s_over_time(%s[%ds])", f, q.expr, w)); err == nil && len(v) == 1 {
				mm = append(mm, fmt.Sprintf("%.3f", v[0].Value*1e3))
			}
		}
		if len(mm) == 0 {
			mm = []string{"(none in the window)"}
		}
		parts = append(parts, fmt.Sprintf("%s min/avg/max %s ms", q.label, strings.Join(mm, "/")))
	}
	res.printf("%s: over the same scrapes: %s", name, strings.Join(parts, "; "))
}

// rasClientCost times n queries with the exporter's RAS client: median
// wall time and CPU per query (this process's rusage, which the client
// dominates).
func rasClientCost(addr string, n int) (wall, cpu time.Duration, done int, err error) {
	var walls []float64
	var r0, r1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	for i := 0; i < n; i++ {
		t := time.Now()
		if _, err := ncclras.Query(context.Background(), addr, ncclras.Options{Timeout: 5 * time.Second}); err != nil {
			return 0, 0, 0, err
		}
		walls = append(walls, float64(time.Since(t)))
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	used := time.Duration(r1.Utime.Nano()-r0.Utime.Nano()+r1.Stime.Nano()-r0.Stime.Nano()) / time.Duration(n)
	return time.Duration(median(walls)), used, n, nil
}

// rasCmds are the commands before STATUS: the protocol, RAS's own
// gathering timeout and, for JSON, the format.
func rasCmds(json bool) []string {
	cmds := []string{"CLIENT PROTOCOL " + strconv.Itoa(ncclras.ClientProtocol), "TIMEOUT 5"}
	if json {
		cmds = append(cmds, "SET FORMAT json")
	}
	return cmds
}

// saveRAS keeps RAS's answers as it wrote them (JSON and text STATUS) in
// dir/ras-<what>.json and .txt.
func saveRAS(addr, dir, what string) {
	for _, f := range []struct {
		ext  string
		json bool
	}{{"json", true}, {"txt", false}} {
		if b, err := rawRAS(addr, rasCmds(f.json), 10*time.Second); err == nil {
			os.WriteFile(filepath.Join(dir, "ras-"+what+"."+f.ext), b, 0o644)
		}
	}
}

// rawRAS sends each command of cmds, reading its one-line answer, then
// STATUS, and returns the answer until EOF (at most 4 MiB).
func rawRAS(addr string, cmds []string, timeout time.Duration) ([]byte, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	br := bufio.NewReader(c)
	for _, cmd := range cmds {
		if _, err := c.Write([]byte(cmd + "\n")); err != nil {
			return nil, err
		}
		if _, err := br.ReadString('\n'); err != nil {
			return nil, fmt.Errorf("%s: %w", cmd, err)
		}
	}
	if _, err := c.Write([]byte("STATUS\n")); err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(br, ncclras.DefaultMaxAnswer))
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// nclLines counts NCCL log lines in the files under dir (a rank's output
// included: without NCCL_DEBUG, NCCL prints none).
func nclLines(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(p, ".log") && strings.Contains(p, "/nccl/") || strings.HasSuffix(p, ".out")) {
			return nil
		}
		b, _ := os.ReadFile(p)
		n += strings.Count(string(b), " NCCL INFO ") + strings.Count(string(b), " NCCL WARN ")
		return nil
	})
	return n
}

// valuesByPid lists samples by node and pid.
func valuesByPid(ss []promapi.Sample) string {
	if len(ss) == 0 {
		return "(none)"
	}
	var out []string
	for _, s := range ss {
		out = append(out, fmt.Sprintf("%s pid %s: %g", s.Metric["instance"], s.Metric["pid"], s.Value))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
