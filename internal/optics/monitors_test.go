package optics

import (
	"reflect"
	"strings"
	"testing"
)

// Monitors and thresholds are exported only where the module reports them
// (issue 27): a monitor the module lacks reads 0, which is not a
// measurement, and a threshold set left at 0 is not a limit. For SFF-8636
// "reports" is not byte 220 alone (issue 35): sff8636_test.go and
// real_sff8636_test.go.

func noMonitors(t *testing.T, what string, m *Module) {
	t.Helper()
	if m.Temperature.OK || m.Voltage.OK || m.Lanes != nil {
		t.Errorf("%s: monitors temperature %+v voltage %+v lanes %v", what, m.Temperature, m.Voltage, m.Lanes)
	}
	for _, th := range []*Thresholds{m.TemperatureThresholds, m.VoltageThresholds, m.TxPowerThresholds, m.RxPowerThresholds, m.BiasThresholds} {
		if th != nil {
			t.Errorf("%s: thresholds %+v", what, th)
		}
	}
}

// A QSFP-DD passive copper cable: CMIS flat memory, so no page 01h and no
// monitor is advertised. ethtool -m prints no monitors for it (cmis.c,
// cmis_show_dom returns on a flat memory model); identity only.
func TestCMISPassiveCopperFlat(t *testing.T) {
	m := load(t, "cmis-qsfpdd-passive-copper.dump")
	if m.Spec != "CMIS" || m.Type != "QSFP-DD" || m.Vendor != "NVIDIA" || m.PartNumber != "MCP1660-W001E30" || m.Serial != "MT2251VS00123" || !m.Copper {
		t.Errorf("identity %+v", m)
	}
	if len(m.Missing) != 0 {
		t.Errorf("missing %v: a flat module has no pages to miss", m.Missing)
	}
	noMonitors(t, "passive copper", m)
	mem := buildCMISCopper()
	if got := Pages(mem.Lower); !reflect.DeepEqual(got, []PageKey{{0, 0}}) {
		t.Errorf("pages to read %v, want upper page 00h only", got)
	}
}

// The optical module of the fixtures advertises every monitor (01h:159 =
// 03h, 01h:160 = 0Fh): all of them and all threshold sets are exported.
func TestCMISAdvertisesEverything(t *testing.T) {
	m := load(t, "cmis-osfp-400g-healthy.dump")
	if !m.Temperature.OK || !m.Voltage.OK || len(m.Lanes) != 4 {
		t.Fatalf("monitors %+v %+v lanes %d", m.Temperature, m.Voltage, len(m.Lanes))
	}
	for i, l := range m.Lanes {
		if !l.TxPower.OK || !l.RxPower.OK || !l.Bias.OK {
			t.Errorf("lane %d %+v", i+1, l)
		}
	}
	for i, th := range []*Thresholds{m.TemperatureThresholds, m.VoltageThresholds, m.TxPowerThresholds, m.RxPowerThresholds, m.BiasThresholds} {
		if th == nil {
			t.Errorf("threshold set %d absent", i)
		}
	}
}

