package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/fixturetree"
)

// States every healthy node goes through, checked with real Prometheus
// (promtool evaluates every group at one interval and cannot express the
// first): a scrape that fails just before the rail-history group's
// evaluation, an exporter restart at the same moment, and ports that were
// never cabled.

// scrapeProxy stands between Prometheus and a node's exporter: Prometheus
// scrapes the proxy (the node's instance is the proxy's address), which
// answers 503 while failing is set (a scrape timeout or error) and 502
// while the exporter is down (a restart).
type scrapeProxy struct {
	srv     *httptest.Server
	failing atomic.Bool
}

func newScrapeProxy(t testing.TB, exporterAddr string) *scrapeProxy {
	t.Helper()
	p := &scrapeProxy{}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: exporterAddr})
	rp.ErrorLog = nil
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.failing.Load() {
			http.Error(w, "scrape failure injected by the test", http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *scrapeProxy) addr() string { return strings.TrimPrefix(p.srv.URL, "http://") }

// nextEvaluation returns when the rule group will next be evaluated.
func nextEvaluation(t testing.TB, prom *promClient, group string) time.Time {
	t.Helper()
	var next time.Time
	waitFor(t, 30*time.Second, "rule group "+group+" evaluated", func() bool {
		groups, err := prom.Rules(context.Background())
		if err != nil {
			return false
		}
		for _, g := range groups {
			if g.Name == group && !g.LastEvaluation.IsZero() && g.LastEvaluation.Year() > 2000 {
				iv := time.Duration(g.Interval * float64(time.Second))
				next = g.LastEvaluation.Add(iv)
				for time.Until(next) < 2*time.Second { // room to fail a scrape before it
					next = next.Add(iv)
				}
				return true
			}
		}
		return false
	})
	return next
}

// aroundHistoryEvaluation runs fault at about 1.2 s before an evaluation
// of the rail-history group (so that at least one scrape at the 1 s
// interval fails before it) and heal 0.6 s after it, then checks that the
// record of vanished rails did list the node's rails (the state that paged
// falsely before: a 2-minute-old record after one failed scrape), while
// RailLinkDown stayed silent on the node for longer than its `for:` and a
// history interval. It tries again when the failure missed the evaluation.
func aroundHistoryEvaluation(t testing.TB, prom *promClient, instance, what string, fault, heal func()) {
	t.Helper()
	const group = "fabric_exporter.rail_history"
	for try := 1; ; try++ {
		next := nextEvaluation(t, prom, group)
		time.Sleep(time.Until(next.Add(-1200 * time.Millisecond)))
		fault()
		time.Sleep(time.Until(next.Add(600 * time.Millisecond)))
		heal()
		// Watch RailLinkDown (pending or firing) for 9 s: longer than the
		// test's for (2 s) plus the history interval (5 s).
		deadline := time.Now().Add(9 * time.Second)
		for time.Now().Before(deadline) {
			if n, err := prom.count(`ALERTS{alertname="RailLinkDown", instance="` + instance + `"}`); err != nil || n > 0 {
				as, _ := prom.list(`ALERTS{alertname="RailLinkDown", instance="` + instance + `"}`)
				t.Fatalf("%s: RailLinkDown on a healthy node (%v): %v", what, err, as)
			}
			time.Sleep(300 * time.Millisecond)
		}
		n, err := prom.count(`max_over_time(rail:fabric_rail_vanished:max_over_history{instance="` + instance + `"}[15s])`)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			t.Logf("%s: the vanished-rails record listed %d rails of the healthy node (try %d); RailLinkDown stayed silent", what, n, try)
			return
		}
		if try == 5 {
			t.Fatalf("%s: the failure never hit a rail-history evaluation in %d tries: the test did not exercise the case (last: %s)", what, try, scrapesAround(prom, instance, group, next))
		}
		t.Logf("%s: try %d missed the rail-history evaluation; again (%s)", what, try, scrapesAround(prom, instance, group, next))
	}
}

