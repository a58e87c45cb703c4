// Package devlinknl reads the health reporters and the device information
// of devlink instances (what `devlink health show` and `devlink dev info`
// print, iproute2's devlink/devlink.c) over the kernel's "devlink" generic
// netlink family (net/devlink/). The transport is
// github.com/mdlayher/genetlink, as for internal/ethtoolnl:
// github.com/vishvananda/netlink speaks devlink but has no health reporters
// and no deadline on its requests.
//
// Requests (include/uapi/linux/devlink.h, numbers below):
//
//   - DEVLINK_CMD_HEALTH_REPORTER_GET as a dump with the device's handle
//     (DEVLINK_ATTR_BUS_NAME "pci", DEVLINK_ATTR_DEV_NAME "0000:3b:00.0"):
//     one answer per reporter of the instance and of its ports (mlx5: fw,
//     fw_fatal and vnic on the device; tx and rx on the uplink port, whose
//     answers carry DEVLINK_ATTR_PORT_INDEX). Since Linux 6.6 the kernel
//     dumps that instance only (devlink_nl_dumpit calls
//     devlink_nl_inst_single_dumpit, commit 4a1b5aa8b5c7) and answers
//     ENODEV for an unknown handle; before, it ignores the handle and
//     dumps every instance, so answers
//     are filtered by handle here, and an empty result is checked with a
//     DEVLINK_CMD_GET of the handle (ENODEV: no such instance).
//   - DEVLINK_CMD_INFO_GET (a do request with the handle): driver name,
//     serial numbers, fixed, running and stored versions (mlx5: fw.psid
//     fixed, fw.version running and stored; mlx5_devlink_info_get queries
//     the firmware for them).
//
// Both are unprivileged: net/devlink/netlink_gen.c gives them no
// GENL_ADMIN_PERM ("can be retrieved by unprivileged users" in the older
// small-ops table). Checked live on Linux 6.18 (the lent H200 machine,
// whose mlx5 driver is loaded without a device): the family resolves
// (devlink, version 1), the requests' attributes pass the kernel's policy,
// and a dump and an info request for an unknown handle answer ENODEV
// (ErrNoDevice). The family is netnsok: a caller sees the instances of
// its own network namespace only (devlinks_xa_find_get checks net_eq), so
// an exporter outside the host's network namespace sees none.
//
// The kernel answers a dump in the sendmsg(2) that requests it, after
// taking each instance's lock (devl_lock, a mutex): a driver that holds
// that lock — mlx5 recovering from a firmware error, waiting for firmware
// commands that time out — blocks the caller in the kernel, where no socket
// deadline reaches. Every request therefore runs in its own goroutine on
// its own socket, and the caller waits at most until its deadline
// (ErrTimeout); a request still blocked makes the next request for the same
// device fail at once instead of blocking another thread.
package devlinknl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/mdlayher/netlink"
)

