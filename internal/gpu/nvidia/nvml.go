//go:build cgo && !nogpu

package nvidia

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/fabric-exporter/fabric_exporter/internal/gpu"
)

// gpmMetrics are the GPM metrics behind the DCGM fields 1001-1005, 1009
// and 1010 (tech brief §5.2), with the factor to base units.
var gpmMetrics = [gpu.NumFields]struct {
	id    nvml.GpmMetricId
	scale float64
}{
	gpu.GraphicsEngineActive: {nvml.GPM_METRIC_GRAPHICS_UTIL, 0.01},      // %
	gpu.SMActive:             {nvml.GPM_METRIC_SM_UTIL, 0.01},            // %
	gpu.SMOccupancy:          {nvml.GPM_METRIC_SM_OCCUPANCY, 0.01},       // %
	gpu.TensorActive:         {nvml.GPM_METRIC_ANY_TENSOR_UTIL, 0.01},    // %
	gpu.DRAMActive:           {nvml.GPM_METRIC_DRAM_BW_UTIL, 0.01},       // %
	gpu.PCIeTransmitted:      {nvml.GPM_METRIC_PCIE_TX_PER_SEC, 1 << 20}, // MiB/s
	gpu.PCIeReceived:         {nvml.GPM_METRIC_PCIE_RX_PER_SEC, 1 << 20}, // MiB/s
}

// nvmlSampler reads inventory once and, every interval in the background,
// the compute processes, utilization and (with GPM) the activity fields of
// the last window. devices() only copies the latest results.
type nvmlSampler struct {
	lib           nvml.Interface
	interval      time.Duration
	logger        log.Logger
	driverVersion string
	anyGPM        bool
	gpus          []*nvmlGPU
	procWindow    time.Duration // tests: the per-process window (0: from the interval)

	mu     sync.Mutex
	latest []gpu.Device

	quit chan struct{}
	done chan struct{}
}

type nvmlGPU struct {
	dev     gpu.Device // static part: index, uuid, name, bus
	h       nvml.Device
	gpm     bool
	samples [2]nvml.GpmSample
	cur     int
	primed  bool
	lost    bool
	links   []int // NVLink links NVML reports a state for
	// noProcUtil: the GPU answered NOT_SUPPORTED to per-process
	// utilization; not asked again.
	noProcUtil bool
}

func startNVML(lib nvml.Interface, interval time.Duration, withGPM bool, logger log.Logger) (*nvmlSampler, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: NVML init: %s", gpu.ErrNoGPU, lib.ErrorString(ret))
	}
	s := &nvmlSampler{lib: lib, interval: interval, logger: logger, quit: make(chan struct{}), done: make(chan struct{})}
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		s.driverVersion = v
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		lib.Shutdown()
		return nil, fmt.Errorf("NVML device count: %s", lib.ErrorString(ret))
	}
	for i := range n {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			level.Warn(logger).Log("msg", "skipping GPU", "index", i, "err", lib.ErrorString(ret))
			continue
		}
		g := &nvmlGPU{h: h, dev: gpu.Device{Index: i}}
		g.dev.UUID, _ = h.GetUUID()
		g.dev.Name, _ = h.GetName()
		if pci, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
			g.dev.PCIBusID = gpu.BusIDFromNVML(int8String(pci.BusId[:]))
		}
		for link := range nvml.NVLINK_MAX_LINKS {
			if _, ret := h.GetNvLinkState(link); ret == nvml.SUCCESS {
				g.links = append(g.links, link)
			}
		}
		if withGPM {
			if sup, ret := h.GpmQueryDeviceSupport(); ret == nvml.SUCCESS && sup.IsSupportedDevice != 0 {
				a, r1 := lib.GpmSampleAlloc()
				b, r2 := lib.GpmSampleAlloc()
				if r1 == nvml.SUCCESS && r2 == nvml.SUCCESS {
					g.gpm, g.samples = true, [2]nvml.GpmSample{a, b}
					s.anyGPM = true
				}
			}
		}
		s.gpus = append(s.gpus, g)
	}
	readPeers(s.gpus)
	s.sample(time.Now())
	go s.loop()
	return s, nil
}

