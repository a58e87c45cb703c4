package main

import (
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// The what-if rules keep every rule and lose every rail join, and
// promtool still accepts them.
func TestDropRailJoins(t *testing.T) {
	b, err := os.ReadFile("../../alerts/fabric-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	out := string(dropRailJoins(b))
	// The counter joins with fabric_rdma_port_info / fabric_netdev_info are
	// gone (the GPUDirect records join the topology's GPU x HCA paths with
	// fabric_rail_info on purpose: no counter, no what-if).
	for _, join := range []string{"group_left (rail) fabric_rdma_port_info", "group_left (rail) fabric_netdev_info"} {
		if strings.Contains(out, join) {
			t.Errorf("a rail join is left: %s", join)
		}
	}
	if got, want := strings.Count(out, "- record:")+strings.Count(out, "- alert:"), strings.Count(string(b), "- record:")+strings.Count(string(b), "- alert:"); got != want {
		t.Errorf("%d rules, want %d", got, want)
	}
	promtool := testenv.Tool(t, "promtool")
	p := filepath.Join(t.TempDir(), "rules.yml")
	os.WriteFile(p, []byte(out), 0o644)
	if o, err := exec.Command(promtool, "check", "rules", p).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, o)
	}
}

func TestAddRailLabel(t *testing.T) {
	in := `# TYPE fabric_rdma_port_info gauge
fabric_rdma_port_info{device="mlx5_0",link_layer="Ethernet",port="1",rail="mlx5_0"} 1
fabric_rdma_port_info{device="mlx5_9",link_layer="Ethernet",port="1",rail=""} 1
fabric_netdev_info{driver="mlx5_core",netdev="eth0",rail="mlx5_0"} 1
fabric_rdma_port_transmitted_bytes_total{device="mlx5_0",port="1"} 5
fabric_rdma_port_transmitted_bytes_total{device="mlx5_9",port="1"} 5
fabric_pfc_pause_frames_total{direction="rx",netdev="eth0",priority="3"} 7
fabric_process_rdma_device_visible{comm="x",device="mlx5_0",node="uverbs0",pid="1"} 1
`
	want := `# TYPE fabric_rdma_port_info gauge
fabric_rdma_port_info{device="mlx5_0",link_layer="Ethernet",port="1",rail="mlx5_0"} 1
fabric_rdma_port_info{device="mlx5_9",link_layer="Ethernet",port="1",rail=""} 1
fabric_netdev_info{driver="mlx5_core",netdev="eth0",rail="mlx5_0"} 1
fabric_rdma_port_transmitted_bytes_total{device="mlx5_0",port="1",rail="mlx5_0"} 5
fabric_rdma_port_transmitted_bytes_total{device="mlx5_9",port="1"} 5
fabric_pfc_pause_frames_total{direction="rx",netdev="eth0",priority="3",rail="mlx5_0"} 7
fabric_process_rdma_device_visible{comm="x",device="mlx5_0",node="uverbs0",pid="1"} 1
`
	if got := string(addRailLabel([]byte(in))); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// Planted nodes change only what their fault needs; healthy nodes move
// their traffic counters and keep their error counters flat.
func TestFleetPlanted(t *testing.T) {
	tm := parseTemplate([]byte(`# TYPE fabric_rdma_port_transmitted_bytes_total counter
fabric_rdma_port_transmitted_bytes_total{device="mlx5_0",port="1"} 10
fabric_rdma_port_transmitted_bytes_total{device="mlx5_1",port="1"} 10
# TYPE fabric_rdma_hw_local_ack_timeout_err_total counter
fabric_rdma_hw_local_ack_timeout_err_total{device="mlx5_2",port="1"} 3
# TYPE fabric_nccl_net_info gauge
fabric_nccl_net_info{host="h",net="IB",pid="1"} 1
# TYPE fabric_process_rdma_device_visible gauge
fabric_process_rdma_device_visible{comm="x",device="mlx5_0",node="uverbs0",pid="1"} 0
`))
	f := newFleet(tm, 5)
	if v := f.nodes["node0000"].series[4].value; v != 1 {
		t.Errorf("rdma_device_visible = %v, want 1 (made healthy)", v)
	}
	if r := f.nodes["node0000"].series[2].rate; r != 0 {
		t.Errorf("healthy local_ack_timeout_err rate %v, want 0", r)
	}
	if r := f.nodes["node0003"].series[2].rate; r != 200 {
		t.Errorf("retrans node local_ack_timeout_err rate %v, want 200", r)
	}
	if a, b := f.nodes["node0001"].series[0].rate, f.nodes["node0001"].series[1].rate; a != 10*b || b == 0 {
		t.Errorf("imbalance node rates %v, %v: want mlx5_1 at a tenth of mlx5_0", a, b)
	}
	if l := f.nodes["node0004"].series[3].labels; !strings.Contains(l, `net="Socket"`) {
		t.Errorf("socket node: %s", l)
	}
	if l := f.nodes["node0000"].series[3].labels; !strings.Contains(l, `net="IB"`) {
		t.Errorf("healthy node: %s", l)
	}
	// The socket node's channels on NET/Socket (the rule's evidence that
	// the job spans nodes); no other node has them.
	if s := f.nodes["node0004"].series; len(s) != 6 || s[5].name != "fabric_nccl_connections" || s[5].labels != `{gdr="false",host="h",pid="1",transport="NET/Socket"}` {
		t.Errorf("socket node connections: %+v", s[len(s)-1])
	}
	if n := len(f.nodes["node0000"].series); n != 5 {
		t.Errorf("healthy node: %d series, want 5", n)
	}
}

func TestFleetRailDownAndSteady(t *testing.T) {
	tm := parseTemplate([]byte(`# TYPE fabric_rdma_port_up gauge
fabric_rdma_port_up{device="mlx5_0",port="1",rail="mlx5_0"} 1
fabric_rdma_port_up{device="mlx5_1",port="1",rail="mlx5_1"} 1
# TYPE fabric_rdma_port_transmitted_bytes_total counter
fabric_rdma_port_transmitted_bytes_total{device="mlx5_0",port="1"} 10
`))
	f := newFleet(tm, 6)
	if v := f.nodes["node0005"].series[1].value; v != 0 {
		t.Errorf("rail down node: mlx5_1 up = %v, want 0", v)
	}
	if v := f.nodes["node0005"].series[0].value; v != 1 {
		t.Errorf("rail down node: mlx5_0 up = %v, want 1", v)
	}
	// Steady: the counter is its value plus rate × the time since t0,
	// whoever scraped before.
	f.steady, f.t0 = true, time.Now().Add(-10*time.Second)
	for range 2 {
		rec := httptest.NewRecorder()
		f.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics?node=node0000", nil))
		var v float64
		for _, l := range strings.Split(rec.Body.String(), "\n") {
			if strings.HasPrefix(l, "fabric_rdma_port_transmitted_bytes_total{") {
				var ms int64
				fmt.Sscan(l[strings.IndexByte(l, ' ')+1:], &v, &ms)
				// The value is the counter's at the sample's timestamp.
				if want := 10 + 3e9*float64(ms-f.t0.UnixMilli())/1000; v != want {
					t.Errorf("steady counter %g at %d, want %g", v, ms, want)
				}
			}
		}
		if v == 0 {
			t.Error("no counter")
		}
	}
}
