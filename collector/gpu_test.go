package collector

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/gpu"
)

// fakeGPU is a gpu.Backend whose snapshot tests change between scrapes.
type fakeGPU struct {
	mu   sync.Mutex
	snap gpu.Snapshot
	err  error
}

func (f *fakeGPU) Snapshot() (gpu.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.snap
	s.Devices = append([]gpu.Device(nil), f.snap.Devices...)
	return s, f.err
}
func (f *fakeGPU) Close() error { return nil }

func newTestGPU(t *testing.T, o *Options) *gpuCollector {
	t.Helper()
	env, _ := testEnv()
	c, err := newGPUCollector(env, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.(*gpuCollector).Close() })
	return c.(*gpuCollector)
}

func TestGPUFixture(t *testing.T) {
	o := fixtureOptions(t, fixtureSys)
	o.GPU.Fixture = "fixtures/gpu/dcgm-8gpu.json"
	c := newTestGPU(t, o)
	// GPU 1 has only GRACT and TENSO (DCGM#244's sparse round): the other
	// fields are blank and therefore absent, never 0.
	compare(t, c, `
# HELP fabric_gpu_sm_active_ratio Fraction of cycles an SM had at least one warp (DCGM 1002, GPM SM_UTIL).
# TYPE fabric_gpu_sm_active_ratio gauge
fabric_gpu_sm_active_ratio{gpu="0",uuid="GPU-6f1c2a40-5ac3-9b4e-7d21-0c1f6a2e3b10"} 0.92167
fabric_gpu_sm_active_ratio{gpu="2",uuid="GPU-6f1c2a42-5ac3-9b4e-7d21-0c1f6a2e3b12"} 0.92167
fabric_gpu_sm_active_ratio{gpu="3",uuid="GPU-6f1c2a43-5ac3-9b4e-7d21-0c1f6a2e3b13"} 0.92167
fabric_gpu_sm_active_ratio{gpu="4",uuid="GPU-6f1c2a44-5ac3-9b4e-7d21-0c1f6a2e3b14"} 0.92167
fabric_gpu_sm_active_ratio{gpu="5",uuid="GPU-6f1c2a45-5ac3-9b4e-7d21-0c1f6a2e3b15"} 0.92167
fabric_gpu_sm_active_ratio{gpu="6",uuid="GPU-6f1c2a46-5ac3-9b4e-7d21-0c1f6a2e3b16"} 0.92167
fabric_gpu_sm_active_ratio{gpu="7",uuid="GPU-6f1c2a47-5ac3-9b4e-7d21-0c1f6a2e3b17"} 0.92167
# HELP fabric_gpu_tensor_active_ratio Fraction of cycles any tensor pipe was active (DCGM 1004, GPM ANY_TENSOR_UTIL).
# TYPE fabric_gpu_tensor_active_ratio gauge
fabric_gpu_tensor_active_ratio{gpu="0",uuid="GPU-6f1c2a40-5ac3-9b4e-7d21-0c1f6a2e3b10"} 0.89459
fabric_gpu_tensor_active_ratio{gpu="1",uuid="GPU-6f1c2a41-5ac3-9b4e-7d21-0c1f6a2e3b11"} 0.178
fabric_gpu_tensor_active_ratio{gpu="2",uuid="GPU-6f1c2a42-5ac3-9b4e-7d21-0c1f6a2e3b12"} 0.89459
fabric_gpu_tensor_active_ratio{gpu="3",uuid="GPU-6f1c2a43-5ac3-9b4e-7d21-0c1f6a2e3b13"} 0.89459
fabric_gpu_tensor_active_ratio{gpu="4",uuid="GPU-6f1c2a44-5ac3-9b4e-7d21-0c1f6a2e3b14"} 0.89459
fabric_gpu_tensor_active_ratio{gpu="5",uuid="GPU-6f1c2a45-5ac3-9b4e-7d21-0c1f6a2e3b15"} 0.89459
fabric_gpu_tensor_active_ratio{gpu="6",uuid="GPU-6f1c2a46-5ac3-9b4e-7d21-0c1f6a2e3b16"} 0.89459
fabric_gpu_tensor_active_ratio{gpu="7",uuid="GPU-6f1c2a47-5ac3-9b4e-7d21-0c1f6a2e3b17"} 0.89459
# HELP fabric_gpu_source_info Where the GPU activity fields come from: dcgm, nvml_gpm or nvml (no activity fields).
# TYPE fabric_gpu_source_info gauge
fabric_gpu_source_info{source="dcgm"} 1
# HELP fabric_dcgm_up 1 while the exporter is connected to the DCGM host engine, 0 while it reconnects.
# TYPE fabric_dcgm_up gauge
fabric_dcgm_up 1
`, "fabric_gpu_sm_active_ratio", "fabric_gpu_tensor_active_ratio", "fabric_gpu_source_info", "fabric_dcgm_up")
}

