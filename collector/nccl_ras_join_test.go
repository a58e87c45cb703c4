package collector

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/fakeras"
)

// The ranks of a pod in its own PID and network namespaces (the fixture's
// 4242: pid 1 in a namespace with 10.77.0.2), as NCCL's RAS reports them:
// joined to their host process, named when dead, and their verbs fds taken
// only from a read made after the rank was first seen.

const podComm = `comm="0x5e1fc0de2a7b9d31"`

// rasPod returns a process collector on a copy of the fixture /proc with
// a fake clock, and an nccl-ras collector that consumes it on the same
// clock, asking a fake RAS service that answers file.
func rasPod(t *testing.T, file string) (string, *processCollector, *ncclRASCollector, *fakeras.Server, *fakeClock) {
	t.Helper()
	procDir := copyTree(t, fixtureProc)
	p, _, clk := newTestProcess(t, processOptions(t, procDir))
	f := fakeras.Start(t, "fixtures/nccl-ras", true, file, "")
	c := newTestRAS(t, NCCLRASOptions{Addresses: []string{closedAddr(t)}}, "127.0.0.1", "192.0.2.2")
	// The pod's own RAS service answers, from its namespace (the fixture's
	// namespace is no real one to enter: the fake is dialled directly).
	c.env.Processes = podInventory{p, RASTarget{Addr: f.Addr(), NetNS: 4026532178}}
	c.now = clk.now
	return procDir, p, c, f, clk
}

// podInventory is a process table whose RAS services are those given.
type podInventory struct {
	*processCollector
	target RASTarget
}

func (i podInventory) RASTargets() []RASTarget { return []RASTarget{i.target} }

// rasHostAnswer is rasPod with the answer coming from a RAS service of
// the exporter's own namespace (the flag's address): it may not speak for
// the pod's ranks.
func rasHostAnswer(t *testing.T, file string) (*processCollector, *ncclRASCollector, *fakeClock) {
	t.Helper()
	procDir := copyTree(t, fixtureProc)
	setEnv(t, procDir, 4242, "NCCL_RAS_ENABLE=0")
	p, _, clk := newTestProcess(t, processOptions(t, procDir))
	f := fakeras.Start(t, "fixtures/nccl-ras", true, file, "")
	c := newTestRAS(t, NCCLRASOptions{Addresses: []string{f.Addr()}}, "127.0.0.1", "192.0.2.2")
	c.env.Processes = p
	c.now = clk.now
	return p, c, clk
}

// A RAS service of the host's namespace (a hostNetwork job, or a tenant's
// fake on the flag's port) that lists a pod's rank at the pod's address
// joins nothing: the rank stays unjoined, "other_namespace".
func TestRASHostAnswerDoesNotJoinPodRank(t *testing.T) {
	p, c, clk := rasHostAnswer(t, "pod-healthy.json")
	processScrape(t, p)
	clk.advance(time.Second)
	c.poll()
	if got := rasLines(t, c, "fabric_nccl_ras_rank_process_info"); len(got) != 0 {
		t.Fatalf("joined from another namespace's answer: %v", got)
	}
	want := `fabric_nccl_ras_rank_unjoined{` + podComm + `,host="10.77.0.2",pid="1",rank="0",reason="other_namespace"} 1`
	if got := rasLines(t, c, "fabric_nccl_ras_rank_unjoined"); len(got) != 1 || got[0] != want {
		t.Fatalf("unjoined %v, want %s", got, want)
	}
}

// rasLines scrapes c and returns its sample lines that contain every one
// of subs.
func rasLines(t *testing.T, c *ncclRASCollector, subs ...string) []string {
	t.Helper()
	return grepLines(rasSamples(t, c), subs...)
}

