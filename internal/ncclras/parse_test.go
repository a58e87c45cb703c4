package ncclras

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func parseFixture(t testing.TB, name string) *Status {
	t.Helper()
	var st *Status
	var err error
	if strings.Contains(name, "-json") {
		st, err = ParseJSON(fixture(t, name))
	} else {
		st, err = ParseText(fixture(t, name))
	}
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return st
}

func TestParseJSONHealthy(t *testing.T) {
	st := parseFixture(t, "2.28.9-json-healthy.txt")
	if st.Version != "2.28.9" || st.Format != "json" || st.Nodes != 1 || st.Processes != 2 || len(st.Communicators) != 1 {
		t.Fatalf("status %+v", st)
	}
	c := st.Communicators[0]
	want := Communicator{Hash: "0xf8e68da1f581fed5", Size: 2, Nodes: 1, Status: StateRunning}
	ops := []OpCount{{"Broadcast", 1}, {"Reduce", 0}, {"AllGather", 0}, {"ReduceScatter", 0}, {"AllReduce", 527}}
	for i, pid := range []int{658, 659} {
		want.Ranks = append(want.Ranks, Rank{Rank: i, Host: "127.0.0.1", PID: pid, HasStatus: true, Collectives: ops})
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("communicator\n got %+v\nwant %+v", c, want)
	}
}

func TestParseJSONKilled(t *testing.T) {
	// The answer 2.28.9 wrote 25 s after kill -9 of rank 1: not valid JSON
	// (no comma after the missing rank's nvml_dev).
	raw := fixture(t, "2.28.9-json-killed.txt")
	if json.Valid(raw) {
		t.Fatal("the recorded answer became valid JSON; the repair test tests nothing")
	}
	st := parseFixture(t, "2.28.9-json-killed.txt")
	c := st.Communicators[0]
	if !c.Incomplete || !c.Error || c.Mismatch || c.MissingCount != 1 || len(c.Ranks) != 1 {
		t.Fatalf("judgements %+v", c)
	}
	if r := c.Ranks[0]; r.AsyncError != 6 || r.AbortFlag || r.PID != 658 {
		t.Fatalf("survivor %+v", r)
	}
	if m := c.Missing; len(m) != 1 || m[0] != (MissingRank{Rank: 1, Host: "127.0.0.1", PID: 659, CUDADev: 0, Unresponsive: true}) {
		t.Fatalf("missing %+v", m)
	}
	if st.Nodes != 1 || st.Processes != 2 {
		t.Fatalf("nodes %d processes %d", st.Nodes, st.Processes)
	}
}

func TestParseJSONStoppedAndDead(t *testing.T) {
	// SIGSTOP of rank 1: RAS considers it dead, the survivor has no error
	// yet (its socket is still open).
	c := parseFixture(t, "2.28.9-json-verbose-stopped.txt").Communicators[0]
	if !c.Incomplete || c.Error || len(c.Missing) != 1 || !c.Missing[0].Dead || !c.Missing[0].Unresponsive {
		t.Fatalf("stopped %+v", c)
	}
	c = parseFixture(t, "2.28.9-json-killed-dead.txt").Communicators[0]
	if !c.Incomplete || !c.Error || !c.Missing[0].Dead {
		t.Fatalf("killed after stop %+v", c)
	}
}

func TestParseJSONIdleAgrees(t *testing.T) {
	for _, f := range []string{"2.28.9-json-idle.txt", "2.28.9-json-busy.txt", "2.28.9-json-verbose-healthy.txt"} {
		c := parseFixture(t, f).Communicators[0]
		if c.Mismatch || c.Error || c.Incomplete || len(c.Ranks) != 2 {
			t.Fatalf("%s: %+v", f, c)
		}
	}
}

