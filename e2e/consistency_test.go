package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// Two Prometheus servers scraping the same exporter at the same time get
// the same series with the same values: concurrent scrapes neither lose nor
// mix up data (the collectors serialise per collector, each scrape gets its
// own batches).
func TestTwoPrometheusServersAgree(tt *testing.T) {
	t := testenv.RepeatFailures(tt)
	if testing.Short() {
		t.Skip("-short")
	}
	promBin := testenv.Tool(t, "prometheus")
	tmp := t.TempDir()
	exporter := buildExporter(t, tmp)
	addr := testenv.FreeAddr(t)
	start(t, exporter, "--web.listen-address="+addr, "--path.sysfs="+filepath.Join(repo, "collector/fixtures/sys"),
		"--path.procfs="+filepath.Join(repo, "collector/fixtures/proc"),
		"--collector.pfc.ethtool-fixtures="+filepath.Join(repo, "collector/fixtures/ethtool"),
		"--collector.gpu.fixture="+filepath.Join(repo, "collector/fixtures/gpu/dcgm-8gpu.json"))
	testenv.WaitHTTP(t, "http://"+addr+"/metrics")

	var proms []*promClient
	for i := range 2 {
		cfg := filepath.Join(tmp, fmt.Sprintf("prom%d.yml", i))
		os.WriteFile(cfg, []byte(fmt.Sprintf("global: {scrape_interval: 1s}\nscrape_configs:\n- job_name: fabric\n  static_configs: [{targets: ['%s']}]\n", addr)), 0o644)
		pa := testenv.FreeAddr(t)
		start(t, promBin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(tmp, fmt.Sprintf("tsdb%d", i)), "--web.listen-address="+pa)
		testenv.WaitHTTP(t, "http://"+pa+"/-/ready")
		proms = append(proms, newPromClient("http://"+pa))
	}
	// Counters that move with every scrape (durations, the read-error
	// counter the fixture's garbage value bumps on each scrape) differ by
	// design; everything else must match.
	const q = `{__name__=~"fabric_.+", __name__!~"fabric_scrape_collector_duration_seconds|fabric_scrape_read_errors_total"}`
	waitFor(t, 30*time.Second, "both servers to have scraped", func() bool {
		for _, p := range proms {
			if n, _ := p.count(`up == 1`); n != 1 {
				return false
			}
		}
		return true
	})
	time.Sleep(5 * time.Second)
	var got [2][]string
	for i, p := range proms {
		res, err := p.query(q)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range res {
			delete(s.Metric, "instance")
			var ls []string
			for k, v := range s.Metric {
				ls = append(ls, k+"="+v)
			}
			sort.Strings(ls)
			got[i] = append(got[i], fmt.Sprintf("%s %v", strings.Join(ls, ","), s.Value))
		}
		sort.Strings(got[i])
	}
	if len(got[0]) < 500 {
		t.Fatalf("only %d series", len(got[0]))
	}
	a, b := strings.Join(got[0], "\n"), strings.Join(got[1], "\n")
	if a != b {
		t.Errorf("the two servers disagree (%d vs %d series)", len(got[0]), len(got[1]))
		set := map[string]bool{}
		for _, l := range got[1] {
			set[l] = true
		}
		for _, l := range got[0] {
			if !set[l] {
				t.Logf("only in the first: %s", l)
			}
		}
	}
	t.Logf("%d series identical on both servers", len(got[0]))
}