// Module monitors follow 01h:159 bit 0 (temperature) and bit 1 (supply
// voltage), each with its thresholds; lane monitors follow 01h:160.
func TestCMISModuleMonitorAdvertisement(t *testing.T) {
	for _, c := range []struct {
		name           string
		b159, b160     byte
		temp, vcc      bool
		tx, rx, bias   bool
		lanesPresent   bool
		copper, paged1 bool
	}{
		{name: "temperature only", b159: 0x01, b160: 0x0f, temp: true, tx: true, rx: true, bias: true, lanesPresent: true, paged1: true},
		{name: "voltage only", b159: 0x02, b160: 0x0f, vcc: true, tx: true, rx: true, bias: true, lanesPresent: true, paged1: true},
		{name: "rx power only", b159: 0x03, b160: 0x04, temp: true, vcc: true, rx: true, lanesPresent: true, paged1: true},
		{name: "no lane monitors", b159: 0x03, b160: 0x00, temp: true, vcc: true, paged1: true},
		{name: "paged copper with temperature", b159: 0x01, b160: 0x07, temp: true, copper: true, paged1: true},
		{name: "no page 01h", b159: 0x03, b160: 0x0f},
	} {
		mem := buildCMIS(cmisSpec{temp: 50, rx: healthyRX, copper: c.copper, missingAdv: !c.paged1})
		if p1 := mem.Upper[PageKey{1, 0}]; p1 != nil {
			p1[159-128], p1[160-128] = c.b159, c.b160
		}
		m, err := Decode(mem)
		if err != nil {
			t.Fatal(err)
		}
		if m.Temperature.OK != c.temp || (m.TemperatureThresholds != nil) != c.temp || m.Voltage.OK != c.vcc || (m.VoltageThresholds != nil) != c.vcc {
			t.Errorf("%s: temperature %+v %+v voltage %+v %+v", c.name, m.Temperature, m.TemperatureThresholds, m.Voltage, m.VoltageThresholds)
		}
		if (m.Lanes != nil) != c.lanesPresent {
			t.Errorf("%s: lanes %v", c.name, m.Lanes)
			continue
		}
		for _, l := range m.Lanes {
			if l.TxPower.OK != c.tx || l.RxPower.OK != c.rx || l.Bias.OK != c.bias {
				t.Errorf("%s: lane %+v", c.name, l)
			}
		}
		if (m.TxPowerThresholds != nil) != c.tx || (m.RxPowerThresholds != nil) != c.rx || (m.BiasThresholds != nil) != c.bias {
			t.Errorf("%s: lane thresholds tx %v rx %v bias %v", c.name, m.TxPowerThresholds, m.RxPowerThresholds, m.BiasThresholds)
		}
	}
}

// SFF-8636 byte 220 of upper page 00h: this QSFP28 implements temperature
// and RX (average) power, neither supply voltage nor TX power; its voltage
// word reads 0 (no reading, and byte 220 bit 4 does not claim one), its
// TX power is not supported (bit 2).
func TestSFF8636PartialMonitors(t *testing.T) {
	m := load(t, "sff8636-qsfp28-partial-dom.dump")
	if !m.Temperature.OK || !near(m.Temperature.V, 41.5) || m.Voltage.OK {
		t.Errorf("temperature %+v voltage %+v", m.Temperature, m.Voltage)
	}
	if len(m.Lanes) != 4 {
		t.Fatalf("lanes %v", m.Lanes)
	}
	for i, l := range m.Lanes {
		if !l.RxPower.OK || !near(l.RxPower.V, mW(-1.2)) || !l.Bias.OK || !near(l.Bias.V, 0.0068) || l.TxPower.OK {
			t.Errorf("lane %d %+v", i+1, l)
		}
	}
	if m.TemperatureThresholds == nil || m.TemperatureThresholds.HighWarning != 75 || m.RxPowerThresholds == nil {
		t.Errorf("implemented monitors' thresholds: temperature %+v rx %+v", m.TemperatureThresholds, m.RxPowerThresholds)
	}
	// Voltage thresholds are populated in page 03h, but the monitor is
	// not implemented; TX power is not implemented.
	if m.VoltageThresholds != nil || m.TxPowerThresholds != nil {
		t.Errorf("thresholds voltage %+v tx %+v", m.VoltageThresholds, m.TxPowerThresholds)
	}
	h := load(t, "sff8636-qsfp56-healthy.dump")
	if !h.Voltage.OK || !near(h.Voltage.V, 3.31) || !h.Lanes[0].TxPower.OK || h.VoltageThresholds == nil || h.TxPowerThresholds == nil || h.BiasThresholds == nil {
		t.Errorf("healthy QSFP56 (byte 220 = 3Ch): voltage %+v lane %+v thresholds %v %v %v", h.Voltage, h.Lanes[0], h.VoltageThresholds, h.TxPowerThresholds, h.BiasThresholds)
	}
}

