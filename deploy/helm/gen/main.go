// Command gen copies alerts/fabric-rules.yml and dashboards/json/*.json into
// the Helm chart (deploy/helm/fabric-exporter/files/), which cannot read
// files outside its directory. Run it from the repository root (make rules
// and make dashboards do):
//
//	go run ./deploy/helm/gen
package main

import (
	"fmt"
	"os"

	"github.com/fabric-exporter/fabric_exporter/deploy/helm"
)

func main() {
	if err := helm.Sync("."); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
