package collector

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// fabric_nccl_fallback_cause_info: why a process runs on sockets. The node
// has the rails rail0=mlx5_0:1 (eth0) and rail1=mlx5_3:1 (eth3); the /proc
// is the process collector's fixture: 4242 sees every verbs node, 4310 is
// in a container without /dev/infiniband.

// causeSetup is a collector over copies of the fixture /proc and /sys, its
// logs in a directory of their own, and its clock.
type causeSetup struct {
	c            *ncclCollector
	logs, procfs string
	sysfs        string
	now          time.Time
}

func newCauseSetup(t *testing.T) *causeSetup {
	t.Helper()
	s := &causeSetup{logs: t.TempDir(), procfs: copyTree(t, fixtureProc), sysfs: copyTree(t, fixtureSys),
		now: time.Now()}
	o := fixtureOptions(t, s.sysfs, "rail0=mlx5_0:1", "rail1=mlx5_3:1")
	o.ProcfsPath = s.procfs
	o.NCCL = NCCLOptions{LogPaths: []string{filepath.Join(s.logs, "*.log")}, Hostname: "exporter-host"}
	env, _ := testEnv()
	c, err := newNCCLState(env, o)
	if err != nil {
		t.Fatal(err)
	}
	c.follower.Yield = func() {}
	c.causes.now = func() time.Time { return s.now }
	s.c = c
	return s
}

// log writes the lines of one process (host:pid) as its own file.
func (s *causeSetup) log(t *testing.T, host, pid string, msgs ...string) {
	t.Helper()
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(host + ":" + pid + ":" + pid + " [0] NCCL " + m + "\n")
	}
	testenv.WriteFile(t, filepath.Join(s.logs, host+"."+pid+".log"), b.String())
}

// causes polls, scrapes and returns "host/pid" -> cause.
func (s *causeSetup) causes(t *testing.T) map[string]string {
	t.Helper()
	s.c.poll()
	out := map[string]string{}
	for _, l := range scrapeSamples(t, s.c, "fabric_nccl_fallback_cause_info") {
		k := l["host"] + "/" + l["pid"]
		if _, dup := out[k]; dup {
			t.Errorf("%s: more than one cause series", k)
		}
		out[k] = l["cause"]
	}
	return out
}

func wantCauses(t *testing.T, got, want map[string]string) {
	t.Helper()
	for _, d := range testenv.DiffMaps(got, want) {
		switch {
		case !d.InWant:
			t.Errorf("%s: cause %q, want no series", d.Key, d.Got)
		case !d.InGot:
			t.Errorf("%s: no cause series, want %q", d.Key, d.Want)
		default:
			t.Errorf("%s: cause %q, want %q", d.Key, d.Got, d.Want)
		}
	}
}

const (
	socketNet  = "INFO Using network Socket"
	ibNet      = "INFO Using network IB"
	socketEth0 = "INFO NET/Socket : Using [0]eth0:10.0.0.1<0>"
	socketEth1 = "INFO NET/Socket : Using [0]eth1:192.168.1.7<0>"
)

// The users' incident: a container without the verbs devices, and
// NCCL_SOCKET_IFNAME on a NIC that is no rail. Both causes are named.
func TestNCCLCauseIncident(t *testing.T) {
	s := newCauseSetup(t)
	s.log(t, "exporter-host", "4310", "INFO NCCL_SOCKET_IFNAME set by environment to eth1", socketEth1, socketNet,
		"INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Socket/0")
	wantCauses(t, s.causes(t), map[string]string{
		"exporter-host/4310": "no_verbs_devices_in_container,socket_ifname_not_a_rail"})
}

