package collector

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/nccl"
	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

// NCCL init failures (no usable network): the lines of each version family,
// from the format strings in NCCL's source (plugin/net.cc, net.cc,
// transport/net_socket.cc, bootstrap.cc, init.cc) and the 2.28.9 line order
// of the H200 capture in fixtures/nccl-h200.

// ncclInit228ForcedIB is NCCL 2.28.9 with NCCL_NET=IB on a host without RDMA
// devices: the IB plugin finds no device, still prints its (empty) device
// list, the socket plugin is skipped by name, and init unwinds with -> 5.
// WARN lines of 2.28 start with an empty line.
const ncclInit228ForcedIB = `vm:700:700 [0] NCCL INFO Bootstrap: Using eth0:192.0.2.2<0>
vm:700:700 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
vm:700:700 [0] NCCL INFO NCCL_NET set by environment to IB
vm:700:700 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so
vm:700:700 [0] NCCL INFO NET/IB : No device found.
vm:700:700 [0] NCCL INFO NET/IB : Using [RO]; OOB eth0:192.0.2.2<0>
vm:700:700 [0] NCCL INFO Failed to initialize NET plugin IB

vm:700:700 [0] plugin/net.cc:379 NCCL WARN Failed to initialize any NET plugin
vm:700:700 [0] NCCL INFO init.cc:1891 -> 5
vm:700:700 [0] NCCL INFO init.cc:2243 -> 5
vm:700:700 [0] NCCL INFO init.cc:2271 -> 5
`

