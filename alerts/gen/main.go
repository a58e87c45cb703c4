// Command gen writes alerts/fabric-rules.yml and alerts/dcgm-compat-rules.yml
// from alerts/rules/*.yml.tmpl, alerts/dcgm.go and alerts/config.yml
// (`make rules`: go run ./alerts/gen -dir alerts).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/fabric-exporter/fabric_exporter/alerts"
)

func main() {
	dir := flag.String("dir", "alerts", "directory to write the rule files to")
	flag.Parse()
	if err := alerts.Generate(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
