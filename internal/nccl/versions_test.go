package nccl

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/go-kit/log"

	"github.com/fabric-exporter/fabric_exporter/internal/testenv"
)

const fixtureNCCLVersions = fixtureNCCL + "/versions"

// ncclClassification is the network of every process of one log as
// "net evidence" ("IB decision", "Socket socket-fallback"), "" for none.
type ncclClassification map[string]string

func (c *testNCCL) classification() ncclClassification {
	out := ncclClassification{}
	c.View(func(procs []*Process, _ Stats) {
		for _, p := range procs {
			v := ""
			if p.Net != "" {
				v = p.Net + " " + p.NetEvidence.String()
			}
			out[p.Host+"/"+p.PID] = v
		}
	})
	return out
}

// ncclVersionTable is what each synthetic log of fixtures/nccl/versions
// must classify to. The logs are built from the format strings of the NCCL
// release in their name (their "# formats:" line cites file:line); the
// rules are in the version table of message.go and in
// docs/nccl-classification.md.
var ncclVersionTable = map[string]ncclClassification{
	// 2.4.2-2.4.7 log "NET/Socket : Using" first for every process (the
	// bootstrap network), then pick IB: the socket line is no decision.
	"nccl-2.4.7-ib.log": {
		"g24a/31001": "IB connection",
		"g24a/31002": "IB device-list",
		"g24b/31101": "IB connection",
		"g24b/31102": "", // the log ends before IB init: never Socket
	},
	"nccl-2.4.7-socket.log": {
		"g24c/32001": "Socket connection",
		"g24c/32002": "Socket socket-fallback", // NET/IB : No device found.
		"g24d/32101": "",
		"g24d/32102": "Socket socket-fallback", // NCCL_IB_DISABLE, no plugin
	},
	// 2.4.8-2.5: plugin, IB, then sockets; no "Using network" yet.
	"nccl-2.5.7-ib.log": {
		"g25a/33001": "IB connection",
		"g25a/33002": "IB device-list",
	},
	"nccl-2.5.7-socket.log": {
		"g25b/34001": "Socket connection",
		"g25b/34002": "Socket socket-fallback",
		"g25c/34003": "",
	},
	// 2.6-2.7: "Using network X".
	"nccl-2.7.8-ib.log": {
		"g27a/35001": "IB decision",
		"g27a/35002": "IB device-list",
	},
	"nccl-2.7.8-socket.log": {
		"g27b/36001": "Socket decision",
		"g27b/36002": "Socket socket-fallback",
	},
	// 2.8-2.18; from 2.13 every net up to the one NCCL_NET names is
	// initialised, so NCCL_NET=Socket logs the IB devices first.
	"nccl-2.18.5-ib.log": {
		"g218a/37001": "IB decision",
		"g218a/37002": "IB device-list",
	},
	"nccl-2.18.5-socket.log": {
		"g218b/38001": "Socket decision",
		"g218b/38002": "", // IB listed, then sockets: IB was not taken
		"g218c/38101": "Socket decision",
	},
	// 2.19-2.27.
	"nccl-2.23.4-ib.log": {
		"g223a/39001": "IB decision",
		"g223a/39002": "IB device-list",
	},
	"nccl-2.23.4-socket.log": {
		"g223b/40001": "Socket decision",
		"g223b/40002": "Socket socket-fallback",
	},
	"nccl-2.27.7-ib.log": {
		"g227a/41001": "IB decision",
		"g227a/41002": "IB device-list", // "Initialized NET plugin IB" is no decision
	},
	"nccl-2.27.7-socket.log": {
		"g227b/42001": "Socket decision",
		"g227c/42101": "Socket decision", // "Assigned NET plugin Socket to comm"
		"g227c/42102": "",
	},
	// 2.28+: "NET/IB : Using [RO]; OOB …" even without a device.
	"nccl-2.28.9-ib.log": {
		"g228a/43001": "IB decision",
		"g228a/43002": "IB device-list",
	},
	"nccl-2.28.9-socket.log": {
		"g228b/44001": "Socket decision",
		"g228b/44002": "Socket socket-fallback",
	},
}

