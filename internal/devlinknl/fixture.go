package devlinknl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Fixtures answers like a Client from what iproute2's devlink prints with
// -j (devlink/devlink.c: pr_out_health, pr_out_info), so that a capture of
// a real host is a fixture:
//
//	DIR/health.json   devlink -j health show
//	DIR/info.json     devlink -j dev info
//	DIR/not-answering handles (pci/0000:3b:00.0), one a line, whose
//	                  requests time out (a wedged driver)
//
// An instance is one that either file names; one in neither is
// ErrNoDevice. A missing info.json answers ErrNotSupported; no
// health.json and no info.json at all is ErrNotAvailable (no devlink).
// devlink prints the dump time in local time (last_dump_date and
// last_dump_time): a fixture is read as UTC, so record it with TZ=UTC.
type Fixtures struct {
	Dir string
}

// maxFixture bounds a fixture file.
const maxFixture = 4 << 20

func (f Fixtures) read(name string) ([]byte, error) {
	fh, err := os.Open(filepath.Join(f.Dir, name))
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return io.ReadAll(io.LimitReader(fh, maxFixture))
}

// healthJSON is `devlink -j health show`: {"health": {"pci/0000:3b:00.0":
// [reporters], "pci/0000:3b:00.0/65535": [reporters]}}.
type healthJSON struct {
	Health map[string][]struct {
		Reporter     string  `json:"reporter"`
		State        string  `json:"state"`
		Error        *uint64 `json:"error"`
		Recover      *uint64 `json:"recover"`
		LastDumpDate string  `json:"last_dump_date"`
		LastDumpTime string  `json:"last_dump_time"`
	} `json:"health"`
}

// infoJSON is `devlink -j dev info`.
type infoJSON struct {
	Info map[string]struct {
		Driver      string `json:"driver"`
		Serial      string `json:"serial_number"`
		BoardSerial string `json:"board.serial_number"`
		Versions    struct {
			Fixed   map[string]string `json:"fixed"`
			Running map[string]string `json:"running"`
			Stored  map[string]string `json:"stored"`
		} `json:"versions"`
	} `json:"info"`
}

// ParseHealthJSON parses `devlink -j health show` into reporters per
// instance, in the order of their handles.
func ParseHealthJSON(b []byte) (map[Handle][]Reporter, error) {
	var hj healthJSON
	if err := json.Unmarshal(b, &hj); err != nil {
		return nil, fmt.Errorf("devlink health JSON: %w", err)
	}
	out := map[Handle][]Reporter{}
	for _, key := range slices.Sorted(maps.Keys(hj.Health)) { // device, then its ports
		reps := hj.Health[key]
		h, port, err := ParseHandle(key)
		if err != nil {
			return nil, err
		}
		if _, ok := out[h]; !ok {
			out[h] = nil
		}
		for _, j := range reps {
			r := Reporter{Name: j.Reporter, Port: uint32(max(port, 0)), HasPort: port >= 0}
			switch j.State {
			case "healthy":
				r.State = StateHealthy
			case "error":
				r.State = StateError
			default:
				return nil, fmt.Errorf("devlink health JSON: %s reporter %q: state %q", key, j.Reporter, j.State)
			}
			if r.Name == "" || j.Error == nil || j.Recover == nil {
				return nil, fmt.Errorf("devlink health JSON: %s: reporter without name, error or recover", key)
			}
			r.Errors, r.Recoveries = *j.Error, *j.Recover
			if j.LastDumpDate != "" {
				t, err := time.Parse("2006-01-02 15:04:05", j.LastDumpDate+" "+j.LastDumpTime)
				if err != nil {
					return nil, fmt.Errorf("devlink health JSON: %s reporter %q: %w", key, j.Reporter, err)
				}
				r.DumpNS = uint64(t.UnixNano())
			}
			if len(out[h]) < MaxReporters {
				out[h] = append(out[h], r)
			}
		}
	}
	return out, nil
}

// ParseInfoJSON parses `devlink -j dev info`.
func ParseInfoJSON(b []byte) (map[Handle]Info, error) {
	var ij infoJSON
	if err := json.Unmarshal(b, &ij); err != nil {
		return nil, fmt.Errorf("devlink info JSON: %w", err)
	}
	out := map[Handle]Info{}
	for key, j := range ij.Info {
		h, port, err := ParseHandle(key)
		if err != nil || port >= 0 {
			return nil, fmt.Errorf("devlink info JSON: instance %q", key)
		}
		bound := func(m map[string]string) map[string]string {
			o := map[string]string{}
			for k, v := range m {
				if len(o) < MaxVersions {
					o[cut(k)] = cut(v)
				}
			}
			return o
		}
		out[h] = Info{Driver: cut(j.Driver), Serial: cut(j.Serial), BoardSerial: cut(j.BoardSerial),
			Fixed: bound(j.Versions.Fixed), Running: bound(j.Versions.Running), Stored: bound(j.Versions.Stored)}
	}
	return out, nil
}

func cut(s string) string {
	if len(s) > maxString {
		return s[:maxString]
	}
	return s
}

// load reads the fixture files: reporters and infos (nil when the file is
// missing) and the handles that do not answer.
func (f Fixtures) load() (map[Handle][]Reporter, map[Handle]Info, map[Handle]bool, error) {
	var health map[Handle][]Reporter
	var infos map[Handle]Info
	b, err := f.read("health.json")
	switch {
	case err == nil:
		if health, err = ParseHealthJSON(b); err != nil {
			return nil, nil, nil, err
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, nil, nil, err
	}
	b, err = f.read("info.json")
	switch {
	case err == nil:
		if infos, err = ParseInfoJSON(b); err != nil {
			return nil, nil, nil, err
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, nil, nil, err
	}
	if health == nil && infos == nil {
		return nil, nil, nil, fmt.Errorf("%w: no health.json or info.json in %s", ErrNotAvailable, f.Dir)
	}
	stuck := map[Handle]bool{}
	if b, err := f.read("not-answering"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			l := strings.TrimSpace(sc.Text())
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			h, _, err := ParseHandle(l)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("%s: %w", filepath.Join(f.Dir, "not-answering"), err)
			}
			stuck[h] = true
		}
	}
	return health, infos, stuck, nil
}

// lookup returns whether h is an instance of the fixtures, or the error its
// requests get.
func (f Fixtures) lookup(ctx context.Context, h Handle) (map[Handle][]Reporter, map[Handle]Info, error) {
	health, infos, stuck, err := f.load()
	if err != nil {
		return nil, nil, err
	}
	_, inHealth := health[h]
	_, inInfo := infos[h]
	switch {
	case !inHealth && !inInfo:
		return nil, nil, fmt.Errorf("%w: %s", ErrNoDevice, h)
	case stuck[h]:
		return nil, nil, fmt.Errorf("%w (%s is listed in not-answering)", ErrTimeout, h)
	}
	return health, infos, ctx.Err()
}

// HealthReporters implements the Client's request from health.json.
func (f Fixtures) HealthReporters(ctx context.Context, h Handle) ([]Reporter, error) {
	health, _, err := f.lookup(ctx, h)
	if err != nil {
		return nil, err
	}
	return health[h], nil
}

// Info implements the Client's request from info.json.
func (f Fixtures) Info(ctx context.Context, h Handle) (Info, error) {
	_, infos, err := f.lookup(ctx, h)
	if err != nil {
		return Info{}, err
	}
	i, ok := infos[h]
	if !ok {
		return Info{}, fmt.Errorf("%w: %s has no info in %s", ErrNotSupported, h, filepath.Join(f.Dir, "info.json"))
	}
	return i, nil
}
