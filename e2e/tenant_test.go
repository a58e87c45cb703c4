package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/vishvananda/netlink"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// Hostile tenants on a GPU node, with real network namespaces and the real
// exporter (docs/hardening.md, "Tenants"). A pod (its own network
// namespace, processes the exporter selects) points NCCL_RAS_ADDR at a
// host service through the node's address and at a metadata address, runs
// a fake RAS on its loopback that names a process of the host's namespace
// (the victim) as a rank of its communicator, with an async error and
// dead, runs fake RAS services that answer huge, slow and garbage, opens
// 40 more of them, and writes odd bytes into its environment and its
// process name. A second pod runs an honest RAS. The exporter must make no
// connection outside the pods' namespaces, export nothing about the
// victim, ask at most 2 services per pod, stay bounded in time and memory,
// and keep the honest pod's rank joined.
//
// The pods are this test binary re-run (TestTenantHelper) in a new
// network namespace; it needs root (CAP_SYS_ADMIN), as CI has.

const (
	tenantMarker = "fabric-tenant-marker"
	honestComm   = "0x600dc0de0000beef"
	// FABRIC_CHILDREN: children apart, and the variables of one apart.
	kidSep, varSep = "\x1e", "\x1f"
)

// tenantHelper re-runs this binary as a tenant process with env.
// A pod (netns) is its own process group, so that the test ends it with
// every process it started.
func tenantHelper(env []string, netns bool) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestTenantHelper$", tenantMarker)
	cmd.Env = append([]string{"FABRIC_TENANT=1"}, env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if netns {
		cmd.SysProcAttr.Cloneflags, cmd.SysProcAttr.Setpgid = syscall.CLONE_NEWNET, true
	}
	return cmd
}

// startPod starts a pod with its children (tenantHelper's env lists) and
// ends it, children and all, with the test.
func startPod(t *testing.T, kids []string) {
	t.Helper()
	pod := tenantHelper([]string{"NCCL_RAS_ENABLE=0", "FABRIC_CHILDREN=" + strings.Join(kids, kidSep)}, true)
	if err := pod.Start(); err != nil {
		t.Skipf("cannot start a process in a new network namespace: %v", err)
	}
	t.Cleanup(func() { syscall.Kill(-pod.Process.Pid, syscall.SIGKILL); pod.Wait() })
}

// TestTenantHelper is a tenant process when FABRIC_TENANT is set: a pod
// (brings its loopback up and starts FABRIC_CHILDREN, env lists apart by
// kidSep, their variables by varSep), a fake RAS service
// (FABRIC_RAS_LISTEN, FABRIC_RAS_MODE), or a process that only sleeps.
func TestTenantHelper(t *testing.T) {
	if os.Getenv("FABRIC_TENANT") == "" {
		t.Skip("a helper of TestHostileTenants")
	}
	if name := os.Getenv("FABRIC_COMM"); name != "" {
		os.WriteFile("/proc/self/comm", []byte(name), 0)
	}
	if kids := os.Getenv("FABRIC_CHILDREN"); kids != "" {
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "tenant pod: lo:", err)
			os.Exit(1)
		}
		for _, k := range strings.Split(kids, kidSep) {
			c := tenantHelper(strings.Split(k, varSep), false)
			if err := c.Start(); err != nil {
				fmt.Fprintln(os.Stderr, "tenant pod:", err)
				os.Exit(1)
			}
		}
	}
	if addr := os.Getenv("FABRIC_RAS_LISTEN"); addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "tenant ras:", err)
			os.Exit(1)
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(1)
			}
			go serveTenantRAS(c, os.Getenv("FABRIC_RAS_MODE"))
		}
	}
	select {}
}

