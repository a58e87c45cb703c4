package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/promapi"
)

// The NCCL Inspector part of the drill: with the plugin loaded (live) or
// its recorded JSON dumps (replay), the exporter follows the ranks'
// NCCL_INSPECTOR_DUMP_DIR (--collector.nccl-inspector.dump-dir) and the
// drill checks from Prometheus that the bus bandwidth is scraped for every
// rank, that it joins the rank's NET/Socket choice on (host, pid), and that
// it agrees with what the dump files say.

const busBWRule = "comm:fabric_nccl_inspector_bus_bandwidth_bytes_per_second:rate1m"

// parseDur reads a Prometheus interval ("15s", "2s"); 15 s if unreadable.
func parseDur(s string) time.Duration {
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d
	}
	return 15 * time.Second
}

// replayInspector appends the recorded Inspector JSON files of src to dst
// in 20 chunks spread over `over`, as the plugin's dump thread does while
// the job runs, so that rate() sees the counters grow over several scrapes.
// The returned channel is closed when every line is written.
func replayInspector(src, dst string, over time.Duration) (<-chan struct{}, error) {
	files, _ := filepath.Glob(filepath.Join(src, "*.log"))
	if len(files) == 0 {
		return nil, fmt.Errorf("replay: no Inspector *.log in %s", src)
	}
	type file struct {
		dst   string
		lines []string
	}
	var fs []file
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		fs = append(fs, file{dst: filepath.Join(dst, filepath.Base(f)), lines: strings.SplitAfter(strings.TrimRight(string(b), "\n")+"\n", "\n")})
	}
	const chunks = 20
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := 0; c < chunks; c++ {
			if c > 0 {
				time.Sleep(over / chunks)
			}
			for _, f := range fs {
				lo, hi := len(f.lines)*c/chunks, len(f.lines)*(c+1)/chunks
				w, err := os.OpenFile(f.dst, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
				if err != nil {
					continue
				}
				w.WriteString(strings.Join(f.lines[lo:hi], ""))
				w.Close()
			}
		}
	}()
	return done, nil
}

// dumpBW is what one rank's Inspector JSON file says.
type dumpBW struct {
	ops      int
	median   float64 // GB/s, of coll_busbw_gbs
	weighted float64 // GB/s, Σ busbw·time / Σ time (what the recording rule computes)
}

// inspectorDumps reads the collectives of every JSON file in dir, by "host/pid".
func inspectorDumps(dir string) map[string]dumpBW {
	bw := map[string][]float64{}
	num, den := map[string]float64{}, map[string]float64{}
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			var op struct {
				Meta struct {
					Host string `json:"hostname"`
					PID  int    `json:"pid"`
				} `json:"metadata"`
				Coll struct {
					BusBW *float64 `json:"coll_busbw_gbs"`
					US    float64  `json:"coll_exec_time_us"`
				} `json:"coll_perf"`
			}
			if json.Unmarshal(sc.Bytes(), &op) != nil || op.Coll.BusBW == nil {
				continue
			}
			k := op.Meta.Host + "/" + strconv.Itoa(op.Meta.PID)
			bw[k] = append(bw[k], *op.Coll.BusBW)
			num[k] += *op.Coll.BusBW * op.Coll.US
			den[k] += op.Coll.US
		}
		f.Close()
	}
	out := map[string]dumpBW{}
	for k, v := range bw {
		d := dumpBW{ops: len(v), median: median(v)}
		if den[k] > 0 {
			d.weighted = num[k] / den[k]
		}
		out[k] = d
	}
	return out
}