func TestRASPodRankJoined(t *testing.T) {
	_, p, c, f, clk := rasPod(t, "pod-healthy.json")
	processScrape(t, p) // the table: 4242's fds read now
	clk.advance(time.Second)
	c.poll()
	// Only rank 0 is this node's (10.77.0.2 is the pod's address, from the
	// table; 10.77.0.3 is another node's).
	if got := rasLines(t, c, "fabric_nccl_ras_rank_info"); len(got) != 1 || !strings.Contains(got[0], `host="10.77.0.2",pid="1",rank="0"`) {
		t.Fatalf("rank series %v, want rank 0 only", got)
	}
	want := `fabric_nccl_ras_rank_process_info{` + podComm + `,container_id="5734f5e6da28ef2a7d30683d72d881d34cc20c195221ed1f200ac9d5a2ffd388",host="10.77.0.2",host_pid="4242",joined_by="nspid",pid="1",pod_uid="8f4c2a1e-6b3d-4e59-9a7c-1d2e3f4a5b6c",rank="0"} 1`
	if got := rasLines(t, c, "fabric_nccl_ras_rank_process_info"); len(got) != 1 || got[0] != want {
		t.Fatalf("joins %v, want %s", got, want)
	}
	// The table's fds were read before the rank was seen: no count yet.
	if got := rasLines(t, c, "fabric_nccl_ras_rank_verbs_fds"); len(got) != 0 {
		t.Fatalf("a count read before the communicator: %v", got)
	}
	// The join nudged the table: its next refresh re-reads 4242's fds.
	clk.advance(time.Second)
	processScrape(t, p)
	want = `fabric_nccl_ras_rank_verbs_fds{` + podComm + `,host="10.77.0.2",host_pid="4242",pid="1",rank="0"} 3`
	if got := rasLines(t, c, "fabric_nccl_ras_rank_verbs_fds"); len(got) != 1 || got[0] != want {
		t.Fatalf("fds %v, want %s", got, want)
	}

	// Killed: RAS calls rank 0 dead. It is missing wherever reported, and
	// this node still names its host process; no fds for a dead rank.
	f.Set("pod-killed.json", "")
	clk.advance(15 * time.Second)
	c.poll()
	out := rasSamples(t, c)
	for _, l := range []string{
		`fabric_nccl_ras_rank_missing{` + podComm + `,host="10.77.0.2",pid="1",rank="0"} 1`,
		`fabric_nccl_ras_rank_process_info{` + podComm + `,container_id="5734f5e6da28ef2a7d30683d72d881d34cc20c195221ed1f200ac9d5a2ffd388",host="10.77.0.2",host_pid="4242",joined_by="nspid",pid="1",pod_uid="8f4c2a1e-6b3d-4e59-9a7c-1d2e3f4a5b6c",rank="0"} 1`,
		`fabric_nccl_ras_communicator_missing_ranks{` + podComm + `} 1`,
	} {
		if !strings.Contains(out, l+"\n") {
			t.Errorf("killed: missing %s in\n%s", l, out)
		}
	}
	if strings.Contains(out, "fabric_nccl_ras_rank_verbs_fds") || strings.Contains(out, "fabric_nccl_ras_rank_info") {
		t.Errorf("killed: rank series of a dead rank:\n%s", out)
	}
	// Gone from RAS for longer than joinKeep: forgotten.
	f.Set("pod-healthy.json", "")
	os.RemoveAll(filepath.Join(p.w.Procfs(), "4242"))
	processScrape(t, p)
	clk.advance(joinKeep + time.Minute)
	f.Set("pod-unknown-pid.json", "")
	c.poll()
	if len(c.joins) != 0 {
		t.Errorf("joins kept after their rank left: %v", c.joins)
	}
}

// NOCOMM: a rank whose process answered without the communicator is not
// missing.
func TestRASPodNoComm(t *testing.T) {
	_, p, c, _, _ := rasPod(t, "pod-nocomm.json")
	processScrape(t, p)
	c.poll()
	out := rasSamples(t, c)
	for _, l := range []string{
		`fabric_nccl_ras_rank_nocomm{` + podComm + `,host="10.77.0.3",pid="1",rank="1"} 1`,
		`fabric_nccl_ras_communicator_nocomm_ranks{` + podComm + `} 1`,
		`fabric_nccl_ras_communicator_missing_ranks{` + podComm + `} 0`,
	} {
		if !strings.Contains(out, l+"\n") {
			t.Errorf("missing %s in\n%s", l, out)
		}
	}
	if strings.Contains(out, "fabric_nccl_ras_rank_missing{") {
		t.Errorf("a NOCOMM rank reported missing:\n%s", out)
	}
}

