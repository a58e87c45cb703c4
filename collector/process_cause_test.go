package collector

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fabric_process_rdma_fallback_cause_info: the causes of a socket fallback
// that /proc and sysfs show, for pages without an NCCL log. The fixture
// node has the default rails mlx5_0:1 (eth0) and mlx5_3:1 (eth3), both
// ACTIVE; in the fixture /proc, 4242 sees every verbs node, 4311 sees
// uverbs1 (mlx5_3), 4310 runs in a container without /dev/infiniband.

// fallbackCauses returns pid -> cause of one scrape, checking each series.
func fallbackCauses(t *testing.T, c *processCollector) map[string]string {
	t.Helper()
	out, err := processScrape(t, c)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, l := range grepLines(out, "fabric_process_rdma_fallback_cause_info{") {
		if !strings.HasSuffix(l, "} 1") {
			t.Errorf("series %s", l)
		}
		cause := strings.SplitN(strings.SplitN(l, `cause="`, 2)[1], `"`, 2)[0]
		pid := strings.SplitN(strings.SplitN(l, `pid="`, 2)[1], `"`, 2)[0]
		if _, dup := got[pid]; dup {
			t.Errorf("two series for pid %s", pid)
		}
		got[pid] = cause
	}
	return got
}

func wantFallbackCauses(t *testing.T, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
		return
	}
	for pid, c := range want {
		if got[pid] != c {
			t.Errorf("pid %s: cause %q, want %q (all: %v)", pid, got[pid], c, got)
		}
	}
}

// The users' incident: 4310's container has no /dev/infiniband and its
// NCCL_SOCKET_IFNAME=eth1 names a NIC that is not a rail (eth0, eth3).
// Both causes, in the order of fabric_nccl_fallback_cause_info; the
// healthy processes have no series.
func TestProcessCauseIncident(t *testing.T) {
	c, errs, _ := newTestProcess(t, processOptions(t, fixtureProc))
	want := map[string]string{"4310": "no_verbs_devices_in_container,socket_ifname_not_a_rail"}
	wantFallbackCauses(t, fallbackCauses(t, c), want)
	wantFallbackCauses(t, fallbackCauses(t, c), want) // cached: the same
	if errs.Value() != 0 {
		t.Errorf("read errors %v", errs.Value())
	}
}

// Each cause alone, on 4311 (it sees mlx5_3's verbs node), its environment
// replaced by each case's.
func TestProcessCauseEach(t *testing.T) {
	base := fixtureBaseEnv(t)
	for _, tc := range []struct {
		name string
		env  []string
		want string // "" = no series
	}{
		{"healthy: the fixture's environment", nil, ""},
		{"nothing set", []string{"NCCL_DEBUG=WARN"}, ""},
		{"NCCL_IB_DISABLE=1", []string{"NCCL_IB_DISABLE=1"}, causeIBDisable},
		{"NCCL_IB_DISABLE=0x1", []string{"NCCL_IB_DISABLE=0x1"}, causeIBDisable},
		{"NCCL_IB_DISABLE=0", []string{"NCCL_IB_DISABLE=0"}, ""},
		{"NCCL_IB_DISABLE=no", []string{"NCCL_IB_DISABLE=no"}, ""},
		{"NCCL_NET=Socket", []string{"NCCL_NET=Socket"}, causeNetSocket},
		{"NCCL_NET=socket", []string{"NCCL_NET=socket"}, causeNetSocket},
		{"NCCL_NET=IB", []string{"NCCL_NET=IB"}, ""},
		{"NCCL_IB_HCA other devices", []string{"NCCL_IB_HCA=mlx5_1,mlx5_2"}, causeHCANoRail},
		{"NCCL_IB_HCA exact prefix", []string{"NCCL_IB_HCA==mlx5"}, causeHCANoRail},
		{"NCCL_IB_HCA excluding the rails", []string{"NCCL_IB_HCA=^mlx5_0,mlx5_3"}, causeHCANoRail},
		{"NCCL_IB_HCA other port", []string{"NCCL_IB_HCA=mlx5_0:2,mlx5_3:2"}, causeHCANoRail},
		{"NCCL_IB_HCA one rail", []string{"NCCL_IB_HCA=mlx5_3"}, ""},
		{"NCCL_IB_HCA prefix", []string{"NCCL_IB_HCA=mlx5"}, ""},
		{"NCCL_IB_HCA empty", []string{"NCCL_IB_HCA="}, ""},
		{"NCCL_SOCKET_IFNAME not a rail", []string{"NCCL_SOCKET_IFNAME=eth1"}, causeIfnameNoRail},
		{"NCCL_SOCKET_IFNAME exact prefix", []string{"NCCL_SOCKET_IFNAME==eth"}, causeIfnameNoRail},
		{"NCCL_SOCKET_IFNAME excluding the rails", []string{"NCCL_SOCKET_IFNAME=^eth"}, causeIfnameNoRail},
		{"NCCL_SOCKET_IFNAME one rail", []string{"NCCL_SOCKET_IFNAME=eth3"}, ""},
		{"NCCL_SOCKET_IFNAME prefix", []string{"NCCL_SOCKET_IFNAME=eth"}, ""},
		{"NCCL_SOCKET_IFNAME excluding others", []string{"NCCL_SOCKET_IFNAME=^docker,lo"}, ""},
		{"NCCL_SOCKET_IFNAME one byte: ignored", []string{"NCCL_SOCKET_IFNAME=x"}, ""},
		{"NCCL_SOCKET_IFNAME unset: NCCL picks", []string{"NCCL_IB_HCA=mlx5_0,mlx5_3"}, ""},
		{"every environment cause", []string{"NCCL_SOCKET_IFNAME=bond0", "NCCL_IB_HCA=mlx4", "NCCL_NET=Socket", "NCCL_IB_DISABLE=1"},
			"nccl_ib_disable,nccl_net_socket,nccl_ib_hca_matches_no_rail,socket_ifname_not_a_rail"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			procDir := procWithEnviron(t, "4311", base, tc.env)
			c, _, _ := newTestProcess(t, processOptions(t, procDir))
			got := fallbackCauses(t, c)
			if got["4311"] != tc.want {
				t.Errorf("4311: cause %q, want %q", got["4311"], tc.want)
			}
			if _, ok := got["4311"]; ok != (tc.want != "") {
				t.Errorf("4311: series %v, want one %v", ok, tc.want != "")
			}
			if got["4242"] != "" {
				t.Errorf("4242: cause %q", got["4242"])
			}
		})
	}
}