// Constants of include/uapi/linux/devlink.h, checked against the header of
// Linux 6.1 (Debian's linux-libc-dev 6.1.187) and that of iproute2's copy
// from 7.2-pre-rc1 by compiling them, and equal to golang.org/x/sys/unix's
// (generated from Linux 7.2). The enums are an ABI: only appended to.
const (
	familyName    = "devlink" // DEVLINK_GENL_NAME
	familyVersion = 1         // DEVLINK_GENL_VERSION

	cmdGet               = 1  // DEVLINK_CMD_GET
	cmdInfoGet           = 51 // DEVLINK_CMD_INFO_GET
	cmdHealthReporterGet = 52 // DEVLINK_CMD_HEALTH_REPORTER_GET

	attrBusName   = 1  // DEVLINK_ATTR_BUS_NAME, string
	attrDevName   = 2  // DEVLINK_ATTR_DEV_NAME, string
	attrPortIndex = 3  // DEVLINK_ATTR_PORT_INDEX, u32
	attrPad       = 61 // DEVLINK_ATTR_PAD (nla_put_u64_64bit's alignment)

	attrInfoDriverName         = 98  // DEVLINK_ATTR_INFO_DRIVER_NAME, string
	attrInfoSerialNumber       = 99  // DEVLINK_ATTR_INFO_SERIAL_NUMBER, string
	attrInfoVersionFixed       = 100 // DEVLINK_ATTR_INFO_VERSION_FIXED, nested
	attrInfoVersionRunning     = 101 // DEVLINK_ATTR_INFO_VERSION_RUNNING, nested
	attrInfoVersionStored      = 102 // DEVLINK_ATTR_INFO_VERSION_STORED, nested
	attrInfoVersionName        = 103 // DEVLINK_ATTR_INFO_VERSION_NAME, string
	attrInfoVersionValue       = 104 // DEVLINK_ATTR_INFO_VERSION_VALUE, string
	attrInfoBoardSerialNumber  = 146 // DEVLINK_ATTR_INFO_BOARD_SERIAL_NUMBER, string
	attrHealthReporter         = 114 // DEVLINK_ATTR_HEALTH_REPORTER, nested
	attrHealthReporterName     = 115 // _NAME, string
	attrHealthReporterState    = 116 // _STATE, u8 (enum devlink_health_reporter_state)
	attrHealthReporterErrCount = 117 // _ERR_COUNT, u64
	attrHealthReporterRecCount = 118 // _RECOVER_COUNT, u64
	attrHealthReporterDumpTS   = 119 // _DUMP_TS, u64: jiffies_to_msecs of the dump
	attrHealthReporterGrace    = 120 // _GRACEFUL_PERIOD, u64 ms
	attrHealthReporterAutoRec  = 121 // _AUTO_RECOVER, u8
	attrHealthReporterDumpTSNS = 137 // _DUMP_TS_NS, u64: ktime_get_real_ns of the dump
	attrHealthReporterAutoDump = 141 // _AUTO_DUMP, u8
)

// The reporter states of enum devlink_health_reporter_state
// (include/net/devlink.h, not in the uapi; iproute2 defines it again).
const (
	StateHealthy = 0 // DEVLINK_HEALTH_REPORTER_STATE_HEALTHY
	StateError   = 1 // DEVLINK_HEALTH_REPORTER_STATE_ERROR
)

// Bounds of one device's answers.
const (
	// MaxReporters is the most reporters kept per device.
	MaxReporters = 64
	// MaxVersions is the most versions kept per kind (fixed, running,
	// stored).
	MaxVersions = 32
	// maxString bounds every string kept (names, versions, serials).
	maxString = 128
)

// Errors, to be told apart with errors.Is.
var (
	// ErrNotAvailable: no devlink here (no generic netlink, or no
	// "devlink" family: a kernel without CONFIG_NET_DEVLINK).
	ErrNotAvailable = errors.New("devlink: not available")
	// ErrNoDevice: no devlink instance with this handle in the caller's
	// network namespace.
	ErrNoDevice = errors.New("devlink: no such instance")
	// ErrNoPrivilege: the kernel refused the request (EPERM, EACCES).
	ErrNoPrivilege = errors.New("devlink: not permitted")
	// ErrNotSupported: the driver does not implement the request
	// (EOPNOTSUPP: an info request to a driver without info_get).
	ErrNotSupported = errors.New("devlink: not supported by the driver")
	// ErrTimeout: no answer before the deadline, or an earlier request for
	// the same device is still blocked in the kernel.
	ErrTimeout = errors.New("devlink: no answer before the deadline")
)

// Handle names a devlink instance: bus and device, "pci/0000:3b:00.0".
type Handle struct {
	Bus, Device string
}

// PCI returns the handle of a PCI function.
func PCI(addr string) Handle { return Handle{Bus: "pci", Device: addr} }

func (h Handle) String() string { return h.Bus + "/" + h.Device }

// ParseHandle parses "bus/device" or "bus/device/port" (a port handle, as
// `devlink health show` prints per-port reporters); port is -1 without one.
func ParseHandle(s string) (h Handle, port int64, err error) {
	parts := strings.Split(s, "/")
	switch {
	case len(parts) == 2:
		port = -1
	case len(parts) == 3:
		if port, err = strconv.ParseInt(parts[2], 10, 64); err != nil || port < 0 || port > 1<<32-1 {
			return Handle{}, 0, fmt.Errorf("devlink handle %q: bad port index", s)
		}
	default:
		return Handle{}, 0, fmt.Errorf("devlink handle %q: want bus/device[/port]", s)
	}
	if parts[0] == "" || parts[1] == "" {
		return Handle{}, 0, fmt.Errorf("devlink handle %q: empty bus or device", s)
	}
	return Handle{Bus: parts[0], Device: parts[1]}, port, nil
}