// ncclRealSampleTable is the classification of every real sample log
// (fixtures/nccl, copies of shared/reference/real-samples/nccl-logs).
var ncclRealSampleTable = map[string]ncclClassification{
	"aws-ofi-nccl-24-mpi-prefix-net-aws-libfabric-warn.log": {
		"ip-172-32-34-121/70560": "AWS Libfabric connection",
		"ip-172-32-36-209/8715":  "", "ip-172-32-36-209/8716": "", "ip-172-32-36-209/8717": "",
		"ip-172-32-36-209/8718": "", "ip-172-32-36-209/8719": "", "ip-172-32-36-209/8720": "",
		"ip-172-32-36-209/8800":  "",
		"ip-172-32-38-1/21471":   "AWS Libfabric connection",
		"ip-172-32-45-165/72593": "AWS Libfabric connection",
	},
	"deepspeed-4715-ibext-p2p-ipc-read.log": {
		"ravg1038/32091": "", "ravg1038/32092": "IBext connection", "ravg1038/32093": "", "ravg1038/32094": "",
		"ravg1040/41357": "IBext connection", "ravg1040/41358": "IBext connection", "ravg1040/41359": "", "ravg1040/41360": "",
	},
	"nccl-1053-socket-lo-gdr-disabled-topology.log": {"axa/3048391": "Socket decision"},
	"nccl-1189-h20-gdrdma-send-receive-p2p-cumem.log": {
		"H20-GPU-05/1789225": "", "H20-GPU-06/4015539": "IB connection", "H20-GPU-06/4015540": "IB connection",
	},
	"nccl-1538-roce-8nic-ibext_v8-2.22.3.log": {
		"job-3bb823c0-6d27-4312-8094-1c5910bf9b51-worker-0/5664": "IBext_v8 decision",
		"job-3bb823c0-6d27-4312-8094-1c5910bf9b51-worker-0/5665": "IBext_v8 decision",
		"job-3bb823c0-6d27-4312-8094-1c5910bf9b51-worker-0/5666": "IBext_v8 decision",
		"job-3bb823c0-6d27-4312-8094-1c5910bf9b51-worker-0/5667": "IBext_v8 decision",
		"job-3bb823c0-6d27-4312-8094-1c5910bf9b51-worker-0/5669": "IBext_v8 decision",
		"job-3bb823c0-6d27-4312-8094-1c5910bf9b51-worker-0/5670": "",
	},
	"nccl-2013-2.27-timestamped-modify-qp-timeout-anonymized.log": {"host-01.example.com/XXXXXX": ""},
	// 2.5.6: "NET/IB : No device found." then the socket list.
	"nccl-300-mpi-stdout-prefix-2.5.6-lo-socket.log": {
		"5873af64cf59/10158": "Socket socket-fallback", "5873af64cf59/10159": "",
		"5873af64cf59/10160": "Socket socket-fallback", "5873af64cf59/10161": "Socket socket-fallback",
	},
	"nccl-367-old-ring-net-socket-nsocks.log": {
		"c6ad99331184/117277": "Socket connection", "c6ad99331184/117284": "", "c6ad99331184/117291": "",
		"c6ad99331184/117298": "", "c6ad99331184/117305": "", "c6ad99331184/117326": "",
	},
	"nccl-899-gdr-disabled-no-module-net-ib.log": {
		"21346d5cefce/5325": "IB connection", "6a5a91752e39/74352": "IB connection",
	},
	"nccl-tests-166-shm-direct-two-procs.log":     {"ubuntu/39964": "", "ubuntu/9621": ""},
	"nccl-tests-185-roce-2.19.3-dgxh100-init.log": {"dgxh100-3/2152176": "IB decision", "dgxh100-4/460770": "IB decision"},
	"sglang-3398-h20-socket-fallback-mnnvl-cumem-env.log": {
		"llm-bm-infer-service-prod-17389809006090t9a-1100014361/88008": "Socket decision",
	},
	"vllm-6370-quoted-socket-multi-interface-2.20.5.log": {"flow-matic/820398": "Socket decision"},
}

// ncclH200Table: NCCL 2.28.9 captured on the lent H200 (fixtures/nccl-h200;
// no RDMA device, then forced onto sockets with NCCL_IB_DISABLE=1).
var ncclH200Table = map[string]ncclClassification{
	"vm.462.log": {"vm/462": "Socket decision"},
	"vm.518.log": {"vm/518": "Socket decision"},
}

