//go:build cgo && !nogpu

package nvidia

import (
	"encoding/binary"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-dcgm/pkg/dcgm"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/go-kit/log"

	"github.com/fabric-exporter/fabric_exporter/internal/gpu"
)

var nopLog = log.NewNopLogger()

func busID(s string) (b [32]int8) {
	for i := range s {
		b[i] = int8(s[i])
	}
	return b
}

// fakeNVML builds a mock NVML with n GPUs; gpm says whether they support
// GPM; lost[i] makes GPU i answer "GPU is lost".
type fakeNVML struct {
	mu      sync.Mutex
	lost    map[int]bool
	metrics func(*nvml.GpmMetricsGetType) nvml.Return
	// nvlinks is the number of NVLink links of GPU 0 (the others are
	// PCIe-only); linkDown marks links whose state is disabled; linkErrs
	// is added to every error counter of GPU 0.
	nvlinks  int
	linkDown map[int]bool
	linkErrs uint64
	// procUtil answers GetProcessUtilization of GPU i (nil: NOT_SUPPORTED).
	procUtil func(i int, since uint64) ([]nvml.ProcessUtilizationSample, nvml.Return)
	// p2p answers GetP2PStatus from GPU a to GPU b (nil: not supported).
	p2p func(a, b int, c nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return)
}

func (f *fakeNVML) lib(n int, gpm bool, initRet nvml.Return) *mock.Interface {
	devs := make([]*mock.Device, n)
	index := func(d nvml.Device) int {
		for j := range devs {
			if devs[j] == d {
				return j
			}
		}
		return -1
	}
	for i := range devs {
		i := i
		ret := func() nvml.Return {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.lost[i] {
				return nvml.ERROR_GPU_IS_LOST
			}
			return nvml.SUCCESS
		}
		devs[i] = &mock.Device{
			GetUUIDFunc: func() (string, nvml.Return) { return "GPU-" + string(rune('a'+i)), nvml.SUCCESS },
			GetNameFunc: func() (string, nvml.Return) { return "NVIDIA H200", nvml.SUCCESS },
			GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) {
				return nvml.PciInfo{BusId: busID("00000000:1A:00.0")}, nvml.SUCCESS
			},
			GpmQueryDeviceSupportFunc: func() (nvml.GpmSupport, nvml.Return) {
				if gpm {
					return nvml.GpmSupport{IsSupportedDevice: 1}, nvml.SUCCESS
				}
				return nvml.GpmSupport{}, nvml.SUCCESS
			},
			GpmSampleGetFunc: func(nvml.GpmSample) nvml.Return { return ret() },
			GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
				return []nvml.ProcessInfo{{Pid: uint32(1000 + i)}}, ret()
			},
			GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 95}, ret() },
			GetProcessUtilizationFunc: func(since uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
				if f.procUtil == nil {
					return nil, nvml.ERROR_NOT_SUPPORTED
				}
				return f.procUtil(i, since)
			},
			GetNvLinkStateFunc: func(link int) (nvml.EnableState, nvml.Return) {
				f.mu.Lock()
				defer f.mu.Unlock()
				if i != 0 || link >= f.nvlinks {
					return 0, nvml.ERROR_NOT_SUPPORTED
				}
				if f.linkDown[link] {
					return nvml.FEATURE_DISABLED, nvml.SUCCESS
				}
				return nvml.FEATURE_ENABLED, nvml.SUCCESS
			},
			GetNvLinkErrorCounterFunc: func(link int, c nvml.NvLinkErrorCounter) (uint64, nvml.Return) {
				f.mu.Lock()
				defer f.mu.Unlock()
				if c == nvml.NVLINK_ERROR_DL_CRC_DATA {
					return 0, nvml.ERROR_NOT_SUPPORTED
				}
				return uint64(10*link+int(c)) + f.linkErrs, nvml.SUCCESS
			},
			GetP2PStatusFunc: func(peer nvml.Device, c nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
				if f.p2p == nil {
					return 0, nvml.ERROR_NOT_SUPPORTED
				}
				return f.p2p(i, index(peer), c)
			},
			GetFieldValuesFunc: func(fv []nvml.FieldValue) nvml.Return {
				for k := range fv {
					fv[k].ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
					v := uint64(1000*(fv[k].ScopeId+1)) + uint64(fv[k].FieldId-nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX)
					binary.NativeEndian.PutUint64(fv[k].Value[:], v)
				}
				return nvml.SUCCESS
			},
		}
	}
	return &mock.Interface{
		InitFunc:                   func() nvml.Return { return initRet },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		ErrorStringFunc:            func(r nvml.Return) string { return "nvml error " + string(rune('0'+int(r)%10)) },
		SystemGetDriverVersionFunc: func() (string, nvml.Return) { return "580.159.04", nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return n, nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) { return devs[i], nvml.SUCCESS },
		GpmSampleAllocFunc: func() (nvml.GpmSample, nvml.Return) {
			return &mock.GpmSample{FreeFunc: func() nvml.Return { return nvml.SUCCESS }}, nvml.SUCCESS
		},
		GpmMetricsGetFunc: func(m *nvml.GpmMetricsGetType) nvml.Return { return f.metrics(m) },
	}
}