func TestParseJSONMismatch(t *testing.T) {
	s := strings.Replace(string(fixture(t, "2.28.9-json-healthy.txt")), `"AllReduce": 527`, `"AllReduce": 526`, 1)
	st, err := ParseJSON([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	if c := st.Communicators[0]; !c.Mismatch || c.Error || c.Incomplete {
		t.Fatalf("%+v", c)
	}
}

func TestParseTextVersions(t *testing.T) {
	for _, tc := range []struct {
		file                   string
		version                string
		nodes, procs, groups   int
		comms                  int
		incomplete, err, mism  bool
		missing                []MissingRank
		asyncRank, asyncPID    int
		dead, missingProcesses int
	}{
		{file: "2.28.9-text-healthy.txt", version: "2.28.9", nodes: 1, procs: 2, groups: 1},
		{file: "2.28.9-text-verbose-mismatch.txt", version: "2.28.9", nodes: 1, procs: 2, groups: 1, comms: 1, mism: true},
		{file: "2.28.9-text-killed.txt", version: "2.28.9", nodes: 1, procs: 2, groups: 1, comms: 1, incomplete: true, err: true,
			missing: []MissingRank{{Rank: 1, Host: "127.0.0.1", PID: 659, CUDADev: 0, Unresponsive: true}}, asyncRank: 0, asyncPID: 658, missingProcesses: 1},
		{file: "2.28.9-text-killed-dead.txt", version: "2.28.9", nodes: 1, procs: 2, groups: 1, comms: 1, incomplete: true, err: true,
			missing: []MissingRank{{Rank: 1, Host: "127.0.0.1", PID: 731, CUDADev: 0, Unresponsive: true, Dead: true}}, asyncRank: 0, asyncPID: 730, dead: 1},
		{file: "2.25.1-text-constructed-healthy.txt", version: "2.25.1", nodes: 2, procs: 16, groups: 2},
		{file: "2.25.1-text-constructed-killed.txt", version: "2.25.1", nodes: 2, procs: 16, groups: 1, comms: 1, incomplete: true, err: true, mism: true,
			missing: []MissingRank{{Rank: 11, PID: -1, CUDADev: -1}}, asyncRank: 3, asyncPID: 40117, missingProcesses: 1},
	} {
		st := parseFixture(t, tc.file)
		if st.Version != tc.version || st.Nodes != tc.nodes || st.Processes != tc.procs || len(st.Groups) != tc.groups ||
			len(st.Communicators) != tc.comms || len(st.DeadProcesses) != tc.dead || len(st.MissingProcesses) != tc.missingProcesses {
			t.Fatalf("%s: %+v", tc.file, st)
		}
		if tc.comms == 0 {
			continue
		}
		c := st.Communicators[0]
		if c.Incomplete != tc.incomplete || c.Error != tc.err || c.Mismatch != tc.mism || !reflect.DeepEqual(c.Missing, tc.missing) {
			t.Fatalf("%s: communicator %+v", tc.file, c)
		}
		if tc.err {
			if len(c.Ranks) != 1 || c.Ranks[0].Rank != tc.asyncRank || c.Ranks[0].PID != tc.asyncPID || c.Ranks[0].AsyncError != 6 {
				t.Fatalf("%s: ranks %+v", tc.file, c.Ranks)
			}
		}
		if g := st.Groups[0]; c.Size != g.RanksPerComm || c.Nodes != g.NodesPerComm || c.Size == 0 {
			t.Fatalf("%s: size %d nodes %d, group %+v", tc.file, c.Size, c.Nodes, g)
		}
	}
	// The same job in both formats names the same communicator.
	j, x := parseFixture(t, "2.28.9-json-killed.txt"), parseFixture(t, "2.28.9-text-killed.txt")
	if j.Communicators[0].Hash != x.Communicators[0].Hash {
		t.Fatalf("hash json %s text %s", j.Communicators[0].Hash, x.Communicators[0].Hash)
	}
}

func TestParseRejects(t *testing.T) {
	for _, s := range []string{"", "garbage", "{", `{"communicators":[]}`, `{"nccl_version":"2.28.9","communicators":[{"hash":"zz"}]}`, "[1,2]"} {
		if _, err := ParseJSON([]byte(s)); err == nil {
			t.Errorf("ParseJSON(%q) accepted", s)
		}
	}
	for _, s := range []string{"", "garbage\n", "Errors\n======\n"} {
		if _, err := ParseText([]byte(s)); err == nil {
			t.Errorf("ParseText(%q) accepted", s)
		}
	}
}

func TestRepairJSON(t *testing.T) {
	for in, want := range map[string]string{
		`{"a": 1 "b": 2}`:        `{"a": 1 ,"b": 2}`,
		`{"a": "x" "b": [1 2]}`:  `{"a": "x" ,"b": [1 ,2]}`,
		`{"a": {} "b": true}`:    `{"a": {} ,"b": true}`,
		`{"a": "q\"" "b": null}`: `{"a": "q\"" ,"b": null}`,
		`{"a": 1, "b": 2}`:       `{"a": 1, "b": 2}`,
	} {
		if got := string(repairJSON([]byte(in))); got != want {
			t.Errorf("repairJSON(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestNormHash(t *testing.T) {
	for in, want := range map[string]string{"0xf8e68da1f581fed5": "0xf8e68da1f581fed5", "00ab": "0xab", "0X00AB": "0xab", "0": "0x0"} {
		if got, ok := normHash(in); !ok || got != want {
			t.Errorf("normHash(%s) = %s %v", in, got, ok)
		}
	}
	for _, in := range []string{"", "0x", "xyz", "12345678901234567"} {
		if _, ok := normHash(in); ok {
			t.Errorf("normHash(%q) accepted", in)
		}
	}
}

func seeds(f *testing.F) {
	ents, _ := os.ReadDir("testdata")
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".txt") && e.Name() != "versions.txt" {
			b, _ := os.ReadFile(filepath.Join("testdata", e.Name()))
			f.Add(b)
		}
	}
}

// bounded checks what a collector relies on: normalized hashes, bounded
// operation names.
func bounded(t *testing.T, st *Status) {
	for _, c := range st.Communicators {
		if !strings.HasPrefix(c.Hash, "0x") || len(c.Hash) > 18 {
			t.Fatalf("hash %q", c.Hash)
		}
		for _, r := range c.Ranks {
			for _, o := range r.Collectives {
				if OpName(o.Op) != o.Op && o.Op != "other" {
					t.Fatalf("op %q", o.Op)
				}
			}
		}
	}
}

func FuzzParseJSON(f *testing.F) {
	seeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseJSON(b)
		if err != nil {
			return
		}
		bounded(t, st)
		// A valid document is decoded unchanged by the repair.
		if json.Valid(b) && string(repairJSON(b)) != string(b) {
			t.Fatalf("repair changed valid JSON %q", b)
		}
	})
}

func FuzzParseText(f *testing.F) {
	seeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseText(b)
		if err != nil {
			return
		}
		bounded(t, st)
		if st.Format != "text" || st.Version == "" {
			t.Fatalf("%+v", st)
		}
	})
}
