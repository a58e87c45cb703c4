package optics

import "testing"

// A module whose temperature thresholds are all 0 (unpopulated) would keep
// TransceiverTemperatureHigh firing (any temperature > 0 °C high warning):
// that set is left out, the populated ones stay.
func TestZeroThresholdsLeftOut(t *testing.T) {
	m := load(t, "cmis-osfp-400g-zero-temp-th.dump")
	if m.TemperatureThresholds != nil {
		t.Errorf("temperature thresholds %+v", m.TemperatureThresholds)
	}
	if !m.Temperature.OK || m.VoltageThresholds == nil || m.RxPowerThresholds == nil || m.TxPowerThresholds == nil || m.BiasThresholds == nil {
		t.Errorf("temperature %+v thresholds %v %v %v %v", m.Temperature, m.VoltageThresholds, m.RxPowerThresholds, m.TxPowerThresholds, m.BiasThresholds)
	}
	// One non-zero value is a populated set (a low warning of 0 °C is real).
	mem := buildCMIS(cmisSpec{temp: 30, rx: healthyRX, zeroTempTh: true})
	mem.Upper[PageKey{2, 0}][132-128] = 70 // high warning 70 °C (MSB of the 1/256 °C word)
	if o, _ := Decode(mem); o.TemperatureThresholds == nil || o.TemperatureThresholds.HighWarning != 70 || o.TemperatureThresholds.LowWarning != 0 {
		t.Errorf("one threshold set: %+v", o.TemperatureThresholds)
	}
}

// The partial SFF-8636 module's bias thresholds (page 03h bytes 184-191)
// are all 0: left out while its bias monitors are reported.
func TestZeroThresholdsSFF8636(t *testing.T) {
	m := load(t, "sff8636-qsfp28-partial-dom.dump")
	if m.BiasThresholds != nil || m.Lanes[0].Bias.V == 0 || m.RxPowerThresholds == nil || m.TemperatureThresholds == nil {
		t.Errorf("bias thresholds %+v lane %+v rx %v temperature %v", m.BiasThresholds, m.Lanes[0], m.RxPowerThresholds, m.TemperatureThresholds)
	}
}
