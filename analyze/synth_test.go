package analyze

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// The synthetic benchmark: two sweeps over C = 1…64 on two nodes with two
// rails each, scraped every 15 s. Within a window, each rail moves
// a·C/(b+C) Gbit/s (times a deterministic ±0.4 % wobble per rail and
// window), of which bgBytes/s is background that does not scale with
// tokens; the rest is k bytes per input token. Between windows only the
// background flows and no tokens arrive.
var (
	synthT0      = time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	synthStep    = 15 * time.Second
	synthConc    = []int{1, 2, 4, 8, 16, 32, 64}
	synthWindow  = 300 * time.Second
	synthPeriod  = 360 * time.Second // window + 60 s idle
	synthBgBytes = 0.05e9 / 8        // 0.05 Gbit/s per rail
	synthRails   = []struct{ instance, device, rail string }{
		{"gpu-a:10470", "mlx5_0", "mlx5_0"}, {"gpu-a:10470", "mlx5_3", "mlx5_3"},
		{"gpu-b:10470", "mlx5_0", "mlx5_0"}, {"gpu-b:10470", "mlx5_3", "mlx5_3"},
	}
)

type synthSweep struct {
	name    string
	a, b, k float64 // Gbit/s per rail, concurrency at half of a, bytes per input token per rail
	first   time.Time
	knee    int
}

// synthA is what the users measured with NCCL_CROSS_NIC=0: 3.332 MB per
// token per rail, an 80.32 Gbit/s ceiling and the knee at C = 16 (the gain
// from C to 2C is b/(b+2C): 6.98 % from 8, 3.61 % from 16).
var synthA = synthSweep{name: "NCCL_CROSS_NIC=0", a: 80.32, b: 1.2, k: 3.332e6, first: synthT0.Add(60 * time.Second), knee: 16}

// synthB is a second sweep an hour later (NCCL_CROSS_NIC=2): lower
// ceiling, later knee (5.88 % from 16, 3.03 % from 32).
var synthB = synthSweep{name: "NCCL_CROSS_NIC=2", a: 72.0, b: 2.0, k: 3.332e6, first: synthT0.Add(time.Hour + 60*time.Second), knee: 32}

var synthEnd = synthB.windowStart(len(synthConc)).Add(2 * time.Minute)

func (s synthSweep) windowStart(i int) time.Time { return s.first.Add(time.Duration(i) * synthPeriod) }

// wobble is the deterministic relative deviation of rail r in window i.
func wobble(r, i int) float64 { return 0.004 * math.Sin(1.7*float64(i)+2.3*float64(r)) }

// gbps is the true throughput of rail r in window i.
func (s synthSweep) gbps(r, i int) float64 {
	c := float64(synthConc[i])
	return s.a * c / (s.b + c) * (1 + wobble(r, i))
}

// tps is the true input tokens/s in window i (the same for every rail:
// the deployment's tokens).
func (s synthSweep) tps(i int) float64 {
	c := float64(synthConc[i])
	return (s.a*c/(s.b+c)*1e9/8 - synthBgBytes) / s.k
}

// rates returns the byte rate of rail r and the token rate at time t.
func rates(r int, t time.Time) (bytes, tokens float64) {
	for _, s := range []synthSweep{synthA, synthB} {
		for i := range synthConc {
			st := s.windowStart(i)
			if !t.Before(st) && t.Before(st.Add(synthWindow)) {
				return (s.k*s.tps(i) + synthBgBytes) * (1 + wobble(r, i)), s.tps(i)
			}
		}
	}
	return synthBgBytes, 0
}

type omSeries struct {
	labels string
	values []float64
}

