package nccl

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// NCCL's port failover and recovery lines, as src/transport/net_ib/
// p2p_resiliency.cc and common.cc write them (NCCL master, 2.29.7+), for a
// rank on a merged device of mlx5_0 and mlx5_3: index 1 (mlx5_3) fails on
// a send and a receive communicator, is recovered once and given up once;
// an async fatal event on mlx5_3:1 twice. Near misses count nothing: the
// INFO that a repeat was ignored, the single-device notice, a garbage
// index, a device name with a space.
func TestFailoverLines(t *testing.T) {
	dir := t.TempDir()
	log := `node7:4242:4242 [0] NCCL INFO NCCL version 2.30.3+cuda12.9
node7:4242:4242 [0] NCCL INFO NET/IB : Using [0]={[0] mlx5_0:1/RoCE, [1] mlx5_3:1/RoCE} ; OOB eth0:10.0.0.11<0>
node7:4242:4301 [0] NCCL WARN NET/IB : mlx5_3:1 async fatal event: port error
node7:4242:4301 [0] NCCL WARN NET/IB : mlx5_3:1 async fatal event on QP (0x55d1) qpn=1234 handle=7 send_cq=1 recv_cq=2 state=6 sq_psn=0
node7:4242:4302 [0] NCCL WARN NET/IB: Device 1 marked as failed. Initiating recovery? Yes (send comm=0x7f3a10001230, outstandingRecovery=0)
node7:4242:4302 [0] NCCL WARN NET/IB: Device 1 marked as failed. Initiating recovery? Yes (recv comm=0x7f3a10004560, outstandingRecovery=0)
node7:4242:4302 [0] NCCL INFO NET/IB: ncclIbResiliencyHandleDeviceFailure: Device 1 was already marked as failed.
node7:4242:4302 [0] NCCL INFO NET/IB: ncclIbResiliencyProgress: Device 1 has been recovered for resiliency context (send comm=0x7f3a10001230, outstandingRecovery=0)
node7:4242:4302 [0] NCCL INFO NET/IB: ncclIbResiliencyProgress: Device 1 will not be attempted to be recovered any more (recv comm=0x7f3a10004560, outstandingRecovery=0).
node7:4242:4302 [0] NCCL INFO NET/IB: ncclIbResiliencyDeviceNumSet: Resiliency is being enabled on a communicator (comm=0x7f3a10007890) with a single local device. In case of failure there will be no device to fail-over to.
node7:4242:4302 [0] NCCL WARN NET/IB: Device x marked as failed. Initiating recovery? No (send comm=0x1, outstandingRecovery=0)
node7:4242:4301 [0] NCCL WARN NET/IB : mlx 5:1 async fatal event: port error
`
	if err := os.WriteFile(filepath.Join(dir, "n.log"), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	c := newTestNCCL(t, testOpts{LogPaths: []string{filepath.Join(dir, "*.log")}})
	c.poll()
	var got []Failover
	var fatal []AsyncFatal
	dev := ""
	c.View(func(procs []*Process, _ Stats) {
		if len(procs) != 1 {
			t.Fatalf("%d processes", len(procs))
		}
		p := procs[0]
		got, fatal = p.Failovers, p.AsyncFatal
		if len(got) == 1 {
			dev = p.FailoverDevice(got[0])
		}
	})
	if want := []Failover{{Index: "1", Failed: 2, Recovered: 1, Permanent: 1}}; !reflect.DeepEqual(got, want) {
		t.Errorf("failovers %+v, want %+v", got, want)
	}
	if dev != "mlx5_3" {
		t.Errorf("index 1 of the merged device is %q, want mlx5_3", dev)
	}
	if want := []AsyncFatal{{Device: "mlx5_3", Port: "1", N: 2}}; !reflect.DeepEqual(fatal, want) {
		t.Errorf("async fatal %+v, want %+v", fatal, want)
	}
}

// An index names a physical device only under exactly one merged device.
func TestFailoverDevice(t *testing.T) {
	devs := []Device{{Name: "mlx5_0"}, {Name: "mlx5_3"}}
	for _, tc := range []struct {
		groups int
		index  string
		want   string
	}{{1, "0", "mlx5_0"}, {1, "1", "mlx5_3"}, {1, "2", ""}, {0, "1", ""}, {2, "1", ""}} {
		p := &Process{Devices: devs, MergedGroups: tc.groups, DevicesMerged: tc.groups > 0}
		if got := p.FailoverDevice(Failover{Index: tc.index}); got != tc.want {
			t.Errorf("%d groups, index %s: %q, want %q", tc.groups, tc.index, got, tc.want)
		}
	}
}
