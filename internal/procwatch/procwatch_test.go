package procwatch

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/rdmanl"
)

// tree writes a small procfs: each process with cmdline, stat, status
// (with its NSpid line) and an fd directory.
type tree struct {
	t   *testing.T
	dir string
}

func newTree(t *testing.T) *tree {
	d := t.TempDir()
	os.WriteFile(filepath.Join(d, "stat"), []byte("cpu  1 0 1 1 0 0 0 0 0 0\n"), 0o644)
	return &tree{t, d}
}

// proc adds a process (or, with tgid other than pid, a thread's directory
// as /proc/TID shows it).
func (tr *tree) proc(pid, tgid int, cmdline string, nspid ...int) {
	p := filepath.Join(tr.dir, strconv.Itoa(pid))
	os.MkdirAll(filepath.Join(p, "fd"), 0o755)
	ns := strconv.Itoa(pid)
	for _, n := range nspid {
		ns += "\t" + strconv.Itoa(n)
	}
	os.WriteFile(filepath.Join(p, "cmdline"), []byte(cmdline+"\x00"), 0o644)
	os.WriteFile(filepath.Join(p, "stat"), []byte(strconv.Itoa(pid)+" (python3) S 1 1 1 0 -1 4194560 1 0 0 0 10 5 0 0 20 0 4 0 12345 100000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"), 0o644)
	os.WriteFile(filepath.Join(p, "status"), []byte("Name:\tpython3\nTgid:\t"+strconv.Itoa(tgid)+"\nNSpid:\t"+ns+"\nCpus_allowed_list:\t0-3\nvoluntary_ctxt_switches:\t1\nnonvoluntary_ctxt_switches:\t1\n"), 0o644)
}

func (tr *tree) fd(pid, fd int, target string) {
	os.Symlink(target, filepath.Join(tr.dir, strconv.Itoa(pid), "fd", strconv.Itoa(fd)))
}

type fakeQPs struct{ l rdmanl.Listing }

func (f *fakeQPs) QueuePairs(context.Context) (rdmanl.Listing, error) { return f.l, nil }

// The kernel names a queue pair's creating thread: NCCL's proxy thread.
// The watcher counts it for the thread's process.
func TestQueuePairsPerThreadGroup(t *testing.T) {
	tr := newTree(t)
	tr.proc(100, 100, "serve")
	tr.proc(107, 100, "serve")            // the proxy thread, /proc/107 as it opens
	tr.proc(200, 200, "serve --exporter") // the exporter: never selected
	tr.proc(300, 300, "kv-transfer")      // not selected: a KV-cache transfer engine in a pod
	os.WriteFile(filepath.Join(tr.dir, "300", "cgroup"), []byte("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod2b7e9d40_51c3_4f8a_b6e2_7c9d0a1b3e4f.slice/cri-containerd-b7813833eb092b66317b20e88d6d7b56cac5643cf1ac9aa8aa70812711bde274.scope\n"), 0o644)
	os.Symlink("200", filepath.Join(tr.dir, "self"))
	qp := func(dev string, pid uint32) rdmanl.QP {
		return rdmanl.QP{Device: dev, Type: 2, State: 3, PID: pid, HasPID: true}
	}
	errQP := func(dev string, pid uint32) rdmanl.QP {
		return rdmanl.QP{Device: dev, Type: 2, State: 6, PID: pid, HasPID: true}
	}
	src := &fakeQPs{rdmanl.Listing{Devices: []rdmanl.Device{{Name: "mlx5_0"}, {Name: "mlx5_3"}},
		QPs: []rdmanl.QP{qp("mlx5_0", 107), qp("mlx5_0", 107), qp("mlx5_3", 107), qp("mlx5_3", 100), qp("mlx5_0", 200),
			errQP("mlx5_3", 300), errQP("mlx5_3", 300), qp("mlx5_3", 300), errQP("mlx5_0", 999),
			{Device: "mlx5_0", Type: 1, State: 3, KernName: "ib_core"}}}}
	w := New(Options{Procfs: tr.dir, Cmdline: regexp.MustCompile(`^serve`), Max: 8}, Sources{QPs: src})
	w.IO.Getpid = func() int { return 200 }
	w.Refresh(context.Background())
	s := w.Snapshot()
	p := s.Process(100, 0)
	if p == nil || !s.QP.OK {
		t.Fatalf("process 100 %v, listing %+v", p, s.QP)
	}
	want := []DevCount{{"mlx5_0", 2}, {"mlx5_3", 2}}
	if len(p.QPs) != 2 || p.QPs[0] != want[0] || p.QPs[1] != want[1] {
		t.Errorf("queue pairs %v, want %v", p.QPs, want)
	}
	// Every owner by state, selected or not, named with its container; the
	// exporter's own (200) too; 999 exited before it could be named.
	got := map[int][]QPCount{}
	conts := map[int]string{}
	for _, o := range s.QPOwners {
		got[o.PID] = o.Counts
		conts[o.PID] = o.Comm + "/" + o.Container.PodUID
	}
	wantOwners := map[int][]QPCount{
		100: {{"mlx5_0", "rts", 2}, {"mlx5_3", "rts", 2}},
		200: {{"mlx5_0", "rts", 1}},
		300: {{"mlx5_3", "err", 2}, {"mlx5_3", "rts", 1}},
	}
	if len(got) != len(wantOwners) {
		t.Errorf("owners %v, want %v", got, wantOwners)
	}
	for pid, w := range wantOwners {
		if !slices.Equal(got[pid], w) {
			t.Errorf("owner %d: %v, want %v", pid, got[pid], w)
		}
	}
	if conts[300] != "python3/2b7e9d40-51c3-4f8a-b6e2-7c9d0a1b3e4f" {
		t.Errorf("owner 300 named %q", conts[300])
	}
}