func int8String(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

func (s *nvmlSampler) loop() {
	defer close(s.done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case now := <-t.C:
			s.sample(now)
		}
	}
}

// sample takes one round of readings and publishes them.
func (s *nvmlSampler) sample(now time.Time) {
	out := make([]gpu.Device, 0, len(s.gpus))
	for _, g := range s.gpus {
		if g.lost {
			continue
		}
		d := g.dev
		if err := s.sampleGPU(g, &d, now); err != nil {
			g.lost = true
			level.Warn(s.logger).Log("msg", "GPU no longer answers; dropping it", "gpu", g.dev.Index, "uuid", g.dev.UUID, "err", err)
			continue
		}
		out = append(out, d)
	}
	s.mu.Lock()
	s.latest = out
	s.mu.Unlock()
}

func gone(ret nvml.Return) bool {
	return ret == nvml.ERROR_GPU_IS_LOST || ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_UNINITIALIZED
}

func (s *nvmlSampler) sampleGPU(g *nvmlGPU, d *gpu.Device, now time.Time) error {
	procs, ret := g.h.GetComputeRunningProcesses()
	if gone(ret) {
		return fmt.Errorf("%w: %s", errLost, s.lib.ErrorString(ret))
	}
	for _, p := range procs {
		d.PIDs = append(d.PIDs, p.Pid)
	}
	if u, ret := g.h.GetUtilizationRates(); ret == nvml.SUCCESS {
		d.Utilization = &gpu.Value{V: float64(u.Gpu) / 100, At: now}
	}
	s.sampleProcesses(g, d, now)
	d.NVLinks = sampleNVLinks(g)
	if !g.gpm {
		for f := range d.Support {
			d.Support[f] = gpu.Unsupported
		}
		return nil
	}
	cur := g.samples[g.cur]
	if ret := g.h.GpmSampleGet(cur); ret != nvml.SUCCESS {
		if gone(ret) {
			return fmt.Errorf("%w: %s", errLost, s.lib.ErrorString(ret))
		}
		g.primed = false
		return nil
	}
	if g.primed {
		req := &nvml.GpmMetricsGetType{NumMetrics: uint32(gpu.NumFields), Sample1: g.samples[1-g.cur], Sample2: cur}
		for f, m := range gpmMetrics {
			req.Metrics[f].MetricId = uint32(m.id)
		}
		if ret := s.lib.GpmMetricsGet(req); ret == nvml.SUCCESS {
			for f, m := range gpmMetrics {
				r := nvml.Return(req.Metrics[f].NvmlReturn)
				switch r {
				case nvml.SUCCESS:
					d.Values[f] = gpu.Value{V: req.Metrics[f].Value * m.scale, At: now}
					d.Support[f] = gpu.Supported
				case nvml.ERROR_NOT_SUPPORTED:
					d.Support[f] = gpu.Unsupported
				}
			}
		}
	}
	g.cur, g.primed = 1-g.cur, true
	return nil
}

// processWindow is the window of per-process activity: several of the
// driver's sampling periods (1/6 s to 1 s), and several of ours.
func (s *nvmlSampler) processWindow() time.Duration {
	if s.procWindow > 0 {
		return s.procWindow
	}
	return min(max(5*time.Second, 3*s.interval), time.Minute)
}

