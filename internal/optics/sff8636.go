package optics

import "fmt"

func decodeSFF8636(m *Memory, mod *Module) {
	lo := m.Lower
	mod.Spec, mod.SpecRevision = "SFF-8636", fmt.Sprint(lo[1])
	paged := !FlatMemory(lo)
	p3 := m.page(3, 0)
	p := m.page(0, 0)
	if p == nil {
		// Byte 220 (what is implemented) and byte 147 (copper or not)
		// are unknown: no monitor is reported.
		mod.Missing = append(mod.Missing, "upper page 00h")
		if paged && p3 == nil {
			mod.Missing = append(mod.Missing, "page 03h")
		}
		return
	}
	identity(mod, p, 148, 165, 168, 184, 196, 212, 16)
	mod.Copper = at(p, 147)[0]>>4 >= 0xa
	switch tech := at(p, 147)[0] >> 4; {
	case tech >= 0xc:
		mod.Media = "active_copper"
	case tech >= 0xa:
		mod.Media = "passive_copper"
	default:
		mod.Media = "optical"
	}
	// Byte 220, Diagnostic Monitoring Type: bit 5 temperature, bit 4
	// supply voltage monitoring implemented, bit 2 TX power supported
	// (bit 3 is the RX power type, OMA or average; SFF-8636 has no bit for
	// RX power or bias: they are the optical lanes' monitors).
	diag := at(p, 220)[0]
	temp, vcc, txPower := diag&0x20 != 0, diag&0x10 != 0, diag&0x04 != 0
	optical := !mod.Copper
	if temp {
		mod.Temperature = Value{s16(lo, 22) / 256, true}
	}
	if vcc {
		mod.Voltage = Value{u16(lo, 26) * voltageUnit, true}
	}
	if optical {
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
	if !paged {
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
	if optical {
		mod.RxPowerThresholds = thresholds(p3, 176, powerUnit, false)
		mod.BiasThresholds = thresholds(p3, 184, biasUnit, false)
		if txPower {
			mod.TxPowerThresholds = thresholds(p3, 192, powerUnit, false)
		}
	}
}
