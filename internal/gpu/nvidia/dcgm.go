//go:build cgo && !nogpu

package nvidia

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/NVIDIA/go-dcgm/pkg/dcgm"
	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/fabric-exporter/fabric_exporter/internal/gpu"
)

// dcgmFields are the profiling fields, in gpu.Field order. DCGM reports
// 1001-1005 as ratios and 1009/1010 in bytes per second: no conversion.
var dcgmFields = [gpu.NumFields]dcgm.Short{1001, 1002, 1003, 1004, 1005, 1009, 1010}

// dcgmAPI is the part of go-dcgm the poller uses, so that tests can stand
// in for a host engine that comes and goes.
type dcgmAPI interface {
	// Connect initialises DCGM and connects (standalone) or starts the
	// embedded host engine. No other method is called unless it succeeded.
	Connect() error
	// Watch creates the field group and watches it on all GPUs.
	Watch(fields []dcgm.Short, every time.Duration) error
	// GPUs lists the GPUs with their UUID, name and PCI bus ID.
	GPUs() ([]dcgmGPUInfo, error)
	// Latest returns the latest values of fields for one GPU.
	Latest(id uint, fields []dcgm.Short) ([]dcgm.FieldValue_v1, error)
	// Close disconnects.
	Close()
}

type dcgmGPUInfo struct {
	ID              uint
	UUID, Name, Bus string
}

// realDCGM is dcgmAPI over go-dcgm.
type realDCGM struct {
	address  string
	embedded bool
	cleanup  func()
	fg       dcgm.FieldHandle
	watching bool
}

func (r *realDCGM) Connect() error {
	var err error
	if r.embedded {
		r.cleanup, err = dcgm.Init(dcgm.Embedded)
	} else {
		r.cleanup, err = dcgm.Init(dcgm.Standalone, r.address, "0")
	}
	return err
}

func (r *realDCGM) Watch(fields []dcgm.Short, every time.Duration) error {
	fg, err := dcgm.FieldGroupCreate(fmt.Sprintf("fabric_exporter_%d", time.Now().UnixNano()), fields)
	if err != nil {
		return err
	}
	r.fg, r.watching = fg, true
	// An explicit update period: the go-dcgm default is 30 s. Keep two
	// samples; values older than that are never read.
	return dcgm.WatchFieldsWithGroupEx(fg, dcgm.GroupAllGPUs(), every.Microseconds(), 0, 2)
}

func (r *realDCGM) GPUs() ([]dcgmGPUInfo, error) {
	ids, err := dcgm.GetSupportedDevices()
	if err != nil {
		return nil, err
	}
	out := make([]dcgmGPUInfo, 0, len(ids))
	for _, id := range ids {
		d, err := dcgm.GetDeviceInfo(id)
		if err != nil {
			return nil, err
		}
		out = append(out, dcgmGPUInfo{ID: id, UUID: d.UUID, Name: d.Identifiers.Model, Bus: gpu.BusIDFromNVML(d.PCI.BusID)})
	}
	return out, nil
}

func (r *realDCGM) Latest(id uint, fields []dcgm.Short) ([]dcgm.FieldValue_v1, error) {
	return dcgm.EntityGetLatestValues(dcgm.FE_GPU, id, fields)
}

func (r *realDCGM) Close() {
	if r.watching {
		dcgm.FieldGroupDestroy(r.fg)
		r.watching = false
	}
	if r.cleanup != nil {
		r.cleanup()
		r.cleanup = nil
	}
}

// dcgmPoller keeps a DCGM connection, reads the latest field values every
// interval and reconnects with bounded backoff when the host engine goes
// away. While disconnected it publishes no values (never stale ones).
type dcgmPoller struct {
	api                    dcgmAPI
	interval               time.Duration
	minBackoff, maxBackoff time.Duration
	logger                 log.Logger
	fields                 []dcgm.Short

	mu     sync.Mutex
	up     bool
	values map[string]*dcgmGPU

	quit chan struct{}
	done chan struct{}
}

type dcgmGPU struct {
	id        int
	name, bus string
	values    [gpu.NumFields]gpu.Value
	support   [gpu.NumFields]gpu.Support
}

// Reconnect backoff: doubles from minBackoff up to maxBackoff.
const (
	minBackoff = time.Second
	maxBackoff = 30 * time.Second
)

