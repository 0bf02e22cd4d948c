/**
 * Replicated volumes (docs/storage.md, "Replication"): replication lag under a steady write load,
 * and the failover time of an ha pod with a replicated volume. Three real agents, one Volume with
 * `replicas: 3` and `syncIntervalSeconds: INTERVAL`, one ha busybox pod (haAfterSeconds HA_AFTER)
 * that appends a timed line every 100 ms and rewrites one of 50 files of 64 KiB every 200 ms (about
 * 320 KiB/s of changed files). For DURATION seconds the lag of each replica (now − syncedAt) is
 * sampled every 500 ms through `orc get volume -o json`; then the primary's agent is killed with -9
 * and its container stopped, and the time until the pod runs on another node is measured, with the
 * seconds of writes lost (from the lines' timestamps).
 * Needs root (loop mounts), bwrap and busybox-static.
 * Run: node --import tsx --import ./test/setup.ts test/bench/volume-replication.bench.ts [INTERVAL] [DURATION] [HA_AFTER]
 */
import { execFileSync } from 'node:child_process'
import { chmodSync, existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { type NodeProcess, newNode, orc, tokenFrom, Workspace, waitFor } from '../cluster/helpers.ts'
import { busyboxMissing } from '../fixtures/busybox-image.ts'
import { pidsRunning } from '../pods/helpers.ts'

const INTERVAL = Number(process.argv[2] ?? 5)
const DURATION = Number(process.argv[3] ?? 60)
const HA_AFTER = Number(process.argv[4] ?? 10)
const missing = busyboxMissing() ?? (process.getuid?.() !== 0 ? 'needs root (loop mounts)' : !existsSync('/dev/loop-control') ? 'no loop devices' : undefined)
if (missing) {
  console.error(`skipped: ${missing}`)
  process.exit(0)
}

const q = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))]!
const script = `echo start >> /data/log; i=0; while true; do i=$((i+1)); echo "$i $(date +%s)" >> /data/log; if [ $((i % 2)) = 0 ]; then dd if=/dev/urandom of=/data/f$((i % 50)) bs=64k count=1 2>/dev/null; fi; sleep 0.1; done # bench-repl ${process.pid}`
const stopPod = () => {
  for (const pid of pidsRunning(['/bin/sh', '-c', script]))
    try {
      process.kill(pid, 'SIGKILL')
    } catch {}
}

