package collector

import (
	"bytes"
	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseNCCLLineHeaders(t *testing.T) {
	for _, tc := range []struct {
		line                string
		kind                ncclLineKind
		host, pid, tag, msg string
	}{
		{"gpu1:4242:4300 [0] NCCL INFO Using network IB", ncclInfo, "gpu1", "4242", "", "Using network IB"},
		{"[1,0]<stdout>:5873af64cf59:10158:10560 [0] NCCL INFO NET/IB : No device found.", ncclInfo, "5873af64cf59", "10158", "[1,0]", "NET/IB : No device found."},
		{"[1,12]<stderr>:h:1:2 [3] NCCL WARN x", ncclWarn, "h", "1", "[1,12]", "x"},
		{"(RayWorkerWrapper pid=4711, ip=10.0.0.2) gpu-1:4711:4800 [0] NCCL INFO m", ncclInfo, "gpu-1", "4711", "pid=4711", "m"},
		{"\x1b[36m(RayWorker pid=9)\x1b[0m g:9:9 [0] NCCL INFO m [repeated 3x across cluster]", ncclInfo, "g", "9", "pid=9", "m"},
		{"node07: node07:1234:1300 [3] NCCL INFO m", ncclInfo, "node07", "1234", "", "m"},
		{"2025-06-01T10:00:00.123456789Z sglang-0:77:77 [0] NCCL INFO m", ncclInfo, "sglang-0", "77", "", "m"},
		{"Jun 01 10:00:01 node3 python3[77]: sglang-0:77:90 [0] NCCL INFO m", ncclInfo, "sglang-0", "77", "", "m"},
		{"> flow-matic:820398:820779 [0] NCCL INFO m", ncclInfo, "flow-matic", "820398", "", "m"},
		{"[2026-03-13 22:26:02] host-01.example.com:XXXXXX [5] ibvwrap.c:262 NCCL WARN Call to ibv_modify_qp failed", ncclWarn, "host-01.example.com", "XXXXXX", "", "Call to ibv_modify_qp failed"},
		{"[1,23]<stdout>:ip-172-32-45-165:72593:73427 [7] create_nccl_ofi_component:459 NCCL WARN NET/OFI Couldn't open AV.", ncclWarn, "ip-172-32-45-165", "72593", "[1,23]", "NET/OFI Couldn't open AV."},
		{"h:1:2 [0] 12.345678 ncclProxyProgress:300 NCCL TRACE proxy", ncclTrace, "h", "1", "", "proxy"},
		{"h:1:2 [0] NCCL INFO", ncclInfo, "h", "1", "", ""},
		{"h:1:2 [0] NCCL INFO m \r", ncclInfo, "h", "1", "", "m"},
		{"[1,0]<stdout>:NCCL version 2.5.6+cuda10.2", ncclBareVersion, "", "", "[1,0]", "2.5.6+cuda10.2"},
		{"NCCL version 2.19.3+cuda12.3", ncclBareVersion, "", "", "", "2.19.3+cuda12.3"},
		{"> NCCL version 2.20.5+cuda12.4", ncclBareVersion, "", "", "", "2.20.5+cuda12.4"},
		{"NCCL version 2.19 is old", ncclNotNCCL, "", "", "", ""},
		{"h:1:2 [0] NCCL INFOX m", ncclNotNCCL, "", "", "", ""},
		{"h:1:2 [0] a b c NCCL INFO m", ncclNotNCCL, "", "", "", ""},
		{"h:1:2 [0]  NCCL INFO two spaces", ncclInfo, "h", "1", "", "two spaces"},
		{":1:2 [0] NCCL INFO no host", ncclNotNCCL, "", "", "", ""},
		{"h: [0] NCCL INFO no pid", ncclNotNCCL, "", "", "", ""},
		{"h:123456789012345678901234567890123 [0] NCCL INFO long pid", ncclNotNCCL, "", "", "", ""},
	} {
		l := parseNCCLLine([]byte(tc.line))
		if l.kind != tc.kind || string(l.host) != tc.host || string(l.pid) != tc.pid || string(l.tag) != tc.tag || string(l.msg) != tc.msg {
			t.Errorf("%q:\n got kind %d host %q pid %q tag %q msg %q\nwant kind %d host %q pid %q tag %q msg %q",
				tc.line, l.kind, l.host, l.pid, l.tag, l.msg, tc.kind, tc.host, tc.pid, tc.tag, tc.msg)
		}
	}
}

func TestClassifyNCCLMessage(t *testing.T) {
	for _, tc := range []struct {
		msg       string
		kind      ncclEventKind
		name, val string
		gdr       bool
		net, list string
		level     int8
	}{
		{"Using network IB", ncclEvNet, "IB", "", false, "", "", ncclNetFromUsing},
		{"Using network AWS Libfabric", ncclEvNet, "AWS Libfabric", "", false, "", "", ncclNetFromUsing},
		{"Assigned NET plugin IBext_v8 to comm", ncclEvNet, "IBext_v8", "", false, "", "", ncclNetFromUsing},
		{"Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA", ncclEvConnection, "NET/IB", "", true, "IB", "", 0},
		{"Channel 00/1 : 0[0] -> 9[1] [send] via NET/IB/1(1)/GDRDMA(PCI)/Shared", ncclEvConnection, "NET/IB", "", true, "IB", "", 0},
		{"Ring 00 : 7 -> 8 [send] via NET/AWS Libfabric/0", ncclEvConnection, "NET/AWS Libfabric", "", false, "AWS Libfabric", "", 0},
		{"Ring 00 : 2[0] -> 3[0] via direct shared memory", ncclEvConnection, "SHM", "", false, "", "", 0},
		{"Channel 19 : 10[2] -> 11[3] via SHM/direct/direct", ncclEvConnection, "SHM", "", false, "", "", 0},
		{"Channel 00/0 : 6[2] -> 5[1] via P2P/IPC/read", ncclEvConnection, "P2P/IPC", "", false, "", "", 0},
		{"Channel 00 :    0   1   2   3", ncclEvNone, "", "", false, "", "", 0},
		{"Channel 00/0 : 0[0] -> 1[1] via ", ncclEvNone, "", "", false, "", "", 0},
		{"Channel 00/0 : 0[0] -> 1[1] via NET//0", ncclEvNone, "", "", false, "", "", 0},
		{"NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:1.2.3.4<0>", ncclEvNetDevices, "IB", "", false, "", " [0]mlx5_0:1/RoCE [RO]", 0},
		{"NET/Socket : Using [0]lo:127.0.0.1<0>", ncclEvSocketIfs, "Socket", "", false, "", " [0]lo:127.0.0.1<0>", 0},
		{"NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1' (no module)", ncclEvGDRDisabled, "mlx5_1", "no module", false, "IB", "", 0},
		{"NET/Socket : GPU Direct RDMA Disabled for HCA 0 'lo'", ncclEvGDRDisabled, "lo", "", false, "Socket", "", 0},
		{"NET/OFI No NIC info for dev 0", ncclEvNone, "", "", false, "", "", 0},
		{"NET/IB : No device found.", ncclEvNetNoDevice, "IB", "", false, "", "", 0},
		{"Using internal Network Socket", ncclEvNet, "Socket", "", false, "", "", ncclNetFromUsing},
		{"Using external Network AWS Libfabric", ncclEvNet, "AWS Libfabric", "", false, "", "", ncclNetFromUsing},
		{"Using non-device net plugin version 0", ncclEvNone, "", "", false, "", "", 0},
		{"Using network ", ncclEvNone, "", "", false, "", "", 0},
		{"NET/Plugin : No plugin found (libnccl-net.so).", ncclEvPluginNone, "Plugin", "", false, "", "", 0},
		{"NET/Plugin : No plugin found (libnccl-net.so), using internal implementation", ncclEvPluginNone, "Plugin", "", false, "", "", 0},
		{"NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No such file or directory No plugin found (libnccl-net.so), using internal implementation", ncclEvPluginNone, "Plugin", "", false, "", "", 0},
		{"NET/Plugin : Plugin load returned 2 : libnccl-net.so: cannot open shared object file.", ncclEvPluginNone, "Plugin", "", false, "", "", 0},
		{"NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.", ncclEvPluginNone, "Plugin", "", false, "", "", 0},
		{"NET/Plugin: Using internal network plugin.", ncclEvPluginNone, "Plugin", "", false, "", "", 0},
		{"NET/Plugin: Could not find: libnccl-net-ofi.so libnccl-net.so", ncclEvPluginNone, "Plugin", "", false, "", "", 0},
		{"NET/Plugin: Loaded net plugin IBext_v8 (v8)", ncclEvNone, "", "", false, "", "", 0},
		{"NET/Plugin: Failed to find ncclNetPlugin_v8 symbol.", ncclEvNone, "", "", false, "", "", 0},
		{"Initialized NET plugin IB", ncclEvNone, "", "", false, "", "", 0},
		{"NCCL version 2.19.3+cuda12.3", ncclEvVersion, "2.19.3+cuda12.3", "", false, "", "", 0},
		{"NCCL_IB_DISABLE set by environment to 1.", ncclEvEnv, "NCCL_IB_DISABLE", "1", false, "", "", 0},
		{"NCCL_SOCKET_IFNAME set by environment to lo", ncclEvEnv, "NCCL_SOCKET_IFNAME", "lo", false, "", "", 0},
		{"NCCL_SOCKET_IFNAME set to lo", ncclEvNone, "", "", false, "", "", 0},
		{"NCCL_ set by environment to x", ncclEvNone, "", "", false, "", "", 0},
	} {
		ev := classifyNCCLMessage([]byte(tc.msg))
		if ev.kind != tc.kind || string(ev.name) != tc.name || string(ev.value) != tc.val || ev.gdr != tc.gdr ||
			(tc.net != "" && string(ev.net) != tc.net) || string(ev.list) != tc.list || ev.level != tc.level {
			t.Errorf("%q: got %+v", tc.msg, ev)
		}
	}
}

// ncclFixtureLines returns every line of the fixtures plus synthetic ones.
func ncclFixtureLines(t testing.TB) [][]byte {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(fixtureNCCL, "*.log"))
	versions, _ := filepath.Glob(filepath.Join(fixtureNCCLVersions, "*.log"))
	files = append(files, versions...)
	var out [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, bytes.Split(b, []byte("\n"))...)
	}
	for _, s := range []string{
		"(RayWorkerWrapper pid=4711) g:4711:4800 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA [repeated 7x across cluster]",
		"h:5:5 [0] NCCL INFO NET/IB : Using [0]={[0] mlx5_0:1/RoCE, [1] mlx5_1:1/RoCE} [1]mlx5_2:1/IB/SHARP [RO]; OOB eth0:10.0.0.1<0>",
		"h:6:6 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:fe80::1%eth1<0>",
		"h:1:3 [0] NCCL INFO Channel 00/1 : 0[0] -> 9[1] [send] via NET/IB/1(1)/GDRDMA(PCI)/Shared",
		"h:1:2 [0] NCCL INFO Assigned NET plugin IB to comm",
		"h23:1:1 [0] NCCL INFO Using internal Network IB",
		"h:7:7 [0] NCCL INFO NET/Plugin: Using internal network plugin.",
	} {
		out = append(out, []byte(s))
	}
	return out
}

