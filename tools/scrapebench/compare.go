// One HCA count measured: its fixture tree, the rows of its table, and the
// raw floor and every exporter and encoding measured in turn, round by
// round; the raw floor's open+read+close loop and its thread CPU time.

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabric-exporter/fabric_exporter/internal/fixturetree"
)

// buildFixture writes a tree of hcas clean copies of the fixture's mlx5_0
// (internal/fixturetree) to dst and returns a one-line description of it.
// The bundled fixture itself is not used: its broken files (an "N/A"
// hw_counter, garbage, a directory in place of a counter) make
// node_exporter's infiniband collector fail as a whole.
func buildFixture(src, dst string, hcas int) (string, error) {
	if err := fixturetree.HCAs(src, dst, hcas); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d HCAs (fixture mlx5_0 replicated ×%d)", hcas, hcas), nil
}

// result is one row of a table.
type result struct {
	name     string
	encoding string        // "identity" or "gzip"; "" for the raw floor
	note     string        // why the row is empty, or remarks
	cpu      time.Duration // CPU time per scrape, the median round
	rounds   []time.Duration
	lat      []time.Duration
	rss200   int64    // VmRSS after the warm-up, KiB
	rssKiB   int64    // VmRSS after the last round
	hwmKiB   int64    // VmHWM after the last round
	fileKiB  int64    // RssFile after the last round (mapped file pages: the binary, libraries)
	anonKiB  int64    // RssAnon after the last round (heap, stacks, runtime)
	series   int      // non-comment lines of one scrape
	body     int      // bytes of one scrape's body as sent (compressed with gzip)
	plain    int      // bytes of one scrape's body uncompressed
	own      int      // series of the measured collector
	failed   []string // collectors reporting success 0
	failLog  string   // the exporter log line explaining the failure
	conns    int      // TCP connections opened during the measured loops
	skipped  bool
	baseline bool // a -baseline row
	node     bool // a node_exporter row
}

// target is one exporter process under measurement.
type target struct {
	res    *result
	c      *child
	scrape func(keep *[]byte) error
	client *http.Transport
}

// benchFixture measures the raw floor and every exporter and encoding on
// one tree: all children run side by side, measured in turn.
func benchFixture(ctx context.Context, w io.Writer, cfg *config, tmp, sysfs, desc, nodeNote string) error {
	files, err := attributeFiles(sysfs)
	if err != nil {
		return err
	}
	raw := &result{name: "raw floor", lat: make([]time.Duration, 0, cfg.n*cfg.rounds)}
	if err := rawFloor(ctx, nil, files, cfg.warmup); err != nil {
		return fmt.Errorf("raw floor: %w", err)
	}

	fabricArgs := func(addr string) []string {
		if cfg.defaults {
			return []string{"--path.sysfs=" + sysfs, "--web.listen-address=" + addr}
		}
		return []string{"--path.sysfs=" + sysfs, "--collector.disable-defaults", "--collector.rdma", "--web.listen-address=" + addr}
	}
	nodeArgs := func(addr string) []string {
		return []string{"--collector.disable-defaults", "--collector.infiniband", "--path.sysfs=" + sysfs, "--web.listen-address=" + addr}
	}
	var targets []*target
	var rows []*result
	defer func() {
		for _, t := range targets {
			t.client.CloseIdleConnections()
			t.c.stop()
		}
	}()
	for _, enc := range cfg.encodings {
		type exp struct {
			name, bin string
			prefixes  []string
			args      func(string) []string
			baseline  bool
			node      bool
		}
		withExtra := func(addr string) []string { return append(fabricArgs(addr), cfg.fabricExtra...) }
		exps := []exp{{"fabric_exporter", cfg.fabricBin, []string{"fabric_rdma_", "fabric_rail_"}, withExtra, false, false}}
		if cfg.baselineBin != "" {
			exps = append(exps, exp{"fabric_exporter (" + cfg.baselineName + ")", cfg.baselineBin, []string{"fabric_rdma_", "fabric_rail_"}, fabricArgs, true, false})
		}
		exps = append(exps, exp{"node_exporter", cfg.nodeBin, []string{"node_infiniband_"}, nodeArgs, false, true})
		for _, e := range exps {
			if e.bin == "" {
				rows = append(rows, &result{name: e.name, encoding: enc, skipped: true, note: nodeNote, node: e.node})
				continue
			}
			t, err := startTarget(ctx, cfg, tmp, e.name, e.bin, enc, e.prefixes, e.args)
			if err != nil {
				return err
			}
			t.res.baseline, t.res.node = e.baseline, e.node
			targets = append(targets, t)
			rows = append(rows, t.res)
		}
	}

	// Rounds: the raw floor, then every child, in an order that rotates.
	for r := range cfg.rounds {
		if err := rawFloor(ctx, raw, files, cfg.n); err != nil {
			return fmt.Errorf("raw floor: %w", err)
		}
		for i := range targets {
			t := targets[(i+r)%len(targets)]
			if err := t.measure(ctx, cfg.n); err != nil {
				return err
			}
		}
	}
	raw.cpu = median(raw.rounds)
	for _, t := range targets {
		t.res.cpu = median(t.res.rounds)
		m, err := procStatus(t.c.cmd.Process.Pid)
		if err != nil {
			return err
		}
		t.res.rssKiB, t.res.hwmKiB, t.res.fileKiB, t.res.anonKiB = m["VmRSS"], m["VmHWM"], m["RssFile"], m["RssAnon"]
		if len(t.res.failed) > 0 {
			t.res.failLog = lastError(t.c.logTail())
		}
		if t.res.conns > 0 {
			t.res.note = fmt.Sprintf("%d new connection(s) during the measured loops", t.res.conns)
		}
	}
	printTable(w, desc, len(files), cfg, raw, rows)
	return nil
}

