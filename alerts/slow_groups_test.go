package alerts

import (
	"strings"
	"testing"
)

// railHistoryInterval must be below the 5m lookback through which
// RailLinkDown reads the history group's record: at 5m or more the record
// would be stale between two evaluations and a vanished rail would not
// page.
func TestRailHistoryIntervalValidated(t *testing.T) {
	for _, v := range []string{"5m", "10m", "0s", "x", "-1m"} {
		b := strings.Replace(string(defaultConfig), "railHistoryInterval: 2m", "railHistoryInterval: "+v, 1)
		if _, err := ParseConfig([]byte(b)); err == nil || !strings.Contains(err.Error(), "railHistoryInterval") {
			t.Errorf("interval %s: %v", v, err)
		}
	}
	r, err := Render(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"- name: fabric_exporter.rail_history\n  interval: 2m\n",
		"max_over_time(fabric_rail_info[6h])",
	} {
		if !strings.Contains(string(r), want) {
			t.Errorf("rules lack %q", want)
		}
	}
	if n := strings.Count(string(r), "max_over_time(fabric_rail_info["); n != 1 {
		t.Errorf("the rail history is read %d times; want once, in the slow group", n)
	}
}

// The long-window error alerts run in their own group at
// errorCounterInterval; a bad value is refused.
func TestErrorCounterIntervalGroup(t *testing.T) {
	for _, v := range []string{"0s", "x", ""} {
		b := strings.Replace(string(defaultConfig), "errorCounterInterval: 1m", "errorCounterInterval: "+v, 1)
		if _, err := ParseConfig([]byte(b)); err == nil || !strings.Contains(err.Error(), "errorCounterInterval") {
			t.Errorf("interval %q: %v", v, err)
		}
	}
	r, err := Render(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	s := string(r)
	i := strings.Index(s, "- name: fabric_exporter.physical_errors\n  interval: 1m\n")
	if i < 0 {
		t.Fatal("no fabric_exporter.physical_errors group every 1m")
	}
	group := s[i:]
	if j := strings.Index(group[1:], "\n- name: "); j >= 0 {
		group = group[:j+1]
	}
	for _, a := range []string{"alert: PCIeUncorrectableErrors", "alert: PCIeCorrectableErrors", "alert: NVLinkErrors"} {
		if strings.Count(s, a) != 1 || !strings.Contains(group, a) {
			t.Errorf("%s is not (only) in the slow group", a)
		}
	}
}