// sampleProcesses reads the per-process utilization samples of the last
// window (nvmlDeviceGetProcessUtilization: NOT_FOUND is "no sample since",
// every process idle). Any other answer leaves the processes unknown.
func (s *nvmlSampler) sampleProcesses(g *nvmlGPU, d *gpu.Device, now time.Time) {
	if g.noProcUtil {
		return
	}
	w := s.processWindow()
	since := uint64(max(now.Add(-w).UnixMicro(), 0))
	var samples []nvml.ProcessUtilizationSample
	ret := nvml.ERROR_INSUFFICIENT_SIZE
	for try := 0; try < 3 && ret == nvml.ERROR_INSUFFICIENT_SIZE; try++ {
		// The buffer can grow between go-nvml's two calls.
		samples, ret = g.h.GetProcessUtilization(since)
	}
	switch ret {
	case nvml.SUCCESS, nvml.ERROR_NOT_FOUND:
	case nvml.ERROR_NOT_SUPPORTED:
		g.noProcUtil = true
		return
	default:
		return
	}
	ps := make([]gpu.ProcessSample, 0, len(samples))
	for _, x := range samples {
		ps = append(ps, gpu.ProcessSample{PID: x.Pid, At: time.UnixMicro(int64(x.TimeStamp)), SM: x.SmUtil, Mem: x.MemUtil})
	}
	d.Processes = gpu.ProcessActivityOf(ps, d.PIDs, now, w)
	d.ProcessesAt, d.ProcessWindow = now, w
}

// devices returns a copy of the latest round.
func (s *nvmlSampler) devices() []gpu.Device {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]gpu.Device, len(s.latest))
	copy(out, s.latest)
	return out
}

func (s *nvmlSampler) stop() {
	close(s.quit)
	<-s.done
	for _, g := range s.gpus {
		if g.gpm {
			g.samples[0].Free()
			g.samples[1].Free()
		}
	}
	s.lib.Shutdown()
}

// nvlinkErrorCounters maps gpu.NVLink* error indices to NVML counters.
var nvlinkErrorCounters = [gpu.NumNVLinkErrors]nvml.NvLinkErrorCounter{
	gpu.NVLinkReplay:   nvml.NVLINK_ERROR_DL_REPLAY,
	gpu.NVLinkRecovery: nvml.NVLINK_ERROR_DL_RECOVERY,
	gpu.NVLinkCRCFlit:  nvml.NVLINK_ERROR_DL_CRC_FLIT,
	gpu.NVLinkCRCData:  nvml.NVLINK_ERROR_DL_CRC_DATA,
}

// sampleNVLinks reads state, error counters and payload byte counters of
// the links found at startup. Values NVML does not return are left out.
func sampleNVLinks(g *nvmlGPU) []gpu.NVLink {
	if len(g.links) == 0 {
		return nil
	}
	out := make([]gpu.NVLink, 0, len(g.links))
	fv := make([]nvml.FieldValue, 0, 2*len(g.links))
	for _, link := range g.links {
		st, ret := g.h.GetNvLinkState(link)
		if ret != nvml.SUCCESS {
			continue
		}
		l := gpu.NVLink{Link: link, Up: st == nvml.FEATURE_ENABLED}
		for i, ctr := range nvlinkErrorCounters {
			if v, ret := g.h.GetNvLinkErrorCounter(link, ctr); ret == nvml.SUCCESS {
				l.Errors[i] = gpu.Counter{V: v, OK: true}
			}
		}
		out = append(out, l)
		fv = append(fv, nvml.FieldValue{FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ScopeId: uint32(link)},
			nvml.FieldValue{FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ScopeId: uint32(link)})
	}
	if ret := g.h.GetFieldValues(fv); ret != nvml.SUCCESS {
		return out
	}
	for i := range out {
		for j, dst := range []*gpu.Counter{&out[i].TxBytes, &out[i].RxBytes} {
			f := fv[2*i+j]
			if nvml.Return(f.NvmlReturn) == nvml.SUCCESS && int(f.ScopeId) == out[i].Link {
				if v, ok := fieldUint(f); ok {
					*dst = gpu.Counter{V: v * 1024, OK: true} // KiB
				}
			}
		}
	}
	return out
}

// fieldUint reads an unsigned field value.
func fieldUint(f nvml.FieldValue) (uint64, bool) {
	switch nvml.ValueType(f.ValueType) {
	case nvml.VALUE_TYPE_UNSIGNED_LONG_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG:
		return binary.NativeEndian.Uint64(f.Value[:]), true
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return uint64(binary.NativeEndian.Uint32(f.Value[:])), true
	}
	return 0, false
}
