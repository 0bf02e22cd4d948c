/**
 * Write throughput of a pod on a local Volume (loop-mounted ext4) against the same `dd` in the same
 * pod on a host directory of the same disk (an emptyDir: a plain directory under the data dir), and
 * against `dd` run on the host itself. One real agent, one busybox pod; each target written ROUNDS
 * times alternately, `dd bs=1M count=SIZE_MB conv=fsync` (fsync: the figure is the disk's, not the
 * page cache's). Needs root (loop mounts), bwrap and busybox-static.
 * Run: node --import tsx --import ./test/setup.ts test/bench/volume.bench.ts [SIZE_MB] [ROUNDS]
 * Prints: MB/s of each (median; timed by /proc/uptime, 10 ms steps), and the ratio volume / host directory.
 */
import { execFileSync } from 'node:child_process'
import { chmodSync, existsSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { newNode, orc, Workspace, waitFor } from '../cluster/helpers.ts'
import { busyboxMissing } from '../fixtures/busybox-image.ts'

const SIZE_MB = Number(process.argv[2] ?? 256)
const ROUNDS = Number(process.argv[3] ?? 3)
const missing = busyboxMissing() ?? (process.getuid?.() !== 0 ? 'needs root (loop mounts)' : !existsSync('/dev/loop-control') ? 'no loop devices' : undefined)
if (missing) {
  console.error(`skipped: ${missing}`)
  process.exit(0)
}

/** MB/s from a line `TAG T0 T1` (seconds of /proc/uptime before and after the dd). */
function rateOf(line: string): number {
  const [, t0, t1] = line.split(' ').map(Number) as [number, number, number]
  if (!(t1 > t0)) throw new Error(`no duration in ${JSON.stringify(line)}`)
  return SIZE_MB / (t1 - t0)
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

const ws = new Workspace()
chmodSync(ws.root, 0o711)
const node = await newNode(ws, 'a')
try {
  await node.up().ready()
  const img = await orc(undefined, ['image', 'import-busybox', '--data-dir', node.dataDir])
  if (img.exitCode !== 0) throw new Error(img.stderr)
  // busybox dd prints no rate: the time comes from /proc/uptime (10 ms resolution) around it.
  const up = `$(cut -d' ' -f1 /proc/uptime)`
  const dd = (tag: string, path: string) =>
    `t0=${up}; dd if=/dev/zero of=${path} bs=1M count=${SIZE_MB} conv=fsync 2>/dev/null; t1=${up}; rm -f ${path}; echo "${tag} $t0 $t1"`
  const rounds = Array.from({ length: ROUNDS }, () => `${dd('vol', '/vol/f')}; ${dd('dir', '/dir/f')}`).join('; ')
  const manifest = [
    { apiVersion: 'orc/v1', kind: 'Volume', metadata: { name: 'bench' }, spec: { size: `${SIZE_MB * 2 + 64}Mi` } },
    {
      apiVersion: 'orc/v1',
      kind: 'Pod',
      metadata: { name: 'dd' },
      spec: {
        restartPolicy: 'Never',
        volumes: [
          { name: 'v', volume: { name: 'bench' } },
          { name: 'd', emptyDir: {} },
        ],
        containers: [
          {
            name: 'main',
            image: 'busybox',
            command: ['/bin/sh', '-c', `${rounds}; echo done`],
            volumeMounts: [
              { name: 'v', mountPath: '/vol' },
              { name: 'd', mountPath: '/dir' },
            ],
          },
        ],
      },
    },
  ]
  const ap = await orc(node.socket, ['apply', '-f', '-'], {}, manifest.map((m) => JSON.stringify(m)).join('\n---\n'))
  if (ap.exitCode !== 0) throw new Error(ap.stderr)
  const out = await waitFor(
    'the dd pod to finish',
    async () => {
      const r = await node.cli(['logs', 'pod/dd'])
      return r.stdout.includes('done') ? r.stdout : undefined
    },
    600_000,
  )
  const vol = out
    .split('\n')
    .filter((l) => l.startsWith('vol '))
    .map(rateOf)
  const dir = out
    .split('\n')
    .filter((l) => l.startsWith('dir '))
    .map(rateOf)
  const hostFile = join(node.dataDir, 'host-dd')
  const host: number[] = []
  for (let i = 0; i < ROUNDS; i++) {
    const line = execFileSync(
      'sh',
      [
        '-c',
        `t0=$(cut -d' ' -f1 /proc/uptime); dd if=/dev/zero of=${hostFile} bs=1M count=${SIZE_MB} conv=fsync 2>/dev/null; echo "host $t0 $(cut -d' ' -f1 /proc/uptime)"`,
      ],
      {
        encoding: 'utf8',
      },
    )
    host.push(rateOf(line.trim()))
    rmSync(hostFile, { force: true })
  }
  console.log(`volume_pod_write_mb_s ${median(vol).toFixed(0)}`)
  console.log(`host_dir_pod_write_mb_s ${median(dir).toFixed(0)}`)
  console.log(`host_dd_write_mb_s ${median(host).toFixed(0)}`)
  console.log(`ratio_volume_over_host_dir ${(median(vol) / median(dir)).toFixed(2)}`)
  console.error(`samples MB/s: volume ${vol.join(', ')}; host dir ${dir.join(', ')}; host dd ${host.join(', ')}`)
} finally {
  await node.kill('SIGKILL')
  for (const line of execFileSync('cat', ['/proc/self/mountinfo'], { encoding: 'utf8' }).split('\n')) {
    const mp = line.split(' ')[4]
    if (mp?.startsWith(ws.root)) execFileSync('umount', ['-l', mp])
  }
  await ws.close()
}
