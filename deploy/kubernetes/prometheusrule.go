// Package kubernetes is fabric_exporter's kustomize base (the YAML files
// here). The Go code renders prometheusrule.yaml from alerts/fabric-rules.yml
// (go run ./deploy/kubernetes/gen, or make rules); the tests decode every
// manifest strictly into the Kubernetes API types.
package kubernetes

import (
	"bytes"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Paths relative to the repository root.
const (
	RulesPath          = "alerts/fabric-rules.yml"
	PrometheusRulePath = "deploy/kubernetes/prometheusrule.yaml"
)

const ruleHeader = `# Generated from alerts/fabric-rules.yml by ` + "`go run ./deploy/kubernetes/gen`" + ` (make rules).
# Do not edit: change alerts/config.yml or alerts/rules/*.yml.tmpl, then run make rules.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: fabric-exporter
  labels:
    app.kubernetes.io/name: fabric-exporter
    app.kubernetes.io/component: exporter
spec:
`

// PrometheusRule returns the PrometheusRule manifest whose spec is the
// Prometheus rule file rules (a single document with only "groups"). The
// groups are copied as text, indented under spec, so the expressions keep
// their layout and comments; the file's leading comments are replaced by the
// manifest's header.
func PrometheusRule(rules []byte) ([]byte, error) {
	var top map[string]any
	if err := yaml.Unmarshal(rules, &top); err != nil {
		return nil, fmt.Errorf("rule file: %w", err)
	}
	if _, ok := top["groups"]; !ok || len(top) != 1 {
		return nil, fmt.Errorf("rule file: want only a top-level groups key, have %d keys", len(top))
	}
	lines := strings.SplitAfter(string(rules), "\n")
	start := -1
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(l, "groups:") {
			start = i
			break
		}
		if t != "" && !strings.HasPrefix(t, "#") {
			return nil, fmt.Errorf("rule file line %d: %q before groups", i+1, t)
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("rule file: no groups: line at column 0")
	}
	var b bytes.Buffer
	b.WriteString(ruleHeader)
	for i, l := range lines[start:] {
		if strings.HasPrefix(l, "---") || strings.HasPrefix(l, "...") {
			return nil, fmt.Errorf("rule file line %d: one YAML document expected", start+i+1)
		}
		if strings.TrimSpace(l) != "" {
			b.WriteString("  ")
			b.WriteString(l)
		} else {
			b.WriteString(strings.TrimLeft(l, " \t"))
		}
	}
	if !bytes.HasSuffix(b.Bytes(), []byte("\n")) {
		b.WriteByte('\n')
	}
	return b.Bytes(), nil
}
