#!/usr/bin/env bash
# Set up this machine (idempotent), start a single-node orc cluster on the embedded defaults, and
# apply the sample pod. The agent stays in the foreground; Ctrl-C (or SIGTERM to this script) stops
# it, and `node bin/orc.mjs down` then removes what it leaves on the host.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

ORC=(env MALLOC_ARENA_MAX=2 node --max-semi-space-size=2 bin/orc.mjs)
orc() { "${ORC[@]}" "$@"; }

# The sample pod's image: a tiny rootfs built from Debian's busybox-static (no registry).
orc image import-busybox

# The agent is this script's own child (through the orc function, $! was a subshell: a TERM to it
# left node running), in its own process group (set -m) so that Ctrl-C reaches only this script and
# the agent gets exactly one TERM from it (a second signal makes the agent exit at once).
set -m
"${ORC[@]}" up &
agent=$!
set +m

stop_agent() {
  trap - INT TERM EXIT
  if kill -0 "$agent" 2>/dev/null; then
    echo "run: stopping the agent (pid $agent)" >&2
    kill -TERM "$agent" 2>/dev/null || true
  fi
  wait "$agent" 2>/dev/null || true
  echo "run: the agent has stopped; its pods (with their network namespaces) and NAT table stay for the next start — remove them with: node bin/orc.mjs down" >&2
}
trap 'stop_agent; exit 130' INT
trap 'stop_agent; exit 143' TERM
trap stop_agent EXIT

# Wait (bounded) for the local API to answer.
for _ in $(seq 1 100); do
  if orc status >/dev/null 2>&1; then break; fi
  kill -0 "$agent" 2>/dev/null || { echo "run: the agent exited" >&2; exit 1; }
  sleep 0.2
done
orc status
orc apply -f examples/pod.yaml --reason "sample pod from scripts/run.sh"
orc get pods -o wide
wait "$agent"
