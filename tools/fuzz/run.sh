#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME each (make fuzz).
#
# A target fails the run when go test fails and writes a failing input under
# testdata/fuzz/<target>/. Go's fuzz coordinator can also fail a target at
# the end of a duration-based -fuzztime with a bare "context deadline
# exceeded" and no input written (golang/go#75804: a race between the
# deadline and the suppression of it, seen under CPU contention; CI failed so
# once on FuzzIBHCA). Such a run is retried, twice at most; a third one fails
# the run too, so a target that hangs still fails.
set -euo pipefail
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-30s}
retries=2
# inputs counts the files under a target's corpus directory (0 without one).
inputs() { find "$1" -type f 2>/dev/null | wc -l || true; }
for pkg in $($GO list ./...); do
  targets=$($GO test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true)
  [ -n "$targets" ] || continue
  dir=$($GO list -f '{{.Dir}}' "$pkg")
  for t in $targets; do
    echo "== $pkg $t"
    try=0
    while :; do
      before=$(inputs "$dir/testdata/fuzz/$t")
      log=$(mktemp)
      if $GO test "$pkg" -run '^$' -fuzz "^$t\$" -fuzztime "$FUZZTIME" 2>&1 | tee "$log"; then
        rm -f "$log"; break
      fi
      after=$(inputs "$dir/testdata/fuzz/$t")
      if [ "$after" -gt "$before" ] || ! grep -q 'context deadline exceeded' "$log" || [ "$try" -ge "$retries" ]; then
        rm -f "$log"; echo "FAIL: $pkg $t" >&2; exit 1
      fi
      rm -f "$log"
      try=$((try + 1))
      echo "-- $t: failed with no input written (golang/go#75804); retry $try of $retries"
    done
  done
done