// TestNCCLParseNoAllocs: parsing a line, its message and its lists
// allocates nothing.
func TestNCCLParseNoAllocs(t *testing.T) {
	lines := ncclFixtureLines(t)
	n := 0
	allocs := testing.AllocsPerRun(5, func() {
		for _, l := range lines {
			parseNCCLScratch(l, &n)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per pass over %d lines", allocs, len(lines))
	}
}

func parseNCCLScratch(l []byte, n *int) {
	pl := parseNCCLLine(l)
	ev := classifyNCCLMessage(pl.msg)
	forEachNCCLListItem(ev.list, func(item []byte) {
		if _, _, _, ok := splitNCCLDevice(item); ok {
			*n++
		}
		if _, ok := splitNCCLInterface(item); ok {
			*n++
		}
	})
	splitNCCLVersion(ev.name)
}

// TestNCCLSteadyStateNoAllocs: lines of known processes cost no
// allocation once their series exist.
func TestNCCLSteadyStateNoAllocs(t *testing.T) {
	c := newTestNCCL(t, NCCLOptions{LogPaths: []string{"unused"}})
	f := &ncclFile{}
	lines := ncclFixtureLines(t)
	c.begin(f)
	for _, l := range lines {
		c.line(f, l)
	}
	allocs := testing.AllocsPerRun(5, func() {
		for _, l := range lines {
			c.line(f, l)
		}
	})
	c.end(f, 0)
	if allocs != 0 {
		t.Errorf("%v allocations per pass over %d known lines", allocs, len(lines))
	}
}

func isSubslice(b, of []byte) bool {
	if len(b) == 0 {
		return true
	}
	bb, oo := b[:cap(b)], of[:cap(of)]
	return len(oo) > 0 && len(bb) <= len(oo) && &oo[len(oo)-1] == &bb[len(bb)-1]
}

// FuzzParseNCCLLine: arbitrary lines never panic, every field is a piece
// of the line, a header has a host and a short pid, and the state the
// collector builds stays within its bounds.
func FuzzParseNCCLLine(f *testing.F) {
	for _, l := range ncclFixtureLines(f) {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if bytes.IndexByte(line, '\n') >= 0 {
			return // the follower splits lines
		}
		pl := parseNCCLLine(line)
		for _, b := range [][]byte{pl.host, pl.pid, pl.tag, pl.msg} {
			if !isSubslice(b, line) {
				t.Fatalf("%q: field %q is not part of the line", line, b)
			}
		}
		switch pl.kind {
		case ncclInfo, ncclWarn, ncclTrace:
			if len(pl.host) == 0 || len(pl.pid) == 0 || len(pl.pid) > maxNCCLPidLen {
				t.Fatalf("%q: host %q pid %q", line, pl.host, pl.pid)
			}
			for _, c := range pl.host {
				if !isHostChar(c) {
					t.Fatalf("%q: host %q", line, pl.host)
				}
			}
		case ncclBareVersion:
			if len(pl.msg) == 0 {
				t.Fatalf("%q: empty version", line)
			}
		}
		ev := classifyNCCLMessage(pl.msg)
		for _, b := range [][]byte{ev.name, ev.value, ev.net, ev.list} {
			if !isSubslice(b, line) && string(b) != "SHM" {
				t.Fatalf("%q: event field %q is not part of the line", line, b)
			}
		}
		n := 0
		parseNCCLScratch(line, &n)

		c := newTestNCCL(t, NCCLOptions{LogPaths: []string{"unused"}, MaxProcesses: 2})
		fl := &ncclFile{}
		c.begin(fl)
		for range 3 {
			c.line(fl, line)
			c.line(fl, append([]byte("x"), line...))
		}
		c.end(fl, 0)
		if len(c.procs) > 2 {
			t.Fatalf("%d processes", len(c.procs))
		}
		for _, p := range c.procs {
			if len(p.conns) > maxNCCLConnKinds || len(p.devices) > maxNCCLListItems || len(p.ifaces) > maxNCCLListItems ||
				len(p.env) > maxNCCLEnv || len(p.gdrOff) > maxNCCLGDRDisabled {
				t.Fatalf("%q: unbounded state", line)
			}
			for _, s := range []string{p.host, p.pid, p.net, p.version, p.cuda} {
				if len(s) > maxNCCLLabel {
					t.Fatalf("%q: label %q over %d bytes", line, s, maxNCCLLabel)
				}
			}
		}
		var b exposition.Batch
		c.files = 1
		if err := c.Update(t.Context(), &b); err != nil {
			t.Fatal(err)
		}
		for _, s := range samplesOf(b) {
			for _, v := range s.s.Values() {
				if len(v) > 3*maxNCCLLabel || strings.ContainsRune(v, '\n') && s.s.Family().Name() == "fabric_nccl_net_info" {
					t.Fatalf("%q: label %q", line, v)
				}
			}
		}
	})
}
