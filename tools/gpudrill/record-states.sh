#!/usr/bin/env bash
# Records what NVML (and the exporter, and NCCL's RAS through it) say of the
# GPU in each state of a two-rank job on one GPU: a healthy eager decode
# job, an idle one, a rank that stops launching (eager hang) and resumes, a
# SIGSTOPped rank, a job shutting down, and the same decode step replayed
# from a CUDA graph (healthy, hung, recovered, idle).
# The ranks talk over NCCL's socket transport (distinct NCCL_HOSTID), logs
# off. Usage, on the lent GPU machine, from the repository root:
#   tools/gpudrill/record-states.sh OUTDIR [./gpudrill] [./fabric_exporter]
# Output: OUTDIR/nvml.jsonl (a record per GPU per second, labelled with the
# state), OUTDIR/<state>.prom (a scrape at the end of each state),
# OUTDIR/rank*.out.
set -u
out=${1:?OUTDIR}; drill=${2:-./gpudrill}; exporter=${3:-./fabric_exporter}
mkdir -p "$out"; out=$(cd "$out" && pwd)
ctl=$(mktemp -d); label=$ctl/label; port=29611
py=${PYTHON:-python3}
echo start >"$label"
"$drill" --record-nvml=600s --record-label="$label" >"$out/nvml.jsonl" 2>"$out/record.err" &
rec=$!
"$exporter" --web.listen-address=127.0.0.1:19471 --collector.nccl-ras.address=127.0.0.1:28028 --collector.nccl-ras.interval=2s >"$out/exporter.log" 2>&1 &
exp=$!
state() { echo "$1" >"$label"; sleep "$2"; curl -s 127.0.0.1:19471/metrics >"$out/$1.prom"; echo "$(date +%T) $1 done"; }
job() { # name, extra args...
  local name=$1; shift; rm -f "$ctl"/{stop,hang,idle}; port=$((port+1))
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port NCCL_HOSTID=drill-host-$r NCCL_SOCKET_IFNAME=lo \
      "$py" tools/gpudrill/allreduce.py --stop-file "$ctl/stop" --hang-file "$ctl/hang" --idle-file "$ctl/idle" --seconds 300 "$@" >"$out/$name-rank$r.out" 2>&1 &
    eval "pid$r=\$!"
  done
  for _ in $(seq 120); do grep -q busbw "$out/$name-rank0.out" 2>/dev/null && break; sleep 0.5; done
  echo "$(date +%T) $name up: pids $pid0 $pid1"
}
endjob() { # a rank that does not stop within 20 s is killed (and said so)
  touch "$ctl/stop"; state "$1-shutdown" 4
  for _ in $(seq 40); do kill -0 $pid0 2>/dev/null || kill -0 $pid1 2>/dev/null || break; sleep 0.5; done
  for p in $pid0 $pid1; do kill -0 $p 2>/dev/null && { echo "$(date +%T) $1: pid $p did not stop: SIGKILL"; kill -9 $p; }; done
  wait $pid0 $pid1 2>/dev/null; state "$1-ended" 3; }

job eager --step decode --second-group
state eager-healthy 20
touch "$ctl/idle"; state eager-idle 20; rm "$ctl/idle"
state eager-busy-again 8
touch "$ctl/hang"; state eager-hang 20; rm "$ctl/hang"
state eager-recovered 10
kill -STOP $pid1; state eager-sigstop 20; kill -CONT $pid1
state eager-continued 10
endjob eager

job graph --step decode --graph --second-group
state graph-healthy 20
touch "$ctl/hang"; state graph-hang 20; rm "$ctl/hang"
state graph-recovered 10
touch "$ctl/idle"; state graph-idle 15; rm "$ctl/idle"
endjob graph

kill $rec $exp; wait
rm -rf "$ctl"