// A rank of this node whose own pid no selected process has: unjoined,
// with the reason; no process, no fds.
func TestRASPodRankUnjoined(t *testing.T) {
	_, p, c, _, _ := rasPod(t, "pod-unknown-pid.json")
	processScrape(t, p)
	c.poll()
	want := `fabric_nccl_ras_rank_unjoined{` + podComm + `,host="10.77.0.2",pid="77",rank="0",reason="no_process"} 1`
	if got := rasLines(t, c, "fabric_nccl_ras_rank_unjoined"); len(got) != 1 || got[0] != want {
		t.Errorf("unjoined %v, want %s", got, want)
	}
	if got := rasLines(t, c, "fabric_nccl_ras_rank_process_info"); len(got) != 0 {
		t.Errorf("joined: %v", got)
	}
}

// A healthy RDMA job whose process the table read before NCCL opened its
// devices: the stale count of 0 is never exported; after the nudged read
// the count is the devices NCCL opened.
func TestRASPodEvidenceNewerThanCommunicator(t *testing.T) {
	procDir, p, c, _, clk := rasPod(t, "pod-healthy.json")
	fd := filepath.Join(procDir, "4242", "fd")
	for _, n := range []string{"12", "14", "17"} { // before ncclNetInit
		os.Remove(filepath.Join(fd, n))
	}
	processScrape(t, p)
	hasLine(t, mustScrape(t, p), `fabric_process_rdma_verbs_fds{comm="python3",pid="4242"} 0`)
	// NCCL opens mlx5_0 and mlx5_3, then registers the communicator.
	os.Symlink("/dev/infiniband/uverbs0", filepath.Join(fd, "12"))
	os.Symlink("/dev/infiniband/uverbs1", filepath.Join(fd, "14"))
	clk.advance(5 * time.Second)
	processScrape(t, p) // a refresh between slow reads: fds not re-read
	clk.advance(time.Second)
	c.poll()
	for i := 0; i < 3; i++ {
		if got := rasLines(t, c, "fabric_nccl_ras_rank_verbs_fds"); len(got) != 0 {
			t.Fatalf("scrape %d before the nudged read: %v (the stale 0 would page a healthy job)", i, got)
		}
	}
	clk.advance(time.Second)
	processScrape(t, p)
	want := `fabric_nccl_ras_rank_verbs_fds{` + podComm + `,host="10.77.0.2",host_pid="4242",pid="1",rank="0"} 2`
	if got := rasLines(t, c, "fabric_nccl_ras_rank_verbs_fds"); len(got) != 1 || got[0] != want {
		t.Fatalf("fds %v, want %s", got, want)
	}
}

