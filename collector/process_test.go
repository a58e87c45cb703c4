package collector

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/proc"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
)

const fixtureProc = "fixtures/proc"

// fixtureSecrets are the secret values planted in the fixture environments
// and command lines (collector/fixtures/build-proc.sh).
var fixtureSecrets = []string{"hf_fixtureSECRETtoken9c1eA7", "fixtureSECRETawsKey+7Hq2/pLx0", "AKIAFIXTURE0EXAMPLE",
	"sk-fixture-SECRET-apikey-4f9a", "SECRET", "fixture-not-allow-listed", "NCCL_CUMEM_ENABLE", `value="TRACE"`}

type fakeClock struct{ t time.Time }

func (f *fakeClock) now() time.Time          { return f.t }
func (f *fakeClock) advance(d time.Duration) { f.t = f.t.Add(d) }

func processOptions(t testing.TB, procfs string) *Options {
	o := fixtureOptions(t, fixtureSys)
	o.ProcfsPath = procfs
	o.Process = ProcessOptions{Cmdline: DefaultProcessCmdline, Max: 64, NumaMapsInterval: time.Minute}
	return o
}

func newTestProcess(t testing.TB, o *Options, gpuPIDs ...int) (*processCollector, *exposition.Counter, *fakeClock) {
	t.Helper()
	env, errs := testEnv()
	if gpuPIDs != nil {
		env.GPUs = fakeInventory{pids: gpuPIDs}
	}
	pc, err := newProcessState(env, o) // no poller: Update refreshes inline
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)}
	pc.w.SetClock(clk.now)
	return pc, errs, clk
}

