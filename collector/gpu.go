package collector

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/gpu"
	"github.com/fabric-exporter/fabric_exporter/internal/gpu/nvidia"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// GPUOptions configures the gpu collector.
type GPUOptions struct {
	Source       string        // auto, dcgm, nvml
	DCGMAddress  string        // nv-hostengine host:port
	DCGMEmbedded bool          // start the host engine inside the exporter
	Interval     time.Duration // sampling period
	Fixture      string        // JSON snapshot served instead of NVML/DCGM (demos, tests)
	// Backend overrides NVML/DCGM (tests).
	Backend func(gpu.Options) (gpu.Backend, error)
}

func gpuFlags(app *kingpin.Application, o *Options) {
	app.Flag("collector.gpu.source", "Where GPU activity comes from: auto (DCGM if its host engine answers at startup, else NVML GPM where the GPU supports it, else NVML without activity fields), dcgm or nvml.").
		Default("auto").EnumVar(&o.GPU.Source, "auto", "dcgm", "nvml")
	app.Flag("collector.gpu.dcgm-address", "Address of the DCGM host engine (nv-hostengine).").Default("localhost:5555").StringVar(&o.GPU.DCGMAddress)
	app.Flag("collector.gpu.dcgm-embedded", "Run the DCGM host engine inside the exporter instead of connecting to nv-hostengine.").BoolVar(&o.GPU.DCGMEmbedded)
	app.Flag("collector.gpu.fixture", "Serve the GPUs described in this JSON file instead of NVML/DCGM (demos and tests; see collector/fixtures/gpu).").PlaceHolder("FILE").Hidden().StringVar(&o.GPU.Fixture)
	app.Flag("collector.gpu.interval", "Sampling period of the GPU activity fields (DCGM update period, GPM window; at least 100ms).").Default("1s").DurationVar(&o.GPU.Interval)
}

// gpuRetryInterval bounds how often a missing NVML/DCGM is looked for again.
const gpuRetryInterval = time.Minute

type gpuCollector struct {
	env  Env
	opts *Options
	bo   gpu.Options
	make func(gpu.Options) (gpu.Backend, error)

	mu      sync.Mutex
	backend gpu.Backend
	lastTry time.Time
	lastErr error
	numa    map[string]string // PCI bus ID -> NUMA node ("" = none)

	info, proc, source, supported, dcgmUp, util *exposition.Family
	procSM, procMem                             *exposition.Family
	nvlinkUp, nvlinkErrors, nvlinkTx, nvlinkRx  *exposition.Family
	p2p                                         *exposition.Family
	fields                                      [gpu.NumFields]*exposition.Family
}

