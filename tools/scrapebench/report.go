// The report: the load average, percentiles and the Markdown table of one
// HCA count.

package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// loadAvg returns the 1-, 5- and 15-minute load averages of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// percentile returns the nearest-rank p-th percentile of d (sorted in place).
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(float64(len(d))*p/100+0.999999) - 1
	return d[max(0, min(i, len(d)-1))]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func printTable(w io.Writer, desc string, files int, cfg *config, raw *result, rows []*result) {
	fmt.Fprintf(w, "\n## %s — %d attribute files per scrape\n\n", desc, files)
	fmt.Fprintln(w, "| | encoding | CPU µs/scrape | × raw floor | × node_exporter | p50 ms | p99 ms | RSS MiB after warm-up / end (max) | bytes sent | series |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	nodeCPU := map[string]time.Duration{}
	for _, r := range rows {
		if r.node && !r.skipped && len(r.failed) == 0 {
			nodeCPU[r.encoding] = r.cpu
		}
	}
	for _, r := range rows {
		if r.skipped {
			fmt.Fprintf(w, "| %s | %s | — | — | — | — | — | — | — | — |\n", r.name, r.encoding)
			continue
		}
		ratio, nodeRatio := "—", "—"
		if raw.cpu > 0 {
			ratio = fmt.Sprintf("%.2f", float64(r.cpu)/float64(raw.cpu))
		}
		if nc := nodeCPU[r.encoding]; nc > 0 && !r.node {
			nodeRatio = fmt.Sprintf("%.2f", float64(r.cpu)/float64(nc))
		}
		fmt.Fprintf(w, "| %s | %s | %.1f | %s | %s | %.3f | %.3f | %.1f / %.1f (%.1f) | %d | %d |\n",
			r.name, r.encoding, us(r.cpu), ratio, nodeRatio, ms(percentile(r.lat, 50)), ms(percentile(r.lat, 99)),
			float64(r.rss200)/1024, float64(r.rssKiB)/1024, float64(r.hwmKiB)/1024, r.body, r.series)
	}
	fmt.Fprintf(w, "| raw floor | | %.1f | 1.00 | — | %.3f | %.3f | — | — | — |\n", us(raw.cpu), ms(percentile(raw.lat, 50)), ms(percentile(raw.lat, 99)))
	fmt.Fprintln(w)
	fmt.Fprintf(w, "CPU µs per scrape in each round (%d scrapes each):\n\n", cfg.n)
	for _, r := range append(slices.Clone(rows), raw) {
		if r.skipped {
			continue
		}
		var rs []string
		for _, d := range r.rounds {
			rs = append(rs, fmt.Sprintf("%.1f", us(d)))
		}
		label := r.name
		if r.encoding != "" {
			label += ", " + r.encoding
		}
		fmt.Fprintf(w, "- %s: %s\n", label, strings.Join(rs, ", "))
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		if r.skipped {
			if r.encoding == cfg.encodings[0] {
				fmt.Fprintf(w, "- %s: %s\n", r.name, r.note)
			}
			continue
		}
		fmt.Fprintf(w, "- %s, %s: %d body bytes uncompressed", r.name, r.encoding, r.plain)
		if r.encoding == "gzip" {
			fmt.Fprintf(w, " (%d sent, %.1f %%)", r.body, 100*float64(r.body)/float64(r.plain))
		}
		fmt.Fprintf(w, ", %d of the %d series from the collector; RSS at the end %.1f MiB file-backed + %.1f MiB anonymous",
			r.own, r.series, float64(r.fileKiB)/1024, float64(r.anonKiB)/1024)
		if r.note != "" {
			fmt.Fprintf(w, "; %s", r.note)
		}
		fmt.Fprintln(w)
		if len(r.failed) > 0 {
			fmt.Fprintf(w, "  - **WARNING**: %s reports a failed collector (%s), so its row measures a failed scrape, not a full one",
				r.name, strings.Join(r.failed, ", "))
			if r.failLog != "" {
				fmt.Fprintf(w, "; its log says: `%s`", r.failLog)
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintf(w, "- raw floor: %d × open+read+close per scrape, %.2f µs CPU per file\n", files, us(raw.cpu)/float64(files))
}