// addUncabledPort gives a fixture sysfs a second port of the HCA of
// srcDevice, as a dual-port ConnectX shows it: another PCI function
// (.1) with its own RDMA device and netdev, Ethernet link layer, never
// cabled (DOWN, Disabled, the 40 Gb/s default rate of a down mlx5 port).
func addUncabledPort(t testing.TB, sys, srcDevice, device, netdev string) {
	t.Helper()
	link, err := os.Readlink(filepath.Join(sys, "class/infiniband", srcDevice))
	if err != nil {
		t.Fatal(err)
	}
	// ../../devices/.../0000:18:00.0/infiniband/mlx5_0
	srcFn := filepath.Dir(filepath.Dir(filepath.Join(sys, "class/infiniband", link)))
	dstFn := strings.TrimSuffix(srcFn, ".0") + ".1"
	if err := fixturetree.Copy(srcFn, dstFn); err != nil {
		t.Fatal(err)
	}
	// The copy holds the source's RDMA device, verbs node and netdev: rename.
	for _, d := range []struct{ dir, from, to string }{
		{"infiniband", srcDevice, device},
		{"net", "", netdev},
	} {
		entries, _ := os.ReadDir(filepath.Join(dstFn, d.dir))
		for _, e := range entries {
			if d.from == "" || e.Name() == d.from {
				if err := os.Rename(filepath.Join(dstFn, d.dir, e.Name()), filepath.Join(dstFn, d.dir, d.to)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	os.RemoveAll(filepath.Join(dstFn, "infiniband_verbs"))
	port := filepath.Join(dstFn, "infiniband", device, "ports/1")
	for name, v := range map[string]string{
		"state": "1: DOWN", "phys_state": "3: Disabled", "rate": "40 Gb/sec (4X QDR)",
		"gid_attrs/ndevs/0": netdev,
	} {
		if err := os.WriteFile(filepath.Join(port, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, v := range map[string]string{"operstate": "down", "carrier": "0", "dev_port": "0"} {
		os.WriteFile(filepath.Join(dstFn, "net", netdev, name), []byte(v+"\n"), 0o644)
	}
	rel := func(p string) string {
		r, err := filepath.Rel(filepath.Join(sys, "class/x"), p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, l := range [][2]string{
		{filepath.Join(dstFn, "infiniband", device), filepath.Join(sys, "class/infiniband", device)},
		{filepath.Join(dstFn, "net", netdev), filepath.Join(sys, "class/net", netdev)},
	} {
		if err := os.Symlink(rel(l[0]), l[1]); err != nil {
			t.Fatal(fmt.Errorf("uncabled port: %w", err))
		}
	}
}

// exporterDownFor sets the for: of FabricExporterDown in rendered rules.
func exporterDownFor(t testing.TB, rules []byte, old, new string) []byte {
	t.Helper()
	i := bytes.Index(rules, []byte("- alert: FabricExporterDown\n"))
	if i < 0 {
		t.Fatal("no FabricExporterDown in the rules")
	}
	j := bytes.Index(rules[i:], []byte("for: "+old+"\n"))
	if j < 0 || bytes.Contains(rules[i+1:i+j], []byte("- alert:")) {
		t.Fatalf("FabricExporterDown has no for: %s", old)
	}
	out := append([]byte(nil), rules[:i+j]...)
	out = append(out, "for: "+new+"\n"...)
	return append(out, rules[i+j+len("for: "+old+"\n"):]...)
}

// scrapesAround says, for a try that missed, which scrapes of the instance
// Prometheus stored around the evaluation at next (up's samples, in
// seconds from next) and when the group was last evaluated.
func scrapesAround(prom *promClient, instance, group string, next time.Time) string {
	var d struct {
		Result []struct {
			Values [][2]any `json:"values"`
		} `json:"result"`
	}
	v := url.Values{"query": {`up{instance="` + instance + `"}[20s]`}}
	if err := prom.Get(context.Background(), "/api/v1/query", v, &d); err != nil {
		return err.Error()
	}
	var parts []string
	for _, r := range d.Result {
		for _, p := range r.Values {
			ts, _ := p[0].(float64)
			parts = append(parts, fmt.Sprintf("%+.2fs=%v", ts-float64(next.UnixNano())/1e9, p[1]))
		}
	}
	out := "up: " + strings.Join(parts, " ")
	if groups, err := prom.Rules(context.Background()); err == nil {
		for _, g := range groups {
			if g.Name == group {
				out += fmt.Sprintf("; %s last evaluated at %+.2fs, took %.3fs", group, g.LastEvaluation.Sub(next).Seconds(), g.EvaluationTime)
			}
		}
	}
	return out
}
