// The checks of a trial, from Prometheus: the socket-fallback run (every
// rank firing, the interface, the join to the GPU) and the forced-IB run
// (an init failure, no network).

package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/promapi"
)

func checkSocket(cfg Config, res *Result, st *stack, name string, ranks []rank, pids string, page notification, paged bool) {
	// Every rank's alert fires (ranks whose lines came in a later scrape
	// are in Prometheus before their group's next notification).
	got := waitQuery(cfg, fmt.Sprintf(`ALERTS{alertname="NCCLSocketFallback",alertstate="firing",pid=~"%s"}`, pids), len(ranks), 40*time.Second)
	res.check(name+": NCCLSocketFallback for every rank", len(got) == len(ranks) && len(ranks) == 2, "%d of %d ranks firing (pids %s)", len(got), len(ranks), pids)
	// The interface: in the notification and in Prometheus.
	ifs := waitQuery(cfg, fmt.Sprintf(`fabric_nccl_socket_interface_info{pid=~"%s"}`, pids), len(ranks), 10*time.Second)
	okIf := len(ifs) >= len(ranks)
	for _, s := range ifs {
		okIf = okIf && s.Metric["interface"] == cfg.SocketIf
	}
	res.check(name+": socket interface", okIf && paged && strings.Contains(page.annotations["summary"], "interface "+cfg.SocketIf),
		"fabric_nccl_socket_interface_info %s; the page says %q", labelsOf(ifs, "pid", "interface"), page.annotations["summary"])
	// The join to the GPU: the same PIDs on the GPU.
	join := waitQuery(cfg, fmt.Sprintf(`fabric_nccl_net_info{net="Socket",pid=~"%s"} * on (instance, pid) group_left (gpu, uuid) fabric_gpu_process_info`, pids), len(ranks), 40*time.Second)
	res.check(name+": fabric_gpu_process_info joins the ranks", len(join) == len(ranks), "%s", labelsOf(join, "pid", "gpu", "uuid"))
	fail, _ := query(cfg.PrometheusPort, fmt.Sprintf(`fabric_nccl_init_failure_info{pid=~"%s"}`, pids))
	res.check(name+": no init failure for a working rank", len(fail) == 0, "%d series", len(fail))
}

func checkInitFailure(cfg Config, res *Result, name string, ranks []rank, pids string, page notification, paged bool) {
	fail := waitQuery(cfg, fmt.Sprintf(`fabric_nccl_init_failure_info{pid=~"%s"}`, pids), len(ranks), 30*time.Second)
	res.check(name+": fabric_nccl_init_failure_info for every rank", len(fail) == len(ranks) && len(ranks) > 0, "%s", labelsOf(fail, "pid", "reason"))
	net, _ := query(cfg.PrometheusPort, fmt.Sprintf(`fabric_nccl_net_info{pid=~"%s"} or fabric_nccl_net_device_info{pid=~"%s"}`, pids, pids))
	res.check(name+": no network reported for a failed rank", len(net) == 0, "%s", labelsOf(net, "pid", "net", "device"))
	res.check(name+": NCCLInitFailed carries the reason", paged && page.labels["reason"] != "", "reason %q", page.labels["reason"])
	sock, _ := query(cfg.PrometheusPort, fmt.Sprintf(`ALERTS{alertname="NCCLSocketFallback",pid=~"%s"}`, pids))
	res.check(name+": no NCCLSocketFallback for a failed rank", len(sock) == 0, "%d alerts", len(sock))
}

// waitQuery polls q until it returns n samples or timeout passes.
func waitQuery(cfg Config, q string, n int, timeout time.Duration) []promapi.Sample {
	return waitFor(cfg, q, func(ss []promapi.Sample) bool { return len(ss) >= n }, timeout)
}

func labelsOf(ss []promapi.Sample, names ...string) string {
	if len(ss) == 0 {
		return "(none)"
	}
	var out []string
	for _, s := range ss {
		var kv []string
		for _, n := range names {
			if v, ok := s.Metric[n]; ok {
				kv = append(kv, n+"="+v)
			}
		}
		out = append(out, "{"+strings.Join(kv, ",")+"}")
	}
	return strings.Join(out, " ")
}