// Each cause alone, unknown, a process of another host (its PID is not
// looked up here even where this host's /proc has a container without
// verbs devices under that PID), healthy IB processes (no series).
func TestNCCLCauseEach(t *testing.T) {
	s := newCauseSetup(t)
	// 4242 sees every verbs node; its environment says why it does not use them.
	env := "PATH=/usr/bin\x00NCCL_NET=socket\x00NCCL_IB_HCA=mlx5_0\x00HF_TOKEN=secret\x00"
	if err := os.WriteFile(filepath.Join(s.procfs, "4242", "environ"), []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
	s.log(t, "exporter-host", "4242", socketNet)
	s.log(t, "exporter-host", "4310", socketNet)
	s.log(t, "other-host", "4310", socketNet) // no container check for another host
	s.log(t, "other-host", "1", "INFO NCCL_IB_DISABLE set by environment to 1.", socketNet)
	s.log(t, "other-host", "2", "INFO NCCL_IB_HCA set by environment to mlx5_1,mlx4", socketNet)
	s.log(t, "other-host", "3", "INFO NET/IB : No device found.", socketEth0, socketNet)
	s.log(t, "other-host", "4", "INFO Failed to open libibverbs.so[.1]", socketNet)
	s.log(t, "other-host", "5", "WARN Failed to open libibverbs.so[.1]", socketNet) // NCCL <= 2.10
	s.log(t, "other-host", "6", socketEth1, socketNet)
	s.log(t, "other-host", "7", "INFO NCCL_IB_DISABLE set by environment to 0.", "INFO NCCL_IB_HCA set by environment to ^mlx5_0", socketEth0, socketNet)
	s.log(t, "other-host", "8", "INFO NET/IB : No device found.", socketEth1, "WARN Failed to initialize any NET plugin")
	s.log(t, "other-host", "9", "INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Socket/0")
	// healthy: IB with every device visible, and IB in the container without
	// verbs devices (its log says IB: it found them some other way)
	s.log(t, "exporter-host", "4311", ibNet, "INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA")
	s.log(t, "other-host", "10", "INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_3:1/RoCE ; OOB eth0:10.0.0.1<0>", ibNet)
	wantCauses(t, s.causes(t), map[string]string{
		"exporter-host/4242": "nccl_net_socket",
		"exporter-host/4310": "no_verbs_devices_in_container",
		"other-host/4310":    "unknown",
		"other-host/1":       "nccl_ib_disable",
		"other-host/2":       "nccl_ib_hca_matches_no_rail",
		"other-host/3":       "ib_no_device_found",
		"other-host/4":       "libibverbs_missing",
		"other-host/5":       "libibverbs_missing",
		"other-host/6":       "socket_ifname_not_a_rail",
		"other-host/7":       "unknown", // NCCL_IB_DISABLE=0, ^mlx5_0 leaves mlx5_3
		"other-host/8":       "ib_no_device_found,socket_ifname_not_a_rail",
		"other-host/9":       "unknown",
	})
	// The environment stayed out of every other series.
	for _, mf := range gather(t, s.c) {
		if strings.Contains(mf.String(), "secret") {
			t.Errorf("%s carries the environment's secret", mf.GetName())
		}
	}
}

// rail_down: every rail of the node is down (port not ACTIVE) or its device
// gone; one rail up is enough for it not to apply.
func TestNCCLCauseRailDown(t *testing.T) {
	s := newCauseSetup(t)
	s.log(t, "other-host", "1", socketNet)
	setState := func(dev, state string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(s.sysfs, "class/infiniband", dev, "ports/1/state"), []byte(state+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	setState("mlx5_0", "1: DOWN")
	wantCauses(t, s.causes(t), map[string]string{"other-host/1": "unknown"})
	if err := os.Remove(filepath.Join(s.sysfs, "class/infiniband/mlx5_3")); err != nil {
		t.Fatal(err)
	}
	wantCauses(t, s.causes(t), map[string]string{"other-host/1": "rail_down"})
	// A process of this host in the container: the device that is left,
	// down, still has its verbs node on the host, which the container lacks.
	s.log(t, "exporter-host", "4310", socketNet)
	wantCauses(t, s.causes(t), map[string]string{"other-host/1": "rail_down",
		"exporter-host/4310": "no_verbs_devices_in_container,rail_down"})
}

// The container is checked at most every ncclCauseEvery per process: a
// verbs node that appears in the root is seen at the next check, not
// before; a process that exits loses its series with the tracker's PID
// check.
func TestNCCLCauseRecheck(t *testing.T) {
	s := newCauseSetup(t)
	s.log(t, "exporter-host", "4310", socketNet)
	wantCauses(t, s.causes(t), map[string]string{"exporter-host/4310": "no_verbs_devices_in_container"})
	dev := filepath.Join(s.procfs, "4310", "root", "dev", "infiniband")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.WriteFile(t, filepath.Join(dev, "uverbs1"), "")
	s.now = s.now.Add(ncclCauseEvery / 2)
	wantCauses(t, s.causes(t), map[string]string{"exporter-host/4310": "no_verbs_devices_in_container"})
	s.now = s.now.Add(ncclCauseEvery)
	wantCauses(t, s.causes(t), map[string]string{"exporter-host/4310": "unknown"})
}

// The label value is at most 128 bytes: causes that do not fit are left
// out from the end, the most specific ones stay, in order.
func TestNCCLCauseLabelBound(t *testing.T) {
	s := newCauseSetup(t)
	env := "NCCL_NET=Socket\x00"
	if err := os.WriteFile(filepath.Join(s.procfs, "4310", "environ"), []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
	s.log(t, "exporter-host", "4310", "INFO NCCL_IB_DISABLE set by environment to 1.", "INFO NCCL_IB_HCA set by environment to =mlx5", "INFO Failed to open libibverbs.so[.1]",
		"INFO NET/IB : No device found.", socketEth1, socketNet)
	wantCauses(t, s.causes(t), map[string]string{"exporter-host/4310": "no_verbs_devices_in_container,nccl_ib_disable,nccl_net_socket,nccl_ib_hca_matches_no_rail,ib_no_device_found,libibverbs_missing"})
	if all := joinCauses(1<<len(causeNames) - 1); len(all) > maxCauseLabel || !strings.HasPrefix(all, causeNoVerbs+","+causeIBDisable+",") {
		t.Errorf("%d bytes: %s", len(all), all)
	}
}
