//go:build cgo && !nogpu

package nvidia

import (
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

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
	logf          func(level, msg string, kv ...any)
	driverVersion string
	anyGPM        bool
	gpus          []*nvmlGPU

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
}

func startNVML(lib nvml.Interface, interval time.Duration, withGPM bool, logf func(string, string, ...any)) (*nvmlSampler, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: NVML init: %s", gpu.ErrNoGPU, lib.ErrorString(ret))
	}
	s := &nvmlSampler{lib: lib, interval: interval, logf: logf, quit: make(chan struct{}), done: make(chan struct{})}
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
			logf("warn", "skipping GPU", "index", i, "err", lib.ErrorString(ret))
			continue
		}
		g := &nvmlGPU{h: h, dev: gpu.Device{Index: i}}
		g.dev.UUID, _ = h.GetUUID()
		g.dev.Name, _ = h.GetName()
		if pci, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
			g.dev.PCIBusID = gpu.BusIDFromNVML(int8String(pci.BusId[:]))
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
			s.logf("warn", "GPU no longer answers; dropping it", "gpu", g.dev.Index, "uuid", g.dev.UUID, "err", err)
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