// Values checked by hand against collector/fixtures/proc (build-proc.sh):
//   - cpu: utime 183245 and stime 40210 ticks of 1/100 s -> 1832.45, 402.1;
//   - resident: VmRSS 9595060 kB x 1024 = 9825341440 (= stat rss 2398765 pages x 4096);
//   - numa_maps of 4242: N0 pages 162+698+150+106+1+1+393216+1048576+7424+412+65536
//     +36864+24576+65536+2+33 = 1643293 x 4096 = 6730928128, N1 2+131072+32768 =
//     163842 x 4096 = 671096832; of 4310: N0 160860 x 4096 = 658882560, N1 4683915 x
//     4096 + 512 huge pages x 2048 kB = 20259057664; of 4311: N0 4554947 x 4096 +
//     512 x 2 MiB = 19730804736 and N1 0 (a node of the host without its memory);
//   - allowed nodes: 0-191 covers nodes 0 and 1, 48-95,144-191 is node 1;
//   - NCCL_DEBUG=INFO of 4242 is its first definition (a later TRACE is ignored, as
//     getenv does), NCCL_CUMEM_ENABLE and NCCL_SOCKET_IFNAME_EXTRA are not allow-listed;
//   - all three have NCCL_IB_HCA=mlx5_0,mlx5_3: both rail devices required (nccl_ib_hca);
//   - fds: 4242 holds uverbs0 twice and uverbs1 once, 4310 none (sockets), 4311 uverbs1
//     (uverbs1x and issm0 are not verbs nodes of a rail device);
//   - 4310's root has no dev/infiniband; 4311's uverbs0 is a symlink escaping the root
//     (to /etc/passwd, present on the host) and its rdma_cm an in-root symlink.
const processWant = `
# HELP fabric_process_selected Serving processes reported by the process collector in this scrape (at most --collector.process.max).
# TYPE fabric_process_selected gauge
fabric_process_selected 3
# HELP fabric_process_candidates Processes that matched --collector.process.cmdline or run on a GPU, before the --collector.process.max cap.
# TYPE fabric_process_candidates gauge
fabric_process_candidates 3
# HELP fabric_process_container_info The container of the process, from /proc/PID/cgroup (re-read every --collector.process.numa-maps-interval): runtime (docker, containerd, cri-o, podman; empty when the cgroup path does not say), the full 64-hex container_id and the Kubernetes pod_uid (empty outside Kubernetes); container_name is the Docker Engine API's name of a docker or podman container with --collector.process.docker-host, empty without it or until known (an empty label is no label in Prometheus). Absent for a process outside any recognised container.
# TYPE fabric_process_container_info gauge
fabric_process_container_info{comm="python3",container_id="5734f5e6da28ef2a7d30683d72d881d34cc20c195221ed1f200ac9d5a2ffd388",container_name="",pid="4242",pod_uid="8f4c2a1e-6b3d-4e59-9a7c-1d2e3f4a5b6c",runtime="containerd"} 1
fabric_process_container_info{comm="sglang::schedul",container_id="b7813833eb092b66317b20e88d6d7b56cac5643cf1ac9aa8aa70812711bde274",container_name="",pid="4310",pod_uid="2b7e9d40-51c3-4f8a-b6e2-7c9d0a1b3e4f",runtime="containerd"} 1
fabric_process_container_info{comm="sglang::schedul",container_id="f6f6b9c6a78875c26e65a60448dec9ec0d21dcc5e801662a1444eabcdb85255e",container_name="",pid="4311",pod_uid="",runtime="docker"} 1
# HELP fabric_process_info A reported process and why it was selected (cmdline, gpu or both); comm is its name (/proc/PID/comm).
# TYPE fabric_process_info gauge
fabric_process_info{comm="python3",pid="4242",selected_by="cmdline"} 1
fabric_process_info{comm="sglang::schedul",pid="4310",selected_by="cmdline"} 1
fabric_process_info{comm="sglang::schedul",pid="4311",selected_by="cmdline"} 1
# HELP fabric_process_cpu_seconds_total CPU time of the process by mode (user, system), from /proc/PID/stat.
# TYPE fabric_process_cpu_seconds_total counter
fabric_process_cpu_seconds_total{comm="python3",mode="system",pid="4242"} 402.1
fabric_process_cpu_seconds_total{comm="python3",mode="user",pid="4242"} 1832.45
fabric_process_cpu_seconds_total{comm="sglang::schedul",mode="system",pid="4310"} 3102.84
fabric_process_cpu_seconds_total{comm="sglang::schedul",mode="user",pid="4310"} 24819.23
fabric_process_cpu_seconds_total{comm="sglang::schedul",mode="system",pid="4311"} 2988.5
fabric_process_cpu_seconds_total{comm="sglang::schedul",mode="user",pid="4311"} 23901.14
# HELP fabric_process_resident_memory_bytes Resident memory of the process (VmRSS).
# TYPE fabric_process_resident_memory_bytes gauge
fabric_process_resident_memory_bytes{comm="python3",pid="4242"} 9.82534144e+09
fabric_process_resident_memory_bytes{comm="sglang::schedul",pid="4310"} 1.8234617856e+10
fabric_process_resident_memory_bytes{comm="sglang::schedul",pid="4311"} 1.797742592e+10
# HELP fabric_process_context_switches_total Context switches of the process's main thread by kind (voluntary, nonvoluntary).
# TYPE fabric_process_context_switches_total counter
fabric_process_context_switches_total{comm="python3",kind="nonvoluntary",pid="4242"} 20417
fabric_process_context_switches_total{comm="python3",kind="voluntary",pid="4242"} 1.843921e+06
fabric_process_context_switches_total{comm="sglang::schedul",kind="nonvoluntary",pid="4310"} 188314
fabric_process_context_switches_total{comm="sglang::schedul",kind="voluntary",pid="4310"} 9.7002114e+07
fabric_process_context_switches_total{comm="sglang::schedul",kind="nonvoluntary",pid="4311"} 175201
fabric_process_context_switches_total{comm="sglang::schedul",kind="voluntary",pid="4311"} 9.5887312e+07
# HELP fabric_process_major_page_faults_total Major page faults of the process (page reads from disk).
# TYPE fabric_process_major_page_faults_total counter
fabric_process_major_page_faults_total{comm="python3",pid="4242"} 412
fabric_process_major_page_faults_total{comm="sglang::schedul",pid="4310"} 87
fabric_process_major_page_faults_total{comm="sglang::schedul",pid="4311"} 64
# HELP fabric_process_numa_memory_bytes Memory of the process on each NUMA node: /proc/PID/numa_maps pages times each mapping's kernelpagesize_kB, summed like numastat -p (refreshed at most every --collector.process.numa-maps-interval).
# TYPE fabric_process_numa_memory_bytes gauge
fabric_process_numa_memory_bytes{comm="python3",numa_node="0",pid="4242"} 6.730928128e+09
fabric_process_numa_memory_bytes{comm="python3",numa_node="1",pid="4242"} 6.71096832e+08
fabric_process_numa_memory_bytes{comm="sglang::schedul",numa_node="0",pid="4310"} 6.5888256e+08
fabric_process_numa_memory_bytes{comm="sglang::schedul",numa_node="1",pid="4310"} 2.0259057664e+10
fabric_process_numa_memory_bytes{comm="sglang::schedul",numa_node="0",pid="4311"} 1.9730804736e+10
fabric_process_numa_memory_bytes{comm="sglang::schedul",numa_node="1",pid="4311"} 0
# HELP fabric_process_allowed_numa_nodes_info NUMA nodes whose CPUs the process may run on (Cpus_allowed_list against node*/cpulist), comma-separated.
# TYPE fabric_process_allowed_numa_nodes_info gauge
fabric_process_allowed_numa_nodes_info{comm="python3",nodes="0,1",pid="4242"} 1
fabric_process_allowed_numa_nodes_info{comm="sglang::schedul",nodes="1",pid="4310"} 1
fabric_process_allowed_numa_nodes_info{comm="sglang::schedul",nodes="0",pid="4311"} 1
# HELP fabric_process_allowed_memory_numa_nodes_info NUMA nodes the process may allocate memory from (Mems_allowed_list, its cpuset).
# TYPE fabric_process_allowed_memory_numa_nodes_info gauge
fabric_process_allowed_memory_numa_nodes_info{comm="python3",nodes="0,1",pid="4242"} 1
fabric_process_allowed_memory_numa_nodes_info{comm="sglang::schedul",nodes="1",pid="4310"} 1
fabric_process_allowed_memory_numa_nodes_info{comm="sglang::schedul",nodes="0",pid="4311"} 1
# HELP fabric_process_nccl_env_info An NCCL variable of the process's environment as it was at exec (/proc/PID/environ). Only an allow-list of NCCL variables is read; nothing else of the environment is exported or logged.
# TYPE fabric_process_nccl_env_info gauge
fabric_process_nccl_env_info{comm="python3",name="NCCL_CROSS_NIC",pid="4242",value="0"} 1
fabric_process_nccl_env_info{comm="python3",name="NCCL_DEBUG",pid="4242",value="INFO"} 1
fabric_process_nccl_env_info{comm="python3",name="NCCL_IB_GID_INDEX",pid="4242",value="3"} 1
fabric_process_nccl_env_info{comm="python3",name="NCCL_IB_HCA",pid="4242",value="mlx5_0,mlx5_3"} 1
fabric_process_nccl_env_info{comm="python3",name="NCCL_SOCKET_IFNAME",pid="4242",value="eth0"} 1
fabric_process_nccl_env_info{comm="sglang::schedul",name="NCCL_ALGO",pid="4310",value="Ring"} 1
fabric_process_nccl_env_info{comm="sglang::schedul",name="NCCL_DEBUG",pid="4310",value="WARN"} 1
fabric_process_nccl_env_info{comm="sglang::schedul",name="NCCL_IB_HCA",pid="4310",value="mlx5_0,mlx5_3"} 1
fabric_process_nccl_env_info{comm="sglang::schedul",name="NCCL_IB_TC",pid="4310",value="106"} 1
fabric_process_nccl_env_info{comm="sglang::schedul",name="NCCL_NET_GDR_LEVEL",pid="4310",value="PIX"} 1
fabric_process_nccl_env_info{comm="sglang::schedul",name="NCCL_PROTO",pid="4310",value="Simple"} 1
fabric_process_nccl_env_info{comm="sglang::schedul",name="NCCL_SOCKET_IFNAME",pid="4310",value="eth1"} 1
fabric_process_nccl_env_info{comm="sglang::schedul",name="NCCL_DEBUG",pid="4311",value="WARN"} 1
fabric_process_nccl_env_info{comm="sglang::schedul",name="NCCL_IB_HCA",pid="4311",value="mlx5_0,mlx5_3"} 1
fabric_process_nccl_env_info{comm="sglang::schedul",name="NCCL_SOCKET_IFNAME",pid="4311",value="eth0"} 1
# HELP fabric_process_rdma_device_visible 1 if the verbs node of a rail's RDMA device (node=uverbsN) or rdma_cm exists under /dev/infiniband in the process's root (mount namespace), else 0. Only for rail devices the host has now, with a verbs node: absent for a device gone from the host.
# TYPE fabric_process_rdma_device_visible gauge
fabric_process_rdma_device_visible{comm="python3",device="mlx5_0",node="rdma_cm",pid="4242"} 1
fabric_process_rdma_device_visible{comm="python3",device="mlx5_0",node="uverbs0",pid="4242"} 1
fabric_process_rdma_device_visible{comm="python3",device="mlx5_3",node="rdma_cm",pid="4242"} 1
fabric_process_rdma_device_visible{comm="python3",device="mlx5_3",node="uverbs1",pid="4242"} 1
fabric_process_rdma_device_visible{comm="sglang::schedul",device="mlx5_0",node="rdma_cm",pid="4310"} 0
fabric_process_rdma_device_visible{comm="sglang::schedul",device="mlx5_0",node="uverbs0",pid="4310"} 0
fabric_process_rdma_device_visible{comm="sglang::schedul",device="mlx5_3",node="rdma_cm",pid="4310"} 0
fabric_process_rdma_device_visible{comm="sglang::schedul",device="mlx5_3",node="uverbs1",pid="4310"} 0
fabric_process_rdma_device_visible{comm="sglang::schedul",device="mlx5_0",node="rdma_cm",pid="4311"} 1
fabric_process_rdma_device_visible{comm="sglang::schedul",device="mlx5_0",node="uverbs0",pid="4311"} 0
fabric_process_rdma_device_visible{comm="sglang::schedul",device="mlx5_3",node="rdma_cm",pid="4311"} 1
fabric_process_rdma_device_visible{comm="sglang::schedul",device="mlx5_3",node="uverbs1",pid="4311"} 1
# HELP fabric_process_rdma_device_required A rail RDMA device (present on the host) that the process needs, judged from its environment at exec, reason the first that applies: nccl_ib_hca (NCCL_IB_HCA selects the device; when set, no other device is needed), nccl_net_ib (NCCL_NET=IB), multi_node (WORLD_SIZE > LOCAL_WORLD_SIZE or OMPI_COMM_WORLD_SIZE > OMPI_COMM_WORLD_LOCAL_SIZE: the job spans nodes). Absent with NCCL_IB_DISABLE non-zero or NCCL_NET=Socket (no RDMA asked for), when nothing applies, or while the environment cannot be read.
# TYPE fabric_process_rdma_device_required gauge
fabric_process_rdma_device_required{comm="python3",device="mlx5_0",pid="4242",reason="nccl_ib_hca"} 1
fabric_process_rdma_device_required{comm="python3",device="mlx5_3",pid="4242",reason="nccl_ib_hca"} 1
fabric_process_rdma_device_required{comm="sglang::schedul",device="mlx5_0",pid="4310",reason="nccl_ib_hca"} 1
fabric_process_rdma_device_required{comm="sglang::schedul",device="mlx5_3",pid="4310",reason="nccl_ib_hca"} 1
fabric_process_rdma_device_required{comm="sglang::schedul",device="mlx5_0",pid="4311",reason="nccl_ib_hca"} 1
fabric_process_rdma_device_required{comm="sglang::schedul",device="mlx5_3",pid="4311",reason="nccl_ib_hca"} 1
# HELP fabric_process_rdma_fallback_cause_info Why the process would fall back to socket transport, as far as /proc and sysfs say, for pages without an NCCL log: cause lists those that apply, comma-separated in this order (the causes and order of fabric_nccl_fallback_cause_info): no_verbs_devices_in_container (no verbs node of a rail device the host has in its root), nccl_ib_disable (NCCL_IB_DISABLE non-zero), nccl_net_socket (NCCL_NET=Socket), nccl_ib_hca_matches_no_rail (NCCL_IB_HCA selects no rail device), socket_ifname_not_a_rail (NCCL_SOCKET_IFNAME selects no rail netdev), rail_down (every rail down or its device gone). Computed from the last reads of the process's root and environment and of the rails' ports. Absent when no cause applies.
# TYPE fabric_process_rdma_fallback_cause_info gauge
fabric_process_rdma_fallback_cause_info{cause="no_verbs_devices_in_container,socket_ifname_not_a_rail",comm="sglang::schedul",pid="4310"} 1
# HELP fabric_process_rdma_verbs_open Open file descriptors of the process on the verbs node (/dev/infiniband/uverbsN, one per ibv_open_device) of a rail's RDMA device the host has now: evidence that it uses the device. Read from /proc/PID/fd with the visibility check (every --collector.process.numa-maps-interval), at most 4096 fds per process: a lower bound beyond. Absent when /proc/PID/fd cannot be read (counted in fabric_process_read_errors_total{file="fd"}).
# TYPE fabric_process_rdma_verbs_open gauge
fabric_process_rdma_verbs_open{comm="python3",device="mlx5_0",pid="4242"} 2
fabric_process_rdma_verbs_open{comm="python3",device="mlx5_3",pid="4242"} 1
fabric_process_rdma_verbs_open{comm="sglang::schedul",device="mlx5_0",pid="4310"} 0
fabric_process_rdma_verbs_open{comm="sglang::schedul",device="mlx5_3",pid="4310"} 0
fabric_process_rdma_verbs_open{comm="sglang::schedul",device="mlx5_0",pid="4311"} 0
fabric_process_rdma_verbs_open{comm="sglang::schedul",device="mlx5_3",pid="4311"} 1
# HELP fabric_process_read_errors_total Reads of /proc/PID files that failed for a reason other than the process having exited: permission denied without root or CAP_SYS_PTRACE, or garbage. Also counted in fabric_scrape_read_errors_total.
# TYPE fabric_process_read_errors_total counter
# HELP fabric_process_namespace_info The process's namespaces as NCCL's RAS service sees them: own_pid is the PID it knows itself by (the innermost PID of NSpid: getpid() inside its PID namespace, the pid RAS reports), net_ns its network namespace (the inode of /proc/PID/ns/net; processes with the same value share a network). Absent while unread.
# TYPE fabric_process_namespace_info gauge
fabric_process_namespace_info{comm="python3",net_ns="4026532178",own_pid="1",pid="4242"} 1
fabric_process_namespace_info{comm="sglang::schedul",net_ns="4026531840",own_pid="4310",pid="4310"} 1
fabric_process_namespace_info{comm="sglang::schedul",net_ns="4026531840",own_pid="4311",pid="4311"} 1
fabric_process_read_errors_total{file="cgroup"} 0
fabric_process_read_errors_total{file="cmdline"} 0
fabric_process_read_errors_total{file="environ"} 0
fabric_process_read_errors_total{file="fd"} 0
fabric_process_read_errors_total{file="net"} 0
fabric_process_read_errors_total{file="numa_maps"} 0
fabric_process_read_errors_total{file="root"} 0
fabric_process_read_errors_total{file="stat"} 0
fabric_process_read_errors_total{file="status"} 0
# HELP fabric_process_host_pid_namespace 1 if the process lives in the PID namespace of --path.procfs (the NSpid line of /proc/PID/status has one PID), 0 if in a nested one (a container with its own PID namespace: the PID the process knows itself by, e.g. the one NCCL's RAS service reports, is not the pid label; see fabric_process_namespace_info). Absent on kernels without NSpid (before 4.1).
# TYPE fabric_process_host_pid_namespace gauge
fabric_process_host_pid_namespace{comm="python3",pid="4242"} 0
fabric_process_host_pid_namespace{comm="sglang::schedul",pid="4310"} 1
fabric_process_host_pid_namespace{comm="sglang::schedul",pid="4311"} 1
# HELP fabric_process_rdma_netlink_available 1 if the last RDMA netlink queue-pair listing succeeded and its PIDs are those of --path.procfs, else 0 (no RDMA netlink or device, refused, or the exporter not in the PID namespace of --path.procfs; the reason is logged once): fabric_process_rdma_queue_pairs is absent then. Absent before the process collector selected a process.
# TYPE fabric_process_rdma_netlink_available gauge
fabric_process_rdma_netlink_available 0
# HELP fabric_process_rdma_verbs_fds Open file descriptors of the process on any verbs node /dev/infiniband/uverbsN (every RDMA device, rail or not; 0 when none): a process that uses an HCA through verbs holds one per device context. Read from /proc/PID/fd with fabric_process_rdma_verbs_open (every --collector.process.numa-maps-interval, and at once when NCCL's RAS service newly reports the process as a rank; at most 4096 fds per process); absent when /proc/PID/fd cannot be read.
# TYPE fabric_process_rdma_verbs_fds gauge
fabric_process_rdma_verbs_fds{comm="python3",pid="4242"} 3
fabric_process_rdma_verbs_fds{comm="sglang::schedul",pid="4310"} 0
fabric_process_rdma_verbs_fds{comm="sglang::schedul",pid="4311"} 1
# HELP fabric_process_state_info The scheduler state of the process's main thread at the last read of /proc/PID/stat: running (R), sleeping (S), disk_sleep (D: uninterruptible, in the kernel), stopped (T: SIGSTOP, a stopped job), tracing_stop (t: a debugger), zombie (Z), dead (X), idle (I), other. A stopped rank launches nothing and answers nothing, RAS included.
# TYPE fabric_process_state_info gauge
fabric_process_state_info{comm="python3",pid="4242",state="sleeping"} 1
fabric_process_state_info{comm="sglang::schedul",pid="4310",state="sleeping"} 1
fabric_process_state_info{comm="sglang::schedul",pid="4311",state="sleeping"} 1
`