func dev(idx int, uuid string) gpu.Device {
	return gpu.Device{Index: idx, UUID: uuid, Name: "NVIDIA H200", PCIBusID: "0000:19:00.0"}
}

// Blank, unsupported and stale values are absent; unsupported fields say
// so in fabric_gpu_field_supported; a DCGM host engine that goes away and
// comes back; a GPU that disappears between scrapes.
func TestGPUAbsentValues(t *testing.T) {
	now := time.Now()
	d0 := dev(0, "GPU-a")
	d0.Support[gpu.SMActive], d0.Values[gpu.SMActive] = gpu.Supported, gpu.Value{V: 0.5, At: now}
	d0.Support[gpu.TensorActive], d0.Values[gpu.TensorActive] = gpu.Supported, gpu.Value{V: 0.4, At: now.Add(-time.Hour)} // stale
	d0.Support[gpu.DRAMActive] = gpu.Supported                                                                            // blank: no sample
	d0.Support[gpu.SMOccupancy] = gpu.Unsupported
	d1 := dev(1, "GPU-b")
	d1.Support[gpu.SMActive], d1.Values[gpu.SMActive] = gpu.Supported, gpu.Value{V: 0.25, At: now}
	up := true
	fake := &fakeGPU{snap: gpu.Snapshot{Source: "dcgm", Interval: time.Second, DCGMUp: &up, Devices: []gpu.Device{d0, d1}}}
	o := fixtureOptions(t, fixtureSys)
	o.GPU.Backend = func(gpu.Options) (gpu.Backend, error) { return fake, nil }
	c := newTestGPU(t, o)
	compare(t, c, `
# HELP fabric_gpu_sm_active_ratio Fraction of cycles an SM had at least one warp (DCGM 1002, GPM SM_UTIL).
# TYPE fabric_gpu_sm_active_ratio gauge
fabric_gpu_sm_active_ratio{gpu="0",uuid="GPU-a"} 0.5
fabric_gpu_sm_active_ratio{gpu="1",uuid="GPU-b"} 0.25
# HELP fabric_gpu_field_supported 1 if the source delivers the activity field for this GPU, 0 if not (its series is then absent).
# TYPE fabric_gpu_field_supported gauge
fabric_gpu_field_supported{field="dram_active",gpu="0",uuid="GPU-a"} 1
fabric_gpu_field_supported{field="sm_active",gpu="0",uuid="GPU-a"} 1
fabric_gpu_field_supported{field="sm_active",gpu="1",uuid="GPU-b"} 1
fabric_gpu_field_supported{field="sm_occupancy",gpu="0",uuid="GPU-a"} 0
fabric_gpu_field_supported{field="tensor_active",gpu="0",uuid="GPU-a"} 1
`, "fabric_gpu_sm_active_ratio", "fabric_gpu_tensor_active_ratio", "fabric_gpu_dram_active_ratio", "fabric_gpu_sm_occupancy_ratio", "fabric_gpu_field_supported")

	// Host engine gone: the backend publishes no values and dcgm_up 0.
	fake.mu.Lock()
	down := false
	fake.snap.DCGMUp = &down
	for i := range fake.snap.Devices {
		fake.snap.Devices[i].Values = [gpu.NumFields]gpu.Value{}
	}
	fake.mu.Unlock()
	compare(t, c, `
# HELP fabric_dcgm_up 1 while the exporter is connected to the DCGM host engine, 0 while it reconnects.
# TYPE fabric_dcgm_up gauge
fabric_dcgm_up 0
`, "fabric_dcgm_up", "fabric_gpu_sm_active_ratio")

	// Back, and GPU 1 has disappeared.
	fake.mu.Lock()
	fake.snap.DCGMUp = &up
	d0.Values[gpu.SMActive].At = time.Now()
	fake.snap.Devices = []gpu.Device{d0}
	fake.mu.Unlock()
	compare(t, c, `
# HELP fabric_gpu_sm_active_ratio Fraction of cycles an SM had at least one warp (DCGM 1002, GPM SM_UTIL).
# TYPE fabric_gpu_sm_active_ratio gauge
fabric_gpu_sm_active_ratio{gpu="0",uuid="GPU-a"} 0.5
`, "fabric_gpu_sm_active_ratio")
	if n := testutil.CollectAndCount(updater{c: c}, "fabric_gpu_info"); n != 1 {
		t.Errorf("gpu_info series after GPU 1 vanished = %d, want 1", n)
	}
}

