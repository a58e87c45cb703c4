package kmsg

import (
	"bytes"
	"fmt"
	"strconv"
)

// The event classes (docs in doc.go; the kinds of each in the tables
// below and in Classify).
const (
	ClassMLX5       = "mlx5"        // the mlx5 driver's health poller and command interface
	ClassNetdev     = "netdev"      // transmit queue timeouts
	ClassPortModule = "port_module" // mlx5 port module (cable, transceiver) events
	ClassPCIe       = "pcie"        // AER summary lines, hot-plug link down, DPC, a GPU off the bus
	ClassXid        = "xid"         // NVIDIA Xid, kind = the code
)

// Classes lists the classes, for callers that declare one series each.
var Classes = [...]string{ClassMLX5, ClassNetdev, ClassPCIe, ClassPortModule, ClassXid}

// Event is what a kernel line says happened, to which device.
type Event struct {
	Class, Kind string
	// PCI is the PCI function the line names ("0000:3b:00.0"): the
	// dev_printk prefix, else the record's DEVICE=+pci:…, else the Xid's
	// address with function 0 (NVIDIA GPUs are function 0). "" for none.
	PCI string
	// Netdev is the network interface the line names ("" for none).
	Netdev string
}

// Classify returns the event of a kernel record; false for every line it
// does not know, and for records userspace wrote (Record.Kernel).
func Classify(r *Record) (Event, bool) {
	if !r.Kernel() {
		return Event{}, false
	}
	return ClassifyMessage(r.Message, r.PCIDevice())
}

// ClassifyMessage classifies one message text; dictPCI is the record's
// DEVICE=+pci: address (nil when none).
func ClassifyMessage(msg, dictPCI []byte) (Event, bool) {
	if rest, ok := bytes.CutPrefix(msg, []byte("NVRM: ")); ok {
		return classifyNVRM(rest)
	}
	if rest, ok := bytes.CutPrefix(msg, []byte("NETDEV WATCHDOG: ")); ok {
		// Before Linux 6.8 (WARN_ONCE in dev_watchdog, net/sched/sch_generic.c):
		// "NETDEV WATCHDOG: eth3 (mlx5_core): transmit queue 5 timed out[ 5368 ms]".
		name, tail, ok := bytes.Cut(rest, []byte(" ("))
		if !ok || len(name) == 0 || len(name) > 15 || !bytes.Contains(tail, []byte("): transmit queue ")) ||
			!bytes.Contains(tail, []byte(" timed out")) {
			return Event{}, false
		}
		e := Event{Class: ClassNetdev, Kind: "tx_timeout", Netdev: string(name)}
		if dictPCI != nil {
			e.PCI = string(dictPCI)
		}
		return e, true
	}
	p, ok := splitPrefix(msg)
	if !ok {
		return Event{}, false
	}
	e, ok := classifyDevice(p)
	if !ok {
		return Event{}, false
	}
	if e.PCI == "" {
		e.PCI = string(p.bdf)
	}
	if len(p.netdev) > 0 && e.Netdev == "" {
		e.Netdev = string(p.netdev)
	}
	return e, true
}

// prefix is a dev_printk/netdev_printk line: "driver bdf: rest" or
// "driver bdf netdev: rest".
type prefix struct {
	driver, bdf, netdev, rest []byte
}

// splitPrefix parses the prefix the kernel's dev_printk (driver, device
// name) and netdev_printk (driver, parent device name, interface name)
// put before a message, for a device named by its PCI address (also
// pciehp's old service device name, "0000:00:1c.0:pcie004").
func splitPrefix(msg []byte) (prefix, bool) {
	var p prefix
	sp := bytes.IndexByte(msg, ' ')
	if sp <= 0 || sp > 32 || len(msg) < sp+1+12 || !isBDF(msg[sp+1:sp+13]) {
		return p, false
	}
	p.driver, p.bdf = msg[:sp], msg[sp+1:sp+13]
	rest := msg[sp+13:]
	if bytes.HasPrefix(rest, []byte(":pcie")) { // "0000:00:1c.0:pcie004: …"
		i := bytes.Index(rest, []byte(": "))
		if i < 0 || i > 16 {
			return p, false
		}
		rest = rest[i:]
	}
	switch {
	case bytes.HasPrefix(rest, []byte(": ")):
		p.rest = rest[2:]
	case len(rest) > 1 && rest[0] == ' ':
		// netdev_printk: "eth3: …", or "eth3 (unregistering): …".
		name, after, ok := bytes.Cut(rest[1:], []byte(": "))
		if !ok {
			return p, false
		}
		name, state, _ := bytes.Cut(name, []byte(" "))
		if len(name) == 0 || len(name) > 15 || len(state) > 0 && (state[0] != '(' || state[len(state)-1] != ')') {
			return p, false
		}
		p.netdev, p.rest = name, after
	default:
		return p, false
	}
	return p, true
}