// median returns the median of d (sorted in place; the lower middle one
// for an even count).
func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[(len(d)-1)/2]
}

// attributeFiles lists the files one scrape of fabric_exporter's rdma
// collector reads: for every class/infiniband/<dev>/ports/<p>, the state,
// phys_state, rate and gid_attrs/ndevs/0 attributes (when present) and every
// regular file of counters/, counters_ext/ and hw_counters/. Paths go
// through the class symlink, as the exporters' paths do.
func attributeFiles(sysfs string) ([]string, error) {
	files, err := fixturetree.Files(sysfs)
	if err == nil && len(files) == 0 {
		err = fmt.Errorf("%s: no RDMA attribute files found", sysfs)
	}
	return files, err
}

// rawFloor opens, reads and closes every file once per iteration with raw
// system calls, n times. With a result (nil: warm-up), it records the
// thread CPU time per iteration as one round and each iteration's
// latency. It runs
// on a locked OS thread, so RUSAGE_THREAD sees exactly the loop (and not
// the Go runtime's other threads).
func rawFloor(ctx context.Context, res *result, files []string, n int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var buf [4096]byte
	// once is one "scrape". It is written out without helper closures so
	// that the loop costs the system calls and next to nothing else.
	once := func() error {
		for _, f := range files {
			fd, err := unix.Open(f, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			for err == unix.EINTR {
				fd, err = unix.Open(f, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			}
			if err != nil {
				return fmt.Errorf("open %s: %w", f, err)
			}
			_, err = unix.Read(fd, buf[:])
			for err == unix.EINTR {
				_, err = unix.Read(fd, buf[:])
			}
			unix.Close(fd)
			if err != nil {
				return fmt.Errorf("read %s: %w", f, err)
			}
		}
		return nil
	}
	if res == nil {
		for range n {
			if err := once(); err != nil {
				return err
			}
		}
		return nil
	}
	before, err := threadCPU()
	if err != nil {
		return err
	}
	for range n {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		t := time.Now()
		if err := once(); err != nil {
			return err
		}
		res.lat = append(res.lat, time.Since(t))
	}
	after, err := threadCPU()
	if err != nil {
		return err
	}
	res.rounds = append(res.rounds, (after-before)/time.Duration(n))
	return nil
}

// threadCPU returns the user+system CPU time of the calling OS thread.
func threadCPU() (time.Duration, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