const ws = new Workspace()
chmodSync(ws.root, 0o711)
const nodes: NodeProcess[] = []
try {
  for (const n of ['a', 'b', 'c']) nodes.push(await newNode(ws, n))
  const [a, b, c] = nodes as [NodeProcess, NodeProcess, NodeProcess]
  await a.up().ready()
  for (const n of [b, c]) await n.join(a.addr, await tokenFrom(a)).ready()
  for (const n of nodes) {
    const img = await orc(undefined, ['image', 'import-busybox', '--data-dir', n.dataDir])
    if (img.exitCode !== 0) throw new Error(img.stderr)
  }
  const json = async (node: NodeProcess, ref: string) => {
    const r = await node.cli(['get', ref, '-o', 'json'])
    return r.exitCode === 0 ? JSON.parse(r.stdout) : undefined
  }
  const manifest = [
    { apiVersion: 'orc/v1', kind: 'Volume', metadata: { name: 'bench' }, spec: { size: '64Mi', replicas: 3, syncIntervalSeconds: INTERVAL } },
    {
      apiVersion: 'orc/v1',
      kind: 'Pod',
      metadata: { name: 'w' },
      spec: {
        policy: 'ha',
        haAfterSeconds: HA_AFTER,
        terminationGracePeriodSeconds: 1,
        volumes: [{ name: 'd', volume: { name: 'bench' } }],
        containers: [{ name: 'main', image: 'busybox', command: ['/bin/sh', '-c', script], volumeMounts: [{ name: 'd', mountPath: '/data' }] }],
      },
    },
  ]
  const r = await orc(a.socket, ['apply', '-f', '-'], {}, manifest.map((m) => JSON.stringify(m)).join('\n---\n'))
  if (r.exitCode !== 0) throw new Error(r.stderr)
  const first = await waitFor(
    'the writer running',
    async () => {
      const p = await json(a, 'pod/w')
      return p?.status?.phase === 'Running' ? (p.status.node as string) : undefined
    },
    60_000,
  )
  const primary = nodes.find((n) => n.name === first)!
  const other = nodes.find((n) => n !== primary)!
  await waitFor(
    'both replicas synced once',
    async () => {
      const v = await json(other, 'volume/bench')
      return Object.values(v?.status?.replicas ?? {}).filter((x: any) => x.syncedAt).length === 2 ? true : undefined
    },
    60_000,
  )
  // Lag under the load.
  const lags: number[] = []
  const sentKiB: number[] = []
  const end = Date.now() + DURATION * 1000
  const moves: string[] = []
  const notReady: string[] = []
  while (Date.now() < end) {
    const nodesTable = (await other.cli(['get', 'nodes'])).stdout
    const row = nodesTable.split('\n').find((l) => l.startsWith(`${first} `))
    if (row !== undefined && !/\sReady\s/.test(row)) notReady.push(`${new Date().toISOString()} ${row.replace(/\s+/g, ' ')}`)
    const p = await json(other, 'pod/w')
    if (p?.status?.node !== first) moves.push(`${new Date().toISOString()} pod on ${p?.status?.node} (${p?.status?.phase})`)
    const v = await json(other, 'volume/bench')
    for (const x of Object.values(v?.status?.replicas ?? {}) as { syncedAt?: string; lastSentBytes?: number }[]) {
      if (x.syncedAt) lags.push((Date.now() - Date.parse(x.syncedAt)) / 1000)
      if (x.lastSentBytes) sentKiB.push(x.lastSentBytes / 1024)
    }
    await new Promise((res) => setTimeout(res, 500))
  }
  const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')
  console.log(`interval ${INTERVAL} s, ${DURATION} s sampled, ${lags.length} samples; load average ${load}`)
  console.log(`lag (now − syncedAt): p50 ${q(lags, 0.5).toFixed(1)} s, p90 ${q(lags, 0.9).toFixed(1)} s, max ${Math.max(...lags).toFixed(1)} s`)
  console.log(`sent per sync: median ${q(sentKiB, 0.5).toFixed(0)} KiB`)
  if (notReady.length > 0)
    console.log(`the primary's node was not Ready as ${other.name} saw it in ${notReady.length} samples:\n${notReady.slice(0, 8).join('\n')}`)
  if (moves.length > 0) {
    console.log(`the pod left ${first} during the load phase (no failover measured):\n${moves.slice(0, 5).join('\n')}`)
    const h = await other.cli(['history', 'pod/w'])
    console.log(h.stdout.split('\n').slice(-15).join('\n'))
    const { writeFileSync } = await import('node:fs')
    for (const n of nodes) writeFileSync(`/tmp/vr-agent-${n.name}.log`, n.stderr)
    process.exitCode = 1
    throw new Error('moved')
  }

  // Failover.
  const v0 = await json(other, 'volume/bench')
  const logOf = (n: NodeProcess) => join(n.dataDir, 'volumes', v0.metadata.uid, 'mnt', 'log')
  await primary.kill('SIGKILL')
  stopPod()
  const killedAt = Date.now()
  const lastWritten = Number(readFileSync(logOf(primary), 'utf8').trim().split('\n').at(-1)!.split(' ')[1])
  const moved = await waitFor(
    'the writer running elsewhere',
    async () => {
      const p = await json(other, 'pod/w')
      return p?.status?.phase === 'Running' && p.status.node !== first ? (p.status.node as string) : undefined
    },
    120_000,
  )
  const runningAt = Date.now()
  const target = nodes.find((n) => n.name === moved)!
  await waitFor(
    'the restarted writer writing',
    () =>
      readFileSync(logOf(target), 'utf8')
        .split('\n')
        .filter((l) => l === 'start').length === 2,
    30_000,
  )
  const lines = readFileSync(logOf(target), 'utf8').split('\n')
  const lastKept = Number(lines[lines.lastIndexOf('start') - 1]?.split(' ')[1])
  console.log(`failover (kill -9 → Running on ${moved}): ${((runningAt - killedAt) / 1000).toFixed(1)} s with haAfter ${HA_AFTER} s`)
  console.log(`writes lost: the last ${lastWritten - lastKept} s (RPO ≤ interval ${INTERVAL} s + a sync)`)
} finally {
  for (const n of nodes) await n.kill('SIGKILL').catch(() => {})
  stopPod()
  const points = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4])
    .filter((mp): mp is string => mp?.startsWith(ws.root) === true)
  for (const mp of points.reverse())
    try {
      execFileSync('umount', ['-l', mp])
    } catch {}
  await ws.close().catch(() => {})
}
