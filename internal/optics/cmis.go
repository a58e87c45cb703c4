package optics

import "fmt"

// decodeCMIS decodes a CMIS module (memory map in the package doc):
// monitors and thresholds as page 01h advertises them, none with flat
// memory (ethtool's cmis_show_dom prints none either).
func decodeCMIS(m *Memory, mod *Module) {
	lo := m.Lower
	mod.Spec, mod.SpecRevision = "CMIS", fmt.Sprintf("%d.%d", lo[1]>>4, lo[1]&0x0f)
	mod.Firmware = fmt.Sprintf("%d.%d", lo[39], lo[40])
	mod.Copper = lo[85] == 0x03
	mod.Media = cmisMedia(lo[85])
	if p := m.page(0, 0); p != nil {
		identity(mod, p, 129, 145, 148, 164, 166, 182, 16)
	} else {
		mod.Missing = append(mod.Missing, "upper page 00h")
	}
	// Flat memory: no page 01h, so no monitor is advertised (ethtool's
	// cmis_show_dom prints none either); the lower page's monitor bytes
	// of such a module (passive copper) read 0.
	if FlatMemory(lo) {
		return
	}
	adv := m.page(1, 0)
	if adv == nil {
		mod.Missing = append(mod.Missing, "page 01h")
		return
	}
	// Page 01h byte 159: bit 0 temperature, bit 1 supply voltage monitor
	// supported; byte 160: bit 0 TX bias, bit 1 TX power, bit 2 RX power
	// monitor supported, bits 4-3 the TX bias multiplier (x1, x2, x4).
	mods, lanesAdv := at(adv, 159)[0], at(adv, 160)[0]
	temp, vcc := mods&0x01 != 0, mods&0x02 != 0
	var bias, txp, rxp bool
	if !mod.Copper {
		bias, txp, rxp = lanesAdv&0x01 != 0, lanesAdv&0x02 != 0, lanesAdv&0x04 != 0
	}
	mult := 1.0
	switch (lanesAdv >> 3) & 0x03 {
	case 1:
		mult = 2
	case 2:
		mult = 4
	}
	if temp {
		mod.Temperature = Value{s16(lo, 14) / 256, true}
	}
	if vcc {
		mod.Voltage = Value{u16(lo, 16) * voltageUnit, true}
	}
	if th := m.page(2, 0); th != nil {
		if temp {
			mod.TemperatureThresholds = thresholds(th, 128, 1.0/256, true)
		}
		if vcc {
			mod.VoltageThresholds = thresholds(th, 136, voltageUnit, false)
		}
		if txp {
			mod.TxPowerThresholds = thresholds(th, 176, powerUnit, false)
		}
		if bias {
			mod.BiasThresholds = thresholds(th, 184, biasUnit*mult, false)
		}
		if rxp {
			mod.RxPowerThresholds = thresholds(th, 192, powerUnit, false)
		}
	} else {
		mod.Missing = append(mod.Missing, "page 02h")
	}
	if !bias && !txp && !rxp {
		return
	}
	mon := m.page(0x11, 0)
	if mon == nil {
		mod.Missing = append(mod.Missing, "page 11h")
		return
	}
	lanes := int(lo[88] & 0x0f)
	if lanes < 1 || lanes > 8 {
		lanes = 8
		if lo[0] == 0x1e {
			lanes = 4
		}
	}
	mod.Lanes = make([]Lane, lanes)
	for i := range mod.Lanes {
		l := &mod.Lanes[i]
		if txp {
			l.TxPower = Value{u16(at(mon, 154), 2*i) * powerUnit, true}
		}
		if bias {
			l.Bias = Value{u16(at(mon, 170), 2*i) * biasUnit * mult, true}
		}
		if rxp {
			l.RxPower = Value{u16(at(mon, 186), 2*i) * powerUnit, true}
		}
	}
}