func diffClassification(t *testing.T, name string, got, want ncclClassification) {
	t.Helper()
	for _, d := range testenv.DiffMaps(got, want) {
		t.Errorf("%s: %s: got %q (present %v), want %q (present %v)", name, d.Key, d.Got, d.InGot, d.Want, d.InWant)
	}
}

func classifyFile(t *testing.T, path string) ncclClassification {
	t.Helper()
	c := newTestNCCL(t, testOpts{LogPaths: []string{path}})
	c.poll()
	if c.files() != 1 {
		t.Fatalf("%s: %v files", path, c.files())
	}
	return c.classification()
}

// TestNCCLVersionFamilies classifies the synthetic log of every version
// family, an IB run and a Socket run each.
func TestNCCLVersionFamilies(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(fixtureNCCLVersions, "*.log"))
	if len(files) != len(ncclVersionTable) {
		t.Errorf("%d logs in %s, the table has %d", len(files), fixtureNCCLVersions, len(ncclVersionTable))
	}
	for _, f := range files {
		name := filepath.Base(f)
		want, ok := ncclVersionTable[name]
		if !ok {
			t.Errorf("%s: not in the table", name)
			continue
		}
		diffClassification(t, name, classifyFile(t, f), want)
	}
}

// TestNCCLVersionLogsSayWhatTheyExpect: the "# expect:" line of every
// synthetic log agrees with the table, so a reader of the log sees what the
// test asserts.
func TestNCCLVersionLogsSayWhatTheyExpect(t *testing.T) {
	paren := regexp.MustCompile(`\([^)]*\)`)
	for name, want := range ncclVersionTable {
		b, err := os.ReadFile(filepath.Join(fixtureNCCLVersions, name))
		if err != nil {
			t.Fatal(err)
		}
		var expect string
		for _, l := range strings.Split(string(b), "\n") {
			if s, ok := strings.CutPrefix(l, "# expect: "); ok {
				expect = s
			}
		}
		if expect == "" {
			t.Errorf("%s: no # expect: line", name)
			continue
		}
		byPid := map[string]string{}
		for k, v := range want {
			byPid[k[strings.IndexByte(k, '/')+1:]] = v
		}
		n := 0
		for _, e := range strings.Split(paren.ReplaceAllString(expect, ""), ";") {
			f := strings.Fields(e)
			if len(f) < 2 {
				t.Errorf("%s: expect entry %q", name, e)
				continue
			}
			got := strings.Join(f[1:], " ")
			if got == "unknown" {
				got = ""
			}
			if w, ok := byPid[f[0]]; !ok || w != got {
				t.Errorf("%s: # expect: says %s %q, the table %q", name, f[0], got, w)
			}
			n++
		}
		if n != len(want) {
			t.Errorf("%s: # expect: names %d processes, the table %d", name, n, len(want))
		}
	}
}

// TestNCCLRealSampleClassification classifies every real sample log, from
// fixtures/nccl and, where the checkout has it next to it, from
// shared/reference/real-samples/nccl-logs, and the H200 captures.
func TestNCCLRealSampleClassification(t *testing.T) {
	tables := map[string]map[string]ncclClassification{fixtureNCCL: ncclRealSampleTable, fixtureNCCLH200: ncclH200Table}
	for _, d := range []string{"../../../shared/reference/real-samples/nccl-logs", "../../../../shared/reference/real-samples/nccl-logs"} {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			tables[d] = ncclRealSampleTable
			break
		}
	}
	for dir, table := range tables {
		files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		if len(files) != len(table) {
			t.Errorf("%d logs in %s, the table has %d", len(files), dir, len(table))
		}
		for _, f := range files {
			name := filepath.Base(f)
			want, ok := table[name]
			if !ok {
				t.Errorf("%s: not in the table", f)
				continue
			}
			diffClassification(t, f, classifyFile(t, f), want)
		}
	}
}

// TestNCCLNoTransientSocketClaim feeds every log line by line and checks
// after each line that no process is said to use Socket unless the table
// gives it Socket in the end: a Socket claim is never taken back.
func TestNCCLNoTransientSocketClaim(t *testing.T) {
	check := func(dir string, table map[string]ncclClassification) {
		for name, want := range table {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			c := newTestNCCL(t, testOpts{LogPaths: []string{"unused"}})
			f := &File{path: name}
			for i, l := range bytes.Split(b, []byte("\n")) {
				c.Begin(f)
				c.Line(f, l)
				c.End(f, 0)
				for k, v := range c.classification() {
					if strings.HasPrefix(v, "Socket ") && !strings.HasPrefix(want[k], "Socket ") {
						t.Errorf("%s line %d: %s classified %q, in the end %q", name, i+1, k, v, want[k])
					}
				}
			}
		}
	}
	check(fixtureNCCLVersions, ncclVersionTable)
	check(fixtureNCCL, ncclRealSampleTable)
	check(fixtureNCCLH200, ncclH200Table)
}