// waitFor polls q until ok accepts the result or timeout passes.
func waitFor(cfg Config, q string, ok func([]promapi.Sample) bool, timeout time.Duration) []promapi.Sample {
	deadline := time.Now().Add(timeout)
	for {
		got, err := query(cfg.PrometheusPort, q)
		if err == nil && ok(got) || time.Now().After(deadline) {
			return got
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// perRank returns, for every rank, the largest value of the series with
// its host and pid (false if a rank has none).
func perRank(ss []promapi.Sample, ranks []rank) (map[string]float64, bool) {
	m := map[string]float64{}
	for _, s := range ss {
		k := s.Metric["host"] + "/" + s.Metric["pid"]
		if v, ok := m[k]; !ok || s.Value > v {
			m[k] = s.Value
		}
	}
	all := len(ranks) > 0
	for _, r := range ranks {
		_, ok := m[r.host+"/"+r.pid]
		all = all && ok
	}
	return m, all
}

func checkInspector(cfg Config, res *Result, name string, ranks []rank, pids, inspDir string) {
	// Two scrapes with new operations, then a rule evaluation.
	timeout := 4*parseDur(cfg.ScrapeInterval) + 2*parseDur(cfg.EvalInterval) + 20*time.Second
	every := func(ss []promapi.Sample) bool { _, ok := perRank(ss, ranks); return ok }
	bw := waitFor(cfg, fmt.Sprintf(`%s{pid=~"%s"}`, busBWRule, pids), every, timeout)
	scraped, ok := perRank(bw, ranks)
	res.check(name+": Inspector bus bandwidth for every rank", ok, "%s %s", busBWRule, labelsOf(bw, "host", "pid", "op", "size"))
	join := waitFor(cfg, fmt.Sprintf(`%s{pid=~"%s"} * on (cluster, instance, host, pid) group_left (net) fabric_nccl_net_info{net="Socket"}`, busBWRule, pids),
		every, 4*parseDur(cfg.EvalInterval))
	_, okJoin := perRank(join, ranks)
	res.check(name+": Inspector bus bandwidth joins fabric_nccl_net_info{net=\"Socket\"}", okJoin, "%s", labelsOf(join, "host", "pid", "net", "comm"))
	// Scraped against the files (time-weighted, as the rule).
	dumps := inspectorDumps(inspDir)
	agree := ok
	var parts []string
	for _, r := range ranks {
		k := r.host + "/" + r.pid
		s, d := scraped[k]/1e9, dumps[k]
		if d.ops == 0 || math.Abs(s-d.weighted) > 0.2*d.weighted {
			agree = false
		}
		parts = append(parts, fmt.Sprintf("pid %s: scraped %.2f GB/s, dump files %.2f GB/s time-weighted (median %.2f of %d operations)", r.pid, s, d.weighted, d.median, d.ops))
	}
	sort.Strings(parts)
	res.printf("%s: NCCL Inspector busbw, scraped (%s) vs its JSON dump files: %s", name, busBWRule, strings.Join(parts, "; "))
	res.check(name+": scraped Inspector bus bandwidth agrees with the dump files", agree, "within 20%%: %s", strings.Join(parts, "; "))
}

// reportInspectorProm: the Prometheus-mode dump (per GPU, no pid) scraped
// and joined to the ranks' GPU by uuid.
func reportInspectorProm(cfg Config, res *Result, name string, ranks []rank, pids string) {
	q := fmt.Sprintf(`fabric_nccl_inspector_bus_bandwidth_bytes_per_second * on (instance, uuid) group_left () group by (instance, uuid) (fabric_gpu_process_info{pid=~"%s"})`, pids)
	got := waitFor(cfg, q, func(ss []promapi.Sample) bool { return len(ss) > 0 }, 2*parseDur(cfg.ScrapeInterval)+10*time.Second)
	var parts []string
	for _, s := range got {
		parts = append(parts, fmt.Sprintf("%s %s %s %.2f GB/s", s.Metric["uuid"], s.Metric["op"], s.Metric["size"], s.Value/1e9))
	}
	res.check(name+": Inspector (Prometheus mode) bus bandwidth on the ranks' GPU", len(got) > 0, "%s", strings.Join(parts, "; "))
}
