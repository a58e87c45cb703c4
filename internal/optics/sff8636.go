package optics

import (
	"encoding/binary"
	"fmt"
)

// SFF-8636 monitors, as the ethtool utility decodes them (qsfp.c,
// sff8636_dom_parse and sff8636_show_dom; ethtool -m prints what they
// parse):
//
//   - Temperature (lower page bytes 22-23) and supply voltage (26-27) are
//     read from every module: no bit says whether they exist. Upper page
//     00h byte 220 bits 5 and 4 ("temperature / supply voltage monitoring
//     implemented") were added in SFF-8636 rev 2.8; a 0 there means "not
//     implemented or pre-Rev 2.8" (SFF-8636 rev 2.11, Table 6-24
//     "Diagnostic Monitoring Type"), so many modules that monitor both
//     leave them 0, and some that claim rev 2.8 (byte 1 = 08h) do too. A
//     word is taken as reported when the bit is set or when it reads
//     neither 0000h nor FFFFh (an unimplemented monitor reads 0, an
//     unprogrammed one FFFFh); a module that says it implements the
//     monitor is believed at any value.
//   - Lane monitors (RX power 34-41, TX bias 42-49, TX power 50-57) have
//     no advertisement either; ethtool prints them when the temperature
//     reading is valid ("A valid temperature reading is used as existence
//     for TX/RX power"), and so do we, for modules with lasers (byte 147
//     bits 7-4 below 1010b). TX power is decoded only where byte 220 bit 2
//     says it is supported (ethtool prints it regardless; the bytes of a
//     module without the bit read 0, as in the real dumps of testdata).
//   - Thresholds are on upper page 03h, which exists when Flat_mem (lower
//     byte 2 bit 2, ethtool's SFF8636_STATUS_PAGE_3_PRESENT) is 0
//     ("Paging (at least upper page 03h implemented)", Table 6-2):
//     ethtool's supports_alarms is exactly that. Byte 220 does not decide
//     them; a set is decoded for a monitor that is reported.
//
// A passive copper cable (byte 147 bits 7-4 1010b or 1011b: "Copper cable
// unequalized" / "passive equalized", SFF-8636 rev 2.11 Table 6-20
// "Transmitter Technology", ethtool's
// sff8636_show_wavelength_or_copper_compliance) with flat memory is a cable
// assembly without diagnostics: nothing is reported, whatever its monitor
// bytes hold (a real Molex cable's temperature word reads 0181h, "1.5 °C").
// Temperature and voltage are optional for copper cables (Table 6-8, "PC"
// and "AC" columns): those that are paged, or active, report what they
// measure, never lane monitors: they have no lasers.
func decodeSFF8636(m *Memory, mod *Module) {
	lo := m.Lower
	mod.Spec, mod.SpecRevision = "SFF-8636", fmt.Sprint(lo[1])
	flat := FlatMemory(lo)
	p3 := m.page(3, 0)
	p := m.page(0, 0)
	if p == nil {
		mod.Missing = append(mod.Missing, "upper page 00h")
		if !flat && p3 == nil {
			mod.Missing = append(mod.Missing, "page 03h")
		}
		if flat {
			// Byte 147 (copper or not) is unknown, and a flat-memory
			// module may be a passive copper cable whose monitor bytes
			// mean nothing: no monitor is reported.
			return
		}
		decodeSFF8636LowerOnly(lo, p3, mod)
		return
	}
	identity(mod, p, 148, 165, 168, 184, 196, 212, 16)
	tech := at(p, 147)[0] >> 4
	mod.Copper = tech >= 0xa
	switch {
	case tech >= 0xc:
		mod.Media = "active_copper"
	case tech >= 0xa:
		mod.Media = "passive_copper"
	default:
		mod.Media = "optical"
	}
	if flat && mod.Media == "passive_copper" {
		return
	}
	// Byte 220, Diagnostic Monitoring Type: bit 5 temperature, bit 4
	// supply voltage monitoring implemented, bit 3 RX power type (OMA or
	// average), bit 2 TX power supported.
	diag := at(p, 220)[0]
	temp := diag&0x20 != 0 || reported(lo, 22)
	vcc := diag&0x10 != 0 || reported(lo, 26)
	lanes := !mod.Copper && temp
	txPower := lanes && diag&0x04 != 0
	if temp {
		mod.Temperature = Value{s16(lo, 22) / 256, true}
	}
	if vcc {
		mod.Voltage = Value{u16(lo, 26) * voltageUnit, true}
	}
	if lanes {
		mod.Lanes = make([]Lane, 4)
		for i := range mod.Lanes {
			l := &mod.Lanes[i]
			l.RxPower = Value{u16(lo, 34+2*i) * powerUnit, true}
			l.Bias = Value{u16(lo, 42+2*i) * biasUnit, true}
			if txPower {
				l.TxPower = Value{u16(lo, 50+2*i) * powerUnit, true}
			}
		}
	}
	if flat {
		return
	}
	if p3 == nil {
		mod.Missing = append(mod.Missing, "page 03h")
		return
	}
	if temp {
		mod.TemperatureThresholds = thresholds(p3, 128, 1.0/256, true)
	}
	if vcc {
		mod.VoltageThresholds = thresholds(p3, 144, voltageUnit, false)
	}
	if lanes {
		mod.RxPowerThresholds = thresholds(p3, 176, powerUnit, false)
		mod.BiasThresholds = thresholds(p3, 184, biasUnit, false)
	}
	if txPower {
		mod.TxPowerThresholds = thresholds(p3, 192, powerUnit, false)
	}
}

