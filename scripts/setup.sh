#!/usr/bin/env bash
# Idempotent setup for a fresh Debian machine: the Debian packages orc drives (sandbox, OCI
# runtime, WireGuard, routing, NAT; curl for the bootstrap test; etcd and serf only as benchmark
# baselines) and the npm packages from the lock file. Safe to run again: it installs only what is
# missing.
set -euo pipefail
cd "$(dirname "$0")/.."

DEB_PACKAGES=(bubblewrap runc busybox-static wireguard-tools wireguard-go iproute2 nftables iputils-ping procps curl)
BENCH_PACKAGES=(etcd-server serf)

missing=()
for p in "${DEB_PACKAGES[@]}" ${ORC_SETUP_BENCH:+"${BENCH_PACKAGES[@]}"}; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "setup: cannot install Debian packages ${missing[*]} (need root and apt-get); tests that need them will say skipped" >&2
  else
    echo "setup: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null || true
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

# npm packages exactly as locked; skipped when node_modules already matches the lock file.
stamp=node_modules/.orc-lock-stamp
if [ ! -f "$stamp" ] || ! cmp -s package-lock.json "$stamp"; then
  echo "setup: npm ci" >&2
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json "$stamp"
fi

# Bundle the CLI/agent (dist/orc.mjs); bin/orc.mjs uses it only while it is newer than src/.
node scripts/build.mjs