// serveTenantRAS answers NCCL's RAS client protocol as a hostile tenant
// would: forged (FABRIC_RAS_ANSWER), honest (its own rank), huge (64
// MiB), slow (never answers STATUS), garbage.
func serveTenantRAS(c net.Conn, mode string) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			return
		}
		u := strings.ToUpper(strings.TrimSpace(l))
		switch {
		case mode == "garbage":
			c.Write([]byte("\xff\xfe{\"communicators\": [[[[\x00SECRET\n"))
			return
		case strings.HasPrefix(u, "CLIENT PROTOCOL"):
			c.Write([]byte("SERVER PROTOCOL 2\n"))
		case strings.HasPrefix(u, "TIMEOUT"), strings.HasPrefix(u, "SET FORMAT"):
			c.Write([]byte("OK\n"))
		case strings.HasSuffix(u, "STATUS"):
			switch mode {
			case "slow":
				time.Sleep(time.Minute)
			case "huge":
				chunk := []byte(strings.Repeat(`{"hash":"0x1","ranks":[],`, 4096))
				for n := 0; n < 64<<20; n += len(chunk) {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			case "honest":
				c.Write([]byte(rasJSON(honestComm, "127.0.0.1", os.Getpid(), 0, false)))
			default:
				c.Write([]byte(os.Getenv("FABRIC_RAS_ANSWER")))
			}
			return
		}
	}
}

// rasJSON is a RAS answer with one communicator of one rank at host, pid,
// and (when dead is set) a dead missing rank there too.
func rasJSON(comm, host string, pid, asyncErr int, dead bool) string {
	missing, n := "", 1
	if dead {
		missing, n = fmt.Sprintf(`{"rank": 1, "host": %q, "pid": %d, "cuda_dev": 1, "nvml_dev": 1, "status": {"unresponsive": true, "considered_dead": true}}`, host, pid), 2
	}
	return fmt.Sprintf(`{"nccl_version": "2.29.7", "communicators_count": 1, "communicators": [{"hash": %q, "size": %d, "ranks_count": 1, "missing_ranks_count": %d,
 "ranks": [{"rank": 0, "host": %q, "pid": %d, "cuda_dev": 0, "nvml_dev": 0, "status": {"init_state": 0, "async_error": %d, "finalize_called": false, "destroy_flag": false, "abort_flag": false},
 "collective_counts": {"AllReduce": 4242}}], "missing_ranks": [%s]}], "ras": {"collection_time_sec": 0.001, "timeouts_count": 0}}
`, comm, n, n-1, host, pid, asyncErr, missing)
}

