// Package alerts renders fabric_exporter's recording rules and alerts from
// the templates in rules/ (one per concern: rules/README.md) and the
// selectors and thresholds in config.yml.
package alerts

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/prometheus/common/model"

	"go.yaml.in/yaml/v3"
)

// ruleTemplates holds one template per concern; Render concatenates them
// in the lexical order of their names (the numeric prefixes), after
// rulesHeader.
//
//go:embed rules/*.yml.tmpl
var ruleTemplates embed.FS

// rulesHeader opens the rendered file, before the groups of rules/.
const rulesHeader = `# Rendered from alerts/rules/*.yml.tmpl with alerts/config.yml by ` + "`make rules`" + `.
# Do not edit the rendered file; edit the templates or the config.
# The rules select fabric_exporter's series by metric name (fabric_* is unique
# to the exporter), so they work under any scrape job name; only
# FabricExporterDown needs the job (exporterSelector in alerts/config.yml).
# One template per concern (alerts/rules/README.md), in the order of their
# names. The NCCL pages (alerts, nccl_ras, nccl_hang) run every
# pagerInterval, the other pages and what they read at Prometheus's
# evaluation interval (the groups without interval:); every other group
# runs every warningInterval (alerts/config.yml): at fleet scale the cost of the rules
# is the series they read per round (docs/alerts.md, "Groups";
# docs/benchmarks.md, "Fleet scale").
groups:
`

// ruleFiles returns the names of the rule templates in rendering order.
func ruleFiles() []string {
	names, err := fs.Glob(ruleTemplates, "rules/*.yml.tmpl")
	if err != nil {
		panic(err) // the pattern is constant
	}
	slices.Sort(names)
	return names
}

// ruleSource returns a rule template's text, ending in exactly one newline.
func ruleSource(name string) string {
	b, err := ruleTemplates.ReadFile(name)
	if err != nil {
		panic(err) // embedded
	}
	return strings.TrimRight(string(b), "\n") + "\n"
}

// rulesTemplate is every rule template in rendering order, as Render joins
// them (a blank line between two files), without the header.
var rulesTemplate = func() string {
	var parts []string
	for _, name := range ruleFiles() {
		parts = append(parts, ruleSource(name))
	}
	return strings.Join(parts, "\n")
}()

//go:embed config.yml
var defaultConfig []byte

// Config holds the selectors and thresholds (documented in config.yml).
type Config struct {
	ExporterSelector       string  `yaml:"exporterSelector"`
	SGLangSelector         string  `yaml:"sglangSelector"`
	RateWindow             string  `yaml:"rateWindow"`
	ClusterLabel           string  `yaml:"clusterLabel"`
	RunbookURL             string  `yaml:"runbookURL"`
	ExpectedRailSpeedBytes float64 `yaml:"expectedRailSpeedBytes"`
	RailLinkFlapChanges    float64 `yaml:"railLinkFlapChanges"`
	FlapWindow             string  `yaml:"flapWindow"`
	PauseStormWindow       string  `yaml:"pauseStormWindow"`
	RailHistoryWindow      string  `yaml:"railHistoryWindow"`
	RailHistoryInterval    string  `yaml:"railHistoryInterval"`
	ErrorCounterInterval   string  `yaml:"errorCounterInterval"`
	WarningInterval        string  `yaml:"warningInterval"`
	// PagerInterval: the evaluation interval of the groups whose pages
	// must come fast (alerts, nccl_ras, nccl_hang).
	PagerInterval              string  `yaml:"pagerInterval"`
	RailTCPFallbackMinBits     float64 `yaml:"railTCPFallbackMinBits"`
	RailTCPFallbackMaxRDMABits float64 `yaml:"railTCPFallbackMaxRDMABits"`
	NonRailNICMaxBits          float64 `yaml:"nonRailNICMaxBits"`
	RailImbalanceRatio         float64 `yaml:"railImbalanceRatio"`
	RailImbalanceMinBits       float64 `yaml:"railImbalanceMinBits"`
	PFCPauseOccupancy          float64 `yaml:"pfcPauseOccupancy"`
	RoCERetransPerSecond       float64 `yaml:"roceRetransPerSecond"`
	RoCECNPIgnoredPerSecond    float64 `yaml:"roceCNPIgnoredPerSecond"`
	CrossNUMALocalRatio        float64 `yaml:"crossNUMALocalRatio"`
	CrossNUMAMinBytes          float64 `yaml:"crossNUMAMinBytes"`
	// Physical path (issue 22)
	PCIeBusyGPUUtilization   float64 `yaml:"pcieBusyGPUUtilization"`
	PCIeBusyRDMABits         float64 `yaml:"pcieBusyRDMABits"`
	PCIeCorrectablePerMinute float64 `yaml:"pcieCorrectablePerMinute"`
	PCIeErrorWindow          string  `yaml:"pcieErrorWindow"`
	PreFECBERMax             float64 `yaml:"preFECBERMax"`
	FECErrorWindow           string  `yaml:"fecErrorWindow"`
	NVLinkErrorsPerMinute    float64 `yaml:"nvlinkErrorsPerMinute"`
	NVLinkErrorWindow        string  `yaml:"nvlinkErrorWindow"`
	// NCCLBusBandwidthLow: bus bandwidth below this fraction of a rail's link speed.
	NCCLInspectorBusBandwidthRatio float64 `yaml:"ncclInspectorBusBandwidthRatio"`
	KubernetesGPUResources         string  `yaml:"kubernetesGPUResources"`
	KubernetesRDMAResources        string  `yaml:"kubernetesRDMAResources"`
	// CauseLatchWindow: how long the latched cause of a process's NCCL page
	// outlives a gap in its cause (last_over_time of the latch records).
	CauseLatchWindow string `yaml:"causeLatchWindow"`
	// Hang: the signatures of a hung serving group (alerts/rules/25-nccl-hang.yml.tmpl).
	Hang HangConfig `yaml:"hang"`
	// RailsInUseWindow: how far back NCCLRankLostRail looks for the rails a
	// rank used (alerts/rules/15-rails-in-use.yml.tmpl).
	RailsInUseWindow string `yaml:"railsInUseWindow"`
	// RailShareLowRatio: RailShareLow warns when one of the rails a node's
	// multi-node ranks send on carries less than this fraction of the
	// busiest of them (rail:fabric_rank_rail_share:ratio_rate).
	RailShareLowRatio float64 `yaml:"railShareLowRatio"`
	// XidFatal: the NVIDIA Xid codes GPUXidFatal pages on.
	XidFatal []int `yaml:"xidFatal"`
	For      struct {
		NCCL   string `yaml:"nccl"`
		Short  string `yaml:"short"`
		Medium string `yaml:"medium"`
		Long   string `yaml:"long"`
		// KeepFiring is the keep_firing_for of every page.
		KeepFiring string `yaml:"keepFiring"`
	} `yaml:"for"`
}

