package collector

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log"
)

// fixtureQPs is what `rdma -j resource show qp` prints on the fixture
// node (fixtures/rdma-qp/README.md).
const fixtureQPs = "fixtures/rdma-qp/qp.json"

// qpFixtureOptions are the process collector's options on the fixture
// /proc with --collector.process.rdma-qp-fixture=file.
func qpFixtureOptions(t *testing.T, procfs, file string) *Options {
	t.Helper()
	var fo Options
	app := kingpin.New("qp-fixture", "")
	processFlags(app, &fo)
	if _, err := app.Parse([]string{"--collector.process.rdma-qp-fixture=" + file}); err != nil {
		t.Fatal(err)
	}
	o := processOptions(t, procfs)
	o.Process.RDMAQPFixture = fo.Process.RDMAQPFixture
	return o
}

// --collector.process.rdma-qp-fixture: the queue pairs of the fixture
// node, attributed to the fixture /proc's processes although this test is
// not in that procfs's PID namespace (its self is 3907), where a netlink
// listing is refused (TestProcessRDMAOtherPIDNamespace).
func TestProcessRDMAQPFixture(t *testing.T) {
	c, _, _ := newTestProcess(t, qpFixtureOptions(t, fixtureProc, fixtureQPs))
	out, err := processScrape(t, c)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`fabric_process_rdma_queue_pairs{comm="python3",device="mlx5_0",pid="4242"} 4`,
		`fabric_process_rdma_queue_pairs{comm="python3",device="mlx5_3",pid="4242"} 4`,
		`fabric_process_rdma_queue_pairs{comm="sglang::schedul",device="mlx5_0",pid="4310"} 0`,
		`fabric_process_rdma_queue_pairs{comm="sglang::schedul",device="mlx5_3",pid="4310"} 0`,
		`fabric_process_rdma_queue_pairs{comm="sglang::schedul",device="mlx5_0",pid="4311"} 0`,
		`fabric_process_rdma_queue_pairs{comm="sglang::schedul",device="mlx5_3",pid="4311"} 3`,
		`fabric_rdma_owner_queue_pairs{comm="python3",container_id="5734f5e6da28ef2a7d30683d72d881d34cc20c195221ed1f200ac9d5a2ffd388",device="mlx5_0",pid="4242",pod_uid="8f4c2a1e-6b3d-4e59-9a7c-1d2e3f4a5b6c",state="rts"} 4`,
		`fabric_rdma_owner_queue_pairs{comm="python3",container_id="5734f5e6da28ef2a7d30683d72d881d34cc20c195221ed1f200ac9d5a2ffd388",device="mlx5_3",pid="4242",pod_uid="8f4c2a1e-6b3d-4e59-9a7c-1d2e3f4a5b6c",state="rts"} 4`,
		`fabric_rdma_owner_queue_pairs{comm="sglang::schedul",container_id="f6f6b9c6a78875c26e65a60448dec9ec0d21dcc5e801662a1444eabcdb85255e",device="mlx5_3",pid="4311",pod_uid="",state="err"} 1`,
		`fabric_rdma_owner_queue_pairs{comm="sglang::schedul",container_id="f6f6b9c6a78875c26e65a60448dec9ec0d21dcc5e801662a1444eabcdb85255e",device="mlx5_3",pid="4311",pod_uid="",state="rts"} 2`,
	}
	got := append(grepLines(out, "fabric_process_rdma_queue_pairs{"), grepLines(out, "fabric_rdma_owner_queue_pairs{")...)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("queue-pair series:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	hasLine(t, out, `fabric_process_rdma_netlink_available 1`)
}

