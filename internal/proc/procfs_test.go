package proc

import (
	"os"
	"strconv"
	"testing"

	"github.com/prometheus/procfs"

	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// TestAgreesWithProcfs: our stat, status and cgroup parsers give what
// github.com/prometheus/procfs gives for the same files, on every process
// of the fixture /proc and of this machine's real /proc (a process that
// exits or that we may not read is skipped; values that move between two
// reads of a live process are compared on the fixture only).
func TestAgreesWithProcfs(t *testing.T) {
	for _, root := range []string{fixtureProc, "/proc"} {
		live := root == "/proc"
		fs, err := procfs.NewFS(root)
		if err != nil {
			t.Fatal(err)
		}
		var pids []int
		if err := sysfs.ScanDir(root, func(name []byte) {
			if pid, ok := ParsePID(name); ok {
				pids = append(pids, pid)
			}
		}); err != nil {
			t.Fatal(err)
		}
		compared := 0
		for _, pid := range pids {
			dir := root + "/" + strconv.Itoa(pid)
			p, err := fs.Proc(pid)
			if err != nil {
				continue
			}
			raw, err := os.ReadFile(dir + "/stat")
			if err != nil {
				continue
			}
			ours, err := ParseStat(raw)
			theirs, err2 := p.Stat()
			if err2 != nil {
				continue
			}
			if err != nil {
				t.Errorf("%s/stat: %v; procfs parsed it", dir, err)
				continue
			}
			if uint64(theirs.Starttime) != ours.StartTime || (!live && (theirs.Comm != string(ours.Comm) ||
				uint64(theirs.MajFlt) != ours.MajFlt || uint64(theirs.UTime) != ours.UTime || uint64(theirs.STime) != ours.STime ||
				uint64(theirs.NumThreads) != ours.NumThreads || uint64(theirs.RSS) != ours.RSSPage)) {
				t.Errorf("%s/stat: ours %+v (comm %q), procfs %+v", dir, ours, ours.Comm, theirs)
			}
			compared++

			raw, err = os.ReadFile(dir + "/status")
			if err != nil {
				continue
			}
			st, err := ParseStatus(raw)
			pst, err2 := p.NewStatus()
			if err != nil || err2 != nil {
				if (err == nil) != (err2 == nil) && !live {
					t.Errorf("%s/status: ours %v, procfs %v", dir, err, err2)
				}
				continue
			}
			cpus, err := ParseCPUList(st.CpusAllowed)
			var want CPUSet
			for _, c := range pst.CpusAllowedList {
				want = want.With(int(c))
			}
			if err != nil || cpus.String() != want.String() {
				t.Errorf("%s/status: Cpus_allowed_list %v (%v), procfs %v", dir, cpus, err, want)
			}
			if !live && (st.VmRSS != pst.VmRSS || st.VolCtx != pst.VoluntaryCtxtSwitches || st.NonvolCtx != pst.NonVoluntaryCtxtSwitches) {
				t.Errorf("%s/status: ours %+v, procfs %+v", dir, st, pst)
			}

			raw, err = os.ReadFile(dir + "/cgroup")
			if err != nil {
				continue
			}
			cgs, err := p.Cgroups()
			if err != nil {
				continue
			}
			got, ok := ParseCgroupFile(raw)
			want2, ok2 := cgroupsContainer(cgs)
			if got != want2 || ok != ok2 {
				t.Errorf("%s/cgroup: ours %+v %v, over procfs's lines %+v %v", dir, got, ok, want2, ok2)
			}
		}
		if compared == 0 {
			t.Errorf("%s: no process compared", root)
		}
		t.Logf("%s: %d processes compared", root, compared)
	}
}
