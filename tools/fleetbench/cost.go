// CPU cost at one instant (-cost): Prometheus's CPU time for every rule and
// dashboard query, evaluated with scraping and rule evaluation stopped.

package main

import (
	"bytes"
	"fmt"
	"math"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/fabric-exporter/fabric_exporter/dashboards"
)

var costFiles []string

type ruleCost struct {
	Group string  `json:"group"`
	Name  string  `json:"name"`
	CPUS  float64 `json:"cpu_s"`
}

type groupCost struct {
	Name string  `json:"name"`
	CPUS float64 `json:"cpu_s"` // one evaluation of every rule of the group
	// Every is the group's interval (its own, else the evaluation
	// interval); PerRoundS is CPUS spread over rounds of the evaluation
	// interval (a group evaluated every 1m costs a quarter of its CPUS per
	// 15 s round, one every 5 s three times it).
	Every     string  `json:"every"`
	PerRoundS float64 `json:"cpu_s_per_round"`
}

type fileCost struct {
	File   string      `json:"file"`
	TotalS float64     `json:"cpu_s_per_round"`
	Groups []groupCost `json:"groups"`
	Rules  []ruleCost  `json:"rules"`
}

type queryCost struct {
	Dashboard string  `json:"dashboard"`
	Panel     string  `json:"panel"`
	Scope     string  `json:"scope"`
	CPUS      float64 `json:"cpu_s"`
	WallS     float64 `json:"wall_s"`
	Series    int     `json:"series"`
}

// cpuTicks is the utime+stime of a process, in clock ticks (1/100 s).
func cpuTicks(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return u + st, nil
}

// repeats is how often each rule and query is evaluated (-repeats).
var repeats = 5

// costQueries: also measure the dashboard queries (-cost-queries).
var costQueries = true

// measureCost stops scraping and rule evaluation (a reload with an empty
// config), then evaluates every rule of every -cost file and every dashboard
// query at one instant T (30 s ago, so the fleet's last scrapes are in),
// each `repeats` times, and takes Prometheus's CPU time for it less its idle
// rate. Rule expressions are wrapped in count() so that the JSON of large
// results is not counted (a rule evaluation encodes nothing).
func measureCost(p *prom, pid int, cfgPath string, n int, interval time.Duration, log func(string, ...any)) ([]fileCost, []queryCost, error) {
	T := time.Now().Add(-30 * time.Second)
	if err := os.WriteFile(cfgPath, []byte("global:\n  scrape_interval: 15s\n"), 0o644); err != nil {
		return nil, nil, err
	}
	proc, _ := os.FindProcess(pid)
	if err := proc.Signal(syscall.SIGHUP); err != nil {
		return nil, nil, err
	}
	time.Sleep(10 * time.Second)
	c0, _ := cpuTicks(pid)
	t0 := time.Now()
	time.Sleep(10 * time.Second)
	c1, _ := cpuTicks(pid)
	idle := (c1 - c0) / 100 / time.Since(t0).Seconds() // cores while idle
	log("idle after reload: %.3f cores", idle)
	measureQ := func(path string, v url.Values) (cpu, wall float64, series int, err error) {
		c0, _ := cpuTicks(pid)
		t0 := time.Now()
		for range repeats {
			if series, err = p.count(path, v); err != nil {
				return
			}
		}
		wall = time.Since(t0).Seconds()
		c1, _ := cpuTicks(pid)
		cpu = math.Max(0, ((c1-c0)/100-idle*wall)/float64(repeats))
		return cpu, wall / float64(repeats), series, nil
	}
	var out []fileCost
	for _, file := range costFiles {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, nil, err
		}
		var doc struct {
			Groups []struct {
				Name     string `yaml:"name"`
				Interval string `yaml:"interval"`
				Rules    []struct {
					Record string `yaml:"record"`
					Alert  string `yaml:"alert"`
					Expr   string `yaml:"expr"`
				} `yaml:"rules"`
			} `yaml:"groups"`
		}
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return nil, nil, fmt.Errorf("%s: %v", file, err)
		}
		fc := fileCost{File: file}
		for _, g := range doc.Groups {
			gc := groupCost{Name: g.Name, Every: interval.String()}
			every := interval
			if g.Interval != "" {
				d, err := model.ParseDuration(g.Interval)
				if err != nil {
					return nil, nil, fmt.Errorf("%s: group %s: interval %q: %v", file, g.Name, g.Interval, err)
				}
				every, gc.Every = time.Duration(d), g.Interval
			}
			for _, rl := range g.Rules {
				v := url.Values{"query": {"count((" + rl.Expr + "))"}, "time": {fmt.Sprintf("%.3f", float64(T.UnixMilli())/1000)}}
				cpu, _, _, err := measureQ("/api/v1/query", v)
				if err != nil {
					return nil, nil, fmt.Errorf("%s %s: %v", g.Name, rl.Record+rl.Alert, err)
				}
				gc.CPUS += cpu
				fc.Rules = append(fc.Rules, ruleCost{Group: g.Name, Name: rl.Record + rl.Alert, CPUS: cpu})
			}
			// A group evaluated every 1m costs a quarter of its CPU per
			// 15 s round, one evaluated every 5 s three times it.
			gc.PerRoundS = gc.CPUS * interval.Seconds() / every.Seconds()
			fc.Groups = append(fc.Groups, gc)
			fc.TotalS += gc.PerRoundS
		}
		sort.Slice(fc.Rules, func(i, j int) bool { return fc.Rules[i].CPUS > fc.Rules[j].CPUS })
		log("%s: %.3f CPU s per round", file, fc.TotalS)
		out = append(out, fc)
	}
	var qc []queryCost
	one := dashboards.DefaultValues()
	one["instance"] = fmt.Sprintf("node%04d", n-1)
	qs := dashboards.Queries()
	if !costQueries {
		qs = nil
	}
	for _, q := range qs {
		for _, scope := range []string{"all", "one"} {
			e := q.Expr
			if scope == "one" {
				var err error
				if e, err = dashboards.Expand(q.Template, one); err != nil {
					return nil, nil, err
				}
			}
			path, v := panelQuery(e, q.Instant, T)
			cpu, wall, series, err := measureQ(path, v)
			if err != nil {
				return nil, nil, fmt.Errorf("%s / %s: %v", q.Dashboard, q.Panel, err)
			}
			qc = append(qc, queryCost{Dashboard: q.Dashboard, Panel: q.Panel, Scope: scope, CPUS: cpu, WallS: wall, Series: series})
		}
	}
	sort.SliceStable(qc, func(i, j int) bool { return qc[i].CPUS > qc[j].CPUS })
	return out, qc, nil
}

// panelQuery is the API request of a dashboard query as a panel asks it at
// end: an instant query, or a range query over 5 minutes at a 15 s step.
func panelQuery(expr string, instant bool, end time.Time) (path string, v url.Values) {
	v = url.Values{"query": {expr}}
	if instant {
		v.Set("time", fmt.Sprint(end.Unix()))
		return "/api/v1/query", v
	}
	v.Set("start", fmt.Sprint(end.Add(-5*time.Minute).Unix()))
	v.Set("end", fmt.Sprint(end.Unix()))
	v.Set("step", "15")
	return "/api/v1/query_range", v
}
