// One trial: a fresh stack, the NCCL job started (live) or its recorded logs
// replayed, the wait for the page and its time, then the checks, the
// exporter's cost and the report of the job.

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// runTrial runs one NCCL job (kind "socket" or "ib") against a fresh stack
// and checks what it must report.
func runTrial(cfg Config, sh shipped, res *Result, name, kind, inspector string) error {
	dir := filepath.Join(cfg.WorkDir, name)
	ncclDir := filepath.Join(dir, "nccl")
	if err := os.MkdirAll(ncclDir, 0o755); err != nil {
		return err
	}
	gpuFixture := ""
	if cfg.Replay != "" {
		gpuFixture = filepath.Join(cfg.Replay, "gpu-fixture.json")
	}
	inspDir := ""
	if inspector != "" {
		inspDir = filepath.Join(dir, "inspector")
		if err := os.MkdirAll(inspDir, 0o755); err != nil {
			return err
		}
	}
	st, err := startStack(cfg, sh, dir, stackOpts{gpuFixture: gpuFixture, inspectorDir: inspDir})
	defer st.stop()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	start := time.Now()
	var job []*proc
	defer func() {
		for _, p := range job {
			p.stop(10 * time.Second)
		}
	}()
	stopFile := filepath.Join(dir, "stop")
	if cfg.Replay != "" {
		if err := replayLogs(filepath.Join(cfg.Replay, kind), ncclDir); err != nil {
			return err
		}
		if inspector == "json" {
			done, err := replayInspector(cfg.ReplayInspector, inspDir, 4*parseDur(cfg.ScrapeInterval))
			if err != nil {
				return err
			}
			defer func() { <-done }()
		}
	} else {
		if job, err = startJob(cfg, dir, kind, inspector, stopFile); err != nil {
			return err
		}
	}
	// t0: the first NCCL line in the log directory.
	t0, err := firstLine(ncclDir, 120*time.Second, job)
	if err != nil {
		res.check(name+": NCCL log", false, "%v", err)
		return nil
	}
	cpu0, _, _, _ := procStat(st.exporter.cmd.Process.Pid)
	ranks := waitRanks(ncclDir, 2, 20*time.Second)
	pids := pidRegexp(ranks)
	alert := "NCCLSocketFallback"
	if kind == "ib" {
		alert = "NCCLInitFailed"
	}
	isRank := func(l map[string]string) bool {
		for _, r := range ranks {
			if l["pid"] == r.pid && l["host"] == r.host {
				return true
			}
		}
		return false
	}
	var page notification
	var paged bool
	deadline := time.Now().Add(cfg.PageTimeout)
	for time.Now().Before(deadline) {
		if page, paged = st.hook.first(alert, isRank); paged {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !paged {
		res.check(name+": "+alert+" paged", false, "no %s notification for pids %s within %s of the first NCCL line", alert, pids, cfg.PageTimeout)
	} else {
		ttp := page.at.Sub(t0)
		if kind == "socket" {
			res.TimeToPage = append(res.TimeToPage, ttp)
		} else {
			res.InitPage = ttp
		}
		res.check(name+": "+alert+" paged", page.receiver == "pager" && page.labels["severity"] == "page",
			"receiver %s, host %s, pid %s; first NCCL line %s, page %s: %.1f s", page.receiver, page.labels["host"], page.labels["pid"],
			t0.UTC().Format("15:04:05.0"), page.at.UTC().Format("15:04:05.0"), ttp.Seconds())
	}
	switch kind {
	case "socket":
		checkSocket(cfg, res, st, name, ranks, pids, page, paged)
		if inspector == "json" {
			checkInspector(cfg, res, name, ranks, pids, inspDir)
		}
	case "ib":
		checkInitFailure(cfg, res, name, ranks, pids, page, paged)
	}
	// Exporter cost while the job ran (from the first NCCL line to now).
	cpu1, rss, hwm, err := procStat(st.exporter.cmd.Process.Pid)
	wall := time.Since(t0).Seconds()
	if err == nil {
		res.printf("%s: exporter CPU %.2f%% of one core over %.0f s, RSS %.1f MiB (peak %.1f MiB)", name, 100*(cpu1-cpu0)/wall, wall, float64(rss)/(1<<20), float64(hwm)/(1<<20))
	}
	if d, err := query(cfg.PrometheusPort, `fabric_scrape_collector_duration_seconds{collector=~"gpu|nccl|process"}`); err == nil {
		var parts []string
		for _, s := range d {
			parts = append(parts, fmt.Sprintf("%s %.2f ms", s.Metric["collector"], s.Value*1e3))
		}
		res.printf("%s: collector durations at the last scrape: %s", name, strings.Join(parts, ", "))
	}
	if kind == "socket" && cfg.Replay == "" {
		// Prometheus-mode Inspector dumps come every 30 s at the least and
		// are deleted at teardown: let the job run long enough to see one.
		if inspector == "prom" {
			for time.Since(start) < 75*time.Second && !anyFile(filepath.Join(dir, "inspector"), ".prom") {
				time.Sleep(500 * time.Millisecond)
			}
			snapshotDir(filepath.Join(dir, "inspector"), filepath.Join(dir, "inspector-snapshot"))
			if anyFile(filepath.Join(dir, "inspector-snapshot"), ".prom") {
				reportInspectorProm(cfg, res, name, ranks, pids)
			}
		}
		os.WriteFile(stopFile, nil, 0o644)
		for _, p := range job {
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
			}
		}
		reportJob(res, name, dir, inspector)
	}
	if kind == "socket" && cfg.Replay == "" {
		writeGPUFixture(cfg, dir, ranks)
	}
	writeNotifications(st.hook, filepath.Join(dir, "webhook.jsonl"))
	saveScrape(exporterURL(cfg), filepath.Join(dir, "metrics.prom"))
	return nil
}

// startJob starts the two ranks.
func startJob(cfg Config, dir, kind, inspector, stopFile string) ([]*proc, error) {
	script := filepath.Join(dir, "allreduce.py")
	if err := os.WriteFile(script, allreduceScript, 0o644); err != nil {
		return nil, err
	}
	var out []*proc
	for r := 0; r < 2; r++ {
		env := append(os.Environ(),
			"RANK="+strconv.Itoa(r), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(cfg.TorchPort),
			"DRILL_GPU="+strconv.Itoa(cfg.GPU), "PYTHONUNBUFFERED=1", "CUDA_CACHE_DISABLE=1",
			// Two "hosts" on one GPU: every byte crosses NCCL's network transport.
			"NCCL_HOSTID=drill-node-"+strconv.Itoa(r),
			"NCCL_DEBUG=INFO", "NCCL_DEBUG_FILE="+filepath.Join(dir, "nccl", "%h.%p.log"),
			"NCCL_NVLS_ENABLE=0", "TORCH_SYMM_MEM_DISABLE_MULTICAST=1", "NVSHMEM_DISABLE_NVLS=1")
		switch kind {
		case "socket":
			// The incident: RDMA unavailable (NCCL_IB_DISABLE, as in a
			// container without /dev/infiniband), NCCL takes NET/Socket.
			env = append(env, "NCCL_IB_DISABLE=1", "NCCL_SOCKET_IFNAME="+cfg.SocketIf)
		case "ib":
			// The other face: the network forced to IB where there is none
			// (NCCL_IB_HCA names no device, so hosts with RDMA fail too).
			env = append(env, "NCCL_NET=IB", "NCCL_IB_HCA==drill_no_such_hca", "NCCL_SOCKET_IFNAME="+cfg.SocketIf)
		}
		if inspector != "" {
			idir := filepath.Join(dir, "inspector")
			os.MkdirAll(idir, 0o755)
			env = append(env, "NCCL_PROFILER_PLUGIN="+cfg.Inspector, "NCCL_INSPECTOR_ENABLE=1", "NCCL_INSPECTOR_DUMP_DIR="+idir)
			if inspector == "prom" {
				env = append(env, "NCCL_INSPECTOR_PROM_DUMP=1", "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=30000000")
			} else {
				env = append(env, "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=1000000")
			}
		}
		p, err := startProc(fmt.Sprintf("rank%d", r), filepath.Join(dir, fmt.Sprintf("rank%d.out", r)), env, cfg.Python,
			script, "--stop-file", stopFile, "--seconds", "150")
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
	return out, nil
}

// replayLogs writes the recorded logs of src into dst, as NCCL would.
func replayLogs(src, dst string) error {
	files, _ := filepath.Glob(filepath.Join(src, "*.log"))
	if len(files) == 0 {
		return fmt.Errorf("replay: no *.log in %s", src)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(f)), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// firstLine waits for the first NCCL line in dir and returns when it was
// seen (polled every 10 ms).
func firstLine(dir string, timeout time.Duration, job []*proc) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, r := range ranksIn(dir) {
			if b, err := os.ReadFile(r.file); err == nil && strings.Contains(string(b), " NCCL INFO ") {
				return time.Now(), nil
			}
		}
		dead := len(job) > 0
		for _, p := range job {
			dead = dead && p.exited()
		}
		if dead {
			return time.Time{}, errors.New("the NCCL job exited without writing an NCCL log (see rank*.out)")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("no NCCL line in %s within %s", dir, timeout)
}

func waitRanks(dir string, n int, timeout time.Duration) []rank {
	deadline := time.Now().Add(timeout)
	for {
		rs := ranksIn(dir)
		if len(rs) >= n || time.Now().After(deadline) {
			return rs
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func anyFile(dir, suffix string) bool {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), suffix) {
			return true
		}
	}
	return false
}

func snapshotDir(src, dst string) {
	os.MkdirAll(dst, 0o755)
	filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil {
			os.WriteFile(filepath.Join(dst, filepath.Base(p)), b, 0o644)
		}
		return nil
	})
}
