#!/usr/bin/env bash
# Idempotent setup for a fresh Debian machine: the Debian packages orc drives (sandbox, OCI and gVisor
# runtimes, WireGuard, routing, NAT; qemu-system-x86, linux-image-amd64 and cpio for VirtualMachines and their tests' guest, qemu-utils (qemu-img: image overlays), dosfstools and mtools (the cloud-init seed) for their disks, syslinux for the disk-boot test's boot disk; e2fsprogs and util-linux for Volumes (mkfs.ext4, loop mounts, fsfreeze), mmdebstrap for the redis-on-a-Volume test's image; curl for the bootstrap test; openssl for the HTTPS listener's certificate; shellcheck for install.sh; dnsutils (dig) and dnsmasq-base for the DNS tests and benchmark; docker-registry, skopeo, umoci, zstd for the
# registry-image tests; chromium for the dashboard's browser tests; etcd and serf only as benchmark baselines) and the npm packages from the lock file. Safe to run again: it installs only what is
# missing.
set -euo pipefail
cd "$(dirname "$0")/.."

DEB_PACKAGES=(bubblewrap runc runsc busybox-static qemu-system-x86 qemu-utils dosfstools mtools syslinux linux-image-amd64 cpio e2fsprogs util-linux mmdebstrap wireguard-tools wireguard-go iproute2 nftables iputils-ping procps curl openssl shellcheck docker-registry skopeo umoci zstd tmux dnsutils dnsmasq-base chromium)
BENCH_PACKAGES=(etcd-server serf strace)

APT_LOCKS=(/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock)
LOCK_WAIT_S=300

# Who holds one of apt's and dpkg's locks, as "PID (NAME)", or nothing when they are free. They
# are POSIX (fcntl) locks, which `flock` cannot see; /proc/locks lists them by device and inode.
apt_lock_holder() {
  local f dev key pid
  for f in "${APT_LOCKS[@]}"; do
    [ -e "$f" ] || continue
    dev=$(stat -c %d "$f")
    key=$(printf '%02x:%02x:%s' $(((dev >> 8) & 0xfff)) $(((dev & 0xff) | ((dev >> 12) & 0xfff00))) "$(stat -c %i "$f")")
    pid=$(awk -v key="$key" '$2 != "->" && $6 == key { print $5; exit }' /proc/locks)
    [ -n "$pid" ] || continue
    if [ "$pid" -gt 0 ] 2>/dev/null; then
      echo "$pid ($(cat "/proc/$pid/comm" 2>/dev/null || echo '?'))"
    else
      echo "an unknown process"
    fi
    return
  done
}

# Waits up to LOCK_WAIT_S for the locks to be free, saying once whom it waits for.
wait_for_apt_locks() {
  local holder said='' deadline=$((SECONDS + LOCK_WAIT_S))
  while holder=$(apt_lock_holder) && [ -n "$holder" ]; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "setup: the dpkg lock is still held by $holder after ${LOCK_WAIT_S}s; run setup again once it is free" >&2
      return 1
    fi
    if [ -z "$said" ]; then
      echo "setup: waiting up to ${LOCK_WAIT_S}s for the dpkg lock, held by $holder" >&2
      said=1
    fi
    sleep 1
  done
}

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
    # Another apt or dpkg (unattended-upgrades on a fresh machine) may hold the locks: wait for
    # it, bounded. `apt-get update` ignores DPkg::Lock::Timeout for the lists lock (apt 2.6), hence
    # the wait here; the option still covers a lock taken between the wait and apt-get's own.
    wait_for_apt_locks
    apt-get -o DPkg::Lock::Timeout="$LOCK_WAIT_S" update -qq >/dev/null || true
    wait_for_apt_locks
    apt-get -o DPkg::Lock::Timeout="$LOCK_WAIT_S" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
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