// The file is read at every listing: a rewrite shows at the next one, a
// broken file makes the listing unavailable (the file and entry logged),
// a repaired one brings it back.
func TestProcessRDMAQPFixtureRewritten(t *testing.T) {
	file := filepath.Join(t.TempDir(), "qp.json")
	orig, err := os.ReadFile(fixtureQPs)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(file, orig, 0o644)
	c, _, clk := newTestProcess(t, qpFixtureOptions(t, fixtureProc, file))
	var logs strings.Builder
	c.env.Once = NewOnceLogger(log.NewLogfmtLogger(&logs), 16)
	out, _ := processScrape(t, c)
	hasLine(t, out, `fabric_process_rdma_queue_pairs{comm="sglang::schedul",device="mlx5_3",pid="4311"} 3`)

	os.WriteFile(file, []byte(strings.Replace(string(orig), `"state":"ERR"`, `"state":"RTS"`, 1)), 0o644)
	clk.advance(time.Minute)
	out, _ = processScrape(t, c)
	if got := grepLines(out, `state="err"`); len(got) > 0 {
		t.Errorf("a queue pair in err after the rewrite:\n%s", strings.Join(got, "\n"))
	}
	hasLine(t, out, `fabric_rdma_owner_queue_pairs{comm="sglang::schedul",container_id="f6f6b9c6a78875c26e65a60448dec9ec0d21dcc5e801662a1444eabcdb85255e",device="mlx5_3",pid="4311",pod_uid="",state="rts"} 3`)

	os.WriteFile(file, []byte(strings.Replace(string(orig), `"state":"ERR"`, `"state":"BROKEN"`, 1)), 0o644)
	clk.advance(time.Minute)
	out, _ = processScrape(t, c)
	hasLine(t, out, `fabric_process_rdma_netlink_available 0`)
	if got := append(grepLines(out, "fabric_process_rdma_queue_pairs{"), grepLines(out, "fabric_rdma_owner_queue_pairs{")...); len(got) > 0 {
		t.Errorf("queue pairs from a broken file:\n%s", strings.Join(got, "\n"))
	}
	if !strings.Contains(logs.String(), file+": entry 12: mlx5_3 lqpn 2133: unknown state") {
		t.Errorf("the log does not name the file and the entry:\n%s", logs.String())
	}

	os.WriteFile(file, orig, 0o644)
	clk.advance(time.Minute)
	out, _ = processScrape(t, c)
	hasLine(t, out, `fabric_process_rdma_netlink_available 1`)
	hasLine(t, out, `fabric_process_rdma_queue_pairs{comm="python3",device="mlx5_0",pid="4242"} 4`)
}

// The bundled fixture is written for the fixture /proc: every owner is a
// process there, with the comm iproute2 would have printed, and the kernel
// QPs are the GSI queue pair of each port, owned by ib_core.
func TestRDMAQPFixtureMatchesProc(t *testing.T) {
	raw, err := os.ReadFile(fixtureQPs)
	if err != nil {
		t.Fatal(err)
	}
	var entries []struct {
		IfName string `json:"ifname"`
		Port   int    `json:"port"`
		LQPN   int    `json:"lqpn"`
		Type   string `json:"type"`
		PID    int    `json:"pid"`
		Comm   string `json:"comm"`
	}
	if err := json.Unmarshal(raw, &entries); err != nil {
		t.Fatal(err)
	}
	gsi := map[string]int{}
	for _, e := range entries {
		if e.PID == 0 {
			if e.Type != "GSI" || e.LQPN != 1 || e.Comm != "ib_core" {
				t.Errorf("kernel QP %+v: want the GSI QP (lqpn 1) of ib_core", e)
			}
			gsi[e.IfName+"/"+strconv.Itoa(e.Port)]++
			continue
		}
		comm, err := os.ReadFile(filepath.Join(fixtureProc, strconv.Itoa(e.PID), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != e.Comm {
			t.Errorf("QP %s lqpn %d: pid %d comm %q; the fixture /proc says %q, %v", e.IfName, e.LQPN, e.PID, e.Comm, comm, err)
		}
		if _, err := os.Stat(filepath.Join(fixtureSys, "class/infiniband", e.IfName, "ports", strconv.Itoa(e.Port))); err != nil {
			t.Errorf("QP %s lqpn %d: no such port in the fixture sysfs: %v", e.IfName, e.LQPN, err)
		}
	}
	if len(gsi) != 2 || gsi["mlx5_0/1"] != 1 || gsi["mlx5_3/1"] != 1 {
		t.Errorf("GSI QPs per port %v, want one on mlx5_0/1 and mlx5_3/1", gsi)
	}
}
