package rdmanl

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Fixture is a Source that reads the listing from a file holding what
// `rdma -j resource show qp` (iproute2, rdma/res-qp.c) prints, for demos
// and tests on fixture trees. The file is read again on every call.
//
// The format: a JSON array with one object per queue pair. iproute2 writes
// "ifindex" and "ifname" (the device, print_link), "port" (only when the
// kernel sent one: not before the QP is bound to a port), "lqpn", "rqpn"
// and "rq-psn" (RC and UC only), "type" (qp_types_to_str: SMI, GSI, RC,
// UC, UD, RAW_IPV6, RAW_ETHERTYPE, RAW_PACKET, XRC_INI, XRC_TGT, DRIVER,
// UNKNOWN), "state" (RESET, INIT, RTR, RTS, SQD, SQE, ERR, UNKNOWN),
// "sq-psn", "path-mig-state" (RC, UC, XRC), "pdn" (user QPs), "pid" (user
// QPs; iproute2 before the switch to res_print_u32 wrote "pid": 0 for a
// kernel QP too) and "comm": for a user QP the /proc/PID/comm iproute2
// read, for a kernel QP the kernel owner's name (RES_KERN_NAME).
//
// Read: ifindex, ifname, port, lqpn, type, state, pid, comm; other keys
// are ignored. A QP with a pid other than 0 is a user QP (HasPID, PID);
// one without, or with pid 0, a kernel QP whose KernName is its comm, as
// the netlink path decodes RES_KERN_NAME. type and state are the names
// TypeName and StateName print (ParseType, ParseState); UNKNOWN, which
// does not say which value, is an error, as are malformed JSON, a missing
// ifindex, ifname, lqpn, type or state, a kernel QP without comm, and one
// device name with two indexes. The listing's devices are the distinct
// ifnames with their ifindex, sorted by index: a device with no queue
// pair at all is not in the file (netlink lists every device).
//
// The PIDs are taken as those of the procfs the exporter reads
// (PIDsOfProcfs): the file is written for a fixture /proc.
type Fixture struct {
	Path string
}

// MaxFixtureBytes bounds the fixture file.
const MaxFixtureBytes = 64 << 20

// NewFixture returns a Fixture reading path.
func NewFixture(path string) *Fixture { return &Fixture{Path: path} }

// PIDsOfProcfs says that the listing's PIDs are those of the exporter's
// --path.procfs, whatever PID namespace the exporter runs in.
func (f *Fixture) PIDsOfProcfs() bool { return true }

// QueuePairs reads and decodes the file. Errors name the file (and the
// entry).
func (f *Fixture) QueuePairs(ctx context.Context) (Listing, error) {
	if err := ctx.Err(); err != nil {
		return Listing{}, err
	}
	fh, err := os.Open(f.Path)
	if err != nil {
		return Listing{}, fmt.Errorf("queue-pair fixture: %w", err)
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, MaxFixtureBytes+1))
	if err != nil {
		return Listing{}, fmt.Errorf("queue-pair fixture %s: %w", f.Path, err)
	}
	if len(b) > MaxFixtureBytes {
		return Listing{}, fmt.Errorf("queue-pair fixture %s: larger than %d bytes", f.Path, MaxFixtureBytes)
	}
	l, err := ParseFixture(b, MaxQPs)
	if err != nil {
		return Listing{}, fmt.Errorf("queue-pair fixture %s: %w", f.Path, err)
	}
	return l, nil
}

// fixtureQP holds the keys of one entry that are read; pointers tell an
// absent key from a zero.
type fixtureQP struct {
	IfIndex *uint32 `json:"ifindex"`
	IfName  *string `json:"ifname"`
	Port    *uint32 `json:"port"`
	LQPN    *uint32 `json:"lqpn"`
	Type    *string `json:"type"`
	State   *string `json:"state"`
	PID     *uint32 `json:"pid"`
	Comm    *string `json:"comm"`
}

// ParseFixture decodes what `rdma -j resource show qp` prints (see
// Fixture), keeping at most max queue pairs (the rest counted in Dropped).
func ParseFixture(b []byte, max int) (Listing, error) {
	var l Listing
	var entries []json.RawMessage
	if err := json.Unmarshal(b, &entries); err != nil {
		return l, fmt.Errorf("not a JSON array of queue pairs (rdma -j resource show qp): %w", err)
	}
	index := map[string]uint32{}
	for i, raw := range entries {
		q, idx, err := parseFixtureQP(raw)
		if err != nil {
			return Listing{}, fmt.Errorf("entry %d: %w", i, err)
		}
		if prev, ok := index[q.Device]; ok && prev != idx {
			return Listing{}, fmt.Errorf("entry %d: device %s has ifindex %d, and %d in an earlier entry", i, q.Device, idx, prev)
		} else if !ok {
			if len(index) >= MaxDevices {
				return Listing{}, fmt.Errorf("entry %d: more than %d devices", i, MaxDevices)
			}
			index[q.Device] = idx
			l.Devices = append(l.Devices, Device{Index: idx, Name: q.Device})
		}
		if len(l.QPs) >= max {
			l.Dropped++
			continue
		}
		l.QPs = append(l.QPs, q)
	}
	slices.SortFunc(l.Devices, func(a, b Device) int {
		return cmp.Or(cmp.Compare(a.Index, b.Index), strings.Compare(a.Name, b.Name))
	})
	return l, nil
}

// parseFixtureQP decodes one entry: the queue pair and its device's
// ifindex.
func parseFixtureQP(raw json.RawMessage) (QP, uint32, error) {
	var e fixtureQP
	if err := json.Unmarshal(raw, &e); err != nil {
		return QP{}, 0, err
	}
	var missing []string
	for _, k := range []struct {
		name    string
		present bool
	}{{"ifindex", e.IfIndex != nil}, {"ifname", e.IfName != nil && *e.IfName != ""}, {"lqpn", e.LQPN != nil},
		{"type", e.Type != nil}, {"state", e.State != nil}} {
		if !k.present {
			missing = append(missing, k.name)
		}
	}
	if len(missing) > 0 {
		return QP{}, 0, fmt.Errorf("no %s", strings.Join(missing, ", "))
	}
	q := QP{Device: *e.IfName, LQPN: *e.LQPN}
	what := fmt.Sprintf("%s lqpn %d", q.Device, q.LQPN)
	if e.Port != nil {
		q.Port = *e.Port
	}
	var ok bool
	if q.Type, ok = ParseType(*e.Type); !ok {
		return QP{}, 0, fmt.Errorf("%s: unknown type %q", what, *e.Type)
	}
	if q.State, ok = ParseState(*e.State); !ok {
		return QP{}, 0, fmt.Errorf("%s: unknown state %q", what, *e.State)
	}
	switch {
	case e.PID != nil && *e.PID != 0:
		q.PID, q.HasPID = *e.PID, true
	case e.Comm == nil || *e.Comm == "":
		return QP{}, 0, errors.New(what + ": a kernel queue pair (no pid) without comm, its owner's name")
	default:
		q.KernName = *e.Comm
	}
	return q, *e.IfIndex, nil
}
