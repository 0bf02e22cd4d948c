#!/bin/bash
# Runs the chaos test (test/chaos/jepsen.test.ts) N times in a row (default 6), as root.
# A failed run keeps its agents' data dirs and logs (printed); every run's refusals other than
# `unresolved` are saved to $OUT/run-I.refused. Usage: scripts/chaos-repeat.sh [N] [OUT]
set -u
cd "$(dirname "$0")/.."
n=${1:-6}
out=${2:-/tmp/chaos-repeat}
mkdir -p "$out"
for i in $(seq 1 "$n"); do
  log="$out/run-$i.log"
  CHAOS_KEEP=1 node scripts/run-tests.mjs test/chaos > "$log" 2>&1
  dir=$(grep -ao "kept in [^ ]*" "$log" | head -1 | cut -d' ' -f3)
  if [ -n "$dir" ]; then
    for f in "$dir"/*.log; do grep -a '"peer update refused"\|peer sent garbage' "$f" | grep -av '"unresolved"' | sed "s|^|$(basename "$f"): |"; done > "$out/run-$i.refused"
  fi
  summary=$(grep -ao 'convergence=[^ ]* lost=[0-9]*' "$log" | head -1)
  if grep -aq "^1 passed" "$log"; then
    echo "run $i: pass $summary ($(wc -l < "$out/run-$i.refused" 2>/dev/null || echo 0) refusals other than unresolved)"
    [ -n "$dir" ] && rm -rf "$dir"
  else
    echo "run $i: FAIL $summary $(grep -ao 'seed=[0-9]*' "$log" | head -1) data and logs in $dir"
  fi
done
