package proc

import (
	"bytes"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/procfs"

	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// BenchmarkProcFiles measures, per /proc/PID file the process collector
// reads, our reader and parser against github.com/prometheus/procfs
// reading and parsing the same file to the same answer, on the fixture
// /proc (process 4311 of collector/fixtures/proc) and on this machine's
// real /proc (the benchmark's own process). One op is one process's file:
//
//   - stat, status: ours re-reads the descriptor a sysfs.Reader keeps open
//     (one pread) and parses in place; procfs opens, reads and closes the
//     file and parses into a struct (Proc.Stat, Proc.NewStatus);
//   - cgroup: ours reads into a reused buffer (ReadInto) and attributes
//     the container (ParseCgroupFile); procfs is Proc.Cgroups, then the
//     same attribution on each line's path;
//   - environ: ours reads into a reused buffer, keeps the allow-listed
//     NCCL variables (NCCLEnv) and wipes the buffer; procfs is
//     Proc.Environ, then the same allow-list;
//   - cmdline: ours reads into a reused buffer and matches the default
//     --collector.process.cmdline regexp in place; procfs is Proc.CmdLine,
//     joined with spaces, then the same match;
//   - list: the /proc listing (PIDs): sysfs.ScanDir + ParsePID against
//     procfs FS.AllProcs.
//
// Run: go test ./internal/proc -run '^$' -bench BenchmarkProcFiles -benchmem -count 5
func BenchmarkProcFiles(b *testing.B) {
	for _, where := range []struct{ name, root, pid string }{
		{"fixture", fixtureProc, "4311"},
		{"real", "/proc", strconv.Itoa(os.Getpid())},
	} {
		fs, err := procfs.NewFS(where.root)
		if err != nil {
			b.Fatal(err)
		}
		pid, _ := strconv.Atoi(where.pid)
		p, err := fs.Proc(pid)
		if err != nil {
			b.Fatal(err)
		}
		dir := where.root + "/" + where.pid
		b.Run("stat/"+where.name+"/ours", func(b *testing.B) {
			r := sysfs.NewReader()
			defer r.Close()
			var buf [sysfs.MaxAttrSize]byte
			path := dir + "/stat"
			b.ReportAllocs()
			for b.Loop() {
				raw, err := r.Read(path, buf[:])
				if err != nil {
					b.Fatal(err)
				}
				if s, err := ParseStat(raw); err != nil || s.StartTime == 0 {
					b.Fatal(s, err)
				}
			}
		})
		b.Run("stat/"+where.name+"/procfs", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if s, err := p.Stat(); err != nil || s.Starttime == 0 {
					b.Fatal(s, err)
				}
			}
		})
		b.Run("status/"+where.name+"/ours", func(b *testing.B) {
			r := sysfs.NewReader()
			defer r.Close()
			var buf [16 << 10]byte
			path := dir + "/status"
			b.ReportAllocs()
			for b.Loop() {
				raw, err := r.Read(path, buf[:])
				if err != nil {
					b.Fatal(err)
				}
				s, err := ParseStatus(raw)
				if err != nil || !s.HasRSS {
					b.Fatal(s, err)
				}
				if _, err := ParseCPUList(s.CpusAllowed); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("status/"+where.name+"/procfs", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if s, err := p.NewStatus(); err != nil || s.VmRSS == 0 || len(s.CpusAllowedList) == 0 {
					b.Fatal(s, err)
				}
			}
		})
		b.Run("cgroup/"+where.name+"/ours", func(b *testing.B) {
			buf := make([]byte, MaxCgroupFile+1)
			path := dir + "/cgroup"
			b.ReportAllocs()
			for b.Loop() {
				n, err := ReadInto(Open, path, buf)
				if err != nil || n == 0 {
					b.Fatal(err)
				}
				ParseCgroupFile(buf[:n])
			}
		})
		b.Run("cgroup/"+where.name+"/procfs", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				cgs, err := p.Cgroups()
				if err != nil || len(cgs) == 0 {
					b.Fatal(err)
				}
				cgroupsContainer(cgs)
			}
		})
		b.Run("environ/"+where.name+"/ours", func(b *testing.B) {
			buf := make([]byte, 1<<20)
			path := dir + "/environ"
			b.ReportAllocs()
			for b.Loop() {
				n, err := ReadInto(Open, path, buf)
				if err != nil {
					b.Fatal(err)
				}
				NCCLEnv(buf[:n], func(string, []byte) {})
				clear(buf[:n])
			}
		})
		b.Run("environ/"+where.name+"/procfs", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				env, err := p.Environ()
				if err != nil {
					b.Fatal(err)
				}
				for _, e := range env {
					if name, _, ok := strings.Cut(e, "="); ok && strings.HasPrefix(name, "NCCL_") {
						_ = slices.Contains(ncclEnvAllowed[:], name)
					}
				}
			}
		})
		re := regexp.MustCompile(`sglang\.launch_server|(^|[/ ])sglang serve( |$)|^sglang::`)
		b.Run("cmdline/"+where.name+"/ours", func(b *testing.B) {
			buf := make([]byte, 64<<10)
			path := dir + "/cmdline"
			b.ReportAllocs()
			for b.Loop() {
				n, err := ReadInto(Open, path, buf)
				if err != nil {
					b.Fatal(err)
				}
				line := buf[:n]
				for i, c := range line {
					if c == 0 {
						line[i] = ' '
					}
				}
				re.Match(bytes.TrimRight(line, " "))
				clear(line)
			}
		})
		b.Run("cmdline/"+where.name+"/procfs", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				args, err := p.CmdLine()
				if err != nil {
					b.Fatal(err)
				}
				re.MatchString(strings.Join(args, " "))
			}
		})
		b.Run("list/"+where.name+"/ours", func(b *testing.B) {
			var pids []int
			b.ReportAllocs()
			for b.Loop() {
				pids = pids[:0]
				if err := sysfs.ScanDir(where.root, func(name []byte) {
					if pid, ok := ParsePID(name); ok {
						pids = append(pids, pid)
					}
				}); err != nil || len(pids) == 0 {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(pids)), "pids")
		})
		b.Run("list/"+where.name+"/procfs", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if procs, err := fs.AllProcs(); err != nil || len(procs) == 0 {
					b.Fatal(err)
				}
			}
		})
	}
}

// cgroupsContainer is ParseCgroupFile's attribution over procfs's lines.
func cgroupsContainer(cgs []procfs.Cgroup) (Container, bool) {
	var found Container
	ok := false
	for _, cg := range cgs {
		if cg.HierarchyID < 0 || !strings.HasPrefix(cg.Path, "/") {
			return Container{}, false
		}
		ref, in, valid := parseCgroupPath(cg.Path)
		if !valid {
			return Container{}, false
		}
		if !in {
			continue
		}
		if ok && ref != found {
			return Container{}, false
		}
		found, ok = ref, true
	}
	return found, ok
}