// reported tells whether the 16-bit monitor word at off holds a reading:
// neither 0000h (what an unimplemented monitor reads; ethtool takes a
// temperature of 0 as "no diagnostics") nor FFFFh (unprogrammed memory,
// ethtool's other sentinel).
func reported(b []byte, off int) bool {
	w := binary.BigEndian.Uint16(b[off:])
	return w != 0 && w != 0xffff
}

// decodeSFF8636LowerOnly decodes a paged module read without its upper
// page 00h (ethtool or a cage that returned the lower 128 bytes only). A
// paged module is no passive copper cable without diagnostics (those have
// flat memory), so its lower page's monitors mean what they say:
// temperature and supply voltage where their words hold a reading, RX
// power and TX bias per lane where the temperature does and the lanes'
// words are not all empty (a paged copper cable has no lasers: its lane
// words read 0). What byte 220 decides is unknown and left out: TX power
// (bit 2) and whether RX power is OMA or average (bit 3).
func decodeSFF8636LowerOnly(lo, p3 []byte, mod *Module) {
	temp, vcc := reported(lo, 22), reported(lo, 26)
	lanes := false
	if temp {
		for off := 34; off < 50; off += 2 {
			if reported(lo, off) {
				lanes = true
			}
		}
	}
	if temp {
		mod.Temperature = Value{s16(lo, 22) / 256, true}
	}
	if vcc {
		mod.Voltage = Value{u16(lo, 26) * voltageUnit, true}
	}
	if lanes {
		mod.Lanes = make([]Lane, 4)
		for i := range mod.Lanes {
			mod.Lanes[i].RxPower = Value{u16(lo, 34+2*i) * powerUnit, true}
			mod.Lanes[i].Bias = Value{u16(lo, 42+2*i) * biasUnit, true}
		}
	}
	if p3 == nil {
		return
	}
	if temp {
		mod.TemperatureThresholds = thresholds(p3, 128, 1.0/256, true)
	}
	if vcc {
		mod.VoltageThresholds = thresholds(p3, 144, voltageUnit, false)
	}
	if lanes {
		mod.RxPowerThresholds = thresholds(p3, 176, powerUnit, false)
		mod.BiasThresholds = thresholds(p3, 184, biasUnit, false)
	}
}