// Reporter is one health reporter as DEVLINK_CMD_HEALTH_REPORTER_GET
// answers it (devlink_nl_health_reporter_fill, net/devlink/health.c).
type Reporter struct {
	Name string
	// Port is the devlink port index of a per-port reporter (mlx5's tx
	// and rx on the uplink port); HasPort is false for a device reporter.
	Port    uint32
	HasPort bool
	// State is StateHealthy or StateError (or a later kernel's value).
	State uint8
	// Errors counts devlink_health_report calls (each error the driver
	// reported); Recoveries the recoveries that succeeded.
	Errors, Recoveries uint64
	// DumpNS is when the stored dump was taken (Unix time in ns,
	// _DUMP_TS_NS, Linux 5.4+); 0 when the kernel holds no dump or gives
	// only _DUMP_TS (milliseconds of jiffies, no wall clock). The kernel
	// keeps one dump per reporter, taken at the first error after the last
	// `devlink health dump clear`.
	DumpNS uint64
}

// Info is a DEVLINK_CMD_INFO_GET answer (devlink_nl_info_fill).
type Info struct {
	Driver, Serial, BoardSerial string
	// Fixed, Running and Stored map version names (fw.version, fw.psid,
	// fw, board.id) to values.
	Fixed, Running, Stored map[string]string
}

// Version returns the first of names present in m, "" when none is.
func Version(m map[string]string, names ...string) string {
	for _, n := range names {
		if v, ok := m[n]; ok {
			return v
		}
	}
	return ""
}

// decoder wraps an attribute decoder with the integer rules of nla_get_uint
// (a u64 attribute may come in 4 or 8 bytes) and a first-error record.
type decoder struct {
	*netlink.AttributeDecoder
	err error
}

func newDecoder(b []byte) (*decoder, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, err
	}
	return &decoder{AttributeDecoder: ad}, nil
}

func (d *decoder) fail(format string, a ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, a...)
	}
}

// uint reads an unsigned integer attribute of 1, 2, 4 or 8 bytes.
func (d *decoder) uint() uint64 {
	b := d.Bytes()
	switch len(b) {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.NativeEndian.Uint16(b))
	case 4:
		return uint64(binary.NativeEndian.Uint32(b))
	case 8:
		return binary.NativeEndian.Uint64(b)
	}
	d.fail("devlink: integer attribute %d of %d bytes", d.Type(), len(b))
	return 0
}

// str reads a string attribute, NUL-terminated or not, bounded.
func (d *decoder) str() string {
	b := d.Bytes()
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	if len(b) > maxString {
		b = b[:maxString]
	}
	return string(b)
}

// handle reads the bus and device name attributes of an answer.
type handleAttrs struct {
	h       Handle
	hasBus  bool
	hasDev  bool
	port    uint32
	hasPort bool
}

func (a *handleAttrs) take(d *decoder) bool {
	switch d.Type() {
	case attrBusName:
		a.h.Bus, a.hasBus = d.str(), true
	case attrDevName:
		a.h.Device, a.hasDev = d.str(), true
	case attrPortIndex:
		a.port, a.hasPort = uint32(d.uint()), true
	default:
		return false
	}
	return true
}

// DecodeReporter decodes one DEVLINK_CMD_HEALTH_REPORTER_GET answer (the
// attributes after the generic netlink header): the instance's handle and
// the reporter. Name, state and both counts are required (iproute2 skips a
// reporter without them); unknown attributes are skipped.
func DecodeReporter(b []byte) (Handle, Reporter, error) {
	var r Reporter
	var ha handleAttrs
	d, err := newDecoder(b)
	if err != nil {
		return Handle{}, r, err
	}
	var seen int
	for d.Next() {
		if ha.take(d) || d.Type() != attrHealthReporter {
			continue
		}
		d.Nested(func(nd *netlink.AttributeDecoder) error {
			n := &decoder{AttributeDecoder: nd}
			for n.Next() {
				switch n.Type() {
				case attrHealthReporterName:
					r.Name, seen = n.str(), seen|1
				case attrHealthReporterState:
					r.State, seen = uint8(n.uint()), seen|2
				case attrHealthReporterErrCount:
					r.Errors, seen = n.uint(), seen|4
				case attrHealthReporterRecCount:
					r.Recoveries, seen = n.uint(), seen|8
				case attrHealthReporterDumpTSNS:
					r.DumpNS = n.uint()
				}
			}
			if n.err != nil {
				return n.err
			}
			return n.Err()
		})
	}
	if err := errors.Join(d.Err(), d.err); err != nil {
		return Handle{}, Reporter{}, err
	}
	if !ha.hasBus || !ha.hasDev || ha.h.Bus == "" || ha.h.Device == "" {
		return Handle{}, Reporter{}, errors.New("devlink: health reporter answer without a handle")
	}
	if seen != 15 || r.Name == "" {
		return Handle{}, Reporter{}, fmt.Errorf("devlink: health reporter of %s without name, state or counts", ha.h)
	}
	r.Port, r.HasPort = ha.port, ha.hasPort
	return ha.h, r, nil
}

