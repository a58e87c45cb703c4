package alerts

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// A real node's scrape held for 20 minutes raises nothing: the lent H200
// (a VM with one GPU on the root bus, no RDMA device, no IOMMU, no
// peer-memory module; testdata/README.md) is a healthy idle node, so every
// shipped alert must stay inactive there, also the GPUDirect ones that read
// its IOMMU and peer-memory facts.
func TestNoAlertOnLentH200(t *testing.T) {
	promtool := testenv.Tool(t, "promtool")
	series, err := scrapeAsInputSeries("testdata/h200-vm.prom", `job="fabric",instance="h200:10470"`, 80)
	if err != nil {
		t.Fatal(err)
	}
	if len(series) < 100 {
		t.Fatalf("only %d series in the scrape", len(series))
	}
	rf, err := readRules(renderedPath)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "rule_files: [%s]\nevaluation_interval: 15s\ntests:\n- interval: 15s\n  input_series:\n", renderedPath)
	for _, s := range series {
		b.WriteString(s)
	}
	b.WriteString("  alert_rule_test:\n")
	alerts := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			// FabricExporterDown reads up, which a scrape does not hold.
			for _, at := range []string{"5m", "19m"} {
				fmt.Fprintf(&b, "  - eval_time: %s\n    alertname: %s\n    exp_alerts: []\n", at, r.Alert)
			}
		}
	}
	if alerts < 30 {
		t.Fatalf("only %d alerts in %s", alerts, renderedPath)
	}
	dir := t.TempDir()
	stripped, err := stripAnnotations(renderedPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, renderedPath), stripped, 0o644); err != nil {
		t.Fatal(err)
	}
	test := filepath.Join(dir, "h200_test.yml")
	if err := os.WriteFile(test, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", test).CombinedOutput(); err != nil {
		t.Fatalf("an alert on the lent H200's scrape: %v\n%s", err, out)
	}
}

// scrapeAsInputSeries turns a text exposition into promtool input series
// holding each sample's value for n+1 steps, with extra labels added.
func scrapeAsInputSeries(path, extra string, n int) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("%s: bad line %q", path, line)
		}
		name, val := line[:i], line[i+1:]
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: bad value in %q", path, line)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j+1] + extra + "," + name[j+1:]
		} else {
			name += "{" + extra + "}"
		}
		out = append(out, fmt.Sprintf("  - series: '%s'\n    values: '%sx%d'\n",
			strings.ReplaceAll(name, "'", "''"), strconv.FormatFloat(v, 'g', -1, 64), n))
	}
	return out, sc.Err()
}
