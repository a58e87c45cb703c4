// The report: one run's results as Markdown tables.

package main

import (
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"
)

func printResult(w io.Writer, r result) {
	fmt.Fprintf(w, "\n## %d nodes, Prometheus %s, rules %s (%s, load %s, %d CPUs)\n\n", r.Nodes, r.Prometheus, r.Rules, r.Date, r.Load, runtime.NumCPU())
	fmt.Fprintf(w, "head series %.0f (%.0f per node); all groups %.3f s per round = %.2f ms per node per round (slower groups count their share; sum of the groups' fastest rounds: %.3f s = %.2f ms per node); missed iterations %.0f; rule failures %.0f; targets down %.0f\n",
		r.HeadSeries, r.HeadSeries/float64(r.Nodes), r.TotalMeanS, r.PerNodeMs, r.TotalMinS, r.TotalMinS/float64(r.Nodes)*1000, r.Missed, r.Failures, r.ScrapeFailures)
	fmt.Fprintf(w, "Prometheus CPU %.2f cores, RSS max %.0f MiB\n\n", r.CPUCores, r.RSSBytes/(1<<20))
	if r.Rounds.Rounds > 0 {
		fmt.Fprintf(w, "rounds of the window: %d; evaluation time started per round: mean %.3f s (%.2f ms per node), peak %.3f s (%.2f ms per node) at %s, spanning %.1f s wall: %s\n",
			r.Rounds.Rounds, r.Rounds.MeanS, r.Rounds.MeanS/float64(r.Nodes)*1000, r.Rounds.PeakS, r.Rounds.PeakS/float64(r.Nodes)*1000, r.Rounds.PeakAt, r.Rounds.PeakSpanS, strings.Join(r.Rounds.PeakParts, ", "))
		fmt.Fprintf(w, "peak round over random placements of the groups (their offsets hash the file path): mean %.3f s (%.2f ms per node), 99th percentile %.3f s (%.2f ms per node), all in one round %.3f s (%.2f ms per node)\n",
			r.PlacementMeanS, r.PlacementMeanS/float64(r.Nodes)*1000, r.PlacementP99S, r.PlacementP99S/float64(r.Nodes)*1000, r.PlacementWorstS, r.PlacementWorstS/float64(r.Nodes)*1000)
		if r.RestartS > 0 {
			fmt.Fprintf(w, "first start (empty TSDB), missed iterations by group: %s; restarted on the same data, ready in %.0f s; its first minute's slowest evaluations: %s; then:\n", byGroup(r.MissedFirstStart), r.RestartS, strings.Join(r.RestartSlowest, ", "))
		}
		fmt.Fprintf(w, "missed iterations by group: warm-up %s; window %s\n", byGroup(r.MissedWarmup), byGroup(r.MissedWindow))
		fmt.Fprintf(w, "warm-up: peak round %.3f s at %s (%s); slowest evaluations: %s\n\n", r.WarmupRounds.PeakS, r.WarmupRounds.PeakAt, strings.Join(r.WarmupRounds.PeakParts, ", "), strings.Join(r.WarmupSlowest, ", "))
	}
	fmt.Fprintln(w, "| group | every s | offset s | rules | min s/evaluation | mean s/evaluation | max s/evaluation | mean ms/node/evaluation | evaluations |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, g := range r.Groups {
		fmt.Fprintf(w, "| %s | %.0f | %.1f | %d | %.3f | %.3f | %.3f | %.3f | %d |\n", g.Name, g.EveryS, r.OffsetS[g.Name], g.Rules, g.MinS, g.MeanS, g.MaxS, g.MeanS/float64(r.Nodes)*1000, g.Samples)
	}
	fmt.Fprintln(w, "\nslowest rules (mean s per round):\n\n| s | group | rule |\n|---:|---|---|")
	for i, rl := range r.TopRules {
		if i == 10 {
			break
		}
		fmt.Fprintf(w, "| %.4f | %s | %s |\n", rl.MeanS, rl.Group, rl.Rule)
	}
	fmt.Fprintf(w, "\ndashboard queries: %d, each for all instances and for one; slowest:\n\n| s | series | instances | dashboard / panel |\n|---:|---:|---|---|\n", len(r.Queries)/2)
	shown := map[string]int{}
	for _, q := range r.Queries {
		if shown[q.Scope] == 6 {
			continue
		}
		shown[q.Scope]++
		e := ""
		if q.Error != "" {
			e = " ERROR " + q.Error
		}
		fmt.Fprintf(w, "| %.3f | %d | %s | %s / %s%s |\n", q.Seconds, q.Series, q.Scope, q.Dashboard, q.Panel, e)
	}
	for _, c := range r.Costs {
		fmt.Fprintf(w, "\nrule CPU at one instant, %s: %.3f s per round = %.3f ms per node per round (each group counted as often as it runs in a round: a 1m group a quarter, a 5s group three times)\n\n| group | every | CPU s per evaluation | CPU s per round | ms per node per round |\n|---|---|---:|---:|---:|\n", c.File, c.TotalS, c.TotalS/float64(r.Nodes)*1000)
		for _, g := range c.Groups {
			fmt.Fprintf(w, "| %s | %s | %.3f | %.3f | %.3f |\n", g.Name, g.Every, g.CPUS, g.PerRoundS, g.PerRoundS/float64(r.Nodes)*1000)
		}
		fmt.Fprintf(w, "\nmost expensive rules:\n\n| CPU s | group | rule |\n|---:|---|---|\n")
		for i, rl := range c.Rules {
			if i == 8 {
				break
			}
			fmt.Fprintf(w, "| %.3f | %s | %s |\n", rl.CPUS, rl.Group, rl.Name)
		}
	}
	if len(r.QueryCosts) > 0 {
		fmt.Fprintf(w, "\ndashboard queries (5 m range, 15 s step, ending at the instant), CPU and wall seconds, most expensive:\n\n| CPU s | wall s | series | instances | dashboard / panel |\n|---:|---:|---:|---|---|\n")
		for i, q := range r.QueryCosts {
			if i == 12 {
				break
			}
			fmt.Fprintf(w, "| %.3f | %.3f | %d | %s | %s / %s |\n", q.CPUS, q.WallS, q.Series, q.Scope, q.Dashboard, q.Panel)
		}
	}
	fmt.Fprintf(w, "\nfiring: %s\npending: %s\nalerts ok: %v\n", summarize(r.Firing), summarize(r.Pending), r.AlertsOK)
	for _, p := range r.AlertProblems {
		fmt.Fprintln(w, "  -", p)
	}
}

// summarize counts alerts by name.
func summarize(keys []string) string {
	c := map[string]int{}
	for _, k := range keys {
		c[strings.SplitN(k, "/", 2)[0]]++
	}
	var parts []string
	for k, v := range c {
		parts = append(parts, fmt.Sprintf("%s×%d", k, v))
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// byGroup writes "group n, ..." (or "none").
func byGroup(m map[string]float64) string {
	var parts []string
	for g, v := range m {
		if v == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.0f", strings.TrimPrefix(g, "fabric_exporter."), v))
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
