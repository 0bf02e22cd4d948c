// A real database on a Volume: Debian's redis-server (an image built with mmdebstrap, imported into
// the node's image store) with its append-only file on a loop-mounted ext4 Volume. Keys written
// through `orc exec … redis-cli` must be there after an in-place update, after the agent is killed
// with SIGKILL (and an update from the new agent), and after the pod is deleted and made again; and,
// on a replicated Volume of three nodes, after the node holding it is lost (the ha pod fails over to
// the promoted replica).

import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs'
import { test } from 'node:test'
import { skipReason } from '../pods/helpers.ts'
import { type NodeProcess, newNode, orc, tokenFrom, Workspace, waitFor } from './helpers.ts'

/** Built once per machine (mmdebstrap takes 20–70 s); a new version of the list makes a new one. */
const ROOTFS = '/var/tmp/orc-test-redis-rootfs-v2'

function which(bin: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${bin}`], { stdio: 'ignore' })
    return true
  } catch {
    return false
  }
}

function redisRootfs(): string | undefined {
  if (existsSync(`${ROOTFS}/usr/bin/redis-server`)) return undefined
  const tmp = `${ROOTFS}.tmp-${process.pid}`
  try {
    execFileSync(
      'mmdebstrap',
      ['--variant=essential', '--include=redis-server,redis-tools', '--dpkgopt=path-exclude=/usr/share/{doc,man,locale}/*', 'bookworm', tmp],
      { stdio: 'ignore', timeout: 300_000 },
    )
    // Device nodes are not an image's to give (the sandbox makes its own /dev; the import refuses them).
    rmSync(`${tmp}/dev`, { recursive: true, force: true })
    mkdirSync(`${tmp}/dev`)
    renameSync(tmp, ROOTFS)
    return undefined
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true })
    return `mmdebstrap could not build the redis image (no Debian mirror?): ${(err as Error).message.split('\n')[0]}`
  }
}

const skip =
  skipReason() ??
  (process.getuid?.() !== 0
    ? 'loop mounts need root'
    : !existsSync('/dev/loop-control')
      ? 'no loop devices'
      : !which('mmdebstrap')
        ? 'mmdebstrap not installed (scripts/setup.sh installs it)'
        : redisRootfs())

const MARK = `--volumes-redis-${process.pid}`
const TUNABLES = JSON.stringify({ restartBackoffMs: 100, maxRestartBackoffMs: 400, runRetryMs: 500, resolveImageTimeoutMs: 60_000 })

function redisPod(rev: string, volume = 'redis-data', ha = false): string {
  return JSON.stringify({
    apiVersion: 'orc/v1',
    kind: 'Pod',
    metadata: { name: 'redis' },
    spec: {
      terminationGracePeriodSeconds: 5,
      ...(ha ? { policy: 'ha', haAfterSeconds: 10 } : {}),
      volumes: [{ name: 'data', volume: { name: volume } }],
      containers: [
        {
          name: 'main',
          image: 'redis',
          env: [{ name: 'REV', value: rev }],
          // Every write is fsynced to the append-only file before it is acknowledged.
          command: [
            '/usr/bin/redis-server',
            '--dir',
            '/data',
            '--appendonly',
            'yes',
            '--appendfsync',
            'always',
            '--save',
            '',
            '--bind',
            '127.0.0.1',
            '--protected-mode',
            'no',
            '--unixsocket',
            '',
            '--logfile',
            '',
            '--dbfilename',
            'dump.rdb',
            '--tcp-backlog',
            '16',
            '--port',
            '6379',
            '--syslog-ident',
            MARK,
          ],
          volumeMounts: [{ name: 'data', mountPath: '/data' }],
        },
      ],
    },
  })
}

/**
 * A workspace whose cleanup leaves nothing of the run: the agents stop the pod (or are killed), then
 * the sandboxes (bwrap keeps the marker in its argv; redis-server rewrites its own), the loop
 * mounts, the workspace.
 */
function redisWorkspace(t: { after(fn: () => Promise<void>): void }): { ws: Workspace; nodes: NodeProcess[] } {
  const ws = new Workspace()
  chmodSync(ws.root, 0o711)
  const nodes: NodeProcess[] = []
  t.after(async () => {
    for (const n of nodes) await n.cli(['delete', 'pod/redis']).catch(() => undefined)
    await waitFor('redis stopped', () => pidsWithArg(MARK).length === 0, 20_000).catch(() => undefined)
    for (const n of nodes) await n.kill('SIGKILL')
    killRedis()
    const points = readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .map((l) => l.split(' ')[4])
      .filter((mp): mp is string => mp?.startsWith(ws.root) === true)
    for (const mp of points.reverse()) {
      try {
        execFileSync('umount', ['-l', mp])
      } catch {}
    }
    await ws.close().catch(() => {})
  })
  return { ws, nodes }
}

/** Every sandbox of this run (a node "lost" with its containers). */
function killRedis(): void {
  for (const pid of pidsWithArg(MARK)) {
    try {
      process.kill(pid, 'SIGKILL')
    } catch {}
  }
}

test('redis-server keeps its keys on a Volume through update, agent kill -9 and pod re-creation', { skip, timeout: 300_000 }, async (t) => {
  const { ws, nodes } = redisWorkspace(t)
  const a = await newNode(ws, 'a')
  nodes.push(a)
  a.env = { ORC_POD_TUNABLES: TUNABLES }
  await a.up().ready()
  const imp = await orc(undefined, ['image', 'import', ROOTFS, '--name', 'redis', '--data-dir', a.dataDir])
  assert.equal(imp.exitCode, 0, imp.stderr)
  const apply = async (text: string) => {
    const r = await orc(a.socket, ['apply', '-f', '-'], {}, text)
    assert.equal(r.exitCode, 0, r.stderr)
  }
  const cli = (...args: string[]) => a.cli(['exec', 'redis', '--', '/usr/bin/redis-cli', ...args])
  const answering = (what: string) =>
    waitFor(
      what,
      async () => {
        const r = await cli('PING')
        return r.stdout.trim() === 'PONG'
      },
      90_000,
    )

  await apply(JSON.stringify({ apiVersion: 'orc/v1', kind: 'Volume', metadata: { name: 'redis-data' }, spec: { size: '64Mi' } }))
  await apply(redisPod('1'))
  await answering('redis to answer')
  assert.equal((await cli('SET', 'k1', 'one')).stdout.trim(), 'OK')
  assert.equal((await cli('INCR', 'counter')).stdout.trim(), '1')

  await apply(redisPod('2'))
  await waitFor('the in-place restart', async () => JSON.parse((await a.cli(['get', 'pod/redis', '-o', 'json'])).stdout).status?.runningRevision > 2, 60_000)
  await answering('redis to answer after the update')
  assert.equal((await cli('GET', 'k1')).stdout.trim(), 'one')
  assert.equal((await cli('INCR', 'counter')).stdout.trim(), '2')

  await a.kill('SIGKILL')
  await a.up().ready()
  await answering('the adopted redis to answer')
  await apply(redisPod('3'))
  await waitFor(
    'the update after kill -9',
    async () => {
      const p = JSON.parse((await a.cli(['get', 'pod/redis', '-o', 'json'])).stdout)
      return p.status?.phase === 'Running' && p.spec.containers[0].env[0].value === '3' && p.status.runningRevision === p.status.targetRevision
    },
    60_000,
  )
  await answering('redis to answer after kill -9 and update')
  assert.equal((await cli('INCR', 'counter')).stdout.trim(), '3')

  assert.equal((await a.cli(['delete', 'pod/redis'])).exitCode, 0)
  await waitFor(
    'the volume detached',
    async () => JSON.parse((await a.cli(['get', 'volume/redis-data', '-o', 'json'])).stdout).status?.phase === 'Available',
    60_000,
  )
  await apply(redisPod('4'))
  await answering('the new pod’s redis to answer')
  assert.equal((await cli('GET', 'k1')).stdout.trim(), 'one')
  assert.equal((await cli('GET', 'counter')).stdout.trim(), '3')
})

// The node holding a replicated Volume is lost (agent killed with -9, its containers with it): the
// ha redis pod fails over to a node holding a replica, which is promoted, and redis starts there
// from the synced append-only file — every key written before the last sync is there, and redis
// takes writes again on the new primary.
test('redis-server on a replicated Volume fails over with its node: the promoted replica holds the synced keys', { skip, timeout: 300_000 }, async (t) => {
  const { ws, nodes } = redisWorkspace(t)
  const [a, b, c] = [await newNode(ws, 'a'), await newNode(ws, 'b'), await newNode(ws, 'c')]
  nodes.push(a, b, c)
  for (const n of nodes) n.env = { ORC_POD_TUNABLES: TUNABLES }
  await a.up().ready()
  for (const n of [b, c]) await n.join(a.addr, await tokenFrom(a)).ready()
  for (const n of nodes) {
    const imp = await orc(undefined, ['image', 'import', ROOTFS, '--name', 'redis', '--data-dir', n.dataDir])
    assert.equal(imp.exitCode, 0, imp.stderr)
  }
  const apply = async (text: string) => {
    const r = await orc(a.socket, ['apply', '-f', '-'], {}, text)
    assert.equal(r.exitCode, 0, r.stderr)
  }
  const json = (node: NodeProcess, ref: string) => node.getJson(ref)
  const INTERVAL = 3
  await apply(
    JSON.stringify({
      apiVersion: 'orc/v1',
      kind: 'Volume',
      metadata: { name: 'redis-ha' },
      spec: { size: '64Mi', replicas: 3, syncIntervalSeconds: INTERVAL },
    }),
  )
  await apply(redisPod('1', 'redis-ha', true))
  const first = await waitFor(
    'pod/redis running',
    async () => {
      const p = await json(a, 'pod/redis')
      return p?.status?.phase === 'Running' ? (p.status.node as string) : undefined
    },
    90_000,
  )
  const primary = nodes.find((n) => n.name === first)!
  const [s, other] = nodes.filter((n) => n !== primary) as [NodeProcess, NodeProcess]
  const cli = (via: NodeProcess, ...args: string[]) => via.cli(['exec', 'redis', '--', '/usr/bin/redis-cli', ...args])
  await waitFor('redis to answer', async () => (await cli(a, 'PING')).stdout.trim() === 'PONG', 90_000)
  assert.equal((await cli(a, 'SET', 'k1', 'one')).stdout.trim(), 'OK')
  for (let i = 1; i <= 5; i++) assert.equal((await cli(a, 'INCR', 'counter')).stdout.trim(), String(i))
  const wroteAt = Date.now()
  // A sync that began after the writes has reached both replicas (synced more than an interval later).
  await waitFor(
    'both replicas synced after the writes',
    async () => {
      const v = await json(a, 'volume/redis-ha')
      const r = v?.status?.replicas ?? {}
      return [s, other].every((n) => r[n.name]?.syncedAt !== undefined && Date.parse(r[n.name].syncedAt) > wroteAt + INTERVAL * 1000)
    },
    90_000,
  )
  await primary.kill('SIGKILL')
  killRedis()
  const lostAt = Date.now()
  const moved = await waitFor(
    'pod/redis running on a replica',
    async () => {
      const p = await json(s, 'pod/redis')
      return p?.status?.phase === 'Running' && p.status.node !== first ? (p.status.node as string) : undefined
    },
    120_000,
  )
  t.diagnostic(`redis failed over ${first} → ${moved} in ${Date.now() - lostAt} ms`)
  assert.equal((await json(s, 'volume/redis-ha'))?.status?.node, moved, 'the replica where the pod runs is the primary')
  await waitFor('redis to answer on the new primary', async () => (await cli(s, 'PING')).stdout.trim() === 'PONG', 90_000)
  assert.equal((await cli(s, 'GET', 'k1')).stdout.trim(), 'one')
  assert.equal((await cli(s, 'GET', 'counter')).stdout.trim(), '5')
  assert.equal((await cli(s, 'INCR', 'counter')).stdout.trim(), '6', 'the promoted copy takes writes')
})

/** Host pids whose command line has `arg` as one of its words. */
function pidsWithArg(arg: string): number[] {
  const out: number[] = []
  for (const d of readdirSync('/proc')) {
    if (!/^[0-9]+$/.test(d)) continue
    try {
      if (readFileSync(`/proc/${d}/cmdline`, 'utf8').split('\0').includes(arg)) out.push(Number(d))
    } catch {}
  }
  return out
}
