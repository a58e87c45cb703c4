// Package optics decodes the management memory of pluggable optical
// modules (QSFP28/QSFP56 under SFF-8636, QSFP-DD/OSFP/QSFP112 under CMIS)
// into the module's identity, its monitors (temperature, supply voltage,
// per-lane transmit and receive optical power and laser bias current) and
// the module's own warning and alarm thresholds, in base units.
//
// No maintained Go library decodes these formats (github.com/safchain/ethtool
// returns the raw bytes of the legacy ioctl, which cannot address CMIS
// pages), so the decoders here are written from the specifications' memory
// maps; byte addresses below are those of the documents:
//
// SFF-8636 (Management Interface for 4-lane Modules and Cables, rev 2.11;
// QSFP+ modules under SFF-8436 share the map and ethtool decodes both):
//   - lower page 00h: byte 0 identifier (SFF-8024 Table 4-1), 1 revision
//     compliance, 2 status (bit 2 Flat_mem), 22-23 temperature (signed,
//     1/256 °C), 26-27 supply voltage (100 µV) — Table 6-8; 34-41 RX power
//     lanes 1-4, 42-49 TX bias lanes 1-4 (2 µA), 50-57 TX power lanes 1-4
//     (0.1 µW) — Table 6-9;
//   - upper page 00h: 147 transmitter technology (bits 7-4, Table 6-20:
//     1010b-1011b passive copper, 1100b-1111b active copper), 148-163
//     vendor name, 165-167 OUI, 168-183 part number, 184-185 revision,
//     196-211 serial number, 212-219 date code, 220 diagnostic monitoring
//     type (Table 6-24: bit 5 temperature, bit 4 supply voltage monitoring
//     implemented, both "0b=Not implemented or pre-Rev 2.8"; bit 3 RX power
//     type OMA/average; bit 2 TX power supported);
//   - upper page 03h (absent with Flat_mem): thresholds, each high alarm,
//     low alarm, high warning, low warning: 128-135 temperature, 144-151
//     supply voltage, 176-183 RX power, 184-191 TX bias, 192-199 TX power
//     — 6.4.
//
// Which of them a module reports follows the ethtool utility's qsfp.c
// (sff8636_show_dom), not byte 220 alone: see sff8636.go. Offsets as in
// ethtool's qsfp.h (SFF8636_DIAG_TYPE_OFFSET 0xDC, RX power type 0x08, TX
// power 0x04; SFF8636_STATUS_2_OFFSET 0x02, SFF8636_STATUS_PAGE_3_PRESENT
// 0x04; SFF8636_DEVICE_TECH_OFFSET 0x93) and sonic-platform-common's
// sff8636.py (TEMP_SUPPORT bit 5, VOLTAGE_SUPPORT bit 4, TX_POWER_SUPPORT
// bit 2).
//
// CMIS (OIF Common Management Interface Specification, rev 4.0 to 5.x):
//   - lower page: 0 identifier, 1 revision (major.minor nibbles), 2 bit 7
//     flat memory, 14-15 temperature, 16-17 supply voltage, 39-40 active
//     firmware major.minor, 85 module media type (1 MMF, 2 SMF, 3 passive
//     copper, 4 active cable, 5 BASE-T), 86-89 the
//     first application advertised (88: host lane count in bits 7-4, media
//     lane count in bits 3-0) — section 8.2;
//   - upper page 00h: 129-144 vendor name, 145-147 OUI, 148-163 part number,
//     164-165 revision, 166-181 serial number, 182-189 date code — 8.3;
//   - page 01h (absent with flat memory): 159 supported module monitors
//     (bit 0 temperature, 1 supply voltage, 2-4 aux 1-3, 5 custom), 160
//     supported lane monitors (bit 0 TX bias, 1 TX power, 2 RX power, bits
//     4-3 TX bias multiplier 1/2/4) — CMIS 5.x Table 8-47 "Supported
//     Monitors Advertisement" (section 8.4.7 in 5.2). Byte 160 and flat
//     memory as the ethtool utility's cmis.h has them
//     (CMIS_DIAG_CHAN_ADVER_OFFSET 0xA0 with the masks above,
//     CMIS_MEMORY_MODEL_OFFSET 0x02 mask 0x80); ethtool does not decode
//     byte 159, whose bits (TempMonSupported 0, VccMonSupported 1) are
//     taken from public transcriptions of that table, which agree;
//   - page 02h: thresholds (high alarm, low alarm, high warning, low
//     warning): 128-135 temperature, 136-143 supply voltage, 176-183 TX
//     power, 184-191 TX bias, 192-199 RX power — 8.5;
//   - page 11h bank 0: 154-169 TX power lanes 1-8, 170-185 TX bias lanes
//     1-8, 186-201 RX power lanes 1-8 — 8.9 (lane-specific monitors).
//
// The table numbers of these sections differ between revisions of the
// documents; the byte addresses above are the same in all of them and were
// cross-checked against the offsets the ethtool utility uses (cmis.h, qsfp.h).
//
// A page that could not be read is left out: what it carries is absent
// from the Module (Missing names it), the rest is decoded.
//
// Only what the module reports is decoded: a monitor it does not implement
// reads 0, which is not a measurement. CMIS modules with flat memory
// (passive copper) advertise nothing and report no monitors and no
// thresholds (as ethtool -m prints none); without page 01h (CMIS) or upper
// page 00h (SFF-8636) it is unknown what the module reports and the
// monitors are absent. SFF-8636 passive copper cables with flat memory
// report nothing either. A threshold set is decoded only for a reported
// monitor, and left out when all its four values are 0 (unpopulated).
package optics

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// PageKey names an upper page (bytes 128-255) of the module's memory.
type PageKey struct{ Page, Bank uint8 }

