// The node template: the exporter's real output, taken once on fixtures and
// parsed into series with their healthy rates, and the -rail-label what-if
// (the rail label on the series, the rail joins out of the rules).

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/fixturetree"
)

const hcas = 8

// ncclLog is a real NCCL log (two ranks on two DGX H100 with RoCE) whose
// processes chose IB.
const ncclLog = "collector/fixtures/nccl/nccl-tests-185-roce-2.19.3-dgxh100-init.log"

func exporterOutput(work, bin string) ([]byte, error) {
	if bin == "" {
		bin = filepath.Join(work, "fabric_exporter")
		if out, err := exec.Command("go", "build", "-o", bin, "./cmd/fabric_exporter").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("build: %v\n%s", err, out)
		}
	}
	sys, eth, nccl := filepath.Join(work, "sys"), filepath.Join(work, "ethtool"), filepath.Join(work, "nccl")
	if err := fixturetree.HCAs("collector/fixtures/sys", sys, hcas); err != nil {
		return nil, err
	}
	ethBase, err := os.ReadFile("collector/fixtures/ethtool/eth0")
	if err != nil {
		return nil, err
	}
	os.MkdirAll(eth, 0o755)
	for i := range hcas {
		os.WriteFile(filepath.Join(eth, fmt.Sprintf("eth%d", i)), ethBase, 0o644)
	}
	// Every rail netdev has an optical module and FEC (the fixture's eth0).
	phy := filepath.Join(work, "phy")
	os.MkdirAll(phy, 0o755)
	for _, ext := range []string{"eeprom", "fec"} {
		pb, err := os.ReadFile("collector/fixtures/phy/eth0." + ext)
		if err != nil {
			return nil, err
		}
		for i := range hcas {
			os.WriteFile(filepath.Join(phy, fmt.Sprintf("eth%d.%s", i, ext)), pb, 0o644)
		}
	}
	os.MkdirAll(nccl, 0o755)
	b, err := os.ReadFile(ncclLog)
	if err != nil {
		return nil, err
	}
	os.WriteFile(filepath.Join(nccl, "rank.log"), b, 0o644)
	gpu := filepath.Join(work, "gpu.json")
	if err := fullGPUFixture("collector/fixtures/gpu/dcgm-8gpu.json", gpu); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--web.listen-address="+addr, "--path.sysfs="+sys, "--path.procfs=collector/fixtures/proc",
		"--collector.pfc.ethtool-fixtures="+eth, "--collector.phy.fixtures="+phy, "--collector.gpu.fixture="+gpu,
		"--collector.nccl.log-path="+filepath.Join(nccl, "*.log"), "--collector.nccl.retention=0")
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var last error
	for range 100 {
		time.Sleep(200 * time.Millisecond)
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			last = err
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		// The nccl collector reads its logs in the background: wait for them.
		if err == nil && resp.StatusCode == 200 && bytes.Contains(body, []byte("fabric_nccl_net_info{")) {
			return body, nil
		}
		last = fmt.Errorf("status %d, no NCCL series yet", resp.StatusCode)
	}
	return nil, fmt.Errorf("scrape the exporter: %v", last)
}

// fullGPUFixture copies the DCGM fixture with every blank field filled and
// no compute PIDs (the bundled fixture has a sparse GPU, which rightly
// raises GPUActivityMissing).
func fullGPUFixture(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return err
	}
	for _, g := range doc["gpus"].([]any) {
		gm := g.(map[string]any)
		delete(gm, "pids")
		for k, v := range gm["fields"].(map[string]any) {
			if v == nil {
				gm["fields"].(map[string]any)[k] = 0.5
			}
		}
	}
	out, _ := json.Marshal(doc)
	return os.WriteFile(dst, out, 0o644)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

type tseries struct {
	name, labels string // labels with braces, "" when none
	value        float64
	rate         float64 // per second; 0 for gauges and flat counters
	gauge        bool    // jitter ±10 % (ratios, rates)
}

type template struct {
	meta   map[string]string // family name -> its HELP and TYPE lines
	series []tseries
}

func (t *template) counters() int {
	n := 0
	for _, s := range t.series {
		if s.rate > 0 {
			n++
		}
	}
	return n
}