func TestHostileTenants(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces and a privileged exporter")
	}
	dir := t.TempDir()
	exporter := buildExporter(t, dir)

	// The host's services a tenant would like the exporter to probe: one
	// on every address (the node IP), one on loopback.
	var secretConns atomic.Int64
	secret := func(addr string) string {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				secretConns.Add(1)
				c.Write([]byte("SECRET-TOKEN-4f1c\n"))
				c.Close()
			}
		}()
		return ln.Addr().String()
	}
	anyAddr, loAddr := secret("0.0.0.0:0"), secret("127.0.0.1:0")
	_, anyPort, _ := net.SplitHostPort(anyAddr)
	nodeIP := ""
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
				nodeIP = n.IP.String()
				break
			}
		}
	}
	if nodeIP == "" {
		t.Skip("no non-loopback IPv4 address on this host")
	}

	// The victim: a serving process of the host's namespace.
	victim := tenantHelper([]string{"NCCL_RAS_ENABLE=0"}, false)
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { victim.Process.Kill(); victim.Wait() })
	vpid := victim.Process.Pid

	// The hostile pod.
	forged := rasJSON("0x7e4a11ce5e1fbad0", nodeIP, vpid, 6, true)
	kids := []string{
		"NCCL_RAS_ADDR=" + nodeIP + ":" + anyPort, // a host service through the node's address
		"NCCL_RAS_ADDR=169.254.169.254:80",        // a metadata service
		"NCCL_RAS_ADDR=" + loAddr,                 // the host's loopback service's port, on the pod's own loopback
		"FABRIC_RAS_LISTEN=127.0.0.1:28028" + varSep + "FABRIC_RAS_MODE=forged" + varSep + "FABRIC_COMM=\xffev\"il{}\\" + varSep + "NCCL_SOCKET_IFNAME=\xff\xfe\"}{=" + varSep + "FABRIC_RAS_ANSWER=" + forged,
		"NCCL_RAS_ADDR=127.0.0.1:28100" + varSep + "FABRIC_RAS_LISTEN=127.0.0.1:28100" + varSep + "FABRIC_RAS_MODE=huge",
		"NCCL_RAS_ADDR=127.0.0.1:28101" + varSep + "FABRIC_RAS_LISTEN=127.0.0.1:28101" + varSep + "FABRIC_RAS_MODE=slow",
	}
	for i := range 40 {
		a := fmt.Sprintf("127.0.0.1:%d", 28200+i)
		kids = append(kids, "NCCL_RAS_ADDR="+a+varSep+"FABRIC_RAS_LISTEN="+a+varSep+"FABRIC_RAS_MODE=garbage")
	}
	startPod(t, kids)
	// The honest pod: its own rank at its own loopback, with its own pid.
	startPod(t, []string{"FABRIC_RAS_LISTEN=127.0.0.1:28028" + varSep + "FABRIC_RAS_MODE=honest"})

	addr := testenv.FreeAddr(t)
	exp := start(t, exporter, "--web.listen-address="+addr, "--collector.disable-defaults",
		"--collector.process", "--collector.nccl-ras", "--collector.process.cmdline="+tenantMarker,
		"--collector.nccl-ras.interval=1s", "--collector.nccl-ras.timeout=3s")
	testenv.WaitHTTP(t, "http://"+addr+"/metrics")

	var worst time.Duration
	var body string
	deadline := time.Now().Add(12 * time.Second)
	for time.Now().Before(deadline) {
		t0 := time.Now()
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		worst = max(worst, time.Since(t0))
		body = string(b)
		time.Sleep(time.Second)
	}
	rss := vmRSS(t, exp.Process.Pid)
	t.Logf("host services: %d connections; slowest scrape %v; exporter RSS %d MiB", secretConns.Load(), worst.Round(time.Millisecond), rss>>20)

	if n := secretConns.Load(); n != 0 {
		t.Errorf("the exporter connected %d times to host services a tenant named", n)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("the scrape does not parse with a tenant's odd bytes in it: %v", err)
	}
	vp := strconv.Itoa(vpid)
	for name, f := range fams {
		if !strings.HasPrefix(name, "fabric_nccl_ras_") {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if (l.GetName() == "pid" || l.GetName() == "host_pid") && l.GetValue() == vp {
					t.Errorf("a series names the victim: %s %v", name, m.GetLabel())
				}
				if l.GetName() == "comm" && l.GetValue() == "0x7e4a11ce5e1fbad0" && name != "fabric_nccl_ras_communicator_ranks" &&
					strings.HasPrefix(name, "fabric_nccl_ras_rank_") {
					t.Errorf("a rank series of the forged communicator: %s %v", name, m.GetLabel())
				}
			}
		}
	}
	if f := fams["fabric_nccl_ras_targets"]; f != nil {
		for _, m := range f.GetMetric() {
			if m.GetGauge().GetValue() > 2*2 { // two pods at most 2 each
				t.Errorf("asked %v services %v", m.GetGauge().GetValue(), m.GetLabel())
			}
		}
	}
	if worst > 5*time.Second {
		t.Errorf("a scrape took %v with a slow and a huge tenant RAS", worst)
	}
	if rss > 256<<20 {
		t.Errorf("exporter RSS %d MiB", rss>>20)
	}
	// The honest pod's rank is joined to its process.
	joined := false
	if f := fams["fabric_nccl_ras_rank_process_info"]; f != nil {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "comm" && l.GetValue() == honestComm {
					joined = true
				}
			}
		}
	}
	if !joined {
		t.Errorf("the honest pod's rank is not joined:\n%s", grepBody(body, "fabric_nccl_ras_"))
	}
}

// grepBody returns the lines of a scrape that start with prefix.
func grepBody(body, prefix string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) || strings.HasPrefix(l, "fabric_collector_state_info{collector=\"nccl-ras") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// vmRSS is a process's resident set in bytes.
func vmRSS(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