// No driver: no data, the exporter keeps serving; NVML appearing later
// (driver loaded after the exporter started) is picked up on retry.
func TestGPUInitFailureAndRetry(t *testing.T) {
	calls := 0
	var backend gpu.Backend
	o := fixtureOptions(t, fixtureSys)
	o.GPU.Backend = func(gpu.Options) (gpu.Backend, error) {
		calls++
		if backend == nil {
			return nil, errors.New("NVML init: library not found")
		}
		return backend, nil
	}
	c := newTestGPU(t, o)
	if err := c.Update(context.Background(), &exposition.Batch{}); !errors.Is(err, ErrNoData) {
		t.Fatalf("Update without NVML = %v, want ErrNoData", err)
	}
	if calls != 1 {
		t.Errorf("backend tried %d times within the retry interval, want 1", calls)
	}
	backend = &fakeGPU{snap: gpu.Snapshot{Source: "nvml", Interval: time.Second, Devices: []gpu.Device{dev(0, "GPU-a")}}}
	c.lastTry = time.Now().Add(-gpuRetryInterval)
	var b exposition.Batch
	if err := c.Update(context.Background(), &b); err != nil {
		t.Fatalf("Update after the driver appeared: %v", err)
	}
	if calls != 2 || b.Len() == 0 {
		t.Errorf("calls %d, samples %d", calls, b.Len())
	}
	// A binary built without GPU support never retries.
	o.GPU.Backend = func(gpu.Options) (gpu.Backend, error) { calls++; return nil, gpu.ErrNotBuilt }
	c = newTestGPU(t, o)
	c.lastTry = time.Time{}
	if err := c.Update(context.Background(), &exposition.Batch{}); !errors.Is(err, ErrNoData) || !strings.Contains(err.Error(), "without GPU support") {
		t.Errorf("Update without GPU support = %v", err)
	}
}

func TestGPUIntervalValidation(t *testing.T) {
	env, _ := testEnv()
	o := fixtureOptions(t, fixtureSys)
	o.GPU.Interval = 50 * time.Millisecond
	if _, err := newGPUCollector(env, o); err == nil {
		t.Error("interval below 100ms accepted")
	}
	o.GPU = GPUOptions{Fixture: "fixtures/gpu/nope.json"}
	if _, err := newGPUCollector(env, o); err == nil {
		t.Error("missing fixture accepted")
	}
}

func TestBusIDFromNVML(t *testing.T) {
	for in, want := range map[string]string{"00000000:18:00.0": "0000:18:00.0", "00000000:9B:00.0": "0000:9b:00.0", "0000:3b:00.0": "0000:3b:00.0"} {
		if got := gpu.BusIDFromNVML(in); got != want {
			t.Errorf("BusIDFromNVML(%q) = %q, want %q", in, got, want)
		}
	}
}