// TestNCCLClassificationEvidenceLog: every classification is logged at
// debug level with the file and the byte offset of the line that decided
// it, also for a line that arrived in two reads.
func TestNCCLClassificationEvidenceLog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.log")
	src, err := os.ReadFile(filepath.Join(fixtureNCCLVersions, "nccl-2.18.5-socket.log"))
	if err != nil {
		t.Fatal(err)
	}
	// Cut the file in the middle of the "Using network Socket" line of
	// 38001: the first poll reads a partial line.
	cut := bytes.Index(src, []byte("NCCL INFO Using network Socket")) + 12
	testenv.WriteFile(t, path, string(src[:cut]))
	var buf bytes.Buffer
	c := newTestNCCL(t, testOpts{LogPaths: []string{path}, Hostname: "h", Logger: log.NewLogfmtLogger(log.NewSyncWriter(&buf))})
	c.poll()
	testenv.AppendFile(t, path, string(src[cut:]))
	c.poll()

	type entry struct {
		pid, net, evidence, line string
		offset                   int
	}
	var got []entry
	kv := regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S*)`)
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		m := map[string]string{}
		for _, p := range kv.FindAllStringSubmatch(l, -1) {
			v := p[2]
			if u, err := strconv.Unquote(v); err == nil {
				v = u
			}
			m[p[1]] = v
		}
		if m["level"] != "debug" || !strings.HasPrefix(m["msg"], "NCCL network") {
			continue
		}
		off, err := strconv.Atoi(m["offset"])
		if err != nil || m["file"] != path {
			t.Errorf("entry without file and offset: %s", l)
			continue
		}
		got = append(got, entry{m["pid"], m["net"], m["evidence"], m["line"], off})
	}
	want := []entry{
		{pid: "38001", net: "IB", evidence: "device-list"},
		{pid: "38001", net: "", evidence: "none"}, // the socket list follows
		{pid: "38001", net: "Socket", evidence: "decision"},
		{pid: "38002", net: "IB", evidence: "device-list"},
		{pid: "38002", net: "", evidence: "none"},
		{pid: "38101", net: "Socket", evidence: "socket-fallback"},
		{pid: "38101", net: "Socket", evidence: "decision"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d evidence lines, want %d:\n%s", len(got), len(want), buf.String())
	}
	for i, g := range got {
		w := want[i]
		if g.pid != w.pid || g.net != w.net || g.evidence != w.evidence {
			t.Errorf("entry %d: got %+v, want %+v", i, g, w)
		}
		// The offset is where the logged line starts in the file.
		if g.offset < 0 || g.offset >= len(src) || !strings.HasPrefix(string(src[g.offset:]), g.line+"\n") {
			t.Errorf("entry %d: offset %d does not start the line %q", i, g.offset, g.line)
		}
	}
}

// TestNCCLEvidenceLogBounded: a log that flips between networks logs a
// bounded number of evidence lines per process.
func TestNCCLEvidenceLogBounded(t *testing.T) {
	var buf bytes.Buffer
	c := newTestNCCL(t, testOpts{LogPaths: []string{"unused"}, Logger: log.NewLogfmtLogger(&buf)})
	f := &File{path: "x.log"}
	c.Begin(f)
	for i := range 1000 {
		c.Line(f, []byte("h:1:1 [0] NCCL INFO Using network "+[]string{"IB", "Socket"}[i%2]))
	}
	c.End(f, 0)
	if n := strings.Count(buf.String(), "\n"); n != maxNetLogs+1 {
		t.Errorf("%d evidence lines, want %d", n, maxNetLogs+1)
	}
	if !strings.Contains(buf.String(), "not logged") {
		t.Error("no note that further changes are not logged")
	}
	if got := c.classification()["h/1"]; got != "Socket decision" {
		t.Errorf("net %q after the flips, want the latest decision", got)
	}
}