func TestProcessFixture(t *testing.T) {
	c, errs, _ := newTestProcess(t, processOptions(t, fixtureProc))
	compare(t, c, processWant)
	compare(t, c, processWant) // cached state gives the same scrape
	if errs.Value() != 0 {
		t.Errorf("read errors %v", errs.Value())
	}
	// The hand-made lstat walk agrees with openat2(RESOLVE_IN_ROOT).
	c2, _, _ := newTestProcess(t, processOptions(t, fixtureProc))
	c2.w.IO.Roots.NoOpenat2 = true
	compare(t, c2, processWant, "fabric_process_rdma_device_visible")
}

// samples returns "labels value" lines of the named families after one update.
func processScrape(t testing.TB, c Collector) (string, error) {
	t.Helper()
	var b exposition.Batch
	err := c.Update(t.Context(), &b)
	var out bytes.Buffer
	if werr := testFamilies.WriteText(&out, []*exposition.Batch{&b}); werr != nil {
		t.Fatal(werr)
	}
	return out.String(), err
}

func grepLines(text string, subs ...string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(l, s)
		}
		if ok && l != "" {
			out = append(out, l)
		}
	}
	return out
}

func hasLine(t testing.TB, text, line string) {
	t.Helper()
	for _, l := range strings.Split(text, "\n") {
		if l == line {
			return
		}
	}
	t.Errorf("scrape lacks %q; has:\n%s", line, strings.Join(grepLines(text, strings.SplitN(line, "{", 2)[0]), "\n"))
}