// The scrape captured on the real H200 (tools/gpuverify, NVML GPM) has the
// same families and label names as the collector writes today, and its
// values show the matmul: SM and tensor activity near 0 idle, above 0.5
// under load.
func TestGPUH200Capture(t *testing.T) {
	parse := func(path string) map[string]*dto.MetricFamily {
		t.Helper()
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		p := expfmt.NewTextParser(model.UTF8Validation)
		mfs, err := p.TextToMetricFamilies(f)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return mfs
	}
	value := func(mfs map[string]*dto.MetricFamily, name string) float64 {
		mf := mfs[name]
		if mf == nil || len(mf.GetMetric()) != 1 {
			t.Fatalf("%s: want one series", name)
		}
		return mf.GetMetric()[0].GetGauge().GetValue()
	}
	idle, load := parse("fixtures/gpu/h200/idle.prom"), parse("fixtures/gpu/h200/load.prom")
	for _, name := range []string{"fabric_gpu_sm_active_ratio", "fabric_gpu_tensor_active_ratio"} {
		if v := value(idle, name); v > 0.05 {
			t.Errorf("idle %s = %v", name, v)
		}
		if v := value(load, name); v < 0.5 {
			t.Errorf("load %s = %v", name, v)
		}
	}

	// The same shape from the collector today.
	now := time.Now()
	d := dev(0, "GPU-x")
	for f := range gpu.NumFields {
		d.Support[f], d.Values[f] = gpu.Supported, gpu.Value{V: 0.5, At: now}
	}
	d.Utilization, d.PIDs = &gpu.Value{V: 1, At: now}, []uint32{446}
	o := fixtureOptions(t, fixtureSys)
	o.GPU.Backend = func(gpu.Options) (gpu.Backend, error) {
		return &fakeGPU{snap: gpu.Snapshot{Source: "nvml_gpm", DriverVersion: "580.159.04", Interval: time.Second, Devices: []gpu.Device{d}}}, nil
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(updater{c: newTestGPU(t, o)})
	ours, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	shape := func(mf *dto.MetricFamily) string {
		var ls []string
		for _, l := range mf.GetMetric()[0].GetLabel() {
			ls = append(ls, l.GetName())
		}
		sort.Strings(ls)
		return mf.GetName() + "{" + strings.Join(ls, ",") + "}"
	}
	want := map[string]bool{}
	for _, mf := range load {
		want[shape(mf)] = true
	}
	for _, mf := range ours {
		if !want[shape(mf)] {
			t.Errorf("collector writes %s, the H200 capture has no such family/labels", shape(mf))
		}
		delete(want, shape(mf))
	}
	for s := range want {
		t.Errorf("the H200 capture has %s, the collector no longer writes it", s)
	}
}

// NewExporter hands the gpu collector's inventory to the process and
// kubernetes collectors, whatever the order the collectors are named in.
func TestGPUInventoryWiring(t *testing.T) {
	d := dev(0, "GPU-a")
	d.PIDs = []uint32{41872, 41873}
	o := processOptions(t, fixtureProc)
	o.Kubernetes.PodResourcesSocket = filepath.Join(t.TempDir(), "none.sock")
	o.GPU.Backend = func(gpu.Options) (gpu.Backend, error) {
		return &fakeGPU{snap: gpu.Snapshot{Source: "nvml", Interval: time.Second, Devices: []gpu.Device{d}}}, nil
	}
	e, err := NewExporter([]string{"process", "kubernetes", "gpu"}, o, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	byName := map[string]Collector{}
	for _, nc := range e.collectors {
		byName[nc.name] = nc.c
	}
	p := byName["process"].(*processCollector)
	if p.env.GPUs == nil {
		t.Fatal("process collector has no GPU PIDs")
	}
	if got := p.env.GPUs.PIDs(context.Background()); len(got) != 2 || got[0] != 41872 {
		t.Errorf("GPU PIDs = %v", got)
	}
	k := byName["kubernetes"].(*kubernetesCollector)
	if k.gpus == nil {
		t.Fatal("kubernetes collector has no GPU devices")
	}
	if got := k.gpus(context.Background()); len(got) != 1 || got[0].UUID != "GPU-a" {
		t.Errorf("GPU devices = %v", got)
	}
	if names := e.Names(); !slices.Equal(names, []string{"gpu", "kubernetes", "process"}) {
		t.Errorf("scrape order %v", names)
	}
	// Without the gpu collector, the consumers get no inventory.
	e2, err := NewExporter([]string{"process"}, o, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e2.Close)
	if e2.collectors[0].c.(*processCollector).env.GPUs != nil {
		t.Error("process collector has GPU PIDs without the gpu collector")
	}
}
