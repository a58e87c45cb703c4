// Command gen writes fabric_exporter's Grafana dashboards as JSON
// (`make dashboards`: go run ./dashboards/gen -out dashboards/json).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/fabric-exporter/fabric_exporter/dashboards"
)

func main() {
	out := flag.String("out", "dashboards/json", "directory to write the dashboard JSON files to")
	flag.Parse()
	if err := dashboards.Generate(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
