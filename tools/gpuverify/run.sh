#!/usr/bin/env bash
# Verifies the gpu collector on a real GPU machine (the lent H200): start the
# exporter built with cgo, scrape it idle, run a bf16 matmul loop with
# PyTorch, scrape under load, and report the sampler's CPU cost and the
# scrape latency. Writes idle.prom, load.prom, exporter.log and summary.txt
# to $OUT (default ./gpuverify-out).
set -u
OUT=${OUT:-./gpuverify-out}
BIN=${BIN:-./build/fabric_exporter}
ADDR=127.0.0.1:10470
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

scrape() { python3 - "$1" <<'PY'
import sys, time, urllib.request
t = time.time()
body = urllib.request.urlopen("http://127.0.0.1:10470/metrics", timeout=10).read().decode()
dt = time.time() - t
open(sys.argv[1], "w").write(body)
print("%.6f" % dt)
PY
}
cpu_ticks() { awk '{print $14+$15}' /proc/$1/stat; }

{
echo "== machine"; nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader; uname -r
"$BIN" --version 2>&1 | head -1
} > "$OUT/summary.txt" 2>&1

"$BIN" --web.listen-address=$ADDR --collector.disable-defaults --collector.gpu \
  --collector.gpu.interval=1s --log.level=debug > "$OUT/exporter.log" 2>&1 &
PID=$!
for i in $(seq 50); do scrape /dev/null >/dev/null 2>&1 && break; sleep 0.2; done
sleep 3
T0=$(cpu_ticks $PID); W0=$(date +%s.%N)
sleep 10  # idle: only the 1 s sampler runs
T1=$(cpu_ticks $PID); W1=$(date +%s.%N)
scrape "$OUT/idle.prom" > /dev/null

python3 - > "$OUT/matmul.log" 2>&1 <<'PY' &
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize(); t = time.time(); n = 0
while time.time() - t < 14:
    for _ in range(10):
        c = a @ b
    torch.cuda.synchronize(); n += 10
dt = time.time() - t
print("matmuls %d in %.1fs: %.0f TFLOP/s" % (n, dt, 2 * 8192**3 * n / dt / 1e12))
PY
MM=$!
sleep 8
scrape "$OUT/load.prom" > /dev/null
nvidia-smi --query-gpu=utilization.gpu,utilization.memory --format=csv,noheader > "$OUT/nvidia-smi-load.txt"
LAT=$(python3 - <<'PY'
import time, urllib.request
d = []
for _ in range(50):
    t = time.time()
    urllib.request.urlopen("http://127.0.0.1:10470/metrics", timeout=10).read()
    d.append(time.time() - t)
d.sort()
print("p50 %.2f ms, p99 %.2f ms (50 scrapes, one client process)" % (d[24] * 1000, d[49] * 1000))
PY
)
wait $MM
T2=$(cpu_ticks $PID)
kill $PID; wait $PID 2>/dev/null

HZ=$(getconf CLK_TCK)
{
echo "== idle sampler CPU: $(awk -v t0=$T0 -v t1=$T1 -v w0=$W0 -v w1=$W1 -v hz=$HZ 'BEGIN{printf "%.2f%% of one core (%.1f ms CPU per 1 s sample)", (t1-t0)/hz/(w1-w0)*100, (t1-t0)/hz/(w1-w0)*1000}')"
echo "== scrape latency under load: $LAT"
echo "== matmul: $(cat "$OUT/matmul.log")"
echo "== nvidia-smi under load (utilization.gpu, utilization.memory): $(cat "$OUT/nvidia-smi-load.txt")"
echo "== idle"; grep -E '^fabric_(gpu|dcgm|scrape_collector_success)' "$OUT/idle.prom" | grep -v field_supported
echo "== load"; grep -E '^fabric_(gpu|dcgm)' "$OUT/load.prom" | grep -v field_supported
echo "== field support"; grep -E '^fabric_gpu_field_supported' "$OUT/load.prom"
} >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
