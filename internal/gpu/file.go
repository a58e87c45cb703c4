package gpu

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// fileSnapshot is the JSON form of a Snapshot read by FileBackend: field
// values by name, null (or missing) for "no current sample".
type fileSnapshot struct {
	Source        string       `json:"source"`
	DriverVersion string       `json:"driver_version"`
	DCGMUp        *bool        `json:"dcgm_up,omitempty"`
	IntervalMS    int          `json:"interval_ms"`
	GPUs          []fileDevice `json:"gpus"`
}

type fileDevice struct {
	Index       int                 `json:"index"`
	UUID        string              `json:"uuid"`
	Name        string              `json:"name"`
	PCIBusID    string              `json:"pci_bus_id"`
	Fields      map[string]*float64 `json:"fields"`
	Unsupported []string            `json:"unsupported"`
	Utilization *float64            `json:"utilization"`
	PIDs        []uint32            `json:"pids"`
	// Processes: per-process activity (absent: unknown).
	Processes []fileProcess `json:"processes"`
	NVLinks   []fileNVLink  `json:"nvlinks"`
	P2P       []fileP2P     `json:"p2p"`
}

type fileProcess struct {
	PID uint32  `json:"pid"`
	SM  float64 `json:"sm"`
	Mem float64 `json:"mem"`
}

type fileNVLink struct {
	Link    int               `json:"link"`
	Up      bool              `json:"up"`
	Errors  map[string]uint64 `json:"errors"`
	TxBytes *uint64           `json:"tx_bytes"`
	RxBytes *uint64           `json:"rx_bytes"`
}

// FileBackend serves a snapshot described in a JSON file (demos, the golden
// end-to-end test). Values are stamped with the time of each Snapshot call.
type FileBackend struct {
	snap fileSnapshot
}

// NewFileBackend reads and validates path.
func NewFileBackend(path string) (*FileBackend, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var fb FileBackend
	if err := json.Unmarshal(b, &fb.snap); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, d := range fb.snap.GPUs {
		for name := range d.Fields {
			if fieldByName(name) < 0 {
				return nil, fmt.Errorf("%s: gpu %d: unknown field %q", path, d.Index, name)
			}
		}
		for _, name := range d.Unsupported {
			if fieldByName(name) < 0 {
				return nil, fmt.Errorf("%s: gpu %d: unknown field %q", path, d.Index, name)
			}
		}
		for _, p := range d.Processes {
			if !(p.SM >= 0 && p.SM <= 1 && p.Mem >= 0 && p.Mem <= 1) {
				return nil, fmt.Errorf("%s: gpu %d: process %d: sm and mem are ratios (0-1)", path, d.Index, p.PID)
			}
		}
		if err := checkFileP2P(d.P2P); err != nil {
			return nil, fmt.Errorf("%s: gpu %d: %w", path, d.Index, err)
		}
		for _, l := range d.NVLinks {
			for name := range l.Errors {
				if nvlinkErrorByName(name) < 0 {
					return nil, fmt.Errorf("%s: gpu %d: link %d: unknown NVLink error %q", path, d.Index, l.Link, name)
				}
			}
		}
	}
	return &fb, nil
}

func nvlinkErrorByName(s string) int {
	for i, n := range nvlinkErrorNames {
		if n == s {
			return i
		}
	}
	return -1
}

func fieldByName(s string) Field {
	for i, n := range fieldNames {
		if n == s {
			return Field(i)
		}
	}
	return -1
}

// Snapshot returns the file's GPUs with values stamped now.
func (fb *FileBackend) Snapshot() (Snapshot, error) {
	now := time.Now()
	s := Snapshot{Source: fb.snap.Source, DriverVersion: fb.snap.DriverVersion, DCGMUp: fb.snap.DCGMUp,
		Interval: time.Duration(fb.snap.IntervalMS) * time.Millisecond}
	if s.Interval == 0 {
		s.Interval = time.Second
	}
	for _, fd := range fb.snap.GPUs {
		d := Device{Index: fd.Index, UUID: fd.UUID, Name: fd.Name, PCIBusID: fd.PCIBusID, PIDs: fd.PIDs}
		for name, v := range fd.Fields {
			f := fieldByName(name)
			d.Support[f] = Supported
			if v != nil {
				d.Values[f] = Value{V: *v, At: now}
			}
		}
		for _, name := range fd.Unsupported {
			d.Support[fieldByName(name)] = Unsupported
		}
		if fd.Utilization != nil {
			d.Utilization = &Value{V: *fd.Utilization, At: now}
		}
		if fd.Processes != nil {
			d.Processes, d.ProcessesAt, d.ProcessWindow = []ProcessActivity{}, now, 5*time.Second
			for _, p := range fd.Processes {
				d.Processes = append(d.Processes, ProcessActivity{PID: p.PID, SM: p.SM, Mem: p.Mem, Samples: 1})
			}
		}
		for _, fl := range fd.NVLinks {
			l := NVLink{Link: fl.Link, Up: fl.Up}
			for name, v := range fl.Errors {
				l.Errors[nvlinkErrorByName(name)] = Counter{V: v, OK: true}
			}
			if fl.TxBytes != nil {
				l.TxBytes = Counter{V: *fl.TxBytes, OK: true}
			}
			if fl.RxBytes != nil {
				l.RxBytes = Counter{V: *fl.RxBytes, OK: true}
			}
			d.NVLinks = append(d.NVLinks, l)
		}
		d.Peers = filePeers(fd.P2P)
		s.Devices = append(s.Devices, d)
	}
	return s, nil
}

// Close does nothing.
func (fb *FileBackend) Close() error { return nil }
