#!/bin/bash
# The cost of RailLinkDown's rail history (docs/benchmarks.md, "Fleet
# scale"): 6 h of fabric_rail_info at a 15 s scrape for NODES nodes x 8
# rails, backfilled with promtool, then the history query evaluated 20
# times at one instant on each Prometheus given; prints CPU and wall seconds
# per evaluation. Usage: history6h.sh [NODES] [PROMETHEUS...]
# (default 125 nodes, Debian's prometheus). Needs promtool, python3, curl.
set -euo pipefail
nodes=${1:-125}; shift || true
proms=("$@"); [ ${#proms[@]} -gt 0 ] || proms=(prometheus)
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
end=$(( $(date +%s) / 7200 * 7200 ))   # a block boundary
python3 - "$nodes" "$end" "$w/rail.om" <<'PY'
import sys
nodes, end, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
with open(out, 'w') as f:
    f.write('# HELP fabric_rail_info A rail.\n# TYPE fabric_rail_info gauge\n')
    for n in range(nodes):
        for r in range(8):
            lab = 'fabric_rail_info{cluster="c",job="fabric",instance="node%04d:10470",rail="mlx5_%d",device="mlx5_%d",port="1",netdev="eth%d"} 1 ' % (n, r, r, r)
            f.write(''.join(lab + str(t) + '\n' for t in range(end - 6 * 3600, end, 15)))
    f.write('# EOF\n')
PY
promtool tsdb create-blocks-from openmetrics "$w/rail.om" "$w/tsdb" >/dev/null
q='count(max by (cluster, job, instance, rail, device, port) (max_over_time(fabric_rail_info[6h])))'
printf 'global:\n  scrape_interval: 15s\n' > "$w/p.yml"
for p in "${proms[@]}"; do
  rm -rf "$w/tsdb/wal" "$w/tsdb/chunks_head" "$w/tsdb/lock"
  "$p" --config.file="$w/p.yml" --storage.tsdb.path="$w/tsdb" --storage.tsdb.retention.time=30d \
    --web.listen-address=127.0.0.1:19191 >"$w/log" 2>&1 &
  pid=$!
  for _ in $(seq 60); do curl -sf 127.0.0.1:19191/-/ready >/dev/null && break; sleep 1; done
  ask() { curl -s --data-urlencode "query=$q" --data-urlencode "time=$((end - 60))" 127.0.0.1:19191/api/v1/query; }
  ask >/dev/null; sleep 5
  c0=$(awk '{print $14+$15}' /proc/$pid/stat); t0=$(date +%s.%N)
  for _ in $(seq 20); do ask >/dev/null; done
  c1=$(awk '{print $14+$15}' /proc/$pid/stat); t1=$(date +%s.%N)
  awk -v c="$((c1 - c0))" -v t0="$t0" -v t1="$t1" -v s="$((nodes * 8))" -v p="$p" \
    'BEGIN { printf "%s: %.3f CPU s, %.3f wall s per evaluation, %d series x 6 h\n", p, c/100/20, (t1-t0)/20, s }'
  kill $pid; wait $pid 2>/dev/null || true
done