// GPU PIDs from the gpu collector's hook are selected besides the regexp;
// a PID the hook names that is not in this procfs (another PID namespace,
// exited) is ignored.
func TestProcessGPUPIDs(t *testing.T) {
	o := processOptions(t, fixtureProc)
	var calls int
	env, errs := testEnv()
	env.GPUs = fakeInventory{pids: []int{5001, 4310, 99999}, calls: &calls}
	c, err := newProcessState(env, o)
	if err != nil {
		t.Fatal(err)
	}
	out, err := processScrape(t, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`fabric_process_selected 4`, `fabric_process_candidates 4`,
		`fabric_process_info{comm="python3",pid="5001",selected_by="gpu"} 1`,
		`fabric_process_info{comm="sglang::schedul",pid="4310",selected_by="cmdline,gpu"} 1`,
		`fabric_process_info{comm="python3",pid="4242",selected_by="cmdline"} 1`,
		`fabric_process_nccl_env_info{comm="python3",name="NCCL_DEBUG",pid="5001",value="WARN"} 1`,
		`fabric_process_numa_memory_bytes{comm="python3",numa_node="1",pid="5001"} 1.34217728e+08`,
	} {
		hasLine(t, out, want)
	}
	if calls != 1 || errs.Value() != 0 || strings.Contains(out, "99999") {
		t.Errorf("hook calls %d, read errors %v, 99999 in output %v", calls, errs.Value(), strings.Contains(out, "99999"))
	}
}

