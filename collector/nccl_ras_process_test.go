package collector

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/go-kit/log"

	"github.com/fabric-exporter/fabric_exporter/internal/procwatch"
)

// closedAddr returns a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

// setEnv appends variables to a fixture process's environment (the
// fixture processes do not define them: these are their first
// definitions).
func setEnv(t *testing.T, procDir string, pid int, vars ...string) {
	t.Helper()
	path := filepath.Join(procDir, fmt.Sprint(pid), "environ")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vars {
		raw = append(raw, v+"\x00"...)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// listenAt makes a fixture process hold listening sockets on addrs (IPv4
// or localhost, with a port): an fd on socket inode 7700+PID and that
// inode's lines in its namespace's /proc/PID/net/tcp (the lines other
// calls wrote kept).
func listenAt(t *testing.T, procDir string, pid int, addrs ...string) {
	t.Helper()
	ino := 7700 + pid
	os.Symlink(fmt.Sprintf("socket:[%d]", ino), filepath.Join(procDir, fmt.Sprint(pid), "fd", "900"))
	var ls []string
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		if host == "localhost" {
			host = "127.0.0.1"
		}
		ip := netip.MustParseAddr(host).Unmap().As4()
		pn, _ := strconv.Atoi(port)
		ls = append(ls, fmt.Sprintf("%02X%02X%02X%02X:%04X %d", ip[3], ip[2], ip[1], ip[0], pn, ino))
	}
	listen(t, procDir, pid, ls...)
}

// rasWithProcesses returns a process collector on a copy of the fixture
// /proc and an nccl-ras collector that consumes it, whose flag address has
// no listener.
func rasWithProcesses(t *testing.T) (string, *processCollector, *ncclRASCollector, string) {
	t.Helper()
	procDir := copyTree(t, fixtureProc)
	// 4242 lives in its pod's own network namespace, where RAS listens on
	// the pod's loopback: these tests are about the exporter's namespace,
	// so its RAS is off (TestRASPodTargets has it on).
	setEnv(t, procDir, 4242, "NCCL_RAS_ENABLE=0")
	p, _, _ := newTestProcess(t, processOptions(t, procDir))
	flag := closedAddr(t)
	c := newTestRAS(t, NCCLRASOptions{Addresses: []string{flag}}, "127.0.0.1")
	c.env.Processes = p
	return procDir, p, c, flag
}

// A serving process's NCCL_RAS_ADDR is queried without a flag naming it;
// when the process exits, the address and its series go, and the state
// falls back to what the flag's address says.
func TestRASProcessAddress(t *testing.T) {
	f := newFakeRAS(t, true, "2.28.9-json-healthy.txt", "")
	procDir, p, c, flag := rasWithProcesses(t)
	setEnv(t, procDir, 4311, "NCCL_RAS_ADDR="+f.Addr())
	listenAt(t, procDir, 4311, f.Addr())
	out, _ := processScrape(t, p)
	hasLine(t, out, `fabric_process_nccl_env_info{comm="sglang::schedul",name="NCCL_RAS_ADDR",pid="4311",value="`+f.Addr()+`"} 1`)
	if got := rasAddrs(p); !slices.Equal(got, []string{f.Addr()}) {
		t.Fatalf("RASAddresses = %v", got)
	}
	c.poll()
	got, err := inspectorScrape(t, c)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if got[`fabric_nccl_ras_up{address="`+f.Addr()+`",netns=""}`] != 1 || got[`fabric_nccl_ras_info{address="`+f.Addr()+`",format="json",netns="",version="2.28.9"}`] != 1 {
		t.Fatalf("the process's address was not queried: %v", scrapeKeys(got, "fabric_nccl_ras_up"))
	}
	if got[`fabric_nccl_ras_communicator_ranks{comm="0xf8e68da1f581fed5"}`] != 2 {
		t.Errorf("no communicator from the process's address")
	}

	// The process exits: its RAS service goes, and its address is no
	// longer listed after the next scrape of the process collector.
	if err := os.RemoveAll(filepath.Join(procDir, "4311")); err != nil {
		t.Fatal(err)
	}
	processScrape(t, p)
	if got := rasAddrs(p); len(got) != 0 {
		t.Fatalf("RASAddresses after exit = %v", got)
	}
	c.poll()
	got, err = inspectorScrape(t, c)
	var se *StateError
	if !errors.As(err, &se) || se.State != StateNoHardware {
		t.Fatalf("after exit: err %v, want no_hardware", err)
	}
	if len(got) != 0 {
		t.Errorf("series left after the process exited: %v", got)
	}
	if !slices.Equal(c.addrs, []string{flag}) {
		t.Errorf("queried %v, want the flag's address only", c.addrs)
	}
}

// NCCL_RAS_ENABLE other than 1 (RAS off in NCCL), an address of another
// host, or one NCCL would not read as an IP and port: not queried.
func TestRASProcessAddressNotQueried(t *testing.T) {
	f := newFakeRAS(t, true, "2.28.9-json-healthy.txt", "")
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"disabled", []string{"NCCL_RAS_ADDR=" + f.Addr(), "NCCL_RAS_ENABLE=0"}},
		{"disabled, before the address", []string{"NCCL_RAS_ENABLE=false", "NCCL_RAS_ADDR=" + f.Addr()}},
		{"remote", []string{"NCCL_RAS_ADDR=10.255.0.1:" + portOf(t, f.Addr())}},
		{"host name", []string{"NCCL_RAS_ADDR=fixture-node7:" + portOf(t, f.Addr())}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			procDir, p, c, flag := rasWithProcesses(t)
			setEnv(t, procDir, 4311, tc.env...)
			listenAt(t, procDir, 4311, f.Addr(), "10.255.0.1:"+portOf(t, f.Addr()))
			processScrape(t, p)
			c.poll()
			got, err := inspectorScrape(t, c)
			var se *StateError
			if !errors.As(err, &se) || se.State != StateNoHardware || len(got) != 0 {
				t.Fatalf("err %v, samples %v", err, got)
			}
			if !slices.Equal(c.addrs, []string{flag}) {
				t.Errorf("queried %v, want the flag's address only", c.addrs)
			}
		})
	}
	// An address of its own namespace is queried where the process
	// listens there; one where it does not listen is not.
	procDir, p, c, _ := rasWithProcesses(t)
	own := "192.0.2.2:" + portOf(t, f.Addr())
	setEnv(t, procDir, 4311, "NCCL_RAS_ADDR="+own)
	listenAt(t, procDir, 4311, own)
	processScrape(t, p)
	if got := c.addresses(map[string]bool{"192.0.2.2": true}); !slices.Contains(got, own) {
		t.Errorf("an address of its namespace where it listens not queried: %v", got)
	}
	procDir, p, c, _ = rasWithProcesses(t)
	setEnv(t, procDir, 4311, "NCCL_RAS_ADDR="+own)
	listenAt(t, procDir, 4311, "192.0.2.2:1")
	processScrape(t, p)
	if got := c.addresses(map[string]bool{"192.0.2.2": true}); slices.Contains(got, own) {
		t.Errorf("a port where the process does not listen queried: %v", got)
	}
}

