//go:build cgo && !nogpu

// --record-nvml: what NVML says of each GPU, once a second, as JSON lines:
// utilization.gpu, the compute processes, every per-process utilization
// sample NVML still holds (nvmlDeviceGetProcessUtilization from 0: the
// driver's whole buffer, to learn its period and depth) and the GPM
// activity of the last second. The drill's states are recorded with it
// (collector/fixtures/gpu/hang/) and the exporter's per-process figures
// are tested on what it recorded.

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

type nvmlRecord struct {
	T       time.Time          `json:"t"`
	Label   string             `json:"label,omitempty"`
	GPU     int                `json:"gpu"`
	Util    *uint32            `json:"util_gpu,omitempty"`
	PIDs    []uint32           `json:"pids"`
	Ret     string             `json:"process_utilization_return"`
	Samples []nvmlProcSample   `json:"samples"`
	GPM     map[string]float64 `json:"gpm,omitempty"`
}

type nvmlProcSample struct {
	PID uint32 `json:"pid"`
	TS  uint64 `json:"ts_us"`
	SM  uint32 `json:"sm"`
	Mem uint32 `json:"mem"`
}

var recordGPM = map[string]nvml.GpmMetricId{
	"graphics": nvml.GPM_METRIC_GRAPHICS_UTIL, "sm": nvml.GPM_METRIC_SM_UTIL, "tensor": nvml.GPM_METRIC_ANY_TENSOR_UTIL,
	"dram": nvml.GPM_METRIC_DRAM_BW_UTIL, "occupancy": nvml.GPM_METRIC_SM_OCCUPANCY,
}

// recordNVML writes a record per GPU every second for d; the label of
// each record is the content of labelFile at that time ("" if none).
func recordNVML(out *os.File, d time.Duration, labelFile string) error {
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("NVML init: %s", nvml.ErrorString(ret))
	}
	defer nvml.Shutdown()
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("NVML device count: %s", nvml.ErrorString(ret))
	}
	type dev struct {
		h    nvml.Device
		prev nvml.GpmSample
	}
	var devs []dev
	for i := range n {
		h, _ := nvml.DeviceGetHandleByIndex(i)
		s, _ := nvml.GpmSampleAlloc()
		h.GpmSampleGet(s)
		devs = append(devs, dev{h, s})
	}
	enc := json.NewEncoder(out)
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(time.Second)
		label := ""
		if b, err := os.ReadFile(labelFile); err == nil {
			label = string(b)
		}
		for i, dv := range devs {
			r := nvmlRecord{T: time.Now(), Label: label, GPU: i, PIDs: []uint32{}, Samples: []nvmlProcSample{}}
			if u, ret := dv.h.GetUtilizationRates(); ret == nvml.SUCCESS {
				r.Util = &u.Gpu
			}
			if ps, ret := dv.h.GetComputeRunningProcesses(); ret == nvml.SUCCESS {
				for _, p := range ps {
					r.PIDs = append(r.PIDs, p.Pid)
				}
			}
			ss, ret := dv.h.GetProcessUtilization(0)
			r.Ret = nvml.ErrorString(ret)
			for _, s := range ss {
				r.Samples = append(r.Samples, nvmlProcSample{s.Pid, s.TimeStamp, s.SmUtil, s.MemUtil})
			}
			cur, _ := nvml.GpmSampleAlloc()
			if dv.h.GpmSampleGet(cur) == nvml.SUCCESS {
				req := &nvml.GpmMetricsGetType{Sample1: dv.prev, Sample2: cur}
				var names []string
				for name, id := range recordGPM {
					req.Metrics[req.NumMetrics].MetricId = uint32(id)
					req.NumMetrics++
					names = append(names, name)
				}
				if nvml.GpmMetricsGet(req) == nvml.SUCCESS {
					r.GPM = map[string]float64{}
					for k, name := range names {
						if nvml.Return(req.Metrics[k].NvmlReturn) == nvml.SUCCESS {
							r.GPM[name] = req.Metrics[k].Value / 100
						}
					}
				}
				dv.prev.Free()
				devs[i].prev = cur
			}
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
	}
	return nil
}
