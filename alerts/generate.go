package alerts

import (
	"fmt"
	"os"
	"path/filepath"
)

// The files `make rules` writes into alerts/ (go run ./alerts/gen).
const (
	// RulesFile holds the recording rules and alerts (Render).
	RulesFile = "fabric-rules.yml"
	// DCGMCompatFile holds the optional dcgm-exporter compatibility
	// recording rules (RenderDCGMCompat).
	DCGMCompatFile = "dcgm-compat-rules.yml"
)

// Generated returns the content of every generated file for c, by file
// name (RulesFile, DCGMCompatFile).
func Generated(c Config) (map[string][]byte, error) {
	rules, err := Render(c)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{RulesFile: rules, DCGMCompatFile: RenderDCGMCompat(c)}, nil
}

// Generate writes the generated files for the shipped config.yml into dir.
func Generate(dir string) error {
	files, err := Generated(DefaultConfig())
	if err != nil {
		return err
	}
	for _, name := range []string{RulesFile, DCGMCompatFile} {
		if err := os.WriteFile(filepath.Join(dir, name), files[name], 0o644); err != nil {
			return fmt.Errorf("alerts: %w", err)
		}
	}
	return nil
}