func startDCGM(api dcgmAPI, interval time.Duration, logger log.Logger) *dcgmPoller {
	p := &dcgmPoller{api: api, interval: interval, logger: logger, fields: dcgmFields[:], minBackoff: minBackoff, maxBackoff: maxBackoff,
		values: map[string]*dcgmGPU{}, quit: make(chan struct{}), done: make(chan struct{})}
	connected := p.connect()
	go p.loop(connected)
	return p
}

func (p *dcgmPoller) connect() bool {
	if err := p.api.Connect(); err != nil {
		level.Debug(p.logger).Log("msg", "DCGM connect failed", "err", err)
		return false
	}
	if err := p.api.Watch(p.fields, p.interval); err != nil {
		level.Warn(p.logger).Log("msg", "DCGM watch failed", "err", err)
		p.api.Close()
		return false
	}
	level.Info(p.logger).Log("msg", "connected to DCGM")
	p.poll()
	return true
}

func (p *dcgmPoller) loop(connected bool) {
	defer close(p.done)
	backoff := p.minBackoff
	wait := p.interval
	if !connected {
		wait = backoff
	}
	for {
		select {
		case <-p.quit:
			if connected {
				p.api.Close()
			}
			return
		case <-time.After(wait):
		}
		if !connected {
			if connected = p.connect(); connected {
				backoff, wait = p.minBackoff, p.interval
			} else {
				backoff = min(backoff*2, p.maxBackoff)
				wait = backoff
			}
			continue
		}
		if !p.poll() {
			level.Warn(p.logger).Log("msg", "lost the DCGM host engine; reconnecting", "backoff", backoff.String())
			p.api.Close()
			connected, wait = false, backoff
		}
	}
}

// poll reads every GPU once; false means the connection failed.
func (p *dcgmPoller) poll() bool {
	gpus, err := p.api.GPUs()
	if err != nil {
		p.setDown()
		return false
	}
	next := make(map[string]*dcgmGPU, len(gpus))
	for _, g := range gpus {
		vals, err := p.api.Latest(g.ID, p.fields)
		if err != nil {
			p.setDown()
			return false
		}
		d := &dcgmGPU{id: int(g.ID), name: g.Name, bus: g.Bus}
		for _, fv := range vals {
			f := fieldIndex(fv.FieldID)
			if f < 0 {
				continue
			}
			v, sup := decode(fv)
			d.support[f] = sup
			if sup == gpu.Supported && !math.IsNaN(v) {
				d.values[f] = gpu.Value{V: v, At: time.UnixMicro(fv.TS)}
			}
		}
		next[g.UUID] = d
	}
	p.mu.Lock()
	p.up, p.values = true, next
	p.mu.Unlock()
	return true
}

func (p *dcgmPoller) setDown() {
	p.mu.Lock()
	p.up, p.values = false, map[string]*dcgmGPU{}
	p.mu.Unlock()
}

func fieldIndex(id dcgm.Short) int {
	for i, f := range dcgmFields {
		if f == id {
			return i
		}
	}
	return -1
}

// decode returns a field's value, or NaN with the support state for DCGM's
// blank sentinels (no sample yet, profiling paused, not supported).
func decode(fv dcgm.FieldValue_v1) (float64, gpu.Support) {
	if fv.Status != 0 {
		return math.NaN(), gpu.Unknown
	}
	switch fv.FieldType {
	case dcgm.DCGM_FT_DOUBLE:
		v := fv.Float64()
		switch {
		case v == dcgm.DCGM_FT_FP64_NOT_SUPPORTED || v == dcgm.DCGM_FT_FP64_NOT_FOUND:
			return math.NaN(), gpu.Unsupported
		case v >= dcgm.DCGM_FT_FP64_BLANK:
			return math.NaN(), gpu.Supported
		}
		return v, gpu.Supported
	case dcgm.DCGM_FT_INT64:
		v := fv.Int64()
		switch {
		case v == dcgm.DCGM_FT_INT64_NOT_SUPPORTED || v == dcgm.DCGM_FT_INT64_NOT_FOUND:
			return math.NaN(), gpu.Unsupported
		case v >= dcgm.DCGM_FT_INT64_BLANK:
			return math.NaN(), gpu.Supported
		}
		return float64(v), gpu.Supported
	}
	return math.NaN(), gpu.Unknown
}

// latest returns whether DCGM is connected and the latest values by UUID.
func (p *dcgmPoller) latest() (bool, map[string]*dcgmGPU) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.up, p.values
}

func (p *dcgmPoller) stop() {
	close(p.quit)
	<-p.done
}
