// Command ncclbench measures the nccl collector's log parsing throughput
// against `grep -c 'NCCL INFO'` on the same file, in the same run.
//
// It assembles a log of at least -size bytes from the lines of the real
// NCCL sample logs (collector/fixtures/nccl/*.log, without their three
// provenance lines) in a temporary directory under -dir, reads it once to
// bring it into the page cache, then runs alternately, -runs times each:
//
//   - grep: `LC_ALL=C grep -c 'NCCL INFO' FILE` (single-threaded);
//   - ours: this program re-executed as a child with GOMAXPROCS=1 that
//     reads the file once through internal/nccl's Follower and Tracker
//     (nccl.ScanLog: the code the exporter's nccl collector runs, state
//     included).
//
// Each child's wall time, CPU time (rusage utime+stime) and peak RSS
// (VmHWM of /proc/PID/status, polled every millisecond; the Go child also
// reports its own at exit) are recorded. Throughput is file bytes per
// second in MB/s (10^6 bytes), per wall second and per CPU second; on a
// shared machine the CPU figure is the steadier one. The run with the
// least CPU time of each side is reported, and the file is deleted at the
// end. The smaller -small file is measured too, to show that memory does
// not grow with the file.
//
// Run it from the repository root:
//
//	go run ./tools/ncclbench
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/nccl"
)

func main() {
	var (
		size     = flag.Int64("size", 1<<30, "bytes of the assembled log (at least)")
		small    = flag.Int64("small", 64<<20, "bytes of the smaller log measured for memory flatness (0: skip)")
		dir      = flag.String("dir", ".bench", "directory for the temporary log (gitignored)")
		fixtures = flag.String("fixtures", "collector/fixtures/nccl", "directory of the sample logs")
		runs     = flag.Int("runs", 3, "runs of each side")
		parse    = flag.String("parse", "", "internal: parse this file and print the result as JSON")
	)
	flag.Parse()
	if *parse != "" {
		childParse(*parse)
		return
	}
	if err := run(*size, *small, *dir, *fixtures, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "ncclbench:", err)
		os.Exit(1)
	}
}

type childResult struct {
	nccl.ScanResult
	HWM int64 // VmHWM of the child, bytes
}

func childParse(path string) {
	r, err := nccl.ScanLog(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	json.NewEncoder(os.Stdout).Encode(childResult{r, vmHWM(os.Getpid())})
}

// vmHWM reads a process's peak resident set size from /proc/PID/status.
// (rusage's ru_maxrss is not used: a child started with vfork counts the
// parent's resident set until it execs.)
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kb)
			return kb * 1024
		}
	}
	return 0
}

type measure struct {
	wall, cpu time.Duration
	maxRSS    int64 // bytes
	out       []byte
}

// runChild runs cmd, polling its peak RSS (VmHWM) every millisecond.
func runChild(cmd *exec.Cmd) (measure, error) {
	var out bytes.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout = &out
	}
	cmd.Stderr = os.Stderr
	begin := time.Now()
	if err := cmd.Start(); err != nil {
		return measure{}, err
	}
	done := make(chan struct{})
	hwm := make(chan int64, 1)
	go func() {
		var peak int64
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			if v := vmHWM(cmd.Process.Pid); v > peak {
				peak = v
			}
			select {
			case <-done:
				hwm <- peak
				return
			case <-t.C:
			}
		}
	}()
	err := cmd.Wait()
	m := measure{wall: time.Since(begin), out: out.Bytes()}
	close(done)
	m.maxRSS = <-hwm
	if err != nil {
		return m, fmt.Errorf("%s: %w", strings.Join(cmd.Args, " "), err)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		m.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return m, nil
}

// assemble writes sample lines repeatedly until the file has size bytes.
func assemble(path, fixtures string, size int64) (int64, int64, error) {
	files, _ := filepath.Glob(filepath.Join(fixtures, "*.log"))
	if len(files) == 0 {
		return 0, 0, fmt.Errorf("no sample logs in %s (run from the repository root)", fixtures)
	}
	var body bytes.Buffer
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, 0, err
		}
		lines := bytes.SplitAfter(b, []byte("\n"))
		for _, l := range lines[min(3, len(lines)):] {
			body.Write(l)
		}
	}
	info := int64(bytes.Count(body.Bytes(), []byte("NCCL INFO")))
	fh, err := os.Create(path)
	if err != nil {
		return 0, 0, err
	}
	w := bufio.NewWriterSize(fh, 1<<20)
	var n, infos int64
	for n < size {
		w.Write(body.Bytes())
		n += int64(body.Len())
		infos += info
	}
	if err := w.Flush(); err != nil {
		fh.Close()
		return 0, 0, err
	}
	return n, infos, fh.Close()
}

