package collector

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/proc"
)

const (
	cid1 = "5734f5e6da28ef2a7d30683d72d881d34cc20c195221ed1f200ac9d5a2ffd388"
	cid2 = "b7813833eb092b66317b20e88d6d7b56cac5643cf1ac9aa8aa70812711bde274"
)

// The container is re-read every --collector.process.numa-maps-interval; a
// file that turns to garbage or vanishes removes the series (no label rather
// than a wrong one), an unreadable one is a counted read error.
func TestProcessContainerReread(t *testing.T) {
	procDir := copyTree(t, fixtureProc)
	c, errs, clk := newTestProcess(t, processOptions(t, procDir))
	series := func(out string) []string { return grepLines(out, "fabric_process_container_info{", `pid="4311"`) }
	out, _ := processScrape(t, c)
	if got := series(out); len(got) != 1 || !strings.Contains(got[0], `runtime="docker"`) {
		t.Fatalf("before: %q", got)
	}
	cg := filepath.Join(procDir, "4311", "cgroup")
	os.WriteFile(cg, []byte("0::/machine.slice/libpod-"+cid2+".scope\n"), 0o644)
	clk.advance(30 * time.Second)
	out, _ = processScrape(t, c)
	if got := series(out); len(got) != 1 || !strings.Contains(got[0], `runtime="docker"`) {
		t.Fatalf("within the interval: %q", got)
	}
	clk.advance(30 * time.Second)
	out, _ = processScrape(t, c)
	want := `fabric_process_container_info{comm="sglang::schedul",container_id="` + cid2 + `",container_name="",pid="4311",pod_uid="",runtime="podman"} 1`
	if got := series(out); len(got) != 1 || got[0] != want {
		t.Fatalf("after the interval: %q", got)
	}
	os.WriteFile(cg, []byte("0::/docker/"+cid1+"\n4:memory:/docker/"+cid2+"\n"), 0o644)
	clk.advance(time.Minute)
	out, _ = processScrape(t, c)
	if got := series(out); len(got) != 0 {
		t.Fatalf("disagreeing hierarchies: %q", got)
	}
	if errs.Value() != 0 {
		t.Fatalf("read errors %v", errs.Value())
	}
	os.WriteFile(cg, bytes.Repeat([]byte("0::/docker/"+cid1+"\n"), proc.MaxCgroupFile/70+1), 0o644)
	clk.advance(time.Minute)
	out, _ = processScrape(t, c)
	if got := series(out); len(got) != 0 || errs.Value() != 1 {
		t.Fatalf("oversized file: %q, read errors %v", got, errs.Value())
	}
	hasLine(t, out, `fabric_process_read_errors_total{file="cgroup"} 1`)
	os.Remove(cg)
	clk.advance(time.Minute)
	out, _ = processScrape(t, c)
	if got := series(out); len(got) != 0 {
		t.Fatalf("no cgroup file: %q", got)
	}
	// The other processes keep theirs.
	if got := grepLines(out, "fabric_process_container_info{", `pid="4242"`); len(got) != 1 {
		t.Fatalf("4242: %q", got)
	}
}
