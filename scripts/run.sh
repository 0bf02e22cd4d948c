#!/usr/bin/env bash
# Set up this machine (idempotent), start a single-node orc cluster on the embedded defaults, and
# apply the sample pod. The agent stays in the foreground; Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

orc() { node --max-semi-space-size=2 bin/orc.mjs "$@"; }

# The sample pod's image: a tiny rootfs built from Debian's busybox-static (no registry).
orc image import-busybox

orc up &
agent=$!
trap 'kill -TERM $agent 2>/dev/null || true; wait $agent 2>/dev/null || true' EXIT INT TERM

# Wait (bounded) for the local API to answer.
for _ in $(seq 1 100); do
  if orc status >/dev/null 2>&1; then break; fi
  kill -0 $agent 2>/dev/null || { echo "run: the agent exited" >&2; exit 1; }
  sleep 0.2
done
orc status
orc apply -f examples/pod.yaml --reason "sample pod from scripts/run.sh"
orc get pods -o wide
wait $agent