func portOf(t *testing.T, addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// Each address once (the flag's and two processes' that share it), and at
// most maxProcessRASAddrs from the processes.
func TestRASProcessAddressesBounded(t *testing.T) {
	procDir, p, c, flag := rasWithProcesses(t)
	setEnv(t, procDir, 4242, "NCCL_RAS_ADDR="+flag)
	setEnv(t, procDir, 4310, "NCCL_RAS_ADDR=127.0.0.2:28028")
	setEnv(t, procDir, 4311, "NCCL_RAS_ADDR=[::ffff:127.0.0.2]:28028")
	listenAt(t, procDir, 4310, "127.0.0.2:28028")
	listenAt(t, procDir, 4311, "127.0.0.2:28028")
	processScrape(t, p)
	if got, want := c.addresses(nil), []string{flag, "127.0.0.2:28028"}; !slices.Equal(got, want) {
		t.Errorf("addresses %v, want %v", got, want)
	}
	var many []string
	for i := range maxProcessRASAddrs + 5 {
		many = append(many, fmt.Sprintf("127.0.1.%d:28028", i))
	}
	c.env.Processes = fakeRASAddrs(many)
	if got := c.addresses(nil); len(got) != 1+maxProcessRASAddrs || got[0] != flag {
		t.Errorf("%d addresses: %v", len(got), got)
	}
}

type fakeRASAddrs []string

func (f fakeRASAddrs) RASTargets() []RASTarget {
	var out []RASTarget
	for _, a := range f {
		out = append(out, RASTarget{Addr: a})
	}
	return out
}
func (f fakeRASAddrs) Table() *procwatch.Snapshot { return nil }
func (f fakeRASAddrs) Nudge(...int)               {}

// rasAddrs lists the addresses of a process collector's RAS targets.
func rasAddrs(p ProcessInventory) []string {
	var out []string
	for _, t := range p.RASTargets() {
		out = append(out, t.Addr)
	}
	return out
}

// addresses lists the addresses a poll would ask, with local as this
// node's addresses.
func (c *ncclRASCollector) addresses(local map[string]bool) []string {
	var out []string
	for _, t := range c.targets(local, map[string]int{}) {
		out = append(out, t.Addr)
	}
	return out
}

// RASTargets may be called from nccl-ras's poll while the process
// collector refreshes (go test -race).
func TestRASAddressesConcurrent(t *testing.T) {
	procDir, p, _, _ := rasWithProcesses(t)
	setEnv(t, procDir, 4311, "NCCL_RAS_ADDR=127.0.0.1:28029")
	listenAt(t, procDir, 4311, "127.0.0.1:28029")
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 50 {
			rasAddrs(p)
		}
	})
	for range 5 {
		processScrape(t, p)
	}
	wg.Wait()
	if got := rasAddrs(p); !slices.Equal(got, []string{"127.0.0.1:28029"}) {
		t.Errorf("RASAddresses = %v", got)
	}
}

