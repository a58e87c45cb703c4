package collector

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fixtureBaseEnv is the environment every fixture process has
// (build-proc.sh's BASEENV), with its secrets.
func fixtureBaseEnv(t testing.TB) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(fixtureProc, "98621", "environ"))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// fabric_process_rdma_device_required: which rail devices (mlx5_0 and
// mlx5_3, port 1, in the fixture sysfs) a process needs, and why, from its
// environment. 4311's environment is replaced by each case's.
func TestProcessRDMARequired(t *testing.T) {
	base := fixtureBaseEnv(t)
	for _, tc := range []struct {
		name string
		env  []string
		want []string // device=reason
	}{
		{"fixture: NCCL_IB_HCA lists both rails", nil, []string{"mlx5_0=nccl_ib_hca", "mlx5_3=nccl_ib_hca"}},
		{"NCCL_IB_HCA one device", []string{"NCCL_IB_HCA=mlx5_3"}, []string{"mlx5_3=nccl_ib_hca"}},
		{"NCCL_IB_HCA prefix", []string{"NCCL_IB_HCA=mlx5"}, []string{"mlx5_0=nccl_ib_hca", "mlx5_3=nccl_ib_hca"}},
		{"NCCL_IB_HCA exact", []string{"NCCL_IB_HCA==mlx5_0"}, []string{"mlx5_0=nccl_ib_hca"}},
		{"NCCL_IB_HCA exact no match", []string{"NCCL_IB_HCA==mlx5"}, nil},
		{"NCCL_IB_HCA excluding", []string{"NCCL_IB_HCA=^mlx5_0"}, []string{"mlx5_3=nccl_ib_hca"}},
		{"NCCL_IB_HCA other port", []string{"NCCL_IB_HCA=mlx5_0:2,mlx5_3:1"}, []string{"mlx5_3=nccl_ib_hca"}},
		// NCCL opens no device NCCL_IB_HCA leaves out, multi-node or not.
		{"NCCL_IB_HCA limits multi-node", []string{"NCCL_IB_HCA=mlx5_3", "WORLD_SIZE=16", "LOCAL_WORLD_SIZE=8"}, []string{"mlx5_3=nccl_ib_hca"}},
		{"NCCL_NET=IB", []string{"NCCL_NET=IB"}, []string{"mlx5_0=nccl_net_ib", "mlx5_3=nccl_net_ib"}},
		{"NCCL_NET=ib, any case", []string{"NCCL_NET=ib", "WORLD_SIZE=16", "LOCAL_WORLD_SIZE=8"}, []string{"mlx5_0=nccl_net_ib", "mlx5_3=nccl_net_ib"}},
		{"empty NCCL_IB_HCA is unset", []string{"NCCL_IB_HCA=", "NCCL_NET=IB"}, []string{"mlx5_0=nccl_net_ib", "mlx5_3=nccl_net_ib"}},
		{"torchrun over 2 nodes", []string{"WORLD_SIZE=16", "LOCAL_WORLD_SIZE=8", "RANK=9"}, []string{"mlx5_0=multi_node", "mlx5_3=multi_node"}},
		{"mpirun over 4 nodes", []string{"OMPI_COMM_WORLD_SIZE=32", "OMPI_COMM_WORLD_LOCAL_SIZE=8"}, []string{"mlx5_0=multi_node", "mlx5_3=multi_node"}},
		// Absent: one node, RDMA switched off, nothing said.
		{"torchrun on one node", []string{"WORLD_SIZE=8", "LOCAL_WORLD_SIZE=8"}, nil},
		{"NCCL_IB_DISABLE=1", []string{"NCCL_IB_DISABLE=1", "NCCL_IB_HCA=mlx5_0", "NCCL_NET=IB", "WORLD_SIZE=16", "LOCAL_WORLD_SIZE=8"}, nil},
		{"NCCL_IB_DISABLE=0", []string{"NCCL_IB_DISABLE=0", "NCCL_IB_HCA=mlx5_0"}, []string{"mlx5_0=nccl_ib_hca"}},
		{"NCCL_NET=Socket", []string{"NCCL_NET=Socket", "NCCL_IB_HCA=mlx5_0", "WORLD_SIZE=16", "LOCAL_WORLD_SIZE=8"}, nil},
		{"NCCL_NET=socket", []string{"NCCL_NET=socket", "WORLD_SIZE=16", "LOCAL_WORLD_SIZE=8"}, nil},
		{"nothing applies", []string{"NCCL_DEBUG=WARN"}, nil},
		{"NCCL_IB_HCA excludes all", []string{"NCCL_IB_HCA=^"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			procDir := procWithEnviron(t, "4311", base, tc.env)
			c, errs, _ := newTestProcess(t, processOptions(t, procDir))
			out, err := processScrape(t, c)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, l := range grepLines(out, "fabric_process_rdma_device_required{", `pid="4311"`) {
				if !strings.HasSuffix(l, " 1") || !strings.HasPrefix(l, `fabric_process_rdma_device_required{comm="sglang::schedul",device="`) {
					t.Errorf("series %s", l)
				}
				dev := strings.SplitN(strings.SplitN(l, `device="`, 2)[1], `"`, 2)[0]
				reason := strings.SplitN(strings.SplitN(l, `reason="`, 2)[1], `"`, 2)[0]
				got = append(got, dev+"="+reason)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			// The launcher's sizes are never exported (the HELP text names them).
			for _, s := range []string{"WORLD_SIZE", "OMPI_COMM"} {
				if got := grepLines(out, s); len(got) > 0 {
					t.Errorf("%s in the scrape: %v", s, got)
				}
			}
			if errs.Value() != 0 {
				t.Errorf("read errors %v", errs.Value())
			}
		})
	}
}

// The series follow the host's devices: none for a device gone from the
// host, and the remaining one keeps its series.
func TestProcessRDMARequiredVanishedDevice(t *testing.T) {
	sysDir := copyTree(t, fixtureSys)
	c, _, clk := newTestProcess(t, processOptionsSys(t, fixtureProc, sysDir))
	out, _ := processScrape(t, c)
	want := `fabric_process_rdma_device_required{comm="python3",device="mlx5_0",pid="4242",reason="nccl_ib_hca"} 1`
	hasLine(t, out, want)
	hasLine(t, out, `fabric_process_rdma_device_required{comm="python3",device="mlx5_3",pid="4242",reason="nccl_ib_hca"} 1`)
	for _, p := range []string{"class/infiniband/mlx5_3", "class/infiniband_verbs/uverbs1"} {
		if err := os.Remove(filepath.Join(sysDir, p)); err != nil {
			t.Fatal(err)
		}
	}
	clk.advance(1)
	out, _ = processScrape(t, c)
	hasLine(t, out, want)
	if got := grepLines(out, "fabric_process_rdma_device_required", `device="mlx5_3"`); len(got) > 0 {
		t.Errorf("series for the vanished device:\n%s", strings.Join(got, "\n"))
	}
}

// procWithEnviron copies the fixture /proc and, when env is not nil, gives
// pid the environment base followed by env (NUL-separated).
func procWithEnviron(t *testing.T, pid, base string, env []string) string {
	t.Helper()
	procDir := copyTree(t, fixtureProc)
	if env != nil {
		b := base + strings.Join(env, "\x00") + "\x00"
		if err := os.WriteFile(filepath.Join(procDir, pid, "environ"), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return procDir
}