// HangConfig holds the thresholds of NCCLCommunicatorHung and
// NCCLRankUnresponsive (config.yml documents each, with the measured
// values they separate).
type HangConfig struct {
	BusyMin         float64 `yaml:"busyMin"`
	IdleMax         float64 `yaml:"idleMax"`
	TensorMax       float64 `yaml:"tensorMax"`
	DRAMMax         float64 `yaml:"dramMax"`
	ProgressWindow  string  `yaml:"progressWindow"`
	For             string  `yaml:"for"`
	UnresponsiveFor string  `yaml:"unresponsiveFor"`
}

// DefaultConfig returns config.yml.
func DefaultConfig() Config {
	c, err := ParseConfig(defaultConfig)
	if err != nil {
		panic(err)
	}
	return c
}

// ParseConfig decodes a config strictly (unknown keys are errors).
func ParseConfig(b []byte) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("alerts config: %w", err)
	}
	// sglangSelector may be empty: SGLang's sglang:* names are unique too.
	for name, v := range map[string]string{"exporterSelector": c.ExporterSelector,
		"rateWindow": c.RateWindow, "flapWindow": c.FlapWindow, "pauseStormWindow": c.PauseStormWindow, "railHistoryWindow": c.RailHistoryWindow, "railHistoryInterval": c.RailHistoryInterval, "errorCounterInterval": c.ErrorCounterInterval, "warningInterval": c.WarningInterval,
		"pcieErrorWindow": c.PCIeErrorWindow, "fecErrorWindow": c.FECErrorWindow, "nvlinkErrorWindow": c.NVLinkErrorWindow,
		"clusterLabel": c.ClusterLabel, "kubernetesGPUResources": c.KubernetesGPUResources, "kubernetesRDMAResources": c.KubernetesRDMAResources, "for.short": c.For.Short, "for.medium": c.For.Medium, "for.long": c.For.Long} {
		if strings.TrimSpace(v) == "" {
			return c, fmt.Errorf("alerts config: %s is empty", name)
		}
	}
	if strings.TrimSpace(c.For.NCCL) == "" {
		return c, fmt.Errorf("alerts config: for.nccl is empty")
	}
	// RailLinkDown reads the history group's record with an instant
	// selector, which looks back 5 minutes (Prometheus's default
	// --query.lookback-delta): the group must write more often than that.
	if d, err := model.ParseDuration(c.RailHistoryInterval); err != nil || time.Duration(d) <= 0 || time.Duration(d) >= 5*time.Minute {
		return c, fmt.Errorf("alerts config: railHistoryInterval %q: must be a duration above 0 and below 5m", c.RailHistoryInterval)
	}
	// The warning groups record series that dashboards and other groups
	// read (rail:fabric_rdma_link_speed:bits, the per-rail rates): at 5m or
	// more they would go stale between two evaluations.
	if d, err := model.ParseDuration(c.WarningInterval); err != nil || time.Duration(d) <= 0 || time.Duration(d) >= 5*time.Minute {
		return c, fmt.Errorf("alerts config: warningInterval %q: must be a duration above 0 and below 5m", c.WarningInterval)
	}
	if d, err := model.ParseDuration(c.ErrorCounterInterval); err != nil || time.Duration(d) <= 0 {
		return c, fmt.Errorf("alerts config: errorCounterInterval %q: must be a duration above 0", c.ErrorCounterInterval)
	}
	// A page bridges a gap of for.keepFiring; the cause it carries must
	// outlive that gap, or the page would come back with another cause.
	keep, err := model.ParseDuration(c.For.KeepFiring)
	if err != nil || time.Duration(keep) < 0 {
		return c, fmt.Errorf("alerts config: for.keepFiring %q: must be a duration (0s: pages resolve at once)", c.For.KeepFiring)
	}
	latch, err := model.ParseDuration(c.CauseLatchWindow)
	if err != nil || latch <= keep {
		return c, fmt.Errorf("alerts config: causeLatchWindow %q: must be a duration above for.keepFiring (%s)", c.CauseLatchWindow, c.For.KeepFiring)
	}
	h := c.Hang
	if d, err := model.ParseDuration(c.PagerInterval); err != nil || time.Duration(d) <= 0 || time.Duration(d) > time.Minute {
		return c, fmt.Errorf("alerts config: pagerInterval %q: must be a duration above 0 and at most 1m", c.PagerInterval)
	}
	for name, v := range map[string]string{"hang.progressWindow": h.ProgressWindow, "hang.for": h.For, "hang.unresponsiveFor": h.UnresponsiveFor} {
		if d, err := model.ParseDuration(v); err != nil || (d <= 0 && name != "hang.for" && name != "hang.unresponsiveFor") {
			return c, fmt.Errorf("alerts config: %s %q: must be a duration above 0", name, v)
		}
	}
	if !(h.IdleMax >= 0 && h.IdleMax < h.BusyMin && h.BusyMin <= 1 && h.TensorMax >= 0 && h.DRAMMax >= 0) {
		return c, fmt.Errorf("alerts config: hang: want 0 <= idleMax < busyMin <= 1 and tensorMax, dramMax >= 0")
	}
	if d, err := model.ParseDuration(c.RailsInUseWindow); err != nil || d <= 0 {
		return c, fmt.Errorf("alerts config: railsInUseWindow %q: must be a duration above 0", c.RailsInUseWindow)
	}
	if !(c.RailShareLowRatio > 0 && c.RailShareLowRatio < 1) {
		return c, fmt.Errorf("alerts config: railShareLowRatio %v: must be above 0 and below 1", c.RailShareLowRatio)
	}
	if len(c.XidFatal) == 0 {
		return c, fmt.Errorf("alerts config: xidFatal: at least one Xid code (GPUXidFatal would match every Xid or none)")
	}
	for _, x := range c.XidFatal {
		if x < 1 || x > 999 {
			return c, fmt.Errorf("alerts config: xidFatal: %d is not an Xid code (1-999)", x)
		}
	}
	if r := c.NCCLInspectorBusBandwidthRatio; !(r > 0 && r <= 1) {
		return c, fmt.Errorf("alerts config: ncclInspectorBusBandwidthRatio %v: must be in (0, 1]", r)
	}
	return c, nil
}