// Healthy rates of the counters that move; every other counter is flat
// (errors, pauses, retransmissions and link events stay 0/s on a healthy node).
var rates = map[string]float64{
	"fabric_rdma_port_transmitted_bytes_total":           3e9, // 24 Gbit/s per rail
	"fabric_rdma_port_received_bytes_total":              3e9,
	"fabric_rdma_port_transmitted_packets_total":         7.5e5,
	"fabric_rdma_port_received_packets_total":            7.5e5,
	"fabric_rdma_port_transmitted_unicast_packets_total": 7.5e5,
	"fabric_rdma_port_received_unicast_packets_total":    7.5e5,
	"fabric_netdev_vport_rdma_bytes_total":               3e9,
	"fabric_netdev_transmitted_bytes_total":              1e5, // a little TCP
	"fabric_netdev_received_bytes_total":                 1e5,
	"fabric_netdev_transmitted_packets_total":            100,
	"fabric_netdev_received_packets_total":               100,
	"fabric_process_cpu_seconds_total":                   1,
	"fabric_process_context_switches_total":              1000,
	"fabric_rdma_hw_rx_write_requests_total":             1e4,
	"fabric_rdma_hw_rx_read_requests_total":              1e4,
}

func parseTemplate(text []byte) *template {
	t := &template{meta: map[string]string{}}
	types := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "# ") {
			f := strings.Fields(line)
			if len(f) >= 3 {
				t.meta[f[2]] += line + "\n"
				if f[1] == "TYPE" && len(f) >= 4 {
					types[f[2]] = f[3]
				}
			}
			continue
		}
		if line == "" {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		s := line[:i]
		name, labels := s, ""
		if j := strings.IndexByte(s, '{'); j >= 0 {
			name, labels = s[:j], s[j:]
		}
		ts := tseries{name: name, labels: labels, value: v}
		if name == "fabric_process_rdma_device_visible" {
			ts.value = 1 // made healthy (see the package comment)
		}
		if types[name] == "counter" {
			ts.rate = rates[name]
		} else if strings.HasSuffix(name, "_ratio") || strings.HasSuffix(name, "_per_second") && !strings.Contains(name, "rate_bytes") && !strings.Contains(name, "speed") {
			// Link rates and speeds (RDMA port rate, netdev speed, PCIe
			// link speeds) stay as they are: a jittered PCIe speed below
			// the supported one is a degraded link.
			ts.gauge = true
		}
		t.series = append(t.series, ts)
	}
	return t
}

// The what-if of -rail-label.
var (
	devPortRe = regexp.MustCompile(`device="([^"]*)".*port="([^"]*)"`)
	netdevRe  = regexp.MustCompile(`netdev="([^"]*)"`)
	railRe    = regexp.MustCompile(`rail="([^"]*)"`)
	joinRe    = regexp.MustCompile(`\s*\* on \(cluster, instance, (device, port|netdev)\) group_left \(rail\) fabric_(rdma_port|netdev)_info(\{rail!=""\})?`)
)

// addRailLabel puts rail="<rail>" on every series (but the *_info ones and
// those that have it) whose device and port, or netdev, is a rail's, by
// fabric_rdma_port_info and fabric_netdev_info.
func addRailLabel(text []byte) []byte {
	lines := strings.Split(string(text), "\n")
	ports, netdevs := map[string]string{}, map[string]string{}
	for _, l := range lines {
		r := railRe.FindStringSubmatch(l)
		if r == nil || r[1] == "" {
			continue
		}
		if strings.HasPrefix(l, "fabric_rdma_port_info{") {
			if m := devPortRe.FindStringSubmatch(l); m != nil {
				ports[m[1]+"/"+m[2]] = r[1]
			}
		} else if strings.HasPrefix(l, "fabric_netdev_info{") {
			if m := netdevRe.FindStringSubmatch(l); m != nil {
				netdevs[m[1]] = r[1]
			}
		}
	}
	for i, l := range lines {
		j := strings.IndexByte(l, '{')
		if strings.HasPrefix(l, "#") || j < 0 || strings.HasPrefix(l, "fabric_process_") || strings.HasPrefix(l, "fabric_rail_") || strings.Contains(l[:j], "_info") || railRe.MatchString(l) {
			continue
		}
		rail, ok := "", false
		if m := devPortRe.FindStringSubmatch(l); m != nil {
			rail, ok = ports[m[1]+"/"+m[2]]
		} else if m := netdevRe.FindStringSubmatch(l); m != nil {
			rail, ok = netdevs[m[1]]
		}
		if ok {
			k := strings.IndexByte(l, '}')
			lines[i] = l[:k] + `,rail="` + rail + `"` + l[k:]
		}
	}
	return []byte(strings.Join(lines, "\n"))
}

// dropRailJoins removes the "* on (...) group_left (rail) fabric_*_info"
// joins from the rules: with the rail on the series they are not needed.
func dropRailJoins(rules []byte) []byte {
	return joinRe.ReplaceAll(rules, nil)
}
