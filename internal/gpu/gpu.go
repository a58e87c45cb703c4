// Package gpu holds the types shared by the gpu collector and its NVML/DCGM
// backends. It has no cgo: the cgo code lives in package nvidia alone, and
// the collector tests use fakes of Backend.
package gpu

import (
	"errors"
	"time"

	"github.com/go-kit/log"
)

// Field is one GPU activity measurement, in base units.
type Field int

// The fields, in DCGM profiling field order (1001-1005, 1009, 1010).
const (
	GraphicsEngineActive Field = iota // DCGM 1001 / GPM GRAPHICS_UTIL, ratio
	SMActive                          // 1002 / SM_UTIL, ratio
	SMOccupancy                       // 1003 / SM_OCCUPANCY, ratio
	TensorActive                      // 1004 / ANY_TENSOR_UTIL, ratio
	DRAMActive                        // 1005 / DRAM_BW_UTIL, ratio
	PCIeTransmitted                   // 1009 / PCIE_TX_PER_SEC, bytes/s
	PCIeReceived                      // 1010 / PCIE_RX_PER_SEC, bytes/s
	NumFields
)

var fieldNames = [NumFields]string{"graphics_engine_active", "sm_active", "sm_occupancy", "tensor_active", "dram_active", "pcie_transmitted", "pcie_received"}

// Name returns the field's label value in fabric_gpu_field_supported.
func (f Field) Name() string { return fieldNames[f] }

// Value is a sample and when it was taken.
type Value struct {
	V  float64
	At time.Time
}

// Support says whether a backend can deliver a field for a GPU.
type Support int8

// Support states.
const (
	Unknown Support = iota
	Supported
	Unsupported
)

// Device is one GPU as its backend sees it.
type Device struct {
	Index    int
	UUID     string
	Name     string
	PCIBusID string // sysfs form: 0000:18:00.0
	// Values holds the latest sample of each field; a field with no
	// current sample (blank, unsupported, not yet sampled) has At zero.
	Values  [NumFields]Value
	Support [NumFields]Support
	// Utilization is NVML's utilization.gpu (ratio) when known.
	Utilization *Value
	// PIDs of compute processes, in the driver's (host) PID namespace.
	PIDs []uint32
	// Processes is each compute process's activity over ProcessWindow
	// ending at ProcessesAt (NVML per-process utilization); nil when the
	// backend cannot tell (DCGM, unsupported, the call failed).
	Processes     []ProcessActivity
	ProcessesAt   time.Time
	ProcessWindow time.Duration
	// NVLinks are the GPU's NVLink links (none on PCIe-only GPUs).
	NVLinks []NVLink
	// Peers is NVML's P2P status towards each other GPU (read once).
	Peers []P2PPeer
}

// NVLink error counters (NVML nvmlNvLinkErrorCounter_t).
const (
	NVLinkReplay   = iota // NVML_NVLINK_ERROR_DL_REPLAY: data link transmit replays
	NVLinkRecovery        // NVML_NVLINK_ERROR_DL_RECOVERY: data link recoveries (the link retrained)
	NVLinkCRCFlit         // NVML_NVLINK_ERROR_DL_CRC_FLIT: flow-control digit CRC errors
	NVLinkCRCData         // NVML_NVLINK_ERROR_DL_CRC_DATA: data CRC errors
	NumNVLinkErrors
)

var nvlinkErrorNames = [NumNVLinkErrors]string{"replay", "recovery", "crc_flit", "crc_data"}

// NVLinkErrorName returns the type label value of NVLink error counter i
// (0 <= i < NumNVLinkErrors).
func NVLinkErrorName(i int) string { return nvlinkErrorNames[i] }

// Counter is a cumulative value and whether the source reported it.
type Counter struct {
	V  uint64
	OK bool
}

// NVLink is one NVLink link of a GPU.
type NVLink struct {
	Link   int
	Up     bool // NVML link state enabled
	Errors [NumNVLinkErrors]Counter
	// Payload bytes sent and received over the link (NVML field values
	// NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX, KiB in NVML).
	TxBytes, RxBytes Counter
}

// Snapshot is what one scrape reads. Backends build it in the background,
// so reading it never waits for the GPU.
type Snapshot struct {
	Source        string // "dcgm", "nvml_gpm" or "nvml"
	DriverVersion string
	Devices       []Device
	// DCGMUp is set when DCGM is the source: whether the host engine is
	// connected now.
	DCGMUp *bool
	// Interval is the sampling period; values older than a few periods are
	// stale.
	Interval time.Duration
}

// Backend delivers GPU snapshots.
type Backend interface {
	Snapshot() (Snapshot, error)
	Close() error
}

// Options select and configure a backend.
type Options struct {
	Source       string        // auto, dcgm or nvml
	DCGMAddress  string        // host:port of nv-hostengine
	DCGMEmbedded bool          // run the host engine inside the exporter
	Interval     time.Duration // sampling period (GPM window, DCGM update period)
	Logger       log.Logger    // nil: no logging
}

// ErrNotBuilt is returned when the binary was built without GPU support.
var ErrNotBuilt = errors.New("built without GPU support (CGO_ENABLED=0 or -tags nogpu)")

// ErrNoGPU is returned when no NVIDIA driver or GPU is present.
var ErrNoGPU = errors.New("no NVIDIA GPU or driver")

// BusIDFromNVML turns NVML's "00000000:18:00.0" into sysfs' "0000:18:00.0".
func BusIDFromNVML(s string) string {
	if len(s) == 16 && s[8] == ':' { // 8-digit domain
		s = s[4:]
	}
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'F' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}