// stripFunc removes mlx5_core_warn/err's "func:line:(pid N): " prefix.
func stripFunc(b []byte) []byte {
	i := bytes.Index(b, []byte(":(pid "))
	if i <= 0 || i > 64 || bytes.IndexByte(b[:i], ' ') >= 0 {
		return b
	}
	j := bytes.Index(b[i:], []byte("): "))
	if j < 0 {
		return b
	}
	return b[i+j+3:]
}

func classifyDevice(p prefix) (Event, bool) {
	rest := p.rest
	if r, ok := bytes.CutPrefix(rest, []byte("AER: ")); ok {
		rest = r
	}
	if sev, ok := bytes.CutPrefix(rest, []byte("PCIe Bus Error: severity=")); ok {
		// aer_print_error (drivers/pci/pcie/aer.c), printed for the function
		// that logged the error, whatever its driver.
		for _, s := range aerSeverity {
			if bytes.HasPrefix(sev, []byte(s.text)) {
				return Event{Class: ClassPCIe, Kind: s.kind, PCI: aerSourceID(p.bdf, sev)}, true
			}
		}
		return Event{}, false
	}
	if r, ok := bytes.CutPrefix(rest, []byte("pciehp: ")); ok {
		rest = r
	}
	if slot, ok := bytes.CutPrefix(rest, []byte("Slot(")); ok {
		// pciehp_ctrl.c: "Slot(%s): Link Down", "Slot(%s): Card not present".
		_, what, ok := bytes.Cut(slot, []byte("): "))
		switch {
		case ok && (string(what) == "Link Down" || string(what) == "Link Down event"):
			// "Link Down event": pciehp before Linux 4.19.
			return Event{Class: ClassPCIe, Kind: "link_down"}, true
		case ok && string(what) == "Card not present":
			return Event{Class: ClassPCIe, Kind: "card_not_present"}, true
		}
		return Event{}, false
	}
	if bytes.HasPrefix(rest, []byte("NETDEV WATCHDOG: CPU: ")) && bytes.Contains(rest, []byte(": transmit queue ")) && len(p.netdev) > 0 {
		// Linux 6.8 and later (netdev_crit in dev_watchdog): "mlx5_core
		// 0000:01:00.0 eth0: NETDEV WATCHDOG: CPU: 1: transmit queue 0
		// timed out 15535 ms", for any driver.
		return Event{Class: ClassNetdev, Kind: "tx_timeout"}, true
	}
	switch {
	case bytes.HasPrefix(rest, []byte("DPC: containment event")):
		return Event{Class: ClassPCIe, Kind: "dpc_containment"}, true
	case string(rest) == "Device recovery failed":
		return Event{Class: ClassPCIe, Kind: "aer_recovery_failed"}, true
	}
	if string(p.driver) != "mlx5_core" {
		return Event{}, false
	}
	return classifyMLX5(stripFunc(p.rest), p.netdev)
}

var aerSeverity = [...]struct{ text, kind string }{
	{"Corrected", "aer_correctable"}, // before Linux 6.14 ("Correctable" since)
	{"Correctable", "aer_correctable"},
	{"Uncorrected (Non-Fatal)", "aer_uncorrectable_nonfatal"},
	{"Uncorrectable (Non-Fatal)", "aer_uncorrectable_nonfatal"},
	{"Uncorrected (Fatal)", "aer_uncorrectable_fatal"},
	{"Uncorrectable (Fatal)", "aer_uncorrectable_fatal"},
}

