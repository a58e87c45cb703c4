package alerts

import (
	"strings"
	"testing"
)

// ncclInspectorBusBandwidthRatio must be a fraction: 0 (the key left out)
// would make NCCLBusBandwidthLow silently unable to fire.
func TestNCCLInspectorRatioValidated(t *testing.T) {
	for _, v := range []string{"0", "-0.1", "1.5"} {
		b := strings.Replace(string(defaultConfig), "ncclInspectorBusBandwidthRatio: 0.25", "ncclInspectorBusBandwidthRatio: "+v, 1)
		if _, err := ParseConfig([]byte(b)); err == nil || !strings.Contains(err.Error(), "ncclInspectorBusBandwidthRatio") {
			t.Errorf("ratio %s: %v", v, err)
		}
	}
	c := DefaultConfig()
	r, err := Render(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(r), "(0.25 * max by (cluster, instance) (rail:fabric_rdma_link_speed:bits) / 8)") {
		t.Error("NCCLBusBandwidthLow does not compare with 0.25 of the fastest rail")
	}
}