func TestRASEnabled(t *testing.T) {
	// "99999999999999999999" overflows (ERANGE): NCCL keeps the default.
	for v, want := range map[string]bool{
		"": true, "1": true, " 1": true, "+1": true, "01": true, "0x1": true, "1abc": true, "99999999999999999999": true,
		"0": false, "00": false, "0x0": false, "0x": false, "2": false, "-1": false,
		"false": false, "true": false, "yes": false, "09": false,
	} {
		if got := rasEnabled(v); got != want {
			t.Errorf("rasEnabled(%q) = %v, want %v", v, got, want)
		}
	}
}

// NewExporter hands the process collector's inventory to nccl-ras,
// whatever the order the collectors are named in; none without it.
func TestProcessInventoryWiring(t *testing.T) {
	o := processOptions(t, fixtureProc)
	o.NCCLRAS = NCCLRASOptions{Addresses: []string{closedAddr(t)}}
	e, err := NewExporter([]string{"nccl-ras", "process"}, o, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	r := e.collectors[0].c.(*ncclRASCollector)
	if p, ok := r.env.Processes.(*processCollector); !ok || p != e.collectors[1].c {
		t.Fatalf("nccl-ras has no process inventory: %T", r.env.Processes)
	}
	e2, err := NewExporter([]string{"nccl-ras"}, o, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e2.Close)
	if e2.collectors[0].c.(*ncclRASCollector).env.Processes != nil {
		t.Error("nccl-ras has a process inventory without the process collector")
	}
}