// writeOpenMetrics writes the synthetic series as OpenMetrics with
// timestamps, ready for `promtool tsdb create-blocks-from openmetrics`:
// fabric_rdma_port_{transmitted,received}_bytes_total and
// fabric_rdma_port_info for the four rail ports, a non-rail port
// (rail="", 5 Gbit/s, must not show up), a copy of one rail under
// job="fabric-reset" whose counter resets in the middle of sweep A's C = 8
// window, and sglang:prompt_tokens_total.
func writeOpenMetrics(path string) error {
	var times []time.Time
	for t := synthT0; !t.After(synthEnd); t = t.Add(synthStep) {
		times = append(times, t)
	}
	resetAt := synthA.windowStart(3).Add(150 * time.Second)
	lbl := func(job, instance, device string) string {
		return fmt.Sprintf(`device=%q,instance=%q,job=%q,port="1"`, device, instance, job)
	}
	var tx, rx, info []omSeries
	var tokens omSeries
	tokens.labels = `instance="gpu-a:30000",job="sglang",model_name="deepseek-ai/DeepSeek-V3"`
	counter := func(rate func(t time.Time) float64, start float64, reset time.Time) []float64 {
		v := start
		var out []float64
		for j, t := range times {
			if j > 0 {
				v += rate(times[j-1]) * synthStep.Seconds()
				if !reset.IsZero() && t.Equal(reset) {
					v = 0
				}
			}
			out = append(out, v)
		}
		return out
	}
	ones := make([]float64, len(times))
	for i := range ones {
		ones[i] = 1
	}
	for r, rl := range synthRails {
		rate := func(t time.Time) float64 { b, _ := rates(r, t); return b }
		txv := counter(rate, 1.234e15+float64(r)*1e13, time.Time{})
		rxv := counter(func(t time.Time) float64 { return 0.97 * rate(t) }, 1.1e15+float64(r)*1e13, time.Time{})
		l := lbl("fabric", rl.instance, rl.device)
		tx = append(tx, omSeries{l, txv})
		rx = append(rx, omSeries{l, rxv})
		info = append(info, omSeries{l + fmt.Sprintf(`,link_layer="Ethernet",netdev="eth%s",phys_state="LinkUp",rail=%q,state="ACTIVE"`, rl.device[len(rl.device)-1:], rl.rail), ones})
		if r == 0 {
			l := lbl("fabric-reset", "gpu-r:10470", rl.device)
			tx = append(tx, omSeries{l, counter(rate, 5e14, resetAt)})
			rx = append(rx, omSeries{l, counter(rate, 5e14, time.Time{})})
			info = append(info, omSeries{l + `,link_layer="Ethernet",netdev="eth0",phys_state="LinkUp",rail="mlx5_0",state="ACTIVE"`, ones})
		}
	}
	// A port that carries no rail: a busy storage NIC.
	l := lbl("fabric", "gpu-a:10470", "mlx5_1")
	nr := counter(func(time.Time) float64 { return 5e9 / 8 }, 7e14, time.Time{})
	tx = append(tx, omSeries{l, nr})
	rx = append(rx, omSeries{l, nr})
	info = append(info, omSeries{l + `,link_layer="Ethernet",netdev="eth1",phys_state="LinkUp",rail="",state="ACTIVE"`, ones})
	tokens.values = counter(func(t time.Time) float64 { _, k := rates(0, t); return k }, 1.5e9, time.Time{})

	var b strings.Builder
	family := func(name, typ, sample string, series []omSeries) {
		fmt.Fprintf(&b, "# TYPE %s %s\n", name, typ)
		sort.Slice(series, func(i, j int) bool { return series[i].labels < series[j].labels })
		for _, s := range series {
			for j, t := range times {
				fmt.Fprintf(&b, "%s{%s} %.3f %d\n", sample, s.labels, s.values[j], t.Unix())
			}
		}
	}
	family("fabric_rdma_port_transmitted_bytes", "counter", MetricTxBytes, tx)
	family("fabric_rdma_port_received_bytes", "counter", MetricRxBytes, rx)
	family(MetricPortInfo, "gauge", MetricPortInfo, info)
	family("sglang:prompt_tokens", "counter", MetricPromptToken, []omSeries{tokens})
	b.WriteString("# EOF\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// sweepYAML is the sweep description of s.
func (s synthSweep) sweepYAML() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: 64K-token prompts, cold prefix cache, 300 s per point\nname: %s\nwindows:\n", s.name, s.name)
	for i, c := range synthConc {
		st := s.windowStart(i)
		fmt.Fprintf(&b, "  - {name: c%d, concurrency: %d, start: %s, end: %s}\n", c, c, st.Format(time.RFC3339), st.Add(synthWindow).Format(time.RFC3339))
	}
	return b.String()
}

// benchLog is bench_serving output for window i of s, timestamped the way
// `ts '%Y-%m-%dT%H:%M:%.S%z'` does.
func (s synthSweep) benchLog(i int) string {
	c := synthConc[i]
	started := s.windowStart(i).Add(-time.Second)
	ts := func(t time.Time) string { return t.Format("2006-01-02T15:04:05.000-0700") + " " }
	end := started.Add(time.Second + synthWindow)
	tokens := s.tps(i) * synthWindow.Seconds()
	var b strings.Builder
	b.WriteString(ts(started.Add(-30*time.Second)) + fmt.Sprintf("benchmark_args=Namespace(backend='sglang', dataset_name='random', random_input_len=65536, random_output_len=1, max_concurrency=%d, warmup_requests=1)\n", c))
	b.WriteString(ts(started.Add(-30*time.Second)) + "Starting warmup with 1 sequences...\n")
	b.WriteString(ts(started) + "Warmup completed with 1 sequences. Starting main benchmark run...\n")
	b.WriteString(ts(end) + "100%|██████████| 64/64 [05:00<00:00,  4.69s/it]\n")
	b.WriteString(ts(end) + "\n" + ts(end) + "============ Serving Benchmark Result ============\n")
	row := func(k, v string) { b.WriteString(ts(end) + fmt.Sprintf("%-40s %-10s\n", k, v)) }
	row("Backend:", "sglang")
	row("Traffic request rate:", "inf")
	row("Max request concurrency:", fmt.Sprint(c))
	row("Successful requests:", "64")
	row("Benchmark duration (s):", fmt.Sprintf("%.2f", synthWindow.Seconds()))
	row("Total input tokens:", fmt.Sprintf("%.0f", tokens))
	row("Input token throughput (tok/s):", fmt.Sprintf("%.2f", tokens/synthWindow.Seconds()))
	b.WriteString(ts(end) + strings.Repeat("=", 50) + "\n")
	return b.String()
}

func TestSynthBenchLogParses(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c8.log")
	os.WriteFile(p, []byte(synthA.benchLog(3)), 0o644)
	sw, err := LoadSweep([]string{p}, DefaultBenchOptions())
	if err != nil {
		t.Fatal(err)
	}
	w := sw.Windows[0]
	if w.Concurrency != 8 || !w.Start.Equal(synthA.windowStart(3)) || w.Duration() != synthWindow {
		t.Errorf("window %+v", w)
	}
}