// A nudge re-reads a process's fds at the next Refresh whatever the slow
// interval says.
func TestNudgeRereadsEvidence(t *testing.T) {
	tr := newTree(t)
	tr.proc(100, 100, "serve")
	tr.fd(100, 3, "/dev/null")
	w := New(Options{Procfs: tr.dir, Cmdline: regexp.MustCompile(`^serve`), Max: 8, Slow: time.Hour}, Sources{})
	now := time.Unix(1_800_000_000, 0)
	w.SetClock(func() time.Time { return now })
	w.Refresh(context.Background())
	if p := w.Snapshot().Process(100, 0); p == nil || !p.FDsRead || p.VerbsFDs != 0 {
		t.Fatalf("first read: %+v", p)
	}
	tr.fd(100, 4, "/dev/infiniband/uverbs0")
	now = now.Add(time.Second)
	w.Refresh(context.Background())
	if p := w.Snapshot().Process(100, 0); p.VerbsFDs != 0 || !p.EvidenceAt.Equal(now.Add(-time.Second)) {
		t.Fatalf("re-read before the interval: %d fds at %v", p.VerbsFDs, p.EvidenceAt)
	}
	w.Nudge(100)
	now = now.Add(time.Second)
	w.Refresh(context.Background())
	if p := w.Snapshot().Process(100, 0); p.VerbsFDs != 1 || !p.EvidenceAt.Equal(now) {
		t.Fatalf("after the nudge: %d fds at %v", p.VerbsFDs, p.EvidenceAt)
	}
}