// retransCounters are the hw_counters of the retransmission class, the
// first numRetrans being those the exporter adds up into
// fabric_rdma_retransmission_events_total (what RoCERetransmissions reads;
// a collector test checks the two lists agree), then the congestion
// notifications. The dashboards chart each.
var retransCounters = [...]string{"local_ack_timeout_err", "packet_seq_err", "out_of_sequence", "implied_nak_seq_err", "roce_adp_retrans", "req_transport_retries_exceeded",
	"np_cnp_sent", "rp_cnp_handled", "rp_cnp_ignored"}

const numRetrans = 6

// RetransCounters returns the hw_counters of the retransmission class (a
// copy): those summed into the retransmission rate, then the congestion
// notifications.
func RetransCounters() []string { return slices.Clone(retransCounters[:]) }

// RetransmissionEventCounters returns the hw_counters whose sum is
// fabric_rdma_retransmission_events_total (a copy).
func RetransmissionEventCounters() []string { return slices.Clone(retransCounters[:numRetrans]) }

// gpuFields are the ratio fields averaged per node.
var gpuFields = [...]string{"graphics_engine_active", "sm_active", "sm_occupancy", "tensor_active", "dram_active"}

// GPUFields returns the GPU ratio fields averaged per node (a copy).
func GPUFields() []string { return slices.Clone(gpuFields[:]) }

