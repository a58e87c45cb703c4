#!/bin/bash
# Live check of the driver-health sources on a real machine (docs/gpu-drill.md,
# "Driver health on the lent machine"): the kernel log as the kernel-events
# collector reads it, devlink, and RDMA queue pairs of real processes on a
# soft-RoCE device where the kernel has one. Prints what it saw; writes the
# scrapes and the tools' answers to $OUT.
#
#   OUT=/tmp/live BIN=./fabric_exporter RDMA_ROOT=/path/to/debs bash tools/gpudrill/live-kernel-events.sh
#
# BIN: the exporter (make build). RDMA_ROOT (optional): a directory where the
# Debian packages ibverbs-utils, libibverbs1, ibverbs-providers, iproute2 (and
# their libraries) were unpacked with dpkg-deb -x, for a machine without them.
# Run as root: it writes to /dev/kmsg and may add an rxe link.
set -u
OUT=${OUT:-/tmp/live-kernel-events}
BIN=${BIN:-./fabric_exporter}
R=${RDMA_ROOT:-}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
set -x
date -u; uname -a; id; grep -E '^Cap(Eff|Bnd)' /proc/self/status
cat /proc/sys/kernel/dmesg_restrict; ls -l /dev/kmsg
dmesg > "$OUT/dmesg.txt" 2>&1; wc -l < "$OUT/dmesg.txt"
ls /lib/modules/"$(uname -r)" 2>&1 | head -3
(zcat /proc/config.gz 2>/dev/null || cat /boot/config-"$(uname -r)" 2>/dev/null) |
	grep -E 'CONFIG_(RDMA_RXE|INFINIBAND|INFINIBAND_USER_ACCESS|MLX5_CORE|NET_DEVLINK|MODULES)='
ls /sys/class/infiniband /sys/class/net 2>&1
RDMA=rdma DEVLINK=devlink BINDIR=
if [ -n "$R" ]; then
	export LD_LIBRARY_PATH=$R/usr/lib/x86_64-linux-gnu:$R/lib/x86_64-linux-gnu
	cp -a "$R"/usr/lib/x86_64-linux-gnu/libibverbs /usr/lib/x86_64-linux-gnu/ 2>/dev/null
	mkdir -p /etc/libibverbs.d && cp -a "$R"/etc/libibverbs.d/. /etc/libibverbs.d/
	RDMA=$R/usr/bin/rdma DEVLINK=$R/sbin/devlink BINDIR=$R/usr/bin/
fi
$DEVLINK -j dev show 2>&1 | head -5; $DEVLINK -j health show 2>&1 | head -5
modprobe rdma_rxe 2>&1; grep -E 'rxe|ib_' /proc/modules
NETDEV=$(ip -o route show default 2>/dev/null | awk '{for(i=1;i<=NF;i++) if($i=="dev") print $(i+1)}' | head -1)
[ -n "$NETDEV" ] || NETDEV=$(ls /sys/class/net | grep -v '^lo$' | head -1)
$RDMA link add rxe0 type rxe netdev "$NETDEV" 2>&1; $RDMA link show 2>&1
# The production shape (no replay: the log from the exporter's start on), and
# a second exporter replaying the kernel's whole buffer.
"$BIN" --web.listen-address=127.0.0.1:10470 --collector.kernel-events > "$OUT/exporter.log" 2>&1 &
EP=$!
"$BIN" --web.listen-address=127.0.0.1:10471 --collector.kernel-events --collector.kernel-events.replay --no-collector.gpu > "$OUT/exporter-replay.log" 2>&1 &
EP2=$!
scrape() { curl -s -m 10 -o "$2" -w '%{time_total}\n' "http://127.0.0.1:$1/metrics"; }
sleep 6
scrape 10470 "$OUT/m-start.txt"; scrape 10471 "$OUT/m-replay.txt"
# Lines written from userspace (facility user) in the words of a fatal Xid and
# an mlx5 health failure: they must not count as kernel events.
echo "<3>NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus." > /dev/kmsg
echo "<3>mlx5_core 0000:3b:00.0: mlx5_health_try_recover:122:(pid 1): health compromised - reached miss count" > /dev/kmsg
sleep 3; scrape 10470 "$OUT/m-forged.txt"
# Queue pairs of real processes on the soft RDMA device, then one in error
# held by a live (stopped) process.
if [ -e /sys/class/infiniband/rxe0 ]; then
	PP=${BINDIR}ibv_rc_pingpong
	"${BINDIR}ibv_devinfo" -d rxe0 2>&1 | head -20
	$PP -d rxe0 -g 1 -n 200000000 -s 4096 > "$OUT/pp-server.txt" 2>&1 & SP=$!
	sleep 1
	$PP -d rxe0 -g 1 -n 200000000 -s 4096 127.0.0.1 > "$OUT/pp-client.txt" 2>&1 & CP=$!
	sleep 4; $RDMA -j resource show qp > "$OUT/rdma-qp-running.json" 2>&1; sleep 3
	scrape 10470 "$OUT/m-qp-running.txt"
	kill -9 $SP; kill -STOP $CP; sleep 4
	$RDMA -j resource show qp > "$OUT/rdma-qp-error.json" 2>&1; sleep 7
	scrape 10470 "$OUT/m-qp-error.txt"
	kill -9 $CP
fi
# Cost: 60 scrapes 1 s apart, every default collector and kernel-events.
read -r u0 s0 < <(awk '{print $14, $15}' /proc/$EP/stat)
for i in $(seq 1 60); do scrape 10470 /dev/null; sleep 1; done > "$OUT/scrape-times.txt"
read -r u1 s1 < <(awk '{print $14, $15}' /proc/$EP/stat)
echo "ticks_per_s=$(getconf CLK_TCK) cpu_ticks=$(((u1 + s1) - (u0 + s0))) over 60 scrapes + 60 s of pollers"
grep -E 'VmRSS|VmHWM' /proc/$EP/status
scrape 10470 "$OUT/m-end.txt"
kill $EP $EP2; sleep 1
dmesg | tail -40 > "$OUT/dmesg-tail.txt"
