// Package helm is fabric_exporter's Helm chart (fabric-exporter/). A chart
// reads no file outside its directory, so the files it serves as they are
// made elsewhere are copied into fabric-exporter/files/: the rule file
// alerts/fabric-rules.yml (the PrometheusRule's spec) and the dashboards
// dashboards/json/*.json (the dashboard ConfigMaps). Sync writes the copies
// (go run ./deploy/helm/gen, part of make rules and make dashboards); Drift
// says where they differ, which the tests refuse.
package helm

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

// Paths relative to the repository root.
const (
	ChartDir      = "deploy/helm/fabric-exporter"
	RulesPath     = "alerts/fabric-rules.yml"
	DashboardsDir = "dashboards/json"
)

// Paths of the copies relative to the chart directory (what the templates
// read with .Files.Get and .Files.Glob).
const (
	ChartRulesPath     = "files/fabric-rules.yml"
	ChartDashboardsDir = "files/dashboards"
)

// Copies returns the chart's copies (relative to the chart directory) and
// their sources (relative to the repository root at root).
func Copies(root string) (map[string]string, error) {
	m := map[string]string{ChartRulesPath: RulesPath}
	dash, err := filepath.Glob(filepath.Join(root, DashboardsDir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(dash) == 0 {
		return nil, fmt.Errorf("no dashboards in %s", filepath.Join(root, DashboardsDir))
	}
	for _, d := range dash {
		b := filepath.Base(d)
		m[ChartDashboardsDir+"/"+b] = DashboardsDir + "/" + b
	}
	return m, nil
}

// stale returns the dashboard copies in the chart that no source has
// (relative to the chart directory, sorted).
func stale(root string, copies map[string]string) ([]string, error) {
	have, err := filepath.Glob(filepath.Join(root, ChartDir, ChartDashboardsDir, "*"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, h := range have {
		rel := ChartDashboardsDir + "/" + filepath.Base(h)
		if _, ok := copies[rel]; !ok {
			out = append(out, rel)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Drift lists every difference between the chart's copies and their sources
// under root: a copy missing or not byte for byte its source, a dashboard
// copy without a source. Empty when the chart is up to date.
func Drift(root string) ([]string, error) {
	copies, err := Copies(root)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, dst := range slices.Sorted(maps.Keys(copies)) {
		src := copies[dst]
		want, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			return nil, err
		}
		got, err := os.ReadFile(filepath.Join(root, ChartDir, dst))
		switch {
		case os.IsNotExist(err):
			out = append(out, fmt.Sprintf("%s/%s: missing (copy of %s)", ChartDir, dst, src))
		case err != nil:
			return nil, err
		case !bytes.Equal(got, want):
			out = append(out, fmt.Sprintf("%s/%s differs from %s", ChartDir, dst, src))
		}
	}
	st, err := stale(root, copies)
	if err != nil {
		return nil, err
	}
	for _, s := range st {
		out = append(out, fmt.Sprintf("%s/%s: no %s/%s", ChartDir, s, DashboardsDir, filepath.Base(s)))
	}
	return out, nil
}

// Sync makes the chart's copies equal their sources under root and removes
// dashboard copies whose source is gone.
func Sync(root string) error {
	copies, err := Copies(root)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(root, ChartDir, ChartDashboardsDir), 0o755); err != nil {
		return err
	}
	for dst, src := range copies {
		b, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(root, ChartDir, dst), b, 0o644); err != nil {
			return err
		}
	}
	st, err := stale(root, copies)
	if err != nil {
		return err
	}
	for _, s := range st {
		if err := os.Remove(filepath.Join(root, ChartDir, s)); err != nil {
			return err
		}
	}
	return nil
}
