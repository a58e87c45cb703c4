// The report and what a trial leaves behind in its directory: the job's and
// the Inspector's bus bandwidth, the last scrape, the notifications and, in
// a live run, the GPU fixture the replay uses.

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

func joinFloats(v []float64, sep string) string {
	var s []string
	for _, f := range v {
		s = append(s, strconv.FormatFloat(f, 'f', 1, 64))
	}
	return strings.Join(s, sep)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// exporterURL is the metrics URL of the trial's (node 0's) exporter.
func exporterURL(cfg Config) string {
	return fmt.Sprintf("http://127.0.0.1:%d/metrics", cfg.ExporterPort)
}

// saveScrape keeps an exporter's last scrape of a trial.
func saveScrape(u, path string) {
	resp, err := http.Get(u)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	os.WriteFile(path, b, 0o644)
}

// reportJob reads the ranks' busbw lines and the Inspector's output.
func reportJob(res *Result, name, dir, inspector string) {
	var bw []float64
	for r := 0; r < 2; r++ {
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("rank%d.out", r)))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "busbw_gbs "); ok && r == 0 {
				if x, err := strconv.ParseFloat(v, 64); err == nil {
					bw = append(bw, x)
				}
			}
		}
		f.Close()
	}
	if len(bw) > 0 {
		res.printf("%s: all-reduce busbw over NET/Socket (job's own timing, %d batches): median %.2f GB/s", name, len(bw), median(bw))
	}
	switch inspector {
	case "json":
		var ibw []float64
		filepath.WalkDir(filepath.Join(dir, "inspector"), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			f, err := os.Open(p)
			if err != nil {
				return nil
			}
			defer f.Close()
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 1<<20), 1<<24)
			for sc.Scan() {
				var op struct {
					Coll struct {
						BusBW *float64 `json:"coll_busbw_gbs"`
					} `json:"coll_perf"`
				}
				if json.Unmarshal(sc.Bytes(), &op) == nil && op.Coll.BusBW != nil {
					ibw = append(ibw, *op.Coll.BusBW)
				}
			}
			return nil
		})
		res.printf("%s: NCCL Inspector (JSON) busbw: %d operations, median %.2f GB/s", name, len(ibw), median(ibw))
	case "prom":
		ps, _ := filepath.Glob(filepath.Join(dir, "inspector-snapshot", "*.prom"))
		res.printf("%s: NCCL Inspector (Prometheus textfile) dumps captured: %d", name, len(ps))
	}
}

// writeGPUFixture records, for the replay, the GPU the ranks ran on with
// their PIDs (a --collector.gpu.fixture file).
func writeGPUFixture(cfg Config, dir string, ranks []rank) {
	info, err := query(cfg.PrometheusPort, `fabric_gpu_info`)
	if err != nil || len(info) == 0 {
		return
	}
	var pids []uint32
	for _, r := range ranks {
		n, _ := strconv.ParseUint(r.pid, 10, 32)
		pids = append(pids, uint32(n))
	}
	g := info[0].Metric
	idx, _ := strconv.Atoi(g["gpu"])
	fx := map[string]any{"source": "nvml", "driver_version": g["driver_version"], "interval_ms": 1000,
		"gpus": []any{map[string]any{"index": idx, "uuid": g["uuid"], "name": g["name"], "pci_bus_id": g["pci_bus_id"], "pids": pids}}}
	b, _ := json.MarshalIndent(fx, "", " ")
	os.WriteFile(filepath.Join(dir, "gpu-fixture.json"), append(b, '\n'), 0o644)
}

func writeNotifications(w *webhook, path string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	os.WriteFile(path, []byte(strings.Join(w.raw, "\n")+"\n"), 0o644)
}