type best struct{ grep, ours measure }

func bench(self, path string, n int64, runs int) (best, childResult, string, error) {
	var b best
	var res childResult
	var grepOut string
	for i := 0; i < runs; i++ {
		g, err := runChild(exec.Command("grep", "-c", "NCCL INFO", path))
		if err != nil {
			return b, res, "", err
		}
		grepOut = strings.TrimSpace(string(g.out))
		if b.grep.cpu == 0 || g.cpu < b.grep.cpu {
			b.grep = g
		}
		c := exec.Command(self, "-parse", path)
		c.Env = append(os.Environ(), "GOMAXPROCS=1")
		o, err := runChild(c)
		if err != nil {
			return b, res, "", err
		}
		if b.ours.cpu == 0 || o.cpu < b.ours.cpu {
			b.ours = o
			if err := json.Unmarshal(o.out, &res); err != nil {
				return b, res, "", err
			}
			b.ours.maxRSS = max(b.ours.maxRSS, res.HWM) // exact, from the child itself
		}
	}
	return b, res, grepOut, nil
}

func mbps(n int64, d time.Duration) float64 { return float64(n) / 1e6 / d.Seconds() }

func run(size, small int64, dir, fixtures string, runs int) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	os.Setenv("LC_ALL", "C") // grep's fastest locale; inherited by both children
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(dir, "ncclbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	grepVersion, _ := exec.Command("grep", "--version").Output()
	fmt.Printf("%s, %s/%s, %d CPUs, %s; %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.GOOS, runtime.GOARCH,
		runtime.NumCPU(), runtime.Version(), strings.SplitN(string(grepVersion), "\n", 2)[0])
	fmt.Printf("load average before: %s\n\n", loadavg())
	fmt.Println("| file | side | wall s | CPU s | MB/s per wall s | MB/s per CPU s | max RSS MiB | result |")
	fmt.Println("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
	sizes := []int64{size}
	if small > 0 {
		sizes = append([]int64{small}, sizes...)
	}
	var ratioWall, ratioCPU float64
	for _, s := range sizes {
		path := filepath.Join(tmp, "nccl.log")
		n, infos, err := assemble(path, fixtures, s)
		if err != nil {
			return err
		}
		// Into the page cache: both sides read from memory.
		warm := exec.Command("cat", path)
		warm.Stdout = io.Discard
		if _, err := runChild(warm); err != nil {
			return err
		}
		b, res, grepOut, err := bench(self, path, n, runs)
		if err != nil {
			return err
		}
		label := fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
		fmt.Printf("| %s | grep -c 'NCCL INFO' | %.3f | %.3f | %.0f | %.0f | %.1f | %s matching lines (expected %d) |\n", label,
			b.grep.wall.Seconds(), b.grep.cpu.Seconds(), mbps(n, b.grep.wall), mbps(n, b.grep.cpu), float64(b.grep.maxRSS)/(1<<20), grepOut, infos)
		fmt.Printf("| %s | nccl collector (GOMAXPROCS=1) | %.3f | %.3f | %.0f | %.0f | %.1f | %d lines, %d unparsed, %d processes |\n", label,
			b.ours.wall.Seconds(), b.ours.cpu.Seconds(), mbps(n, b.ours.wall), mbps(n, b.ours.cpu), float64(b.ours.maxRSS)/(1<<20),
			res.Lines, res.Unparsed, res.Processes)
		if res.Bytes != n {
			return fmt.Errorf("parsed %d bytes of %d", res.Bytes, n)
		}
		ratioWall = mbps(n, b.ours.wall) / mbps(n, b.grep.wall)
		ratioCPU = mbps(n, b.ours.cpu) / mbps(n, b.grep.cpu)
		os.Remove(path)
	}
	fmt.Printf("\nload average after: %s\n\n", loadavg())
	fmt.Printf("nccl collector / grep throughput on the largest file: %.2f per CPU second, %.2f per wall second (target ≥ 0.5)\n", ratioCPU, ratioWall)
	return nil
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