func addrList(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestJoinRank(t *testing.T) {
	host := addrList("192.0.2.2", "127.0.0.1")
	podA, podB := addrList("10.77.0.2"), addrList("10.77.0.4")
	s := &Snapshot{Procs: []Process{
		{PID: 900, NSLevels: 1, OwnPID: 900, NetNS: 1, NetAddrs: host}, // on the host
		{PID: 964, NSLevels: 2, OwnPID: 1, NetNS: 2, NetAddrs: podA},   // a pod, own network
		{PID: 980, NSLevels: 2, OwnPID: 1, NetNS: 3, NetAddrs: podB},   // another pod, own pid 1 too
		{PID: 990, NSLevels: 2, OwnPID: 7, NetNS: 1, NetAddrs: host},   // hostNetwork pods ...
		{PID: 991, NSLevels: 2, OwnPID: 7, NetNS: 1, NetAddrs: host},   // ... with the same own pid
		{PID: 995, NSLevels: 3, OwnPID: 12, NetNS: 4, NetAddrs: nil},   // network unread
		{PID: 996, NSLevels: 0, OwnPID: 0, NetNS: 1, NetAddrs: host},   // a kernel without NSpid
		{PID: 997, NSLevels: 2, OwnPID: 30, NetNS: 5, NetAddrs: podA},  // unique by address ...
		{PID: 998, NSLevels: 2, OwnPID: 30, NetNS: 6, NetAddrs: nil},   // ... but a twin is unread
	}}
	s.SelfNetNS = 1
	for _, c := range []struct {
		host       string
		pid        int
		ns         uint64 // of the RAS service that reports the rank
		want       int
		by, reason string
	}{
		{"192.0.2.2", 900, 0, 900, JoinedByPID, ""},
		{"10.77.0.2", 1, 2, 964, JoinedByNSpid, ""},
		{"10.77.0.4", 1, 3, 980, JoinedByNSpid, ""},
		{"10.77.0.9", 1, 2, 0, "", UnjoinedNoProcess},
		{"192.0.2.2", 7, 0, 0, "", UnjoinedAmbiguous},
		{"10.0.0.5", 12, 4, 0, "", UnjoinedUnread},
		{"192.0.2.2", 996, 0, 996, JoinedByPID, ""},
		{"unknown", 900, 0, 0, "", UnjoinedBadHost},
		{"::ffff:192.0.2.2", 900, 0, 900, JoinedByPID, ""},
		// A pod speaks only for itself: pod A's answer (namespace 2)
		// naming pod B's rank, or the host's, joins nothing; the host's
		// answer naming a pod's rank neither.
		{"10.77.0.4", 1, 2, 0, "", UnjoinedNoProcess},
		{"192.0.2.2", 900, 2, 0, "", UnjoinedNoProcess},
		{"10.77.0.2", 1, 0, 0, "", UnjoinedNoProcess},
		// The namespace settles what the address could not: 997 and its
		// unread twin 998 are in different namespaces.
		{"10.77.0.2", 30, 5, 997, JoinedByNSpid, ""},
		{"10.77.0.2", 30, 6, 0, "", UnjoinedUnread},
	} {
		p, by, reason := s.JoinRank(c.host, c.pid, c.ns)
		got := 0
		if p != nil {
			got = p.PID
		}
		if got != c.want || by != c.by || reason != c.reason {
			t.Errorf("%s pid %d ns %d: %d %q %q, want %d %q %q", c.host, c.pid, c.ns, got, by, reason, c.want, c.by, c.reason)
		}
	}
	for _, c := range []struct {
		ns   uint64
		host string
		want bool
	}{
		{2, "10.77.0.4", true},  // pod B's address, asked of pod A
		{3, "10.77.0.4", false}, // its own
		{0, "10.77.0.2", true},  // a pod's, asked of the host
		{2, "192.0.2.2", true},  // the host's, asked of a pod
		{2, "10.0.0.99", false}, // nobody's here: a remote node's
		{2, "127.0.0.1", false}, // loopback: every namespace has its own
	} {
		if got := s.OtherNSAddr(c.ns, c.host); got != c.want {
			t.Errorf("OtherNSAddr(%d, %s) = %v", c.ns, c.host, got)
		}
	}
	if got := s.NodeAddresses(); len(got) != 4 {
		t.Errorf("node addresses %v", got)
	}
}

// A fixture listing (rdmanl.Fixture: what `rdma -j resource show qp`
// prints) declares its PIDs to be those of the procfs: it is attributed
// with a fixture /proc although the exporter is not in that procfs's PID
// namespace (its self, 200, is not the exporter's PID), where a netlink
// listing is refused. The owners are threads mapped by their Tgid.
func TestQueuePairsFromFixture(t *testing.T) {
	tr := newTree(t)
	tr.proc(100, 100, "serve")
	tr.proc(107, 100, "") // NCCL's proxy thread of 100 (not listed in a real /proc)
	tr.proc(200, 200, "fabric_exporter")
	tr.proc(300, 300, "kv-transfer")
	os.Symlink("200", filepath.Join(tr.dir, "self"))
	fixture := filepath.Join(t.TempDir(), "qp.json")
	os.WriteFile(fixture, []byte(`[
{"ifindex":0,"ifname":"mlx5_0","port":1,"lqpn":1,"type":"GSI","state":"RTS","sq-psn":0,"comm":"ib_core"},
{"ifindex":0,"ifname":"mlx5_0","port":1,"lqpn":4740,"rqpn":5123,"type":"RC","state":"RTS","rq-psn":9101238,"sq-psn":3344112,"path-mig-state":"MIGRATED","pdn":3,"pid":107,"comm":"python3"},
{"ifindex":0,"ifname":"mlx5_0","port":1,"lqpn":4741,"rqpn":5124,"type":"RC","state":"RTS","rq-psn":120577,"sq-psn":15002931,"path-mig-state":"MIGRATED","pdn":3,"pid":107,"comm":"python3"},
{"ifindex":3,"ifname":"mlx5_3","port":1,"lqpn":1,"type":"GSI","state":"RTS","sq-psn":0,"pid":0,"comm":"ib_core"},
{"ifindex":3,"ifname":"mlx5_3","port":1,"lqpn":290,"rqpn":771,"type":"RC","state":"RTS","rq-psn":4410,"sq-psn":88213,"path-mig-state":"MIGRATED","pdn":2,"pid":100,"comm":"python3"},
{"ifindex":3,"ifname":"mlx5_3","port":1,"lqpn":291,"rqpn":772,"type":"RC","state":"ERR","rq-psn":0,"sq-psn":0,"path-mig-state":"MIGRATED","pdn":6,"pid":300,"comm":"python3"}]
`), 0o644)
	src := rdmanl.NewFixture(fixture)
	w := New(Options{Procfs: tr.dir, Cmdline: regexp.MustCompile(`^serve`), Max: 8}, Sources{QPs: src})
	w.IO.Getpid = func() int { return 1 }
	w.Refresh(context.Background())
	s := w.Snapshot()
	p := s.Process(100, 0)
	if p == nil || !s.QP.OK {
		t.Fatalf("process 100 %v, listing %+v", p, s.QP)
	}
	if want := []DevCount{{"mlx5_0", 2}, {"mlx5_3", 1}}; !slices.Equal(p.QPs, want) {
		t.Errorf("queue pairs %v, want %v", p.QPs, want)
	}
	if !slices.Equal(s.QP.Devices, []string{"mlx5_0", "mlx5_3"}) {
		t.Errorf("devices %v", s.QP.Devices)
	}
	got := map[int][]QPCount{}
	for _, o := range s.QPOwners {
		got[o.PID] = o.Counts
	}
	want := map[int][]QPCount{100: {{"mlx5_0", "rts", 2}, {"mlx5_3", "rts", 1}}, 300: {{"mlx5_3", "err", 1}}}
	if len(got) != len(want) || !slices.Equal(got[100], want[100]) || !slices.Equal(got[300], want[300]) {
		t.Errorf("owners %v, want %v", got, want)
	}

	// The same listing from a source that does not say so (netlink) is
	// not made: its PIDs would be of the exporter's namespace.
	l, err := src.QueuePairs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	w = New(Options{Procfs: tr.dir, Cmdline: regexp.MustCompile(`^serve`), Max: 8}, Sources{QPs: &fakeQPs{l}})
	w.IO.Getpid = func() int { return 1 }
	w.Refresh(context.Background())
	if s := w.Snapshot(); s.QP.OK || !strings.Contains(s.QP.Reason, "PID namespace") || s.Process(100, 0).QPs != nil {
		t.Errorf("a netlink listing in another PID namespace: %+v, process 100's queue pairs %v", s.QP, s.Process(100, 0).QPs)
	}
}