func newGPUCollector(env Env, o *Options) (Collector, error) {
	g := o.GPU
	if g.Interval == 0 {
		g.Interval = time.Second
	}
	if g.Interval < 100*time.Millisecond {
		return nil, fmt.Errorf("--collector.gpu.interval %s is below GPM's 100ms minimum", g.Interval)
	}
	if g.Source == "" {
		g.Source = "auto"
	}
	mk := g.Backend
	switch {
	case mk != nil:
	case g.Fixture != "":
		fb, err := gpu.NewFileBackend(g.Fixture)
		if err != nil {
			return nil, fmt.Errorf("--collector.gpu.fixture: %w", err)
		}
		mk = func(gpu.Options) (gpu.Backend, error) { return fb, nil }
	default:
		mk = nvidia.New
	}
	gg := prometheus.GaugeValue
	c := &gpuCollector{
		env: env, opts: o, make: mk, numa: map[string]string{},
		bo: gpu.Options{Source: g.Source, DCGMAddress: g.DCGMAddress, DCGMEmbedded: g.DCGMEmbedded, Interval: g.Interval, Logger: env.Logger},
		info: env.Families.NewFamily("fabric_gpu_info", "GPU metadata; numa_node comes from sysfs (\"\" when the kernel reports none).",
			gg, "gpu", "uuid", "name", "pci_bus_id", "numa_node", "driver_version"),
		proc: env.Families.NewFamily("fabric_gpu_process_info", "A compute process on the GPU (host PID namespace).", gg, "gpu", "uuid", "pid"),
		procSM: env.Families.NewFamily("fabric_gpu_process_utilization_ratio",
			"Fraction of the last window (5 s, or 3 sampling periods if longer, at most 1 m) in which a kernel of the process ran on the GPU (NVML per-process utilization samples, nvidia-smi pmon's sm; host PID namespace). 0: resident but idle, nothing launched. A spinning NCCL kernel that waits for a peer counts as running: read it with fabric_gpu_sm_active_ratio and fabric_gpu_dram_active_ratio of the GPU. Absent where NVML cannot tell (DCGM source, unsupported, the call failed).",
			gg, "gpu", "uuid", "pid"),
		procMem: env.Families.NewFamily("fabric_gpu_process_memory_utilization_ratio",
			"Fraction of the last window in which the process's kernels read or wrote device memory (NVML per-process utilization, nvidia-smi pmon's mem).", gg, "gpu", "uuid", "pid"),
		source:    env.Families.NewFamily("fabric_gpu_source_info", "Where the GPU activity fields come from: dcgm, nvml_gpm or nvml (no activity fields).", gg, "source"),
		supported: env.Families.NewFamily("fabric_gpu_field_supported", "1 if the source delivers the activity field for this GPU, 0 if not (its series is then absent).", gg, "gpu", "uuid", "field"),
		dcgmUp:    env.Families.NewFamily("fabric_dcgm_up", "1 while the exporter is connected to the DCGM host engine, 0 while it reconnects.", gg),
		util:      env.Families.NewFamily("fabric_gpu_utilization_ratio", "NVML utilization.gpu: fraction of the last sample period in which a kernel ran.", gg, "gpu", "uuid"),
		nvlinkUp:  env.Families.NewFamily("fabric_gpu_nvlink_up", "1 if the NVLink link is enabled (NVML link state), 0 if it is down; absent on GPUs without NVLink.", gg, "gpu", "uuid", "link"),
		nvlinkErrors: env.Families.NewFamily("fabric_gpu_nvlink_errors_total",
			"NVLink data-link errors per link (NVML error counters): replay (transmit replays), recovery (the link retrained), crc_flit, crc_data.", prometheus.CounterValue, "gpu", "uuid", "link", "type"),
		nvlinkTx: env.Families.NewFamily("fabric_gpu_nvlink_transmitted_bytes_total", "Payload bytes sent over the NVLink link (NVML field NVLINK_THROUGHPUT_DATA_TX).", prometheus.CounterValue, "gpu", "uuid", "link"),
		nvlinkRx: env.Families.NewFamily("fabric_gpu_nvlink_received_bytes_total", "Payload bytes received over the NVLink link (NVML field NVLINK_THROUGHPUT_DATA_RX).", prometheus.CounterValue, "gpu", "uuid", "link"),
		p2p: env.Families.NewFamily("fabric_gpu_p2p_status_info",
			"NVML's peer-to-peer status from the GPU to peer_gpu (nvmlDeviceGetP2PStatus, asked once when the backend starts), one series per ordered pair with one label per capability (read, write, nvlink, atomics, pci: P2P over PCIe) holding its status: ok, chipset_not_supported, gpu_not_supported, ioh_topology_not_supported, disabled_by_regkey, not_supported, unknown; \"\" (no label) where NVML returned an error for that capability. Absent where it did for all.",
			gg, "gpu", "peer_gpu", "read", "write", "nvlink", "atomics", "pci"),
	}
	for f, d := range [gpu.NumFields][2]string{
		{"fabric_gpu_graphics_engine_active_ratio", "Fraction of time the graphics engine was active (DCGM 1001, GPM GRAPHICS_UTIL)."},
		{"fabric_gpu_sm_active_ratio", "Fraction of cycles an SM had at least one warp (DCGM 1002, GPM SM_UTIL)."},
		{"fabric_gpu_sm_occupancy_ratio", "Resident warps over the maximum, averaged over SMs (DCGM 1003, GPM SM_OCCUPANCY)."},
		{"fabric_gpu_tensor_active_ratio", "Fraction of cycles any tensor pipe was active (DCGM 1004, GPM ANY_TENSOR_UTIL)."},
		{"fabric_gpu_dram_active_ratio", "Fraction of cycles the memory interface was active (DCGM 1005, GPM DRAM_BW_UTIL)."},
		{"fabric_gpu_pcie_transmitted_bytes_per_second", "PCIe bytes per second sent by the GPU, headers included (DCGM 1009, GPM PCIE_TX_PER_SEC)."},
		{"fabric_gpu_pcie_received_bytes_per_second", "PCIe bytes per second received by the GPU, headers included (DCGM 1010, GPM PCIE_RX_PER_SEC)."},
	} {
		c.fields[f] = env.Families.NewFamily(d[0], d[1], gg, "gpu", "uuid")
	}
	c.connect(time.Now())
	return c, nil
}

// connect creates the backend; called at startup and then at most every
// gpuRetryInterval while no GPU library or driver is found.
func (c *gpuCollector) connect(now time.Time) {
	c.lastTry = now
	b, err := c.make(c.bo)
	if err != nil {
		c.lastErr = err
		c.env.Once.Debug("gpu-backend", "msg", "no GPU backend", "err", err)
		return
	}
	c.env.Once.Clear("gpu-backend")
	c.backend, c.lastErr = b, nil
}

