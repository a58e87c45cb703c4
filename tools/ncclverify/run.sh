#!/usr/bin/env bash
# Runs real NCCL (through PyTorch) with NCCL_DEBUG=INFO and the exporter's
# nccl collector tailing the log directory, on the lent GPU machine.
# With two GPUs (WORLD=2) it runs a two-process all-reduce once normally and
# once forced onto sockets over lo; with one GPU it can only run a one-rank
# init + all-reduce (no connections between ranks), in both settings.
# Writes the NCCL logs, the scrapes and summary.txt to $OUT.
set -u
OUT=${OUT:-./ncclverify-out}
BIN=${BIN:-./build/fabric_exporter}
WORLD=${WORLD:-$(nvidia-smi -L | wc -l)}
[ "$WORLD" -gt 2 ] && WORLD=2
mkdir -p "$OUT/nccl"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

"$BIN" --web.listen-address=127.0.0.1:10470 --collector.disable-defaults --collector.nccl --collector.netdev \
  --collector.netdev.device-include=lo --collector.nccl.log-path="$OUT/nccl/*.log" --collector.nccl.poll-interval=250ms \
  > "$OUT/exporter.log" 2>&1 &
PID=$!
scrape() { python3 -c 'import urllib.request,sys; sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:10470/metrics").read().decode())'; }
for i in $(seq 50); do scrape > /dev/null 2>&1 && break; sleep 0.2; done

cat > /tmp/allreduce.py <<'PY'
import os, time, torch, torch.distributed as dist
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(rank)
x = torch.ones(64 << 20, device="cuda", dtype=torch.float32)  # 256 MiB
for _ in range(3): dist.all_reduce(x)
torch.cuda.synchronize(); n = 10; t = time.time()
for _ in range(n): dist.all_reduce(x)
torch.cuda.synchronize(); dt = (time.time() - t) / n
size = x.numel() * 4
busbw = size / dt * (2 * (world - 1) / world) / 1e9 if world > 1 else 0.0
if rank == 0:
    print("world %d: all_reduce of %d MiB in %.3f ms, algbw %.1f GB/s, busbw %.1f GB/s, nccl %s" % (world, size >> 20, dt * 1e3, size / dt / 1e9, busbw, torch.cuda.nccl.version()))
dist.destroy_process_group()
PY

lo_bytes() { awk '/^ *lo:/ {print $2 + $10}' /proc/net/dev; }
run() { # name, env...
  local name=$1; shift
  local before=$(lo_bytes)
  env "$@" NCCL_DEBUG=INFO NCCL_DEBUG_FILE="$OUT/nccl/%h.%p.log" \
    torchrun --standalone --nproc_per_node="$WORLD" /tmp/allreduce.py > "$OUT/$name.txt" 2>&1
  sleep 1
  scrape > "$OUT/$name.prom"
  echo "== $name: $(grep -E '^world' "$OUT/$name.txt") lo bytes +$(( $(lo_bytes) - before ))"
}
{
echo "== machine: $(nvidia-smi -L | head -2 | tr '\n' ' ')"
run normal
run socket NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo
echo "== scrape after both runs (fabric_nccl_*)"
grep -E '^fabric_nccl_(net_info|connections|info|socket_interface_info|net_device_info|tracked|log_lines)' "$OUT/socket.prom"
echo "== lo counters"; grep -E '^fabric_netdev_(received|transmitted)_bytes_total\{netdev="lo"' "$OUT/socket.prom"
} > "$OUT/summary.txt" 2>&1
kill $PID; wait $PID 2>/dev/null
cat "$OUT/summary.txt"
ls "$OUT/nccl"
