// Package rdmanl lists the queue pairs of the kernel's RDMA resource
// tracker with their owning process, what `rdma resource show qp`
// (iproute2, rdma/res-qp.c) prints, over RDMA netlink (NETLINK_RDMA, the
// NLDEV client of drivers/infiniband/core/nldev.c).
//
// Message layout, from include/uapi/rdma/rdma_netlink.h and nldev.c: the
// netlink message type is RDMA_NL_GET_TYPE(client, op) = client<<10 + op
// with client RDMA_NL_NLDEV (5); there is no family header, the attributes
// follow the netlink header. A dump of RDMA_NLDEV_CMD_GET (1) answers one
// message per device (DEV_INDEX u32, DEV_NAME string, ...). The queue-pair
// dump RDMA_NLDEV_CMD_RES_QP_GET (10) needs the device's DEV_INDEX in the
// request (res_get_common_dumpit answers EINVAL without it), so a listing
// is one dump per device, as iproute2 does. Each answer message holds
// DEV_INDEX, DEV_NAME and a nest RES_QP of RES_QP_ENTRY nests, each with
// PORT_INDEX (absent before the QP is bound to a port), RES_LQPN, RES_TYPE
// (enum ib_qp_type), RES_STATE (enum ib_qp_state) and either RES_PID (a
// user QP) or RES_KERN_NAME (a kernel QP).
//
// The PIDs are those of the caller's PID namespace (fill_res_name_pid:
// task_pid_vnr). The kernel lists only the resources of processes the
// caller's namespace can see: those with a PID in it, nested namespaces
// included (rdma_is_visible_in_pid_ns); the first resource-tracker kernels
// (nldev.c of 4.17) only those of the very same namespace. Kernel QPs are
// listed only to a caller in the initial PID namespace. The transport is github.com/mdlayher/netlink,
// which speaks any netlink family (here 20, NETLINK_RDMA) and handles
// multi-part dumps, sequence checks and NLMSG_ERROR.
//
// Fixture (fixture.go) is the other Source: the JSON `rdma -j resource
// show qp` prints, read from a file, for demos and tests on a fixture
// /proc.
package rdmanl

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"syscall"

	"github.com/mdlayher/netlink"
)

// Constants of include/uapi/rdma/rdma_netlink.h (an ABI: "don't change the
// order or add anything between").
const (
	clientNLDEV = 5 // RDMA_NL_NLDEV: RDMA_NL_RDMA_CM=1, IWCM, RSVD, LS, NLDEV

	cmdGet      = 1  // RDMA_NLDEV_CMD_GET
	cmdResQPGet = 10 // RDMA_NLDEV_CMD_RES_QP_GET (RES_GET = 9, then QP)

	attrDevIndex    = 1  // RDMA_NLDEV_ATTR_DEV_INDEX, u32
	attrDevName     = 2  // RDMA_NLDEV_ATTR_DEV_NAME, string
	attrPortIndex   = 3  // RDMA_NLDEV_ATTR_PORT_INDEX, u32
	attrResQP       = 19 // RDMA_NLDEV_ATTR_RES_QP, nested table
	attrResQPEntry  = 20 // RDMA_NLDEV_ATTR_RES_QP_ENTRY, nested table
	attrResLQPN     = 21 // RDMA_NLDEV_ATTR_RES_LQPN, u32
	attrResType     = 26 // RDMA_NLDEV_ATTR_RES_TYPE, u8
	attrResState    = 27 // RDMA_NLDEV_ATTR_RES_STATE, u8
	attrResPID      = 28 // RDMA_NLDEV_ATTR_RES_PID, u32
	attrResKernName = 29 // RDMA_NLDEV_ATTR_RES_KERN_NAME, string
)

// msgType is RDMA_NL_GET_TYPE(client, op).
func msgType(client, op uint16) netlink.HeaderType {
	return netlink.HeaderType(client<<10 + op)
}

// Bounds of one listing.
const (
	// MaxDevices is the most RDMA devices listed.
	MaxDevices = 256
	// MaxQPs is the most queue pairs kept of one listing; the rest are
	// counted in Listing.Dropped.
	MaxQPs = 1 << 17
)

// Errors of a listing, to be told apart with errors.Is.
var (
	// ErrNoPrivilege: the kernel refused the request (EPERM, EACCES).
	ErrNoPrivilege = errors.New("RDMA netlink: not permitted")
	// ErrNotAvailable: no RDMA netlink here (the kernel has no ib_core or
	// does not speak NLDEV) or no RDMA device.
	ErrNotAvailable = errors.New("RDMA netlink: not available")
)

// Source lists the queue pairs of the host's RDMA devices (Client).
type Source interface {
	QueuePairs(ctx context.Context) (Listing, error)
}

// Device is an RDMA device of a listing.
type Device struct {
	Index uint32
	Name  string
}

// QP is one queue pair of the resource tracker.
type QP struct {
	Device   string
	Port     uint32 // 0: not bound to a port yet
	LQPN     uint32
	Type     uint8 // enum ib_qp_type (TypeName)
	State    uint8 // enum ib_qp_state (StateName)
	PID      uint32
	HasPID   bool   // a user QP; false for kernel QPs and a process exiting
	KernName string // the kernel owner of a kernel QP
}

// Listing is the answer of one Source call.
type Listing struct {
	Devices []Device
	QPs     []QP
	Dropped int // QPs beyond MaxQPs, not kept
	// Failed are the devices whose queue pairs could not be listed (their
	// QPs are unknown, not none); the others' are in QPs.
	Failed []DeviceError
}