// classifyMLX5 knows the lines of drivers/net/ethernet/mellanox/mlx5/core
// health.c, cmd.c, events.c and en_main.c (mlx5e_tx_timeout_work).
func classifyMLX5(rest, netdev []byte) (Event, bool) {
	kind := ""
	switch {
	case bytes.HasSuffix(rest, []byte("timeout. Will cause a leak of a command resource")):
		kind = "command_timeout"
	case bytes.HasPrefix(rest, []byte("Fatal error ")) && bytes.HasSuffix(rest, []byte(" detected")):
		kind = "fatal_error"
	case string(rest) == "device's health compromised - reached miss count":
		kind = "health_compromised"
	case bytes.HasPrefix(rest, []byte("synd 0x")):
		kind = "fw_syndrome"
	case string(rest) == "PCI slot is unavailable":
		kind = "pci_slot_unavailable"
	case string(rest) == "health recovery failed":
		kind = "recovery_failed"
	case bytes.HasPrefix(rest, []byte("Detected insufficient power on the PCIe slot")):
		kind = "pcie_power_insufficient"
	case bytes.HasPrefix(rest, []byte("High temperature on sensors with bit set")):
		kind = "high_temperature"
	case bytes.HasPrefix(rest, []byte("Port module event")):
		return portModule(rest)
	case string(rest) == "TX timeout detected" && len(netdev) > 0:
		// Every TX timeout the driver recovers; Linux before 6.8 prints the
		// NETDEV WATCHDOG line once per boot only (WARN_ONCE).
		return Event{Class: ClassNetdev, Kind: "mlx5e_tx_timeout"}, true
	default:
		return Event{}, false
	}
	return Event{Class: ClassMLX5, Kind: kind}, true
}

// portModule parses events.c's "Port module event: module %u, %s" and
// "Port module event[error]: module %u, %s, %s": the kind is the status,
// or for a cable error the error type; a string the driver may add later
// is "other", not dropped (the line is a module event all the same).
func portModule(rest []byte) (Event, bool) {
	body, isErr := bytes.CutPrefix(rest, []byte("Port module event[error]: module "))
	if !isErr {
		var ok bool
		if body, ok = bytes.CutPrefix(rest, []byte("Port module event: module ")); !ok {
			return Event{}, false
		}
	}
	num, text, ok := bytes.Cut(body, []byte(", "))
	if _, err := strconv.ParseUint(string(num), 10, 8); !ok || err != nil {
		return Event{}, false
	}
	e := Event{Class: ClassPortModule, Kind: "other"}
	if isErr {
		_, errText, ok := bytes.Cut(text, []byte(", "))
		if !ok {
			return Event{}, false
		}
		for _, m := range moduleErrors {
			if string(errText) == m.text {
				e.Kind = m.kind
			}
		}
		return e, true
	}
	for _, m := range moduleStatus {
		if string(text) == m.text {
			e.Kind = m.kind
		}
	}
	return e, true
}

// moduleStatus and moduleErrors are events.c's strings
// (mlx5_pme_status_to_string, mlx5_pme_error_to_string; older kernels'
// mlx5_pme_status and mlx5_pme_error arrays).
var moduleStatus = [...]struct{ text, kind string }{
	{"Cable plugged", "cable_plugged"},
	{"Cable unplugged", "cable_unplugged"},
	{"Cable disabled", "cable_disabled"},
}

var moduleErrors = [...]struct{ text, kind string }{
	{"Power budget exceeded", "power_budget_exceeded"},
	{"Long Range for non MLNX cable", "long_range_non_mlnx_cable"},
	{"Bus stuck (I2C or data shorted)", "bus_stuck"},
	{"Bus stuck(I2C or data shorted)", "bus_stuck"},
	{"No EEPROM/retry timeout", "no_eeprom"},
	{"Enforce part number list", "enforce_part_number_list"},
	{"Unknown identifier", "unknown_identifier"},
	{"High Temperature", "high_temperature"},
	{"Bad or shorted cable/module", "bad_cable"},
	{"One or more network ports have been powered down due to insufficient/unadvertised power on the PCIe slot", "pcie_slot_power"},
}

