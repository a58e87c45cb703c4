package optics

import (
	"encoding/binary"
	"testing"
)

// The SFF-8636 reporting rules (sff8636.go) on variations of the
// synthetic QSFP56: byte 147 (transmitter technology), Flat_mem, byte 220
// and the monitor words.
func TestSFF8636ReportingRules(t *testing.T) {
	for _, c := range []struct {
		name           string
		tech           byte // byte 147 bits 7-4
		flat           bool
		diag           byte // byte 220
		temp, vcc      uint16
		wantT, wantV   bool
		wantLanes, wTx bool
		wantTh         bool
	}{
		// ethtool prints temperature and voltage whatever byte 220 says.
		{name: "optical, byte 220 = 0", tech: 0x0, diag: 0x00, temp: 0x2980, vcc: 0x8200, wantT: true, wantV: true, wantLanes: true, wantTh: true},
		{name: "optical, TX power bit", tech: 0x0, diag: 0x04, temp: 0x2980, vcc: 0x8200, wantT: true, wantV: true, wantLanes: true, wTx: true, wantTh: true},
		// A word of 0 or FFFFh without the bit is no reading; lanes follow
		// the temperature (ethtool's validity test).
		{name: "optical, no monitors", tech: 0x0, diag: 0x0c, temp: 0, vcc: 0},
		{name: "optical, unprogrammed", tech: 0x4, diag: 0x08, temp: 0xffff, vcc: 0xffff},
		{name: "optical, voltage 0", tech: 0x0, diag: 0x08, temp: 0x2980, vcc: 0, wantT: true, wantLanes: true, wantTh: true},
		// The bit is believed at any value (0 °C is a reading then).
		{name: "optical, bits set, 0 °C", tech: 0x0, diag: 0x3c, temp: 0, vcc: 0x8200, wantT: true, wantV: true, wantLanes: true, wTx: true, wantTh: true},
		// Flat optical module: monitors, no page 03h to miss.
		{name: "optical, flat", tech: 0x0, flat: true, diag: 0x0c, temp: 0x2980, vcc: 0x8200, wantT: true, wantV: true, wantLanes: true, wTx: true},
		// Passive copper: flat is the no-diagnostics assembly, quiet
		// whatever its words hold; paged reports what it measures, no lanes.
		{name: "passive copper, flat", tech: 0xa, flat: true, diag: 0x00, temp: 0x0181, vcc: 0x8200},
		{name: "passive copper equalized, flat", tech: 0xb, flat: true, diag: 0x30, temp: 0x1981, vcc: 0x8414},
		{name: "passive copper, paged, no monitors", tech: 0xa, diag: 0x00, temp: 0, vcc: 0},
		{name: "passive copper, paged, monitors", tech: 0xa, diag: 0x00, temp: 0x172e, vcc: 0x8016, wantT: true, wantV: true, wantTh: true},
		// Active copper keeps its monitors with flat memory too.
		{name: "active copper, flat", tech: 0xc, flat: true, diag: 0x00, temp: 0x2000, vcc: 0x8200, wantT: true, wantV: true},
	} {
		mem := buildSFF8636(sffSpec{})
		p0, p3 := mem.Upper[PageKey{0, 0}], mem.Upper[PageKey{3, 0}]
		p0[147-128] = c.tech << 4
		p0[220-128] = c.diag
		p3[192-128] = 0x10 // TX power thresholds populated whatever byte 220 says
		binary.BigEndian.PutUint16(mem.Lower[22:], c.temp)
		binary.BigEndian.PutUint16(mem.Lower[26:], c.vcc)
		if c.flat {
			mem.Lower[2] |= 0x04
			delete(mem.Upper, PageKey{3, 0})
		}
		m, err := Decode(mem)
		if err != nil {
			t.Fatal(err)
		}
		if m.Temperature.OK != c.wantT || m.Voltage.OK != c.wantV || (m.Lanes != nil) != c.wantLanes {
			t.Errorf("%s: temperature %+v voltage %+v lanes %v", c.name, m.Temperature, m.Voltage, m.Lanes)
		}
		for _, l := range m.Lanes {
			if !l.RxPower.OK || !l.Bias.OK || l.TxPower.OK != c.wTx {
				t.Errorf("%s: lane %+v", c.name, l)
			}
		}
		if got := m.TemperatureThresholds != nil; got != (c.wantTh && c.wantT) {
			t.Errorf("%s: temperature thresholds %+v", c.name, m.TemperatureThresholds)
		}
		if got := m.VoltageThresholds != nil; got != (c.wantTh && c.wantV) {
			t.Errorf("%s: voltage thresholds %+v", c.name, m.VoltageThresholds)
		}
		if got := m.RxPowerThresholds != nil; got != (c.wantTh && c.wantLanes) {
			t.Errorf("%s: rx power thresholds %+v", c.name, m.RxPowerThresholds)
		}
		if got := m.TxPowerThresholds != nil; got != (c.wantTh && c.wTx) {
			t.Errorf("%s: tx power thresholds %+v", c.name, m.TxPowerThresholds)
		}
		if len(m.Missing) != 0 {
			t.Errorf("%s: missing %v", c.name, m.Missing)
		}
	}
}