// Without upper page 00h the SFF-8636 device technology (copper or not,
// byte 147) and byte 220 are unknown. A paged module is no passive copper
// cable without diagnostics: its lower page's temperature, voltage, RX
// power and bias are reported, with page 03h's thresholds; TX power (byte
// 220 bit 2) is not. A flat one may be such a cable: no monitors.
// A flat SFF-8636 module has no page 03h: monitors, no thresholds.
func TestSFF8636AdvertisementUnknownAndFlat(t *testing.T) {
	mem := buildSFF8636(sffSpec{})
	delete(mem.Upper, PageKey{0, 0})
	m, _ := Decode(mem)
	if !m.Temperature.OK || !m.Voltage.OK || len(m.Lanes) != 4 || m.TemperatureThresholds == nil || m.RxPowerThresholds == nil || m.TxPowerThresholds != nil {
		t.Errorf("paged, no upper page 00h: %+v %+v lanes %v thresholds %v %v %v", m.Temperature, m.Voltage, m.Lanes, m.TemperatureThresholds, m.RxPowerThresholds, m.TxPowerThresholds)
	}
	for i, l := range m.Lanes {
		if !l.RxPower.OK || !l.Bias.OK || l.TxPower.OK {
			t.Errorf("lane %d: %+v", i, l)
		}
	}
	if strings.Join(m.Missing, ",") != "upper page 00h" {
		t.Errorf("missing %v", m.Missing)
	}
	fm := buildSFF8636(sffSpec{})
	fm.Lower[2] |= 0x04
	delete(fm.Upper, PageKey{0, 0})
	delete(fm.Upper, PageKey{3, 0})
	m, _ = Decode(fm)
	noMonitors(t, "flat, no upper page 00h", m)
	flat := buildSFF8636(sffSpec{})
	flat.Lower[2] |= 0x04
	delete(flat.Upper, PageKey{3, 0})
	f, _ := Decode(flat)
	if !f.Temperature.OK || !f.Voltage.OK || len(f.Lanes) != 4 || f.TemperatureThresholds != nil || len(f.Missing) != 0 {
		t.Errorf("flat: %+v %+v lanes %d thresholds %v missing %v", f.Temperature, f.Voltage, len(f.Lanes), f.TemperatureThresholds, f.Missing)
	}
}

// Media: CMIS lower byte 85, SFF-8636 upper page 00h byte 147 bits 7-4.
func TestMedia(t *testing.T) {
	for name, want := range map[string]string{
		"cmis-qsfpdd-passive-copper.dump": "passive_copper",
		"cmis-osfp-400g-healthy.dump":     "smf",
		"sff8636-qsfp28-partial-dom.dump": "optical",
		"sff8636-qsfp56-healthy.dump":     "optical",
	} {
		if got := load(t, name).Media; got != want {
			t.Errorf("%s: media %q, want %q", name, got, want)
		}
	}
	for tech, want := range map[byte]string{0x00: "optical", 0x90: "optical", 0xa0: "passive_copper", 0xb0: "passive_copper", 0xc0: "active_copper", 0xf0: "active_copper"} {
		mem := buildSFF8636(sffSpec{})
		mem.Upper[PageKey{0, 0}][147-128] = tech
		m, _ := Decode(mem)
		if m.Media != want || m.Copper != (tech >= 0xa0) || (m.Lanes == nil) != m.Copper {
			t.Errorf("byte 147 = %02xh: media %q copper %v lanes %d, want %q", tech, m.Media, m.Copper, len(m.Lanes), want)
		}
	}
	for typ, want := range map[byte]string{0x00: "", 0x01: "mmf", 0x04: "active_cable", 0x05: "base_t", 0x40: "0x40"} {
		mem := buildCMIS(cmisSpec{temp: 30, rx: healthyRX})
		mem.Lower[85] = typ
		if m, _ := Decode(mem); m.Media != want {
			t.Errorf("byte 85 = %02xh: media %q, want %q", typ, m.Media, want)
		}
	}
	mem := buildSFF8636(sffSpec{})
	delete(mem.Upper, PageKey{0, 0})
	if m, _ := Decode(mem); m.Media != "" {
		t.Errorf("no upper page 00h: media %q", m.Media)
	}
}
