#!/usr/bin/env bash
# Runs the drill on the lent GPU machine with binaries built on the build
# machine and carried xz-compressed in .dev/ (fabric_exporter, gpudrill,
# prometheus, alertmanager: `make build`, `go build ./tools/gpudrill`,
# Prometheus 3 by `go install …/cmd/prometheus@v0.316.0`, Alertmanager
# 0.25 with its default.tmpl; the working tree's 64 MiB limit is why they travel compressed).
# Usage, from the repository root, as root:
#   tools/gpudrill/lent-run.sh NAME [gpudrill flags...]
# The report goes to stdout and $OUT/NAME-report.txt, the work directory
# (logs, scrapes, RAS answers, notifications) to $OUT/NAME.tar.xz.
set -u
name=${1:?NAME}; shift
bin=/tmp/drillbin; mkdir -p "$bin"
for f in .dev/*.xz; do b=$bin/$(basename "$f" .xz); [ -x "$b" ] || { xz -dc "$f" >"$b" && chmod +x "$b"; }; done
# Debian's Alertmanager reads its notification templates from here.
mkdir -p /usr/share/prometheus/alertmanager && cp .dev/*.tmpl /usr/share/prometheus/alertmanager/ 2>/dev/null
out=${OUT:-/tmp/out}; mkdir -p "$out"
work=/tmp/drill-$name; rm -rf "$work"
export PYTHONUNBUFFERED=1
"$bin/gpudrill" --repo=. --exporter="$bin/fabric_exporter" --prometheus="$bin/prometheus" --alertmanager="$bin/alertmanager" \
  --workdir="$work" "$@" 2>"$out/$name-stderr.txt" | tee "$out/$name-report.txt"
rc=${PIPESTATUS[0]}
tar -C /tmp -cJf "$out/$name.tar.xz" --exclude='*.py' "drill-$name" 2>/dev/null
echo "gpudrill $name: exit $rc"
exit $rc