// Memory is what was read from a module: the lower page (bytes 0-127) and
// the upper pages that could be read (each 128 bytes, byte 128 at index 0).
type Memory struct {
	Lower []byte
	Upper map[PageKey][]byte
}

func (m *Memory) page(p, bank uint8) []byte {
	b := m.Upper[PageKey{p, bank}]
	if len(b) != 128 {
		return nil
	}
	return b
}

// Value is a monitor reading; OK is false when the module does not report
// it (absent, not a zero).
type Value struct {
	V  float64
	OK bool
}

// Thresholds are the module's own limits for one monitor.
type Thresholds struct {
	HighAlarm, LowAlarm, HighWarning, LowWarning float64
}

// Lane holds the monitors of one media lane: optical power in watts, bias
// current in amperes.
type Lane struct {
	TxPower, RxPower, Bias Value
}

// Module is a decoded module memory.
type Module struct {
	Spec         string // "SFF-8636" or "CMIS"
	SpecRevision string // CMIS "5.0"; SFF-8636 revision compliance code "8"
	Identifier   uint8  // SFF-8024 identifier
	Type         string // "QSFP28", "QSFP-DD", "OSFP", ...
	Vendor       string
	VendorOUI    string // "00:90:65"
	PartNumber   string
	Revision     string
	Serial       string
	DateCode     string
	Firmware     string // CMIS active firmware "major.minor"; "" for SFF-8636
	Copper       bool   // a copper cable: no optical monitors
	// Media: CMIS module media type (lower byte 85): "mmf", "smf",
	// "passive_copper", "active_cable", "base_t"; SFF-8636 transmitter
	// technology (upper page 00h byte 147 bits 7-4): "optical" (0000b-
	// 1001b, lasers), "passive_copper" (1010b, 1011b), "active_copper"
	// (1100b-1111b). "" when undefined or unread, "0x.." when reserved.
	Media string

	Temperature Value // degrees Celsius
	Voltage     Value // volts
	Lanes       []Lane

	// Thresholds, nil when the page that holds them was not read.
	TemperatureThresholds, VoltageThresholds *Thresholds
	TxPowerThresholds, RxPowerThresholds     *Thresholds
	BiasThresholds                           *Thresholds

	// Missing names the pages that were expected but not read.
	Missing []string
}

// Errors of Decode.
var (
	ErrShort       = errors.New("module memory: lower page shorter than 128 bytes")
	ErrUnsupported = errors.New("module memory: identifier is neither SFF-8636 nor CMIS")
)

// Spec families by SFF-8024 identifier.
const (
	specNone = iota
	specSFF8636
	specCMIS
)

var typeNames = map[uint8]string{
	0x03: "SFP", 0x0c: "QSFP", 0x0d: "QSFP+", 0x11: "QSFP28",
	0x18: "QSFP-DD", 0x19: "OSFP", 0x1e: "QSFP+ CMIS",
}

