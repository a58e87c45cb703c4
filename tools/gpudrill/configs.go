// The settings the drill takes from the repository (the lab's intervals,
// the shipped routing and rules) and the Prometheus and Alertmanager
// configurations it writes from them.

package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// shipped holds the settings the drill takes from the repository.
type shipped struct {
	scrapeInterval, evalInterval string // deploy/lab/prometheus.yml
	pageGroupWait                string // deploy/alertmanager/alertmanager.yml, severity="page" route
	ncclFor                      string // alerts/fabric-rules.yml, NCCLSocketFallback
	fors                         map[string]string
	am                           map[string]any
}

// forOf is the for: of an alert of the shipped rules ("0s" when none).
func (s shipped) forOf(alert string) string {
	if f, ok := s.fors[alert]; ok && f != "" {
		return f
	}
	return "0s"
}

func loadShipped(repo string) (shipped, error) {
	var s shipped
	var prom struct {
		Global struct {
			Scrape string `yaml:"scrape_interval"`
			Eval   string `yaml:"evaluation_interval"`
		} `yaml:"global"`
	}
	if err := readYAML(filepath.Join(repo, "deploy/lab/prometheus.yml"), &prom); err != nil {
		return s, err
	}
	s.scrapeInterval, s.evalInterval = prom.Global.Scrape, prom.Global.Eval
	if err := readYAML(filepath.Join(repo, "deploy/alertmanager/alertmanager.yml"), &s.am); err != nil {
		return s, err
	}
	if route, ok := s.am["route"].(map[string]any); ok {
		s.pageGroupWait, _ = route["group_wait"].(string)
		routes, _ := route["routes"].([]any)
		for _, r := range routes {
			rm, _ := r.(map[string]any)
			ms, _ := rm["matchers"].([]any)
			for _, m := range ms {
				if ms, _ := m.(string); strings.ReplaceAll(ms, " ", "") == `severity="page"` {
					if gw, ok := rm["group_wait"].(string); ok {
						s.pageGroupWait = gw
					}
				}
			}
		}
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				For   string `yaml:"for"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := readYAML(filepath.Join(repo, "alerts/fabric-rules.yml"), &rules); err != nil {
		return s, err
	}
	s.fors = map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				s.fors[r.Alert] = r.For
			}
		}
	}
	s.ncclFor = s.forOf("NCCLSocketFallback")
	return s, nil
}

func readYAML(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// writeAlertmanagerConfig writes the shipped routing with every receiver's
// webhook pointed at the drill's webhook (path = receiver name).
func writeAlertmanagerConfig(am map[string]any, path string, hookPort int) error {
	recvs, _ := am["receivers"].([]any)
	for _, r := range recvs {
		rm, _ := r.(map[string]any)
		name, _ := rm["name"].(string)
		for k := range rm {
			if k != "name" {
				delete(rm, k)
			}
		}
		rm["webhook_configs"] = []any{map[string]any{"url": fmt.Sprintf("http://127.0.0.1:%d/%s", hookPort, url.PathEscape(name)), "send_resolved": true}}
	}
	b, err := yaml.Marshal(am)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// promTarget is one exporter the drill's Prometheus scrapes.
type promTarget struct{ addr, instance string }

func writePrometheusConfig(path, rules string, scrape, eval string, amPort int, targets []promTarget) error {
	var static []any
	for _, t := range targets {
		static = append(static, map[string]any{"targets": []string{t.addr}, "labels": map[string]string{"cluster": "drill", "instance": t.instance}})
	}
	cfg := map[string]any{
		"global":     map[string]any{"scrape_interval": scrape, "evaluation_interval": eval},
		"rule_files": []string{rules},
		"alerting": map[string]any{"alertmanagers": []any{map[string]any{"static_configs": []any{
			map[string]any{"targets": []string{fmt.Sprintf("127.0.0.1:%d", amPort)}}}}}},
		"scrape_configs": []any{map[string]any{"job_name": "fabric", "static_configs": static}},
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// copyMap deep-copies a decoded YAML document (each trial rewrites its
// receivers).
func copyMap(m map[string]any) map[string]any {
	b, _ := json.Marshal(m)
	var out map[string]any
	json.Unmarshal(b, &out)
	return out
}
