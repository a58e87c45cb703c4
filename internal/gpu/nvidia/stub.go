//go:build !cgo || nogpu

// Package nvidia implements gpu.Backend with NVML (go-nvml) and DCGM
// (go-dcgm). This file is the build without GPU support.
package nvidia

import "github.com/fabric-exporter/fabric_exporter/internal/gpu"

// New reports that GPU support was not built in.
func New(gpu.Options) (gpu.Backend, error) { return nil, gpu.ErrNotBuilt }
