// Command gen writes deploy/kubernetes/prometheusrule.yaml from
// alerts/fabric-rules.yml. Run it from the repository root:
//
//	go run ./deploy/kubernetes/gen
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/fabric-exporter/fabric_exporter/deploy/kubernetes"
)

func main() {
	in := flag.String("rules", kubernetes.RulesPath, "Prometheus rule file")
	out := flag.String("out", kubernetes.PrometheusRulePath, "PrometheusRule manifest to write")
	flag.Parse()
	rules, err := os.ReadFile(*in)
	if err == nil {
		var m []byte
		if m, err = kubernetes.PrometheusRule(rules); err == nil {
			err = os.WriteFile(*out, m, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