// no_verbs_devices_in_container: none of the rail devices' verbs nodes in
// the root; one is enough for it not to apply, and a root that cannot be
// read gives no verdict.
func TestProcessCauseNoVerbs(t *testing.T) {
	procDir := copyTree(t, fixtureProc)
	dev := filepath.Join(procDir, "4311", "root", "dev", "infiniband")
	// uverbs0 escapes the root (not visible); without uverbs1 none is.
	if err := os.Remove(filepath.Join(dev, "uverbs1")); err != nil {
		t.Fatal(err)
	}
	c, _, _ := newTestProcess(t, processOptions(t, procDir))
	wantFallbackCauses(t, fallbackCauses(t, c), map[string]string{
		"4310": "no_verbs_devices_in_container,socket_ifname_not_a_rail",
		"4311": "no_verbs_devices_in_container",
	})

	c, _, _ = newTestProcess(t, processOptions(t, procDir))
	c.w.IO.OpenRoot = func(string) (int, error) { return -1, &os.PathError{Op: "open", Path: "root", Err: syscall.EACCES} }
	wantFallbackCauses(t, fallbackCauses(t, c), map[string]string{"4310": "socket_ifname_not_a_rail"})
}

// rail_down: every rail down (port not ACTIVE) or its device gone; one
// rail up is enough for it not to apply.
func TestProcessCauseRailDown(t *testing.T) {
	sysDir := copyTree(t, fixtureSys)
	setState := func(dev, state string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(sysDir, "class/infiniband", dev, "ports/1/state"), []byte(state+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	setState("mlx5_0", "1: DOWN")
	c, _, clk := newTestProcess(t, processOptionsSys(t, fixtureProc, sysDir))
	wantFallbackCauses(t, fallbackCauses(t, c), map[string]string{"4310": "no_verbs_devices_in_container,socket_ifname_not_a_rail"})

	setState("mlx5_3", "1: DOWN")
	clk.advance(time.Minute)
	wantFallbackCauses(t, fallbackCauses(t, c), map[string]string{
		"4242": "rail_down", "4311": "rail_down",
		"4310": "no_verbs_devices_in_container,socket_ifname_not_a_rail,rail_down",
	})

	// mlx5_3 gone, mlx5_0 down: still every rail.
	c, _, _ = newTestProcess(t, processOptionsSys(t, fixtureProc, sysDir))
	setState("mlx5_3", "4: ACTIVE")
	for _, p := range []string{"class/infiniband/mlx5_3", "class/infiniband_verbs/uverbs1"} {
		if err := os.Remove(filepath.Join(sysDir, p)); err != nil {
			t.Fatal(err)
		}
	}
	got := fallbackCauses(t, c)
	for _, pid := range []string{"4242", "4310", "4311"} {
		if !strings.HasSuffix(got[pid], causeRailDown) {
			t.Errorf("pid %s: cause %q, want rail_down last", pid, got[pid])
		}
	}
}

// The causes are computed with the visibility check: a verbs node that
// appears in the root is seen after --collector.process.numa-maps-interval,
// not before.
func TestProcessCauseInterval(t *testing.T) {
	procDir := copyTree(t, fixtureProc)
	c, _, clk := newTestProcess(t, processOptions(t, procDir))
	incident := map[string]string{"4310": "no_verbs_devices_in_container,socket_ifname_not_a_rail"}
	wantFallbackCauses(t, fallbackCauses(t, c), incident)
	dev := filepath.Join(procDir, "4310", "root", "dev", "infiniband")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dev, "uverbs0"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	clk.advance(30 * time.Second)
	wantFallbackCauses(t, fallbackCauses(t, c), incident)
	clk.advance(30 * time.Second)
	wantFallbackCauses(t, fallbackCauses(t, c), map[string]string{"4310": "socket_ifname_not_a_rail"})
}

// The environment's secrets never reach the cause label, not even in the
// variables the causes read: cause holds only the causes' names.
func TestProcessCauseSecrets(t *testing.T) {
	procDir := copyTree(t, fixtureProc)
	env := fixtureBaseEnv(t) + "NCCL_SOCKET_IFNAME=hf_fixtureSECRETtoken9c1eA7\x00NCCL_IB_HCA=AKIAFIXTURE0EXAMPLE\x00"
	if err := os.WriteFile(filepath.Join(procDir, "4311", "environ"), []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
	c, _, _ := newTestProcess(t, processOptions(t, procDir))
	out, err := processScrape(t, c)
	if err != nil {
		t.Fatal(err)
	}
	lines := grepLines(out, "fabric_process_rdma_fallback_cause_info{")
	if len(lines) != 2 {
		t.Fatalf("%d series, want 2: %v", len(lines), lines)
	}
	for _, l := range lines {
		for _, s := range fixtureSecrets {
			if strings.Contains(l, s) {
				t.Errorf("secret %q in %s", s, l)
			}
		}
		cause := strings.SplitN(strings.SplitN(l, `cause="`, 2)[1], `"`, 2)[0]
		for _, name := range strings.Split(cause, ",") {
			if !slices.Contains(causeNames[:], name) {
				t.Errorf("cause %q in %s", name, l)
			}
		}
	}
	if got := fallbackCauses(t, c)["4311"]; got != "nccl_ib_hca_matches_no_rail,socket_ifname_not_a_rail" {
		t.Errorf("4311: cause %q", got)
	}
}

// Both collectors name the same causes for the same process when the log
// adds nothing to what /proc and sysfs show: the nccl collector (log and
// /proc) and the process collector (/proc alone), over the same /proc,
// sysfs and rails. The NCCL log says only that the network is Socket and,
// where NCCL_SOCKET_IFNAME is set, the interface it chose.
func TestFallbackCauseAgreement(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pid    string
		env    string // "" keeps the fixture's
		ifname string // the interface the log names; "" none
		down   bool   // every rail down
		want   string
	}{
		{"the incident", "4310", "", "eth1", false, "no_verbs_devices_in_container,socket_ifname_not_a_rail"},
		{"the incident, rails down", "4310", "", "eth1", true, "no_verbs_devices_in_container,socket_ifname_not_a_rail,rail_down"},
		{"environment causes", "4242", "NCCL_IB_DISABLE=1\x00NCCL_NET=socket\x00NCCL_IB_HCA=mlx4\x00NCCL_SOCKET_IFNAME=eth1\x00", "eth1", false,
			"nccl_ib_disable,nccl_net_socket,nccl_ib_hca_matches_no_rail,socket_ifname_not_a_rail"},
		{"NCCL_IB_HCA excluding one rail", "4242", "NCCL_IB_HCA=^mlx5_0\x00NCCL_SOCKET_IFNAME=eth3\x00", "eth3", false, causeUnknown},
		{"healthy process, rails down", "4242", "NCCL_SOCKET_IFNAME=eth0\x00", "eth0", true, causeRailDown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newCauseSetup(t)
			if tc.env != "" {
				env := fixtureBaseEnv(t) + tc.env
				if err := os.WriteFile(filepath.Join(s.procfs, tc.pid, "environ"), []byte(env), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.down {
				for _, dev := range []string{"mlx5_0", "mlx5_3"} {
					if err := os.WriteFile(filepath.Join(s.sysfs, "class/infiniband", dev, "ports/1/state"), []byte("1: DOWN\n"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			msgs := []string{socketNet}
			if tc.ifname != "" {
				msgs = append(msgs, "INFO NET/Socket : Using [0]"+tc.ifname+":10.9.8.7<0>")
			}
			s.log(t, "exporter-host", tc.pid, msgs...)
			fromLog := s.causes(t)["exporter-host/"+tc.pid]

			c, _, _ := newTestProcess(t, processOptionsSys(t, s.procfs, s.sysfs, "rail0=mlx5_0:1", "rail1=mlx5_3:1"))
			fromProc, ok := fallbackCauses(t, c)[tc.pid]
			if !ok {
				fromProc = causeUnknown // what the rule says of an absent series
			}
			if fromLog != tc.want || fromProc != tc.want {
				t.Errorf("nccl collector %q, process collector %q, want %q", fromLog, fromProc, tc.want)
			}
		})
	}
}
