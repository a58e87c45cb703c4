package dashboards_test

import (
	"fmt"

	"github.com/fabric-exporter/fabric_exporter/dashboards"
)

// Run every dashboard query against a Prometheus: Expr is plain PromQL.
// Instant queries go to /api/v1/query, the others to /api/v1/query_range.
func ExampleQueries() {
	qs := dashboards.Queries()
	q := qs[0]
	fmt.Printf("%s / %s / %s (instant %v)\n%s\n", q.Dashboard, q.Panel, q.RefID, q.Instant, q.Expr)

	// Other values for the variables:
	v := dashboards.DefaultValues()
	v["instance"] = "node-a:10470"
	expr, err := dashboards.Expand(q.Template, v)
	fmt.Println(expr, err)
	// Output:
	// Fabric overview / RDMA throughput per rail / A (instant false)
	// rail:fabric_rdma_transmitted_bits:rate1m{cluster=~".*", instance=~".*", rail=~".*"}
	// rail:fabric_rdma_transmitted_bits:rate1m{cluster=~".*", instance=~"node-a:10470", rail=~".*"} <nil>
}