func (c *gpuCollector) Update(_ context.Context, b *exposition.Batch) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.backend == nil {
		if errors.Is(c.lastErr, gpu.ErrNotBuilt) {
			return notConfigured("%v", c.lastErr)
		}
		if now := time.Now(); now.Sub(c.lastTry) >= gpuRetryInterval {
			c.connect(now)
		}
		if c.backend == nil {
			return noHardware("%v", c.lastErr)
		}
	}
	snap, err := c.backend.Snapshot()
	if err != nil {
		return err
	}
	if snap.DCGMUp != nil {
		b.AddWith(c.dcgmUp, b2f(*snap.DCGMUp))
	}
	if len(snap.Devices) == 0 && snap.DCGMUp == nil {
		return noHardware("no GPU")
	}
	b.AddWith(c.source, 1, snap.Source)
	stale := 3*snap.Interval + time.Second
	now := time.Now()
	for _, d := range snap.Devices {
		idx := strconv.Itoa(d.Index)
		b.AddWith(c.info, 1, idx, d.UUID, d.Name, d.PCIBusID, c.numaNode(d.PCIBusID), snap.DriverVersion)
		for f := range gpu.NumFields {
			switch d.Support[f] {
			case gpu.Supported:
				b.AddWith(c.supported, 1, idx, d.UUID, f.Name())
			case gpu.Unsupported:
				b.AddWith(c.supported, 0, idx, d.UUID, f.Name())
			}
			if v := d.Values[f]; !v.At.IsZero() && now.Sub(v.At) <= stale {
				b.AddWith(c.fields[f], v.V, idx, d.UUID)
			}
		}
		if u := d.Utilization; u != nil && now.Sub(u.At) <= stale {
			b.AddWith(c.util, u.V, idx, d.UUID)
		}
		for _, pid := range d.PIDs {
			b.AddWith(c.proc, 1, idx, d.UUID, strconv.FormatUint(uint64(pid), 10))
		}
		if !d.ProcessesAt.IsZero() && now.Sub(d.ProcessesAt) <= stale {
			for _, p := range d.Processes {
				pid := strconv.FormatUint(uint64(p.PID), 10)
				b.AddWith(c.procSM, p.SM, idx, d.UUID, pid)
				b.AddWith(c.procMem, p.Mem, idx, d.UUID, pid)
			}
		}
		for _, p := range d.Peers {
			var st [gpu.NumP2PCaps]string
			known := false
			for i, s := range p.Status {
				if p.Known[i] {
					st[i], known = s.String(), true
				}
			}
			if known {
				b.AddWith(c.p2p, 1, idx, strconv.Itoa(p.Index), st[0], st[1], st[2], st[3], st[4])
			}
		}
		for _, l := range d.NVLinks {
			link := strconv.Itoa(l.Link)
			b.AddWith(c.nvlinkUp, b2f(l.Up), idx, d.UUID, link)
			for i, e := range l.Errors {
				if e.OK {
					b.AddWith(c.nvlinkErrors, float64(e.V), idx, d.UUID, link, gpu.NVLinkErrorName(i))
				}
			}
			if l.TxBytes.OK {
				b.AddWith(c.nvlinkTx, float64(l.TxBytes.V), idx, d.UUID, link)
			}
			if l.RxBytes.OK {
				b.AddWith(c.nvlinkRx, float64(l.RxBytes.V), idx, d.UUID, link)
			}
		}
	}
	return nil
}

// numaNode reads bus/pci/devices/<bdf>/numa_node once per GPU: NVML's
// NUMA call only answers on systems where the GPU is itself a NUMA node.
func (c *gpuCollector) numaNode(bus string) string {
	if n, ok := c.numa[bus]; ok {
		return n
	}
	n := ""
	if bus != "" && len(c.numa) < 256 {
		r := sysfs.NewReaderIn(c.opts.SysfsPath)
		if s, err := r.ReadString(filepath.Join(c.opts.SysfsPath, "bus", "pci", "devices", bus, "numa_node")); err == nil {
			if v, err := sysfs.ParseInt([]byte(s)); err == nil && v >= 0 {
				n = strconv.FormatInt(v, 10)
			}
		}
		r.Close()
		c.numa[bus] = n
	}
	return n
}

// PIDs returns the compute PIDs of the backend's latest snapshot (a copy
// of data sampled in the background: it never waits for the GPU).
func (c *gpuCollector) PIDs(context.Context) []int {
	c.mu.Lock()
	b := c.backend
	c.mu.Unlock()
	if b == nil {
		return nil
	}
	snap, err := b.Snapshot()
	if err != nil {
		return nil
	}
	var out []int
	for _, d := range snap.Devices {
		for _, p := range d.PIDs {
			out = append(out, int(p))
		}
	}
	return out
}

// Devices returns the GPUs (index, UUID) of the backend's latest snapshot.
func (c *gpuCollector) Devices(context.Context) []GPUDevice {
	c.mu.Lock()
	b := c.backend
	c.mu.Unlock()
	if b == nil {
		return nil
	}
	snap, err := b.Snapshot()
	if err != nil {
		return nil
	}
	out := make([]GPUDevice, 0, len(snap.Devices))
	for _, d := range snap.Devices {
		out = append(out, GPUDevice{Index: d.Index, UUID: d.UUID})
	}
	return out
}

// Close stops the backend's samplers.
func (c *gpuCollector) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.backend != nil {
		return c.backend.Close()
	}
	return nil
}