// GPM percentages and MiB/s become ratios and bytes/s; an unsupported
// metric is marked so; the first sample gives no window yet.
func TestNVMLGPMConversion(t *testing.T) {
	f := &fakeNVML{lost: map[int]bool{}}
	f.metrics = func(m *nvml.GpmMetricsGetType) nvml.Return {
		if m.NumMetrics != uint32(gpu.NumFields) || m.Sample1 == nil || m.Sample2 == nil || m.Sample1 == m.Sample2 {
			t.Errorf("bad GpmMetricsGet request: %+v", m.NumMetrics)
		}
		for i := range m.NumMetrics {
			switch nvml.GpmMetricId(m.Metrics[i].MetricId) {
			case nvml.GPM_METRIC_SM_OCCUPANCY:
				m.Metrics[i].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			case nvml.GPM_METRIC_PCIE_RX_PER_SEC:
				m.Metrics[i].Value = 2.15 // MiB/s
			default:
				m.Metrics[i].Value = 92.167 // %
			}
		}
		return nvml.SUCCESS
	}
	s, err := startNVML(f.lib(2, true, nvml.SUCCESS), time.Hour, true, nopLog)
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	d := s.devices()
	if len(d) != 2 || !d[0].Values[gpu.SMActive].At.IsZero() {
		t.Fatalf("first round: %+v (a GPM window needs two samples)", d)
	}
	s.sample(time.Now())
	d = s.devices()
	if got := d[0].Values[gpu.SMActive].V; math.Abs(got-0.92167) > 1e-12 {
		t.Errorf("sm_active = %v, want 0.92167", got)
	}
	if got := d[0].Values[gpu.PCIeReceived].V; got != 2.15*1048576 {
		t.Errorf("pcie_received = %v, want %v", got, 2.15*1048576)
	}
	if d[0].Support[gpu.SMOccupancy] != gpu.Unsupported || !d[0].Values[gpu.SMOccupancy].At.IsZero() {
		t.Errorf("unsupported metric: %+v %+v", d[0].Support[gpu.SMOccupancy], d[0].Values[gpu.SMOccupancy])
	}
	if d[1].PCIBusID != "0000:1a:00.0" || d[1].PIDs[0] != 1001 || d[1].Utilization.V != 0.95 {
		t.Errorf("inventory: %+v", d[1])
	}
}

// Without GPM every field is unsupported (NVML basics only); a GPU that is
// lost is dropped; a failed Init is an error and nothing else is called.
func TestNVMLBasicsLostGPUAndInitFailure(t *testing.T) {
	f := &fakeNVML{lost: map[int]bool{}}
	f.metrics = func(*nvml.GpmMetricsGetType) nvml.Return {
		t.Error("GPM called without GPM support")
		return nvml.SUCCESS
	}
	s, err := startNVML(f.lib(2, false, nvml.SUCCESS), time.Hour, true, nopLog)
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	if s.anyGPM || s.devices()[0].Support[gpu.SMActive] != gpu.Unsupported {
		t.Error("fields not marked unsupported without GPM")
	}
	f.mu.Lock()
	f.lost[1] = true
	f.mu.Unlock()
	s.sample(time.Now())
	if d := s.devices(); len(d) != 1 || d[0].UUID != "GPU-a" {
		t.Errorf("after GPU 1 was lost: %+v", d)
	}

	lib := f.lib(1, true, nvml.ERROR_LIBRARY_NOT_FOUND)
	lib.DeviceGetCountFunc = func() (int, nvml.Return) { t.Error("NVML called after a failed Init"); return 0, nvml.SUCCESS }
	if _, err := startNVML(lib, time.Hour, true, nopLog); !errors.Is(err, gpu.ErrNoGPU) {
		t.Errorf("startNVML with a failed Init = %v, want ErrNoGPU", err)
	}
}