// Matchers returns the label matchers as a selector block ({…}), or "" when
// there are none.
func Matchers(m string) string {
	if strings.TrimSpace(m) == "" {
		return ""
	}
	return "{" + m + "}"
}

// Render returns the rule file for c.
func Render(c Config) ([]byte, error) {
	num := func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
	data := map[string]any{
		"W": c.RateWindow, "C": c.ClusterLabel, "Sel": c.ExporterSelector, "SGLang": Matchers(c.SGLangSelector), "Runbook": c.RunbookURL, "GPUFields": GPUFields(),
		"ExpectedRailSpeedBits": num(c.ExpectedRailSpeedBytes * 8), "ExpectedRailSpeedGbit": num(c.ExpectedRailSpeedBytes * 8 / 1e9),
		"RailLinkFlapChanges": num(c.RailLinkFlapChanges), "RailTCPFallbackMinBits": num(c.RailTCPFallbackMinBits),
		"RailTCPFallbackMaxRDMABits": num(c.RailTCPFallbackMaxRDMABits), "NonRailNICMaxBits": num(c.NonRailNICMaxBits),
		"RailImbalanceRatio": num(c.RailImbalanceRatio), "RailImbalanceMinBits": num(c.RailImbalanceMinBits), "RailShareLowRatio": num(c.RailShareLowRatio),
		"PFCPauseOccupancy": num(c.PFCPauseOccupancy), "PFCPauseOccupancyPct": num(c.PFCPauseOccupancy * 100),
		"RoCERetransPerSecond": num(c.RoCERetransPerSecond), "RoCECNPIgnoredPerSecond": num(c.RoCECNPIgnoredPerSecond),
		"CrossNUMALocalRatio": num(c.CrossNUMALocalRatio), "CrossNUMAMinBytes": num(c.CrossNUMAMinBytes),
		"PCIeBusyGPUUtilization": num(c.PCIeBusyGPUUtilization), "PCIeBusyRDMABits": num(c.PCIeBusyRDMABits),
		"PCIeCorrectablePerMinute": num(c.PCIeCorrectablePerMinute), "PCIeErrorWindow": c.PCIeErrorWindow,
		"PreFECBERMax": num(c.PreFECBERMax), "FECErrorWindow": c.FECErrorWindow,
		"NVLinkErrorsPerMinute": num(c.NVLinkErrorsPerMinute), "NVLinkErrorWindow": c.NVLinkErrorWindow,
		"KubeGPU": c.KubernetesGPUResources, "KubeRDMA": c.KubernetesRDMAResources,
		"For": c.For, "FlapWindow": c.FlapWindow, "PauseStormWindow": c.PauseStormWindow, "RailHistoryWindow": c.RailHistoryWindow, "RailHistoryInterval": c.RailHistoryInterval, "ErrorCounterInterval": c.ErrorCounterInterval,
		"WarningInterval": c.WarningInterval, "CauseLatchWindow": c.CauseLatchWindow,
	}
	data["NCCLInspectorBusBandwidthRatio"] = num(c.NCCLInspectorBusBandwidthRatio)
	xids := make([]string, 0, len(c.XidFatal))
	for _, x := range c.XidFatal {
		xids = append(xids, strconv.Itoa(x))
	}
	data["XidFatal"] = strings.Join(xids, "|")
	data["RailsInUseWindow"] = c.RailsInUseWindow
	data["PagerInterval"] = c.PagerInterval
	data["Hang"] = map[string]string{"BusyMin": num(c.Hang.BusyMin), "IdleMax": num(c.Hang.IdleMax),
		"TensorMax": num(c.Hang.TensorMax), "DRAMMax": num(c.Hang.DRAMMax), "ProgressWindow": c.Hang.ProgressWindow, "For": c.Hang.For, "UnresponsiveFor": c.Hang.UnresponsiveFor}
	// Each file is a template of its own (an error names the file and its
	// line; no action spans two files), rendered in order.
	var b bytes.Buffer
	b.WriteString(rulesHeader)
	for i, name := range ruleFiles() {
		t, err := template.New(path.Base(name)).Delims("<%", "%>").Option("missingkey=error").Parse(ruleSource(name))
		if err != nil {
			return nil, err
		}
		if i > 0 {
			b.WriteString("\n")
		}
		if err := t.Execute(&b, data); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}