// classifyNVRM knows the NVIDIA driver's Xid line and its "fallen off the
// bus" lines (those without an Xid included: the driver prints them at
// probe, and with newer drivers instead of Xid 79).
func classifyNVRM(rest []byte) (Event, bool) {
	if x, ok := bytes.CutPrefix(rest, []byte("Xid (")); ok {
		// "NVRM: Xid (PCI:0000:3b:00): 79, pid=…, …" and the older
		// "NVRM: Xid (0000:03:00): 14, Channel 00000001".
		x, _ = bytes.CutPrefix(x, []byte("PCI:"))
		addr, after, ok := bytes.Cut(x, []byte("): "))
		if !ok {
			return Event{}, false
		}
		code, _, _ := bytes.Cut(after, []byte(","))
		if len(code) == 0 || len(code) > 4 || !digits(code) || code[0] == '0' {
			return Event{}, false
		}
		pci := gpuFunction(addr)
		if pci == "" {
			return Event{}, false
		}
		return Event{Class: ClassXid, Kind: string(code), PCI: pci}, true
	}
	if !bytes.Contains(rest, []byte("fallen off the bus")) {
		return Event{}, false
	}
	// "NVRM: GPU 0000:c2:00.0: GPU has fallen off the bus.", the older
	// "NVRM: GPU at 0000:01:00.0 has fallen off the bus." and the probe's
	// "NVRM: The NVIDIA GPU 0000:b3:00.0\x0aNVRM: (PCI ID: …) … fallen off
	// the bus and is not responding to commands."
	for _, p := range [...]string{"GPU at ", "GPU ", "The NVIDIA GPU "} {
		if a, ok := bytes.CutPrefix(rest, []byte(p)); ok && len(a) >= 12 && isBDF(a[:12]) {
			return Event{Class: ClassPCIe, Kind: "gpu_fallen_off_bus", PCI: string(a[:12])}, true
		}
	}
	return Event{}, false
}

// gpuFunction turns an Xid's "0000:3b:00" (or "0000:3b:00.0") into the
// GPU's function "0000:3b:00.0"; "" when it is not a PCI address.
func gpuFunction(a []byte) string {
	switch {
	case len(a) == 12 && isBDF(a):
		return string(a)
	case len(a) == 10 && isDevice(a):
		return string(a) + ".0"
	}
	return ""
}

// isBDF reports whether b is a PCI function address "dddd:bb:dd.f"
// (lower-case hex, as the kernel prints it).
func isBDF(b []byte) bool {
	return len(b) == 12 && isDevice(b[:10]) && b[10] == '.' && b[11] >= '0' && b[11] <= '7'
}

// isDevice reports whether b is "dddd:bb:dd".
func isDevice(b []byte) bool {
	if len(b) != 10 || b[4] != ':' || b[7] != ':' {
		return false
	}
	for _, i := range [...]int{0, 1, 2, 3, 5, 6, 8, 9} {
		if c := b[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func digits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// IssuerPID returns the PID an mlx5 command line names as the task that
// issued the command ("mlx5_core 0000:18:00.0: wait_func:1189:(pid 72061):
// ACCESS_REG(0x805) timeout …", "mlx5_cmd_out_err:838:(pid 2195): …"): the
// kernel's mlx5_core_err prints current's PID, in the initial PID
// namespace. An exporter whose own reads (ethtool statistics, module
// EEPROM: ACCESS_REG) make the driver fail a command must not count, or
// page on, what it caused itself.
func IssuerPID(msg []byte) (int, bool) {
	_, rest, ok := bytes.Cut(msg, []byte(":(pid "))
	if !ok {
		return 0, false
	}
	n := 0
	for i, ch := range rest {
		if ch == ')' && i > 0 {
			return n, true
		}
		if ch < '0' || ch > '9' || i >= 10 {
			return 0, false
		}
		n = n*10 + int(ch-'0')
	}
	return 0, false
}

// aerSourceID is the function an AER detail line of Linux before 4.17
// names by its requester ID ("severity=Corrected, type=Physical Layer,
// id=0018(Receiver ID)", printed with the root port's prefix): bus
// id>>8, device (id>>3)&31, function id&7, in the port's domain. "" for
// the later format, printed with the source function's own prefix.
func aerSourceID(port, sev []byte) string {
	i := bytes.Index(sev, []byte(", id="))
	if i < 0 || len(sev) < i+10 || sev[i+9] != '(' || len(port) < 5 {
		return ""
	}
	id, err := strconv.ParseUint(string(sev[i+5:i+9]), 16, 16)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%s:%02x:%02x.%x", port[:4], id>>8, (id>>3)&0x1f, id&7)
}