// fakeDCGM is a host engine that can go away and come back.
type fakeDCGM struct {
	mu        sync.Mutex
	up        bool
	connected bool
	connects  int
	values    map[dcgm.Short]dcgm.FieldValue_v1
}

func (f *fakeDCGM) Connect() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.connects++
	if !f.up {
		return errors.New("error connecting to nv-hostengine: Host engine connection invalid/disconnected")
	}
	f.connected = true
	return nil
}
func (f *fakeDCGM) Watch([]dcgm.Short, time.Duration) error { return nil }
func (f *fakeDCGM) check() error {
	if !f.connected {
		panic("DCGM called while not connected") // the real library would exit 127
	}
	if !f.up {
		return errors.New("Host engine connection invalid/disconnected")
	}
	return nil
}
func (f *fakeDCGM) GPUs() ([]dcgmGPUInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(); err != nil {
		return nil, err
	}
	return []dcgmGPUInfo{{ID: 0, UUID: "GPU-a", Name: "NVIDIA H200", Bus: "0000:1a:00.0"}}, nil
}
func (f *fakeDCGM) Latest(_ uint, fields []dcgm.Short) ([]dcgm.FieldValue_v1, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(); err != nil {
		return nil, err
	}
	var out []dcgm.FieldValue_v1
	for _, id := range fields {
		if v, ok := f.values[id]; ok {
			out = append(out, v)
		}
	}
	return out, nil
}
func (f *fakeDCGM) Close() {
	f.mu.Lock()
	f.connected = false
	f.mu.Unlock()
}

func fp64(id dcgm.Short, v float64, ts time.Time) dcgm.FieldValue_v1 {
	fv := dcgm.FieldValue_v1{FieldID: id, FieldType: dcgm.DCGM_FT_DOUBLE, TS: ts.UnixMicro()}
	binary.LittleEndian.PutUint64(fv.Value[:], math.Float64bits(v))
	return fv
}

func i64(id dcgm.Short, v int64, ts time.Time) dcgm.FieldValue_v1 {
	fv := dcgm.FieldValue_v1{FieldID: id, FieldType: dcgm.DCGM_FT_INT64, TS: ts.UnixMicro()}
	binary.LittleEndian.PutUint64(fv.Value[:], uint64(v))
	return fv
}

func TestDCGMDecodeBlanks(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		fv   dcgm.FieldValue_v1
		v    float64
		want gpu.Support
	}{
		{fp64(1002, 0.777, now), 0.777, gpu.Supported},
		{fp64(1002, dcgm.DCGM_FT_FP64_BLANK, now), math.NaN(), gpu.Supported},
		{fp64(1002, dcgm.DCGM_FT_FP64_NOT_SUPPORTED, now), math.NaN(), gpu.Unsupported},
		{i64(1009, 498948, now), 498948, gpu.Supported},
		{i64(1009, dcgm.DCGM_FT_INT64_BLANK, now), math.NaN(), gpu.Supported},
		{i64(1010, dcgm.DCGM_FT_INT64_NOT_FOUND, now), math.NaN(), gpu.Unsupported},
		{dcgm.FieldValue_v1{FieldID: 1001, Status: -5}, math.NaN(), gpu.Unknown},
	} {
		v, s := decode(tc.fv)
		if s != tc.want || (math.IsNaN(tc.v) != math.IsNaN(v)) || (!math.IsNaN(v) && v != tc.v) {
			t.Errorf("decode(%d type %c) = %v %v, want %v %v", tc.fv.FieldID, rune(tc.fv.FieldType), v, s, tc.v, tc.want)
		}
	}
}