// cmisMedia names a CMIS module media type (lower page byte 85, SFF-8024
// "Module Media Type"; ethtool cmis.h: CMIS_MT_MMF 01h, CMIS_MT_SMF 02h).
func cmisMedia(t uint8) string {
	switch t {
	case 0x00:
		return ""
	case 0x01:
		return "mmf"
	case 0x02:
		return "smf"
	case 0x03:
		return "passive_copper"
	case 0x04:
		return "active_cable"
	case 0x05:
		return "base_t"
	}
	return fmt.Sprintf("0x%02x", t)
}

func specOf(id uint8) int {
	switch id {
	case 0x0c, 0x0d, 0x11:
		return specSFF8636
	case 0x18, 0x19, 0x1e:
		return specCMIS
	}
	return specNone
}

// TypeName is the SFF-8024 name of an identifier ("0x2a" when unknown).
func TypeName(id uint8) string {
	if n, ok := typeNames[id]; ok {
		return n
	}
	return fmt.Sprintf("0x%02x", id)
}

// FlatMemory reports whether a module with this lower page has no pages
// beyond upper page 00h.
func FlatMemory(lower []byte) bool {
	if len(lower) < 128 {
		return true
	}
	switch specOf(lower[0]) {
	case specSFF8636:
		return lower[2]&0x04 != 0
	case specCMIS:
		return lower[2]&0x80 != 0
	}
	return true
}

// Pages lists the upper pages Decode uses for a module with this lower
// page (what a reader should fetch).
func Pages(lower []byte) []PageKey {
	if len(lower) < 128 {
		return nil
	}
	s := specOf(lower[0])
	if s == specNone {
		return nil
	}
	out := []PageKey{{0, 0}}
	if FlatMemory(lower) {
		return out
	}
	if s == specSFF8636 {
		return append(out, PageKey{3, 0})
	}
	return append(out, PageKey{1, 0}, PageKey{2, 0}, PageKey{0x11, 0})
}

// Decode decodes a module's memory. It fails only when the lower page is
// short or the module is neither SFF-8636 nor CMIS.
func Decode(m Memory) (*Module, error) {
	if len(m.Lower) < 128 {
		return nil, ErrShort
	}
	id := m.Lower[0]
	mod := &Module{Identifier: id, Type: TypeName(id)}
	switch specOf(id) {
	case specSFF8636:
		decodeSFF8636(&m, mod)
	case specCMIS:
		decodeCMIS(&m, mod)
	default:
		return nil, fmt.Errorf("%w: 0x%02x", ErrUnsupported, id)
	}
	return mod, nil
}

func u16(b []byte, off int) float64 { return float64(binary.BigEndian.Uint16(b[off:])) }
func s16(b []byte, off int) float64 { return float64(int16(binary.BigEndian.Uint16(b[off:]))) }

// upper addresses a byte of an upper page by its address (128-255).
func at(p []byte, addr int) []byte { return p[addr-128:] }

const (
	powerUnit   = 1e-7 // 0.1 µW in W
	biasUnit    = 2e-6 // 2 µA in A
	voltageUnit = 1e-4 // 100 µV in V
)

func text(p []byte, from, to int) string {
	b := p[from-128 : to-128+1]
	s := make([]byte, 0, len(b))
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			c = ' '
		}
		s = append(s, c)
	}
	return strings.TrimSpace(string(s))
}

// thresholds decodes one threshold set (high alarm, low alarm, high
// warning, low warning: four 16-bit words from addr). A set whose eight
// bytes are all 0 is unpopulated, not a limit of 0 (a temperature high
// warning of 0 °C would make every reading an excursion): nil.
func thresholds(p []byte, addr int, scale float64, signed bool) *Thresholds {
	get := u16
	if signed {
		get = s16
	}
	b := at(p, addr)
	if binary.BigEndian.Uint64(b) == 0 {
		return nil
	}
	return &Thresholds{HighAlarm: get(b, 0) * scale, LowAlarm: get(b, 2) * scale, HighWarning: get(b, 4) * scale, LowWarning: get(b, 6) * scale}
}

func identity(mod *Module, p []byte, vendor, oui, pn, rev, sn, date int, snLen int) {
	mod.Vendor = text(p, vendor, vendor+15)
	o := at(p, oui)
	mod.VendorOUI = fmt.Sprintf("%02x:%02x:%02x", o[0], o[1], o[2])
	mod.PartNumber = text(p, pn, pn+15)
	mod.Revision = text(p, rev, rev+1)
	mod.Serial = text(p, sn, sn+snLen-1)
	mod.DateCode = text(p, date, date+7)
}