// Over --collector.process.max, GPU processes win, then the lowest PIDs.
func TestProcessMax(t *testing.T) {
	o := processOptions(t, fixtureProc)
	o.Process.Max = 2
	c, _, _ := newTestProcess(t, o, 4311)
	out, _ := processScrape(t, c)
	hasLine(t, out, "fabric_process_selected 2")
	hasLine(t, out, "fabric_process_candidates 3")
	if got := grepLines(out, "fabric_process_info"); len(got) != 2 || !strings.Contains(got[0], `pid="4242"`) || !strings.Contains(got[1], `pid="4311"`) {
		t.Errorf("selected %v, want 4242 and 4311", got)
	}
}

func TestProcessOptions(t *testing.T) {
	env, _ := testEnv()
	for _, p := range []ProcessOptions{{Cmdline: "(", Max: 64}, {Max: 0}, {Max: 1, NumaMapsInterval: -time.Second}} {
		if _, err := newProcessCollector(env, &Options{Process: p}); err == nil {
			t.Errorf("%+v: no error", p)
		}
	}
	// An empty regexp selects GPU processes only.
	o := processOptions(t, fixtureProc)
	o.Process.Cmdline = ""
	c, _, _ := newTestProcess(t, o)
	out, _ := processScrape(t, c)
	hasLine(t, out, "fabric_process_selected 0")
}