func TestNCCLInitFailure(t *testing.T) {
	const names = "fabric_nccl_init_failure_info fabric_nccl_net_info fabric_nccl_socket_interface_info fabric_nccl_net_device_info"
	for _, tc := range []struct {
		name, text, want string
	}{
		{"2.28 NCCL_NET=IB without RDMA devices", ncclInit228ForcedIB, `
fabric_nccl_init_failure_info{host="vm",pid="700",reason="Failed to initialize any NET plugin"} 1
`},
		{"2.28 timestamped WARN after an IB plugin assignment", "h:5:5 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:10.0.0.1<0>\n" +
			"h:5:5 [0] NCCL INFO Assigned NET plugin IB to comm\n" +
			"[2026-05-05 06:16:47] h:5:5 [0] plugin/net.cc:334 NCCL WARN Failed to initialize any NET plugin\n", `
fabric_nccl_init_failure_info{host="h",pid="5",reason="Failed to initialize any NET plugin"} 1
`},
		{"2.12-2.26 NCCL_NET=IB: network not found", "h:6:6 [0] NCCL INFO NCCL_NET set by environment to IB\n" +
			"h:6:6 [0] NCCL INFO NET/IB : No device found.\n" +
			"h:6:6 [0] net.cc:627 NCCL WARN Error: network IB not found.\n" +
			"h:6:6 [0] NCCL INFO init.cc:1302 -> 5\n", `
fabric_nccl_init_failure_info{host="h",pid="6",reason="Error: network IB not found."} 1
`},
		{"2.4-2.11 no IB device and no socket interface", "h:7:7 [0] NCCL INFO NET/IB : No device found.\n" +
			"h:7:7 [0] transport/net_socket.cc:33 NCCL WARN NET/Socket : no interface found\n" +
			"h:7:7 [0] NCCL INFO init.cc:108 -> 2\n", `
fabric_nccl_init_failure_info{host="h",pid="7",reason="NET/Socket : no interface found"} 1
`},
		{"bootstrap without an interface", "h:8:8 [0] bootstrap.cc:114 NCCL WARN Bootstrap : no socket interface found\n", `
fabric_nccl_init_failure_info{host="h",pid="8",reason="Bootstrap : no socket interface found"} 1
`},
		{"the 2.28 IB plugin failure before a socket fallback is no init failure",
			"vm:9:9 [0] NCCL INFO NET/IB : No device found.\n" +
				"vm:9:9 [0] NCCL INFO NET/IB : Using [RO]; OOB eth0:192.0.2.2<0>\n" +
				"vm:9:9 [0] NCCL INFO Failed to initialize NET plugin IB\n" +
				"vm:9:9 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>\n" +
				"vm:9:9 [0] NCCL INFO Using network Socket\n", `
fabric_nccl_net_info{host="vm",net="Socket",pid="9"} 1
fabric_nccl_socket_interface_info{host="vm",interface="lo",pid="9"} 1
`},
		{"the INFO of a failure or other WARNs are no init failure",
			"h:10:10 [0] NCCL INFO Failed to initialize any NET plugin\n" +
				"h:10:10 [0] misc/ibvwrap.cc:187 NCCL WARN Error: network is unreachable\n" +
				"h:10:10 [0] NCCL INFO Using network IB\n", `
fabric_nccl_net_info{host="h",net="IB",pid="10"} 1
`},
		{"a later communicator that completes its init clears the failure",
			"h:11:11 [0] net.cc:627 NCCL WARN Error: network IB not found.\n" +
				"h:11:11 [0] NCCL INFO Using network Socket\n" +
				"h:11:11 [0] NCCL INFO comm 0x55d0 rank 0 nranks 2 cudaDev 0 busId 1b000 - Init COMPLETE\n", `
fabric_nccl_net_info{host="h",net="Socket",pid="11"} 1
`},
		{"a failure after a completed init wins",
			"h:12:12 [0] NCCL INFO Using network Socket\n" +
				"h:12:12 [0] NCCL INFO comm 0x55d0 rank 0 nranks 2 cudaDev 0 busId 1b000 - Init COMPLETE\n" +
				"h:12:12 [0] plugin/net.cc:379 NCCL WARN Failed to initialize any NET plugin\n", `
fabric_nccl_init_failure_info{host="h",pid="12",reason="Failed to initialize any NET plugin"} 1
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := scanText(t, tc.text)
			if got := ncclSamples(t, c, strings.Fields(names)...); got != strings.TrimLeft(tc.want, "\n") {
				t.Errorf("got\n%swant\n%s", got, strings.TrimLeft(tc.want, "\n"))
			}
		})
	}
}

// ncclSamples returns the sample lines of the named families from one
// Update, in the text format.
func ncclSamples(t *testing.T, c *ncclCollector, names ...string) string {
	t.Helper()
	var b exposition.Batch
	if err := c.Update(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := testFamilies.WriteText(&buf, []*exposition.Batch{&b}); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, l := range strings.SplitAfter(buf.String(), "\n") {
		for _, n := range names {
			if strings.HasPrefix(l, n+"{") || strings.HasPrefix(l, n+" ") {
				out.WriteString(l)
			}
		}
	}
	return out.String()
}

// The failure and its reason survive re-reading: a new poll with no new
// lines changes nothing, a repeated WARN keeps one series.
func TestNCCLInitFailureRepeats(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vm.700.log")
	testenv.WriteFile(t, path, ncclInit228ForcedIB)
	c := newTestNCCL(t, NCCLOptions{LogPaths: []string{filepath.Join(dir, "*.log")}})
	c.poll()
	testenv.AppendFile(t, path, "\nvm:700:700 [0] plugin/net.cc:379 NCCL WARN Failed to initialize any NET plugin\n")
	c.poll()
	c.poll()
	want := `fabric_nccl_init_failure_info{host="vm",pid="700",reason="Failed to initialize any NET plugin"} 1
fabric_nccl_warnings_total{host="vm",pid="700"} 2
`
	if got := ncclSamples(t, c, "fabric_nccl_init_failure_info", "fabric_nccl_warnings_total", "fabric_nccl_net_info"); got != want {
		t.Errorf("got\n%swant\n%s", got, want)
	}
}

// Real NCCL 2.28.9 logs of the GPU fire drill (tools/gpudrill on the lent
// H200, collector/fixtures/nccl-drill/README.md): two ranks on one GPU over
// NET/Socket on lo, the same ranks with NCCL_NET=IB and NCCL_IB_HCA naming
// no device, and with NCCL_NET=IB alone. The failed ranks print
// "NET/IB : Using [RO]; OOB …" after "NET/IB : No device found." and a
// timestamped WARN after an empty line.
func TestNCCLDrillCapture(t *testing.T) {
	const dir = "fixtures/nccl-drill"
	const names = "fabric_nccl_init_failure_info fabric_nccl_net_info fabric_nccl_socket_interface_info fabric_nccl_net_device_info"
	for _, tc := range []struct{ glob, want string }{
		{"socket/*.log", `fabric_nccl_net_info{host="vm",net="Socket",pid="692"} 1
fabric_nccl_net_info{host="vm",net="Socket",pid="693"} 1
fabric_nccl_socket_interface_info{host="vm",interface="lo",pid="692"} 1
fabric_nccl_socket_interface_info{host="vm",interface="lo",pid="693"} 1
`},
		{"ib/*.log", `fabric_nccl_init_failure_info{host="vm",pid="1288",reason="Failed to initialize any NET plugin"} 1
fabric_nccl_init_failure_info{host="vm",pid="1289",reason="Failed to initialize any NET plugin"} 1
`},
		{"pure-ib/*.log", `fabric_nccl_init_failure_info{host="vm",pid="1386",reason="Failed to initialize any NET plugin"} 1
fabric_nccl_init_failure_info{host="vm",pid="1387",reason="Failed to initialize any NET plugin"} 1
`},
	} {
		c := newTestNCCL(t, NCCLOptions{LogPaths: []string{filepath.Join(dir, tc.glob)}})
		c.poll()
		if got := ncclSamples(t, c, strings.Fields(names)...); got != tc.want {
			t.Errorf("%s: got\n%swant\n%s", tc.glob, got, tc.want)
		}
	}
	// Every socket trial of the drill classifies the same way.
	more, _ := filepath.Glob(filepath.Join(dir, "more/*/*.log"))
	if len(more) != 8 {
		t.Fatalf("%d logs under more/, want 8", len(more))
	}
	c := newTestNCCL(t, NCCLOptions{LogPaths: []string{filepath.Join(dir, "more/*/*.log")}})
	c.poll()
	n := 0
	c.eachProc(func(k string, p *nccl.Process) {
		n++
		sock := uint64(0)
		for _, e := range p.Conns {
			if e.Transport == "NET/Socket" {
				sock += e.N
			}
		}
		if p.Net != "Socket" || len(p.Interfaces) != 1 || p.Interfaces[0] != "lo" || sock == 0 {
			t.Errorf("%s: %+v", k, *p)
		}
	})
	if n == 0 {
		t.Error("no process in the socket trials")
	}
}