// mustScrape scrapes the process collector without a refresh of the
// table's clock.
func mustScrape(t *testing.T, p *processCollector) string {
	t.Helper()
	out, err := processScrape(t, p)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// listen writes the TCP listeners of a fixture process's namespace
// (/proc/PID/net/tcp): each "HEXADDR:HEXPORT inode".
func listen(t *testing.T, procDir string, pid int, ls ...string) {
	t.Helper()
	body := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	for i, l := range ls {
		a, ino, _ := strings.Cut(l, " ")
		body += fmt.Sprintf("   %d: %s 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 %s 1 0000000000000000 100 0 0 10 0\n", i, a, ino)
	}
	d := filepath.Join(procDir, strconv.Itoa(pid), "net")
	os.MkdirAll(d, 0o755)
	if err := os.WriteFile(filepath.Join(d, "tcp"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A pod's RAS is asked only where the pod itself listens, from inside its
// network namespace: NCCL's default (its loopback), a wildcard (asked at
// its loopback), one of its own addresses. An address that is not the
// pod's (a host service, a metadata endpoint), or a port where another
// process listens, is never dialled. The fixture's 4242 holds socket
// inode 2219481 (its fd 10).
func TestRASPodTargets(t *testing.T) {
	const ns, mine, theirs = 4026532178, "2219481", "31337"
	for _, tc := range []struct {
		env       string
		listeners []string
		want      *RASTarget
	}{
		{"", []string{"0100007F:6D7C " + mine}, &RASTarget{Addr: "localhost:28028", NetNS: ns, Enter: 4242}},
		{"NCCL_RAS_ADDR=0.0.0.0:28030", []string{"00000000:6D7E " + mine}, &RASTarget{Addr: "127.0.0.1:28030", NetNS: ns, Enter: 4242}},
		{"NCCL_RAS_ADDR=10.77.0.2:28031", []string{"02004D0A:6D7F " + mine}, &RASTarget{Addr: "10.77.0.2:28031", NetNS: ns, Enter: 4242}},
		// Not the pod's address: the kubelet's node IP, a metadata service.
		{"NCCL_RAS_ADDR=10.0.0.1:10250", []string{"0100000A:280A " + mine}, nil},
		{"NCCL_RAS_ADDR=169.254.169.254:80", nil, nil},
		// Its loopback, but the listener there is another process's.
		{"NCCL_RAS_ADDR=127.0.0.1:10248", []string{"0100007F:2828 " + theirs}, nil},
		// Nothing listens: not asked (nothing to ask).
		{"", nil, nil},
	} {
		d := copyTree(t, fixtureProc)
		if tc.env != "" {
			setEnv(t, d, 4242, tc.env)
		}
		listen(t, d, 4242, tc.listeners...)
		q, _, _ := newTestProcess(t, processOptions(t, d))
		processScrape(t, q)
		got := q.RASTargets()
		if tc.want == nil {
			if len(got) != 0 {
				t.Errorf("%q: asked %+v", tc.env, got)
			}
			continue
		}
		if len(got) != 1 || got[0] != *tc.want {
			t.Errorf("%q: %+v, want %+v", tc.env, got, *tc.want)
		}
	}
	// Entering needs the flag: without it the pod's service is counted
	// unreachable and not asked.
	d := copyTree(t, fixtureProc)
	listen(t, d, 4242, "0100007F:6D7C "+mine)
	p, _, _ := newTestProcess(t, processOptions(t, d))
	processScrape(t, p)
	c := newTestRAS(t, NCCLRASOptions{Addresses: []string{closedAddr(t)}}, "127.0.0.1")
	c.env.Processes = p
	c.poll()
	got, _ := inspectorScrape(t, c)
	if got[`fabric_nccl_ras_targets{reach="unreachable"}`] != 1 || len(c.addrs) != 1 {
		t.Errorf("entering off: asked %v, targets %v", c.addrs, scrapeKeys(got, "fabric_nccl_ras_targets"))
	}
}

// A tenant's fake RAS service (here on the flag's address, in the host's
// namespace, asked first) that names the pod's communicator with a dead
// rank neither shadows the pod's own answer nor pages about it: the pod's
// answer, whose rank is joined in its own namespace, speaks for the
// communicator.
func TestRASForgedCommunicatorDoesNotShadow(t *testing.T) {
	procDir := copyTree(t, fixtureProc)
	p, _, clk := newTestProcess(t, processOptions(t, procDir))
	real := fakeras.Start(t, "fixtures/nccl-ras", true, "pod-healthy.json", "")
	forged := fakeras.Start(t, "fixtures/nccl-ras", true, "pod-killed.json", "")
	c := newTestRAS(t, NCCLRASOptions{Addresses: []string{forged.Addr()}}, "127.0.0.1", "192.0.2.2")
	c.env.Processes = podInventory{p, RASTarget{Addr: real.Addr(), NetNS: 4026532178}}
	c.now = clk.now
	processScrape(t, p)
	clk.advance(time.Second)
	c.poll()
	if got := rasLines(t, c, "fabric_nccl_ras_rank_missing{"); len(got) != 0 {
		t.Errorf("the forged answer's dead rank is exported: %v", got)
	}
	want := `fabric_nccl_ras_communicator_missing_ranks{` + podComm + `} 0`
	if got := rasLines(t, c, "fabric_nccl_ras_communicator_missing_ranks{"); len(got) != 1 || got[0] != want {
		t.Errorf("communicator %v, want %s (the pod's own answer)", got, want)
	}
}

// A RAS service of the host's namespace that declares the pod's rank dead
// (the pod's address, a namespace it is not) does not page about the pod:
// no missing rank is exported from it; a rank at a remote address still is.
func TestRASHostAnswerCannotDeclarePodRankDead(t *testing.T) {
	p, c, clk := rasHostAnswer(t, "pod-killed.json")
	processScrape(t, p)
	clk.advance(time.Second)
	c.poll()
	if got := rasLines(t, c, "fabric_nccl_ras_rank_missing{"); len(got) != 0 {
		t.Errorf("another namespace's answer names the pod's rank missing: %v", got)
	}
}
