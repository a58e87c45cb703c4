package collector

import (
	"context"
	"errors"
	"net"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/fakeras"
)

const rasFixtures = "../internal/ncclras/testdata"

// newFakeRAS serves the recorded answers of internal/ncclras/testdata.
func newFakeRAS(t *testing.T, json bool, jsonFile, textFile string) *fakeras.Server {
	return fakeras.Start(t, rasFixtures, json, jsonFile, textFile)
}

func newTestRAS(t *testing.T, o NCCLRASOptions, local ...string) *ncclRASCollector {
	t.Helper()
	env, _ := testEnv()
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second
	}
	c, err := newNCCLRASState(env, &Options{NCCLRAS: o})
	if err != nil {
		t.Fatal(err)
	}
	c.local = func() map[string]bool {
		m := map[string]bool{}
		for _, l := range local {
			m[l] = true
		}
		return m
	}
	return c
}

func (c *ncclRASCollector) poll() { c.pollOnce(context.Background()) }

func TestRASJSONHealthyAndKilled(t *testing.T) {
	f := newFakeRAS(t, true, "2.28.9-json-healthy.txt", "")
	c := newTestRAS(t, NCCLRASOptions{Addresses: []string{f.Addr()}}, "127.0.0.1")
	c.poll()
	a := f.Addr()
	rank := func(r, pid string) string {
		return `{comm="0xf8e68da1f581fed5",host="127.0.0.1",pid="` + pid + `",rank="` + r + `"}`
	}
	state := func(r, pid, st string) string {
		return `{comm="0xf8e68da1f581fed5",host="127.0.0.1",pid="` + pid + `",rank="` + r + `",state="` + st + `"}`
	}
	coll := ""
	for _, r := range [][2]string{{"0", "658"}, {"1", "659"}} {
		for _, op := range [][2]string{{"AllGather", "0"}, {"AllReduce", "527"}, {"Broadcast", "1"}, {"Reduce", "0"}, {"ReduceScatter", "0"}} {
			coll += `fabric_nccl_ras_rank_collectives_total{comm="0xf8e68da1f581fed5",host="127.0.0.1",op="` + op[0] + `",pid="` + r[1] + `",rank="` + r[0] + `"} ` + op[1] + "\n"
		}
	}
	want := `# HELP fabric_nccl_ras_up x
# TYPE fabric_nccl_ras_up gauge
fabric_nccl_ras_up{address="` + a + `",netns=""} 1
# TYPE fabric_nccl_ras_info gauge
fabric_nccl_ras_info{address="` + a + `",format="json",netns="",version="2.28.9"} 1
# TYPE fabric_nccl_ras_communicators gauge
fabric_nccl_ras_communicators{address="` + a + `",netns=""} 1
# TYPE fabric_nccl_ras_communicator_ranks gauge
fabric_nccl_ras_communicator_ranks{comm="0xf8e68da1f581fed5"} 2
# TYPE fabric_nccl_ras_communicator_nodes gauge
fabric_nccl_ras_communicator_nodes{comm="0xf8e68da1f581fed5"} 1
# TYPE fabric_nccl_ras_communicator_missing_ranks gauge
fabric_nccl_ras_communicator_missing_ranks{comm="0xf8e68da1f581fed5"} 0
# TYPE fabric_nccl_ras_communicator_mismatch gauge
fabric_nccl_ras_communicator_mismatch{comm="0xf8e68da1f581fed5"} 0
fabric_nccl_ras_communicator_nocomm_ranks{comm="0xf8e68da1f581fed5"} 0
fabric_nccl_ras_targets{reach="own"} 1
fabric_nccl_ras_rank_state_info` + state("0", "658", "running") + ` 1
fabric_nccl_ras_rank_state_info` + state("1", "659", "running") + ` 1
# TYPE fabric_nccl_ras_rank_info gauge
fabric_nccl_ras_rank_info{comm="0xf8e68da1f581fed5",cuda_dev="0",host="127.0.0.1",pid="658",rank="0"} 1
fabric_nccl_ras_rank_info{comm="0xf8e68da1f581fed5",cuda_dev="0",host="127.0.0.1",pid="659",rank="1"} 1
# TYPE fabric_nccl_ras_rank_async_error gauge
fabric_nccl_ras_rank_async_error` + rank("0", "658") + ` 0
fabric_nccl_ras_rank_async_error` + rank("1", "659") + ` 0
# TYPE fabric_nccl_ras_rank_aborted gauge
fabric_nccl_ras_rank_aborted` + rank("0", "658") + ` 0
fabric_nccl_ras_rank_aborted` + rank("1", "659") + ` 0
# TYPE fabric_nccl_ras_rank_init_state gauge
fabric_nccl_ras_rank_init_state` + rank("0", "658") + ` 0
fabric_nccl_ras_rank_init_state` + rank("1", "659") + ` 0
# TYPE fabric_nccl_ras_rank_collectives_total counter
` + coll
	if got, want := rasSamples(t, c), samplesOf(want); got != want {
		t.Fatalf("healthy\n got:\n%s\nwant:\n%s", got, want)
	}

	// 25 s after kill -9 of rank 1 (pid 659): rank 1 missing, rank 0's
	// remote process error; rank 1 has no rank series any more.
	f.Set("2.28.9-json-killed.txt", "")
	c.poll()
	got := rasSamples(t, c)
	for _, s := range []string{
		`fabric_nccl_ras_communicator_missing_ranks{comm="0xf8e68da1f581fed5"} 1`,
		`fabric_nccl_ras_rank_missing` + rank("1", "659") + ` 1`,
		`fabric_nccl_ras_rank_async_error` + rank("0", "658") + ` 6`,
		`fabric_nccl_ras_rank_collectives_total{comm="0xf8e68da1f581fed5",host="127.0.0.1",op="AllReduce",pid="658",rank="0"} 1131`,
	} {
		if !strings.Contains(got, s+"\n") {
			t.Errorf("missing %s in\n%s", s, got)
		}
	}
	if strings.Contains(got, `fabric_nccl_ras_rank_info{comm="0xf8e68da1f581fed5",cuda_dev="0",host="127.0.0.1",pid="659"`) {
		t.Errorf("the killed rank still has rank series:\n%s", got)
	}
}

