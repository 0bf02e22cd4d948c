// Placement across federated clusters with real agents (separate processes, real meshes, real
// sandboxes): cluster home (h1) and cluster cloud (c1, c2) share the namespace `shared`.
// What a user would notice: a pod applied on home with `placement.clusters: [cloud]` runs on a
// cloud node; `orc get -o wide` and `orc why` on home say where; an `ha` pod allowed in both
// clusters moves to home when every cloud agent is gone; a best-effort pod stays bound to its
// cloud node and `orc why` says it waits.

import assert from 'node:assert/strict'
import { chmodSync, mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { test } from 'node:test'
import { execa } from 'execa'
import { BIN, type NodeProcess, newNode, orc, ROOT, tokenFrom, Workspace, waitFor } from '../cluster/helpers.ts'
import { TEST_TUNABLES as POD_TUNABLES, pidsRunning, skipReason } from '../pods/helpers.ts'

const skip = skipReason()

function manifest(name: string, image: string, marker: string, spec: Record<string, unknown>): string {
  return JSON.stringify({
    apiVersion: 'orc/v1',
    kind: 'Pod',
    metadata: { name, namespace: 'shared' },
    spec: { terminationGracePeriodSeconds: 1, containers: [{ name: 'main', image, command: ['sleep', marker] }], ...spec },
  })
}

async function ok(n: NodeProcess, args: string[], input = ''): Promise<string> {
  const r = await orc(n.socket, args, { USER: 'alice' }, input)
  if (r.exitCode !== 0) throw new Error(`orc ${args.join(' ')} on ${n.name} failed (${r.exitCode}): ${r.stderr}${r.stdout}`)
  return r.stdout
}

async function sharedPod(n: NodeProcess, name: string): Promise<Record<string, any> | undefined> {
  try {
    return ((await n.client.call('GET', `/v1/objects/Pod/shared/${name}`)) as { object: Record<string, any> }).object
  } catch {
    return undefined
  }
}

test('federated placement: placement.clusters, ha failover to another cluster, best-effort waits', { skip, timeout: 120_000 }, async (t) => {
  const ws = new Workspace()
  const markers = ['4712101', '4712102', '4712103']
  t.after(async () => {
    await ws.close()
    for (const m of markers)
      for (const pid of pidsRunning(['sleep', m]))
        try {
          process.kill(pid, 'SIGKILL')
        } catch {}
  })
  chmodSync(ws.root, 0o711)
  const shared = join(ws.root, 'images')
  mkdirSync(shared, { mode: 0o711 })
  const imp = await execa(process.execPath, [BIN, 'image', 'import-busybox', '--data-dir', shared], { cwd: ROOT, reject: false })
  assert.equal(imp.exitCode, 0, String(imp.stderr))
  chmodSync(shared, 0o711)
  const image = join(shared, 'images', 'busybox')

  const h1 = await newNode(ws, 'h1')
  const c1 = await newNode(ws, 'c1')
  const c2 = await newNode(ws, 'c2')
  for (const n of [h1, c1, c2]) n.env = { ORC_POD_TUNABLES: JSON.stringify(POD_TUNABLES) }
  h1.up(['--cluster', 'home'])
  c1.up(['--cluster', 'cloud'])
  await Promise.all([h1.ready(), c1.ready()])
  await c2.join(c1.addr, await tokenFrom(c1)).ready()
  await ok(h1, ['federation', 'create', 'lab', '--namespace', 'shared'])
  const token = (await ok(h1, ['federation', 'token', 'lab'])).split('\n')[0]!.trim()
  await ok(c1, ['federation', 'join', '--token', token])
  await waitFor(
    'c2 follows cloud into the federation',
    async () => {
      const v = JSON.parse(await ok(h1, ['federation', 'status', 'lab', '-o', 'json']))
      return v.clusters?.find((c: any) => c.name === 'cloud')?.connected === 2
    },
    30_000,
  )

  // 1. A pod applied on home that may run only in cloud.
  const t0 = Date.now()
  await ok(h1, ['apply', '-f', '-'], manifest('cloud-only', image, markers[0]!, { placement: { clusters: ['cloud'] } }))
  const placed = await waitFor(
    'cloud-only to run on a cloud node',
    async () => {
      const p = await sharedPod(h1, 'cloud-only')
      return p?.status?.phase === 'Running' && /^c[12]@cloud$/.test(p.status.node) ? p : undefined
    },
    20_000,
  )
  t.diagnostic(`pod applied on home running on ${placed.status.node} after ${Date.now() - t0} ms`)
  const wide = await ok(h1, ['get', 'pods', '-n', 'shared', '-o', 'wide'])
  assert.match(wide, new RegExp(`cloud-only\\s+1/1\\s+Running\\s+${placed.status.node}`))
  const why = await ok(h1, ['why', 'pod/cloud-only', '-n', 'shared'])
  assert.match(why, new RegExp(`Running on node ${placed.status.node}`))
  // The pod's status was written by cloud's controllers, in the shared document.
  const hist = JSON.parse(await ok(h1, ['history', 'pod/cloud-only', '-n', 'shared', '-o', 'json'])) as { author: string }[]
  assert.ok(
    hist.some((r) => r.author === 'controller:scheduler@cloud'),
    JSON.stringify(hist.map((r) => r.author)),
  )
  assert.ok(hist.some((r) => r.author === 'controller:lifecycle@cloud'))

  // 2. ha and best-effort pods allowed in both clusters, preferring cloud.
  const both = { placement: { clusters: ['home', 'cloud'], preferClusters: ['cloud'] } }
  await ok(h1, ['apply', '-f', '-'], manifest('mover', image, markers[1]!, { ...both, policy: 'ha', haAfterSeconds: 2 }))
  await ok(h1, ['apply', '-f', '-'], manifest('keeper', image, markers[2]!, both))
  const before = new Map<string, string>()
  for (const name of ['mover', 'keeper']) {
    const p = await waitFor(
      `${name} running in cloud`,
      async () => {
        const x = await sharedPod(h1, name)
        return x?.status?.phase === 'Running' && /@cloud$/.test(x.status.node) ? x : undefined
      },
      20_000,
    )
    before.set(name, p.status.node)
  }

  // 3. Cloud is lost: every cloud agent stops.
  const k0 = Date.now()
  await Promise.all([c1.kill('SIGKILL'), c2.kill('SIGKILL')])
  const moved = await waitFor(
    'the ha pod to run on home',
    async () => {
      const p = await sharedPod(h1, 'mover')
      return p?.status?.phase === 'Running' && p.status.node === 'h1@home' ? p : undefined
    },
    30_000,
  )
  t.diagnostic(`ha pod running on home ${Date.now() - k0} ms after the cloud agents were killed (haAfter 2 s)`)
  assert.equal(moved.status.scheduling.from, before.get('mover'))
  const keeper = await sharedPod(h1, 'keeper')
  assert.equal(keeper?.status?.node, before.get('keeper'), 'the best-effort pod stays bound to its cloud node')
  const whyKeeper = await waitFor(
    'orc why to say the best-effort pod waits for its node',
    async () => {
      const r = await orc(h1.socket, ['why', 'pod/keeper', '-n', 'shared'])
      return /best-effort pod moves when the node is forgotten/.test(r.stdout) ? r.stdout : undefined
    },
    10_000,
  )
  assert.match(whyKeeper, new RegExp(`on node ${before.get('keeper')}`))
  // The pod allowed only in cloud waits (nowhere to go, and best-effort anyway).
  assert.equal((await sharedPod(h1, 'cloud-only'))?.status?.node, placed.status.node)
})