func TestProcessAbsent(t *testing.T) {
	for _, dir := range []string{filepath.Join(t.TempDir(), "none"), t.TempDir()} {
		c, _, _ := newTestProcess(t, processOptions(t, dir))
		if _, err := processScrape(t, c); !errors.Is(err, ErrNoData) {
			t.Errorf("%s: %v, want ErrNoData", dir, err)
		}
	}
}

// A process that exits between scrapes, or between the listing and the
// reads, is skipped silently; permission errors are counted per file and
// the rest of the process is still reported.
func TestProcessVanishedAndPermissionDenied(t *testing.T) {
	procDir := copyTree(t, fixtureProc)
	c, errs, _ := newTestProcess(t, processOptions(t, procDir))
	if _, err := processScrape(t, c); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(procDir, "4311")); err != nil {
		t.Fatal(err)
	}
	denied := func(path string) bool {
		for _, s := range []string{"/4242/environ", "/4242/numa_maps", "/4310/status", "/4310/root"} {
			if strings.HasSuffix(path, s) {
				return true
			}
		}
		return false
	}
	open := c.w.IO.Open
	c.w.IO.Open = func(path string) (proc.File, error) {
		if denied(path) {
			return nil, &os.PathError{Op: "open", Path: path, Err: syscall.EACCES}
		}
		if strings.HasSuffix(path, "/5001/cmdline") { // exited between listing and read
			return nil, &os.PathError{Op: "open", Path: path, Err: syscall.ESRCH}
		}
		return open(path)
	}
	c.w.IO.OpenRoot = func(path string) (int, error) {
		if denied(path) {
			return -1, &os.PathError{Op: "open", Path: path, Err: syscall.EACCES}
		}
		return proc.OpenRoot(path)
	}
	c.w.IO.Reader.Close()
	c.w.IO.Reader = sysfs.NewReaderFunc(func(path string) (sysfs.File, error) {
		if denied(path) {
			return nil, &os.PathError{Op: "open", Path: path, Err: syscall.EPERM}
		}
		return sysfs.Open(path)
	})
	// A new process (4242 as a restarted server would be another PID) so that
	// environ and numa_maps are read again.
	c.w.Forget()
	c.w.Recheck(5001)
	out, err := processScrape(t, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`fabric_process_selected 2`,
		`fabric_process_read_errors_total{file="environ"} 1`,
		`fabric_process_read_errors_total{file="numa_maps"} 1`,
		`fabric_process_read_errors_total{file="status"} 1`,
		`fabric_process_read_errors_total{file="root"} 1`,
		`fabric_process_read_errors_total{file="cmdline"} 0`,
		`fabric_process_cpu_seconds_total{comm="python3",mode="user",pid="4242"} 1832.45`,
		`fabric_process_rdma_device_visible{comm="python3",device="mlx5_0",node="uverbs0",pid="4242"} 1`,
		`fabric_process_numa_memory_bytes{comm="sglang::schedul",numa_node="1",pid="4310"} 2.0259057664e+10`,
	} {
		hasLine(t, out, want)
	}
	for _, absent := range []string{`pid="4311"`, `fabric_process_numa_memory_bytes{comm="python3"`, `fabric_process_nccl_env_info{comm="python3"`,
		`fabric_process_resident_memory_bytes{comm="sglang::schedul"`, `fabric_process_rdma_device_visible{comm="sglang::schedul"`} {
		if strings.Contains(out, absent) {
			t.Errorf("scrape has %s", absent)
		}
	}
	if errs.Value() != 4 {
		t.Errorf("fabric_scrape_read_errors_total %v, want 4", errs.Value())
	}
}