// The host engine stops and restarts: the poller publishes no values while
// it is away (dcgm_up false) and reconnects by itself.
func TestDCGMReconnect(t *testing.T) {
	now := time.Now()
	f := &fakeDCGM{up: true, values: map[dcgm.Short]dcgm.FieldValue_v1{
		1002: fp64(1002, 0.92, now), 1009: i64(1009, 498948, now), 1003: fp64(1003, dcgm.DCGM_FT_FP64_BLANK, now),
	}}
	p := &dcgmPoller{api: f, interval: 10 * time.Millisecond, logger: log.NewNopLogger(), fields: dcgmFields[:],
		minBackoff: 5 * time.Millisecond, maxBackoff: 40 * time.Millisecond,
		values: map[string]*dcgmGPU{}, quit: make(chan struct{}), done: make(chan struct{})}
	go p.loop(p.connect())
	defer p.stop()
	waitFor := func(what string, cond func(bool, map[string]*dcgmGPU) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if cond(p.latest()) {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("timed out waiting for %s", what)
	}
	waitFor("values", func(up bool, v map[string]*dcgmGPU) bool {
		g := v["GPU-a"]
		return up && g != nil && g.values[gpu.SMActive].V == 0.92 && g.values[gpu.PCIeTransmitted].V == 498948 && g.values[gpu.SMOccupancy].At.IsZero()
	})
	f.mu.Lock()
	f.up = false
	f.mu.Unlock()
	waitFor("down", func(up bool, v map[string]*dcgmGPU) bool { return !up && len(v) == 0 })
	f.mu.Lock()
	before := f.connects
	f.up = true
	f.mu.Unlock()
	waitFor("reconnect", func(up bool, v map[string]*dcgmGPU) bool { return up && v["GPU-a"] != nil })
	f.mu.Lock()
	if f.connects <= before {
		t.Error("no reconnect attempt")
	}
	f.mu.Unlock()
}

// auto picks DCGM when the host engine answers, NVML GPM otherwise.
func TestAutoSource(t *testing.T) {
	f := &fakeNVML{lost: map[int]bool{}}
	f.metrics = func(*nvml.GpmMetricsGetType) nvml.Return { return nvml.SUCCESS }
	b, err := newBackend(gpu.Options{Source: "auto", Interval: time.Hour, Logger: log.NewNopLogger()}, f.lib(1, true, nvml.SUCCESS), &fakeDCGM{up: false})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := b.Snapshot()
	b.Close()
	if s.Source != "nvml_gpm" || s.DCGMUp != nil {
		t.Errorf("auto without DCGM: source %q", s.Source)
	}
	dc := &fakeDCGM{up: true, values: map[dcgm.Short]dcgm.FieldValue_v1{1004: fp64(1004, 0.5, time.Now())}}
	b, err = newBackend(gpu.Options{Source: "auto", Interval: time.Hour, Logger: log.NewNopLogger()}, f.lib(1, true, nvml.SUCCESS), dc)
	if err != nil {
		t.Fatal(err)
	}
	s, _ = b.Snapshot()
	b.Close()
	if s.Source != "dcgm" || s.DCGMUp == nil || !*s.DCGMUp || s.Devices[0].Values[gpu.TensorActive].V != 0.5 || s.Devices[0].PIDs[0] != 1000 {
		t.Errorf("auto with DCGM: %+v", s)
	}
	if _, err := newBackend(gpu.Options{Source: "bogus", Interval: time.Hour, Logger: log.NewNopLogger()}, f.lib(1, true, nvml.SUCCESS), dc); err == nil {
		t.Error("unknown source accepted")
	}
}

// NVLink through NVML (the fake): links are found once, state, error
// counters and payload bytes are sampled every round, unsupported counters
// are absent, and a PCIe-only GPU has no links.
func TestNVMLNVLinks(t *testing.T) {
	f := &fakeNVML{lost: map[int]bool{}, nvlinks: 4, linkDown: map[int]bool{2: true}}
	s, err := startNVML(f.lib(2, false, nvml.SUCCESS), time.Hour, false, nopLog)
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	devs := s.devices()
	if len(devs) != 2 || len(devs[0].NVLinks) != 4 || devs[1].NVLinks != nil {
		t.Fatalf("links: %d and %v", len(devs[0].NVLinks), devs[1].NVLinks)
	}
	l := devs[0].NVLinks[2]
	if l.Link != 2 || l.Up || !devs[0].NVLinks[3].Up {
		t.Errorf("state: %+v", devs[0].NVLinks)
	}
	if e := l.Errors[gpu.NVLinkRecovery]; !e.OK || e.V != 21 {
		t.Errorf("recovery counter %+v", e)
	}
	if l.Errors[gpu.NVLinkCRCData].OK {
		t.Error("unsupported CRC data counter reported")
	}
	if !l.TxBytes.OK || l.TxBytes.V != 3000*1024 || l.RxBytes.V != 3001*1024 {
		t.Errorf("bytes %+v %+v", l.TxBytes, l.RxBytes)
	}
	f.mu.Lock()
	f.linkErrs = 5
	f.mu.Unlock()
	s.sample(time.Now())
	if e := s.devices()[0].NVLinks[2].Errors[gpu.NVLinkReplay]; e.V != 25 {
		t.Errorf("replay after a round %+v", e)
	}
}

// Per-process utilization: the samples of the last window per compute
// process, 0 for one without samples, NOT_FOUND (no sample since) is every
// process idle, another error leaves it unknown, NOT_SUPPORTED is not
// asked again.
func TestNVMLProcessUtilization(t *testing.T) {
	f := &fakeNVML{lost: map[int]bool{}}
	f.metrics = func(*nvml.GpmMetricsGetType) nvml.Return { return nvml.SUCCESS }
	var mu sync.Mutex
	answer, calls := nvml.SUCCESS, 0
	var sinceSeen uint64
	f.procUtil = func(i int, since uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if i != 0 {
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		sinceSeen = since
		if answer != nvml.SUCCESS {
			return nil, answer
		}
		// GPU 0's compute process is pid 1000: busy in every 1 s period of
		// the last 5 s.
		now := uint64(time.Now().UnixMicro())
		var out []nvml.ProcessUtilizationSample
		for k := uint64(0); k < 5; k++ {
			out = append(out, nvml.ProcessUtilizationSample{Pid: 1000, TimeStamp: now - k*1_000_000 - 1000, SmUtil: 100, MemUtil: 20})
		}
		return out, nvml.SUCCESS
	}
	s, err := startNVML(f.lib(2, false, nvml.SUCCESS), time.Hour, true, nopLog)
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	s.procWindow = 5 * time.Second // an interval of 1 s
	s.sample(time.Now())
	d := s.devices()
	if len(d[0].Processes) != 1 || d[0].Processes[0].PID != 1000 || d[0].Processes[0].SM < 0.99 || d[0].Processes[0].Mem < 0.19 || d[0].Processes[0].Mem > 0.21 {
		t.Errorf("GPU 0: %+v, want pid 1000 sm 1 mem 0.2", d[0].Processes)
	}
	if w := time.Since(time.UnixMicro(int64(sinceSeen))); w < 4*time.Second || w > 7*time.Second {
		t.Errorf("asked for samples since %s ago, want the 5 s window", w)
	}
	if d[1].Processes != nil || !d[1].ProcessesAt.IsZero() {
		t.Errorf("GPU 1 (NOT_SUPPORTED): %+v, want unknown", d[1].Processes)
	}
	mu.Lock()
	answer = nvml.ERROR_NOT_FOUND
	mu.Unlock()
	s.sample(time.Now())
	if d := s.devices(); len(d[0].Processes) != 1 || d[0].Processes[0].SM != 0 {
		t.Errorf("NOT_FOUND: %+v, want pid 1000 at 0", d[0].Processes)
	}
	mu.Lock()
	answer = nvml.ERROR_UNKNOWN
	before := calls
	mu.Unlock()
	s.sample(time.Now())
	if d := s.devices(); d[0].Processes != nil {
		t.Errorf("ERROR_UNKNOWN: %+v, want unknown", d[0].Processes)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls-before != 1 {
		t.Errorf("%d calls in a round after GPU 1 said NOT_SUPPORTED, want 1 (GPU 0 only)", calls-before)
	}
}