// samplesOf returns the sample lines of an exposition text, sorted, in
// rasSamples' form.
func samplesOf(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n") + "\n"
}

// rasSamples runs Update and returns its nccl_ras samples, one a line.
func rasSamples(t *testing.T, c Collector) string {
	t.Helper()
	got, err := inspectorScrape(t, c)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	var lines []string
	for k, v := range got {
		if strings.HasPrefix(k, "fabric_nccl_ras_") && !strings.HasPrefix(k, "fabric_nccl_ras_query_duration_seconds") && !strings.HasPrefix(k, "fabric_nccl_ras_answer_age_seconds") {
			lines = append(lines, k+" "+strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}

func TestRASTextBefore2287(t *testing.T) {
	f := newFakeRAS(t, false, "", "2.25.1-text-constructed-killed.txt")
	c := newTestRAS(t, NCCLRASOptions{Addresses: []string{f.Addr()}}, "10.0.1.1")
	c.poll()
	got := rasSamples(t, c)
	for _, s := range []string{
		`fabric_nccl_ras_info{address="` + f.Addr() + `",format="text",netns="",version="2.25.1"} 1`,
		`fabric_nccl_ras_communicator_ranks{comm="0x4c8f2a19b05d77e1"} 16`,
		`fabric_nccl_ras_communicator_nodes{comm="0x4c8f2a19b05d77e1"} 2`,
		`fabric_nccl_ras_communicator_missing_ranks{comm="0x4c8f2a19b05d77e1"} 1`,
		`fabric_nccl_ras_communicator_mismatch{comm="0x4c8f2a19b05d77e1"} 1`,
		`fabric_nccl_ras_rank_missing{comm="0x4c8f2a19b05d77e1",host="",pid="",rank="11"} 1`,
		`fabric_nccl_ras_rank_async_error{comm="0x4c8f2a19b05d77e1",host="10.0.1.1",pid="40117",rank="3"} 6`,
		`fabric_nccl_ras_rank_info{comm="0x4c8f2a19b05d77e1",cuda_dev="3",host="10.0.1.1",pid="40117",rank="3"} 1`,
	} {
		if !strings.Contains(got, s+"\n") {
			t.Errorf("missing %s in\n%s", s, got)
		}
	}
	// Text answers carry no per-rank counts or status: absent, not 0.
	for _, s := range []string{"fabric_nccl_ras_rank_collectives_total", "fabric_nccl_ras_rank_aborted", "fabric_nccl_ras_rank_init_state"} {
		if strings.Contains(got, s) {
			t.Errorf("%s from a text answer:\n%s", s, got)
		}
	}
}

func TestRASStates(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	// Nothing listening: no_hardware, no series.
	c := newTestRAS(t, NCCLRASOptions{Addresses: []string{closed}})
	c.poll()
	got, err := inspectorScrape(t, c)
	var se *StateError
	if !errors.As(err, &se) || se.State != StateNoHardware || len(got) != 0 {
		t.Fatalf("refused: err %v, samples %v", err, got)
	}
	// A listener that answers garbage: failed, up 0; the refused address
	// adds nothing.
	g, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	go func() {
		for {
			conn, err := g.Accept()
			if err != nil {
				return
			}
			conn.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			conn.Close()
		}
	}()
	c = newTestRAS(t, NCCLRASOptions{Addresses: []string{closed + "," + g.Addr().String()}})
	c.poll()
	got, err = inspectorScrape(t, c)
	if st, _ := classify(err); st != StateFailed {
		t.Fatalf("garbage: err %v", err)
	}
	if got[`fabric_nccl_ras_up{address="`+g.Addr().String()+`",netns=""}`] != 0 || len(scrapeKeys(got, "fabric_nccl_ras_up")) != 1 {
		t.Fatalf("garbage: %v", got)
	}
}

func TestRASBounds(t *testing.T) {
	f := newFakeRAS(t, true, "2.28.9-json-killed.txt", "")
	g := newFakeRAS(t, true, "2.28.9-json-verbose-stopped.txt", "")
	// Two answers, two communicators: max-communicators 1 keeps one,
	// max-ranks 1 keeps one rank of this host.
	c := newTestRAS(t, NCCLRASOptions{Addresses: []string{f.Addr(), g.Addr()}, MaxCommunicators: 1, MaxRanks: 1}, "127.0.0.1")
	c.poll()
	got, err := inspectorScrape(t, c)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(scrapeKeys(got, "fabric_nccl_ras_communicator_ranks")); n != 1 {
		t.Fatalf("%d communicators", n)
	}
	if n := len(scrapeKeys(got, "fabric_nccl_ras_rank_info")); n != 1 {
		t.Fatalf("%d ranks", n)
	}
	// The same job answered at two addresses is reported once.
	h := newFakeRAS(t, true, "2.28.9-json-healthy.txt", "")
	c = newTestRAS(t, NCCLRASOptions{Addresses: []string{h.Addr(), h.Addr() + "," + f.Addr()}}, "127.0.0.1")
	if len(c.opts.Addresses) != 2 {
		t.Fatalf("addresses %v", c.opts.Addresses)
	}
	c.poll()
	got, _ = inspectorScrape(t, c)
	if n := len(scrapeKeys(got, "fabric_nccl_ras_rank_info")); n != 2 {
		t.Fatalf("%d rank_info series for one job answered twice: %v", n, got)
	}
}

// A scrape copies the last answer: it never waits for a query, even one
// that hangs until its deadline.
func TestRASScrapeDoesNotWait(t *testing.T) {
	f := newFakeRAS(t, true, "2.28.9-json-healthy.txt", "")
	env, _ := testEnv()
	col, err := newNCCLRASCollector(env, &Options{NCCLRAS: NCCLRASOptions{Addresses: []string{f.Addr()}, Interval: time.Second, Timeout: 1500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	c := col.(*ncclRASCollector)
	defer c.Close()
	if got := rasSamples(t, c); !strings.Contains(got, "fabric_nccl_ras_up{") {
		t.Fatalf("first scrape:\n%s", got)
	}
	f.Hang.Store(true)
	time.Sleep(1200 * time.Millisecond) // the next query is hanging now
	start := time.Now()
	got := rasSamples(t, c)
	if d := time.Since(start); d > 200*time.Millisecond {
		t.Fatalf("scrape took %s", d)
	}
	if !strings.Contains(got, `fabric_nccl_ras_rank_collectives_total`) {
		t.Fatalf("scrape during a query lost the last answer:\n%s", got)
	}
}

func TestRASBadFlags(t *testing.T) {
	env, _ := testEnv()
	for _, o := range []NCCLRASOptions{{Addresses: []string{"no-port"}}, {Interval: time.Millisecond}, {MaxRanks: -1}} {
		if _, err := newNCCLRASState(env, &Options{NCCLRAS: o}); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

func scrapeKeys(m map[string]float64, family string) []string {
	var out []string
	for k := range m {
		if strings.HasPrefix(k, family+"{") {
			out = append(out, k)
		}
	}
	return out
}

// The answers' age: since the last finished poll began, on the
// collector's clock; absent before any service answered.
func TestRASAnswerAge(t *testing.T) {
	f := newFakeRAS(t, true, "2.28.9-json-healthy.txt", "")
	c := newTestRAS(t, NCCLRASOptions{Addresses: []string{f.Addr()}}, "127.0.0.1")
	now := time.Unix(1_800_000_000, 0)
	c.now = func() time.Time { return now }
	c.poll()
	now = now.Add(7 * time.Second)
	got, err := inspectorScrape(t, c)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := got["fabric_nccl_ras_answer_age_seconds"]
	if !ok {
		v, ok = got["fabric_nccl_ras_answer_age_seconds{}"]
	}
	if !ok || v != 7 {
		t.Logf("%v", scrapeKeys(got, "fabric_nccl_ras_a"))
		t.Errorf("age %v (present %v), want 7", v, ok)
	}
}