// A PID reused by another process (different starttime) is not reported
// with the old process's data: it is dropped and its command line checked
// again.
func TestProcessPIDReuse(t *testing.T) {
	procDir := copyTree(t, fixtureProc)
	c, _, clk := newTestProcess(t, processOptions(t, procDir))
	processScrape(t, c)
	stat := filepath.Join(procDir, "4310", "stat")
	raw, _ := os.ReadFile(stat)
	if err := os.WriteFile(stat, bytes.Replace(raw, []byte(" 1203511 "), []byte(" 1999999 "), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	// The new process is a shell.
	os.WriteFile(filepath.Join(procDir, "4310", "cmdline"), []byte("bash\x00"), 0o644)
	clk.advance(time.Second)
	out, _ := processScrape(t, c)
	if strings.Contains(out, `pid="4310"`) {
		t.Errorf("reused PID reported:\n%s", strings.Join(grepLines(out, `pid="4310"`), "\n"))
	}
	clk.advance(time.Second)
	out, _ = processScrape(t, c)
	if strings.Contains(out, `pid="4310"`) {
		t.Errorf("non-matching process at a reused PID reported")
	}
	hasLine(t, out, "fabric_process_selected 2")
}

// A process renamed by setproctitle after the first look (SGLang's
// schedulers start as "python3 -c from multiprocessing.spawn import …") is
// selected on a later scrape: command lines are read again after 10 s,
// then less and less often.
func TestProcessSetproctitle(t *testing.T) {
	procDir := copyTree(t, fixtureProc)
	spawn := "python3\x00-c\x00from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)\x00--multiprocessing-fork\x00"
	os.WriteFile(filepath.Join(procDir, "4311", "cmdline"), []byte(spawn), 0o644)
	c, _, clk := newTestProcess(t, processOptions(t, procDir))
	out, _ := processScrape(t, c)
	hasLine(t, out, "fabric_process_selected 2")
	os.WriteFile(filepath.Join(procDir, "4311", "cmdline"), []byte("sglang::scheduler_TP1\x00\x00\x00"), 0o644)
	clk.advance(5 * time.Second)
	out, _ = processScrape(t, c)
	hasLine(t, out, "fabric_process_selected 2")
	clk.advance(5 * time.Second)
	out, _ = processScrape(t, c)
	hasLine(t, out, "fabric_process_selected 3")
	// Long-lived processes that do not match are re-read less and less often.
	for range 10 {
		clk.advance(c.w.CmdlineWait(98621))
		processScrape(t, c)
	}
	if w := c.w.CmdlineWait(98621); w != 5*time.Minute {
		t.Errorf("recheck interval of a long-lived process %v, want 5m", w)
	}
}

// numa_maps and /dev/infiniband are read at most every interval; the
// environment once per process; stat and status on every scrape.
func TestProcessNumaMapsInterval(t *testing.T) {
	procDir := copyTree(t, fixtureProc)
	o := processOptions(t, procDir)
	c, _, clk := newTestProcess(t, o)
	processScrape(t, c)
	os.WriteFile(filepath.Join(procDir, "4311", "numa_maps"), []byte("7f1a00000000 default anon=1 dirty=1 N1=1 kernelpagesize_kB=4\n"), 0o644)
	os.Remove(filepath.Join(procDir, "4311", "root/dev/infiniband/uverbs1"))
	os.WriteFile(filepath.Join(procDir, "4311", "environ"), []byte("NCCL_DEBUG=TRACE\x00"), 0o644)
	statPath := filepath.Join(procDir, "4311", "stat")
	raw, _ := os.ReadFile(statPath)
	os.WriteFile(statPath, bytes.Replace(raw, []byte(" 2390114 "), []byte(" 2390214 "), 1), 0o644)
	clk.advance(59 * time.Second)
	out, _ := processScrape(t, c)
	hasLine(t, out, `fabric_process_numa_memory_bytes{comm="sglang::schedul",numa_node="0",pid="4311"} 1.9730804736e+10`)
	hasLine(t, out, `fabric_process_rdma_device_visible{comm="sglang::schedul",device="mlx5_3",node="uverbs1",pid="4311"} 1`)
	hasLine(t, out, `fabric_process_cpu_seconds_total{comm="sglang::schedul",mode="user",pid="4311"} 23902.14`)
	clk.advance(time.Second)
	out, _ = processScrape(t, c)
	hasLine(t, out, `fabric_process_numa_memory_bytes{comm="sglang::schedul",numa_node="0",pid="4311"} 0`)
	hasLine(t, out, `fabric_process_numa_memory_bytes{comm="sglang::schedul",numa_node="1",pid="4311"} 4096`)
	hasLine(t, out, `fabric_process_rdma_device_visible{comm="sglang::schedul",device="mlx5_3",node="uverbs1",pid="4311"} 0`)
	hasLine(t, out, `fabric_process_nccl_env_info{comm="sglang::schedul",name="NCCL_DEBUG",pid="4311",value="WARN"} 1`)

	// Interval 0: every scrape.
	o.Process.NumaMapsInterval = 0
	c, _, _ = newTestProcess(t, o)
	processScrape(t, c)
	os.WriteFile(filepath.Join(procDir, "4311", "numa_maps"), []byte("7f1a00000000 default anon=1 dirty=1 N1=2 kernelpagesize_kB=4\n"), 0o644)
	out, _ = processScrape(t, c)
	hasLine(t, out, `fabric_process_numa_memory_bytes{comm="sglang::schedul",numa_node="1",pid="4311"} 8192`)
}

// No secret of a process's environment or command line reaches a metric or
// a log line, at debug level, through the whole exporter, also when reads
// fail; the buffers that held them are wiped.
func TestProcessSecretsNeverExported(t *testing.T) {
	var logs bytes.Buffer
	logger := level.NewFilter(log.NewLogfmtLogger(log.NewSyncWriter(&logs)), level.AllowDebug())
	o := processOptions(t, fixtureProc)
	o.PFC.EthtoolFixtures = "fixtures/ethtool"
	var names []string
	for _, s := range Specs() {
		names = append(names, s.Name)
	}
	exp, err := NewExporter(names, o, logger)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for range 2 {
		if err := exp.WriteText(&out); err != nil {
			t.Fatal(err)
		}
	}
	// Fault injection: every environ and cmdline read fails after a first read.
	var pc *processCollector
	for _, nc := range exp.collectors {
		if p, ok := nc.c.(*processCollector); ok {
			pc = p
		}
	}
	pc.poller.Close() // Update refreshes inline from here
	pc.w.IO.Open = func(path string) (proc.File, error) {
		f, err := proc.Open(path)
		if err != nil {
			return nil, err
		}
		return &failingFile{f: f, path: path}, nil
	}
	pc.w.Forget()
	pc.w.Recheck()
	if err := exp.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `fabric_process_nccl_env_info{comm="python3",name="NCCL_SOCKET_IFNAME",pid="4242",value="eth0"} 1`) {
		t.Fatalf("no NCCL variables in the scrape")
	}
	if !strings.Contains(logs.String(), "level=debug") {
		t.Fatalf("no debug logs captured")
	}
	for _, secret := range fixtureSecrets {
		if strings.Contains(out.String(), secret) {
			t.Errorf("secret %q in the metrics", secret)
		}
		if strings.Contains(logs.String(), secret) {
			t.Errorf("secret %q in the logs", secret)
		}
		for _, buf := range pc.w.Buffers() {
			if bytes.Contains(buf, []byte(secret)) {
				t.Errorf("secret %q left in a buffer", secret)
			}
		}
	}
}

// failingFile returns what one read gives, then EIO for environ and cmdline.
type failingFile struct {
	f    proc.File
	path string
	n    int
}

func (f *failingFile) Read(b []byte) (int, error) {
	if f.n > 0 && (strings.HasSuffix(f.path, "/environ") || strings.HasSuffix(f.path, "/cmdline")) {
		return 0, syscall.EIO
	}
	n, err := f.f.Read(b)
	f.n += n
	return n, err
}

func (f *failingFile) Close() error { return f.f.Close() }

// fakeInventory is a GPU inventory with fixed PIDs and devices.
type fakeInventory struct {
	pids    []int
	devices []GPUDevice
	calls   *int // PIDs calls, when not nil
}

func (f fakeInventory) PIDs(context.Context) []int {
	if f.calls != nil {
		*f.calls++
	}
	return f.pids
}
func (f fakeInventory) Devices(context.Context) []GPUDevice { return f.devices }
