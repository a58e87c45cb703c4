//go:build cgo && !nogpu

// Package nvidia implements gpu.Backend with NVML (go-nvml) and DCGM
// (go-dcgm). It is the only package with cgo. Both libraries are loaded
// with dlopen at run time; calling any of their functions after a failed
// Init kills the process (symbol lookup error, exit 127), so every call
// here is gated on a successful Init.
package nvidia

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/fabric-exporter/fabric_exporter/internal/gpu"
)

// New starts the backend the options select:
//   - dcgm: DCGM profiling fields (reconnecting in the background while
//     the host engine is away); NVML, when present, adds inventory, PIDs and
//     utilization;
//   - nvml: NVML only, with GPM fields on GPUs that support GPM;
//   - auto: dcgm if the host engine answers now, else nvml.
func New(o gpu.Options) (gpu.Backend, error) {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Logger == nil {
		o.Logger = log.NewNopLogger()
	}
	var dc dcgmAPI = &realDCGM{address: o.DCGMAddress, embedded: o.DCGMEmbedded}
	return newBackend(o, nvml.New(), dc)
}

// newBackend wires the samplers; tests pass fakes of both libraries.
func newBackend(o gpu.Options, lib nvml.Interface, dc dcgmAPI) (*backend, error) {
	b := &backend{opts: o}
	useDCGM := false
	switch o.Source {
	case "dcgm":
		useDCGM = true
	case "auto", "":
		if err := dc.Connect(); err == nil {
			useDCGM = true
			dc.Close() // the poller connects for real below
		} else {
			msg := "DCGM host engine not reachable, using NVML"
			if strings.Contains(err.Error(), "not found") || strings.Contains(err.Error(), "cannot open shared object") {
				msg = "DCGM library not installed (libdcgm.so.4), using NVML"
			}
			level.Info(o.Logger).Log("msg", msg, "err", err)
		}
	case "nvml":
	default:
		return nil, fmt.Errorf("unknown GPU source %q (want auto, dcgm or nvml)", o.Source)
	}
	nv, err := startNVML(lib, o.Interval, !useDCGM, o.Logger)
	if err != nil && !useDCGM {
		return nil, err
	}
	if err == nil {
		b.nvml = nv
	}
	if useDCGM {
		b.dcgm = startDCGM(dc, o.Interval, o.Logger)
	}
	return b, nil
}

type backend struct {
	opts gpu.Options
	nvml *nvmlSampler // nil when NVML is absent (remote DCGM only)
	dcgm *dcgmPoller  // nil unless DCGM is the source
	once sync.Once
}

func (b *backend) Snapshot() (gpu.Snapshot, error) {
	s := gpu.Snapshot{Interval: b.opts.Interval}
	if b.nvml != nil {
		s.DriverVersion = b.nvml.driverVersion
		s.Devices = b.nvml.devices()
		s.Source = "nvml"
		if b.nvml.anyGPM && b.dcgm == nil {
			s.Source = "nvml_gpm"
		}
	}
	if b.dcgm != nil {
		s.Source = "dcgm"
		up, values := b.dcgm.latest()
		s.DCGMUp = &up
		s.Devices = mergeDCGM(s.Devices, values)
	}
	return s, nil
}

// mergeDCGM puts DCGM's fields on the NVML devices with the same UUID; a
// GPU DCGM knows and NVML does not is added as DCGM describes it.
func mergeDCGM(devs []gpu.Device, values map[string]*dcgmGPU) []gpu.Device {
	seen := map[string]bool{}
	for i := range devs {
		d := &devs[i]
		d.Support = [gpu.NumFields]gpu.Support{}
		d.Values = [gpu.NumFields]gpu.Value{}
		if v, ok := values[d.UUID]; ok {
			d.Values, d.Support = v.values, v.support
			seen[d.UUID] = true
		}
	}
	for uuid, v := range values {
		if !seen[uuid] {
			devs = append(devs, gpu.Device{Index: v.id, UUID: uuid, Name: v.name, PCIBusID: v.bus, Values: v.values, Support: v.support})
		}
	}
	return devs
}

func (b *backend) Close() error {
	b.once.Do(func() {
		if b.dcgm != nil {
			b.dcgm.stop()
		}
		if b.nvml != nil {
			b.nvml.stop()
		}
	})
	return nil
}

var errLost = errors.New("GPU lost")