// DeviceError is one device's failed queue-pair dump.
type DeviceError struct {
	Device string
	Err    error
}

// typeNames are the names `rdma resource show qp` prints for the QP types
// (enum ib_qp_type of include/rdma/ib_verbs.h; iproute2's qp_types_to_str,
// which prints UNKNOWN for 7, the kernel's unused IB_QPT_MAX slot).
var typeNames = map[uint8]string{
	0: "SMI", 1: "GSI", 2: "RC", 3: "UC", 4: "UD", 5: "RAW_IPV6", 6: "RAW_ETHERTYPE",
	8: "RAW_PACKET", 9: "XRC_INI", 10: "XRC_TGT", 0xff: "DRIVER",
}

// stateNames are the QP states (enum ib_qp_state), as iproute2 prints them.
var stateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

// TypeName is the name `rdma resource show qp` prints for the QP type
// (enum ib_qp_type of include/rdma/ib_verbs.h), or the number.
func (q QP) TypeName() string {
	if n, ok := typeNames[q.Type]; ok {
		return n
	}
	return strconv.Itoa(int(q.Type))
}

// StateName is the QP state (enum ib_qp_state), or the number.
func (q QP) StateName() string {
	if int(q.State) < len(stateNames) {
		return stateNames[q.State]
	}
	return strconv.Itoa(int(q.State))
}

// ParseType is the inverse of TypeName: the type t with
// QP{Type: t}.TypeName() == s (a name as iproute2 prints it, upper case,
// or the decimal number of a type without one); false for anything else,
// iproute2's UNKNOWN included (it does not say which type).
func ParseType(s string) (uint8, bool) {
	for t, n := range typeNames {
		if n == s {
			return t, true
		}
	}
	if t, ok := parseEnum(s); ok && typeNames[t] == "" {
		return t, true
	}
	return 0, false
}

// ParseState is the inverse of StateName: the state with that name, or
// the decimal number of a state without one; false for anything else
// (iproute2's UNKNOWN too).
func ParseState(s string) (uint8, bool) {
	for i, n := range stateNames {
		if n == s {
			return uint8(i), true
		}
	}
	if st, ok := parseEnum(s); ok && int(st) >= len(stateNames) {
		return st, true
	}
	return 0, false
}

// parseEnum parses the decimal numbers TypeName and StateName print for
// values without a name: no sign, no leading zero.
func parseEnum(s string) (uint8, bool) {
	if s == "" || s[0] < '0' || s[0] > '9' || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 8)
	return uint8(v), err == nil
}

// DecodeDevice decodes the attributes of one RDMA_NLDEV_CMD_GET answer.
func DecodeDevice(b []byte) (Device, error) {
	var d Device
	var haveIdx bool
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return d, err
	}
	for ad.Next() {
		switch ad.Type() {
		case attrDevIndex:
			d.Index, haveIdx = ad.Uint32(), true
		case attrDevName:
			d.Name = ad.String()
		}
	}
	if err := ad.Err(); err != nil {
		return Device{}, err
	}
	if !haveIdx || d.Name == "" {
		return Device{}, errors.New("RDMA netlink: device without index or name")
	}
	return d, nil
}

// DecodeQPs decodes the attributes of one RDMA_NLDEV_CMD_RES_QP_GET answer
// and appends its queue pairs to out, at most max of them in out; it
// returns out and the number of entries left out. Unknown attributes are
// skipped; a malformed message is an error and adds nothing.
func DecodeQPs(b []byte, out []QP, max int) ([]QP, int, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return out, 0, err
	}
	start := len(out)
	dev, dropped := "", 0
	for ad.Next() {
		switch ad.Type() {
		case attrDevName:
			dev = ad.String()
		case attrResQP:
			ad.Nested(func(tab *netlink.AttributeDecoder) error {
				for tab.Next() {
					if tab.Type() != attrResQPEntry {
						continue
					}
					var q QP
					tab.Nested(func(e *netlink.AttributeDecoder) error {
						q = decodeEntry(e)
						return e.Err()
					})
					if tab.Err() != nil {
						return tab.Err()
					}
					if len(out) >= max {
						dropped++
						continue
					}
					out = append(out, q)
				}
				return tab.Err()
			})
		}
	}
	if err := ad.Err(); err != nil {
		return out[:start], 0, err
	}
	if dev == "" && len(out) > start {
		return out[:start], 0, errors.New("RDMA netlink: queue pairs without a device name")
	}
	for i := start; i < len(out); i++ {
		out[i].Device = dev
	}
	return out, dropped, nil
}

func decodeEntry(e *netlink.AttributeDecoder) QP {
	var q QP
	for e.Next() {
		switch e.Type() {
		case attrPortIndex:
			q.Port = e.Uint32()
		case attrResLQPN:
			q.LQPN = e.Uint32()
		case attrResType:
			q.Type = e.Uint8()
		case attrResState:
			q.State = e.Uint8()
		case attrResPID:
			q.PID, q.HasPID = e.Uint32(), true
		case attrResKernName:
			q.KernName = e.String()
		}
	}
	return q
}

// MapError maps a netlink error to ErrNoPrivilege or ErrNotAvailable
// (wrapping the original), or returns it unchanged.
func MapError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return fmt.Errorf("%w: %w", ErrNoPrivilege, err)
	case errors.Is(err, syscall.EPROTONOSUPPORT), errors.Is(err, syscall.EOPNOTSUPP),
		errors.Is(err, syscall.EAFNOSUPPORT):
		return fmt.Errorf("%w: %w", ErrNotAvailable, err)
	}
	return err
}