// DecodeInfo decodes a DEVLINK_CMD_INFO_GET answer.
func DecodeInfo(b []byte) (Handle, Info, error) {
	var ha handleAttrs
	info := Info{Fixed: map[string]string{}, Running: map[string]string{}, Stored: map[string]string{}}
	d, err := newDecoder(b)
	if err != nil {
		return Handle{}, Info{}, err
	}
	for d.Next() {
		if ha.take(d) {
			continue
		}
		var dst map[string]string
		switch d.Type() {
		case attrInfoDriverName:
			info.Driver = d.str()
		case attrInfoSerialNumber:
			info.Serial = d.str()
		case attrInfoBoardSerialNumber:
			info.BoardSerial = d.str()
		case attrInfoVersionFixed:
			dst = info.Fixed
		case attrInfoVersionRunning:
			dst = info.Running
		case attrInfoVersionStored:
			dst = info.Stored
		}
		if dst == nil {
			continue
		}
		d.Nested(func(nd *netlink.AttributeDecoder) error {
			n := &decoder{AttributeDecoder: nd}
			var name, value string
			for n.Next() {
				switch n.Type() {
				case attrInfoVersionName:
					name = n.str()
				case attrInfoVersionValue:
					value = n.str()
				}
			}
			if _, dup := dst[name]; name != "" && !dup && len(dst) < MaxVersions {
				dst[name] = value
			}
			return n.Err()
		})
	}
	if err := errors.Join(d.Err(), d.err); err != nil {
		return Handle{}, Info{}, err
	}
	if !ha.hasBus || !ha.hasDev || ha.h.Bus == "" || ha.h.Device == "" {
		return Handle{}, Info{}, errors.New("devlink: info answer without a handle")
	}
	return ha.h, info, nil
}

// encodeHandle builds the attributes naming an instance.
func encodeHandle(h Handle) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(attrBusName, h.Bus)
	ae.String(attrDevName, h.Device)
	return ae.Encode()
}

// MapError maps a netlink error to the package's errors (wrapping the
// original), or returns it unchanged.
func MapError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrTimeout), errors.Is(err, ErrNotAvailable), errors.Is(err, ErrNoDevice),
		errors.Is(err, ErrNoPrivilege), errors.Is(err, ErrNotSupported):
		return err
	case errors.Is(err, syscall.ENODEV):
		return fmt.Errorf("%w: %w", ErrNoDevice, err)
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return fmt.Errorf("%w: %w", ErrNoPrivilege, err)
	case errors.Is(err, syscall.EOPNOTSUPP):
		return fmt.Errorf("%w: %w", ErrNotSupported, err)
	case errors.Is(err, syscall.EPROTONOSUPPORT), errors.Is(err, syscall.EAFNOSUPPORT):
		return fmt.Errorf("%w: %w", ErrNotAvailable, err)
	case errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, syscall.EAGAIN), isTimeout(err):
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return err
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// DumpWalksAll reports whether a kernel (its uname release, "5.15.0-91-
// generic") answers a health-reporter dump that names one instance by
// walking every instance, each under its lock: before Linux 6.6 (5.15:
// devlink->lock; 6.0-6.5: devl_lock), where one wedged HCA blocks every
// other's dump. An unreadable release is taken as such a kernel.
func DumpWalksAll(release string) bool {
	var major, minor int
	if _, err := fmt.Sscanf(release, "%d.%d", &major, &minor); err != nil {
		return true
	}
	return major < 6 || major == 6 && minor < 6
}
