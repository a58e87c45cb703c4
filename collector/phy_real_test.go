package collector

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// Real SFF-8636 modules through the collector (issue 35): a Mellanox SR4
// whose byte 220 leaves temperature and voltage monitoring unadvertised
// (0Ch) exports both with their page 03h thresholds, as ethtool -m prints
// them; a Molex passive copper cable with flat memory exports its identity
// and read time only, though its temperature word reads 0181h. Values are
// those of internal/optics/real_sff8636_test.go, computed there from the
// bytes.
func TestPhyRealSFF8636Modules(t *testing.T) {
	v := phyWithModules(t, "sff8636-real-mellanox-mma1b00-ss1.dump", "sff8636-real-molex-1110401054-dac.dump")
	want := map[string]float64{
		"fabric_transceiver_info{eth0,SFF-8636,QSFP28,Mellanox,MMA1B00-SS1,A2,MT1834FT03846,,optical,mlx5_0}": 1,
		"fabric_transceiver_temperature_celsius{eth0,mlx5_0}":                                                 0x2779 / 256.0, // 39.47 °C
		"fabric_transceiver_supply_voltage_volts{eth0,mlx5_0}":                                                3.3477,         // 82c5h x 100 µV
		"fabric_transceiver_temperature_threshold_celsius{eth0,high_alarm,mlx5_0}":                            80,
		"fabric_transceiver_temperature_threshold_celsius{eth0,low_alarm,mlx5_0}":                             -10,
		"fabric_transceiver_supply_voltage_threshold_volts{eth0,high_warning,mlx5_0}":                         3.465,
		"fabric_transceiver_supply_voltage_threshold_volts{eth0,low_warning,mlx5_0}":                          3.135,
		"fabric_transceiver_tx_bias_threshold_amperes{eth0,low_alarm,mlx5_0}":                                 5.492e-3,
		"fabric_transceiver_tx_power_threshold_watts{eth0,low_alarm,mlx5_0}":                                  7.24e-5,
		"fabric_transceiver_rx_power_watts{eth0,4,mlx5_0}":                                                    0,
		"fabric_transceiver_tx_bias_amperes{eth0,1,mlx5_0}":                                                   0,
		"fabric_transceiver_tx_power_watts{eth0,2,mlx5_0}":                                                    0,
	}
	for k, w := range want {
		if got, ok := v[k]; !ok || math.Abs(got-w) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, w)
		}
	}
	// 1 info, 1 read time, 2 module monitors, 12 lane monitors, 5 x 4
	// thresholds.
	if got := transceiverSeries(v, "eth0"); len(got) != 36 {
		t.Errorf("%d series for the Mellanox module, want 36:\n%s", len(got), strings.Join(got, "\n"))
	}
	dac := []string{
		"fabric_transceiver_info{eth3,SFF-8636,QSFP+,Molex Inc.,1110401054,,611030929,,passive_copper,mlx5_3}",
		"fabric_transceiver_read_timestamp_seconds{eth3,mlx5_3}",
	}
	if got := transceiverSeries(v, "eth3"); !slices.Equal(got, dac) {
		t.Errorf("passive copper cable series:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(dac, "\n"))
	}
}
