#!/bin/sh
# Measures what a qemu guest costs beyond its configured memory (docs/decisions.md, "qemu's cgroup"):
# boots KERNEL + INITRD with qemu's argv as orc builds it (src/runtime/qemu.ts) in a fresh cgroup
# v1 memory + pids cgroup without limits, waits for the console to print MARKER, idles 10 s, then
# prints qemu's RSS, the resident part of each large mapping (guest RAM, TCG code cache, malloc
# arenas), the memory cgroup's usage and the most tasks seen. Needs root and cgroup v1 memory/pids
# hierarchies (as on this project's CI machine).
#
#   scripts/measure-qemu-overhead.sh KERNEL INITRD CPUS MEMORY_MIB [ACCEL] [MARKER]
#   e.g. scripts/measure-qemu-overhead.sh /boot/vmlinuz-6.1.0-57-amd64 initramfs.gz 1 256 tcg,tb-size=128
set -eu
kernel=$1; initrd=$2; cpus=$3; mem=$4; accel=${5:-tcg}; marker=${6:-ORC-GUEST-READY}
tag=orc-measure-$$
memcg=/sys/fs/cgroup/memory$(grep ':memory:' /proc/self/cgroup | cut -d: -f3)/$tag
pidcg=/sys/fs/cgroup/pids/$tag
log=$(mktemp)
mkdir -p "$memcg" "$pidcg"
sh -c 'echo $$ > "$1/cgroup.procs"; echo $$ > "$2/cgroup.procs"; shift 2; exec "$@"' sh "$memcg" "$pidcg" \
  qemu-system-x86_64 -nodefaults -no-user-config -display none -vga none -no-reboot -machine q35 \
  -accel "$accel" -cpu max -smp "$cpus" -m "${mem}M" -kernel "$kernel" -append 'panic=-1 console=ttyS0' \
  -initrd "$initrd" -chardev "file,id=con0,path=$log,append=on" -serial chardev:con0 \
  -sandbox on,obsolete=deny,spawn=deny,resourcecontrol=deny -runas nobody &
qp=$!
maxp=0
sample() { p=$(cat "$pidcg/pids.current"); if [ "$p" -gt "$maxp" ]; then maxp=$p; fi; }
t0=$(date +%s)
while ! grep -q "$marker" "$log"; do
  kill -0 "$qp" 2>/dev/null || { echo "qemu exited before $marker"; exit 1; }
  sample; sleep 0.5
done
t1=$(date +%s)
i=0; while [ $i -lt 20 ]; do sample; sleep 0.5; i=$((i + 1)); done
echo "cpus=$cpus memory=${mem}MiB accel=$accel boot=$((t1 - t0))s most-tasks=$maxp"
grep -E '^(VmSize|VmRSS|VmHWM|Threads):' "/proc/$qp/status" | tr -s ' \t' ' ' | tr '\n' ';'; echo
echo "memory cgroup: usage=$(cat "$memcg/memory.usage_in_bytes") max_usage=$(cat "$memcg/memory.max_usage_in_bytes")"
echo "mappings of 1 MiB or more resident, or 64 MiB or more in size:"
awk '/^[0-9a-f]+-[0-9a-f]+ /{r=$1} /^Size:/{s=$2} /^Rss:/{if ($2 >= 1024 || s >= 65536) print "  " r, "size=" s "kB", "rss=" $2 "kB"}' "/proc/$qp/smaps"
kill -9 "$qp"; wait "$qp" 2>/dev/null || true
sleep 1; rmdir "$memcg" "$pidcg"; rm -f "$log"
