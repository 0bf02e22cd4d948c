// Two real clusters of two agents each (separate processes, `orc up` / `orc join`), federated with
// the real CLI: `orc federation create/token/join/status/leave`. Shared objects reach every node
// of both clusters with their cluster and author in the history; private ones stay home; after
// `leave` nothing crosses any more and the copies stay.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { execa } from 'execa'
import { BIN, type NodeProcess, newNode, podManifest, ROOT, tokenFrom, Workspace, waitFor } from '../cluster/helpers.ts'

async function ok(n: NodeProcess, args: string[]): Promise<string> {
  const r = await n.cli(args)
  if (r.exitCode !== 0) throw new Error(`orc ${args.join(' ')} on ${n.name} failed (${r.exitCode}): ${r.stderr}${r.stdout}`)
  return r.stdout
}

async function applyIn(n: NodeProcess, ns: string, name: string): Promise<void> {
  const r = await execa(process.execPath, [BIN, 'apply', '-n', ns, '-f', '-'], {
    cwd: ROOT,
    reject: false,
    input: podManifest(name),
    env: { ORC_SOCKET: n.socket, USER: n.name.startsWith('h') ? 'alice' : 'bob', ORC_NODE: '', ORC_CREDENTIAL: '' },
  })
  if (r.exitCode !== 0) throw new Error(`apply ${ns}/${name} on ${n.name}: ${r.stderr}`)
}

async function has(n: NodeProcess, ns: string, name: string): Promise<boolean> {
  return (await n.cli(['get', 'pod', name, '-n', ns, '-o', 'name'])).exitCode === 0
}

test('two clusters of two agents: federate, share a namespace, see who wrote what, leave', { timeout: 120_000 }, async (t) => {
  const ws = new Workspace()
  t.after(() => ws.close())
  const h1 = await newNode(ws, 'h1')
  const h2 = await newNode(ws, 'h2')
  const c1 = await newNode(ws, 'c1')
  const c2 = await newNode(ws, 'c2')
  h1.up(['--cluster', 'home'])
  c1.up(['--cluster', 'cloud'])
  await Promise.all([h1.ready(), c1.ready()])
  h2.join(h1.addr, await tokenFrom(h1))
  c2.join(c1.addr, await tokenFrom(c1))
  await Promise.all([h2.ready(), c2.ready()])

  const t0 = Date.now()
  const created = await ok(h1, ['federation', 'create', 'lab', '--namespace', 'shared'])
  assert.match(created, /federation\/lab created .* cluster home shares shared/)
  const token = (await ok(h1, ['federation', 'token', 'lab'])).split('\n')[0]!.trim()
  assert.match(token, /^orcfed2\./)
  const joined = await ok(c1, ['federation', 'join', '--token', token])
  assert.match(joined, /joined federation\/lab as cluster cloud; shared namespaces: shared/)
  // The token admitted the cluster: c2 (never given a token) follows, and so does h2.
  await waitFor(
    'every node of both clusters in the federation, seeing both clusters',
    async () => {
      for (const n of [h1, h2, c1, c2]) {
        const r = await n.cli(['federation', 'status', 'lab', '-o', 'json'])
        if (r.exitCode !== 0) return false
        const v = JSON.parse(r.stdout)
        if (v.clusters === undefined || v.clusters.length !== 2) return false
      }
      return true
    },
    40_000,
  )
  t.diagnostic(`four nodes of two clusters federated ${Date.now() - t0} ms after create`)

  // A shared write on h2 reaches every node of cloud; a private one does not.
  const w0 = Date.now()
  await applyIn(h2, 'shared', 'web')
  await applyIn(h2, 'default', 'secret')
  await waitFor('shared/web on c1 and c2', async () => (await has(c1, 'shared', 'web')) && (await has(c2, 'shared', 'web')), 20_000)
  t.diagnostic(`shared write on h2 visible on both cloud nodes after ${Date.now() - w0} ms`)
  const hist = await ok(c2, ['history', 'pod/web', '-n', 'shared', '-o', 'json'])
  // The author is the socket's user: h2 joined home, so its root (root.h2), tagged with its cluster.
  assert.equal(JSON.parse(hist)[0].author, 'user:root.h2@home')
  await applyIn(c2, 'shared', 'api')
  await waitFor('shared/api on h1', () => has(h1, 'shared', 'api'), 20_000)
  assert.equal(JSON.parse(await ok(h1, ['history', 'pod/api', '-n', 'shared', '-o', 'json']))[0].author, 'user:root.c2@cloud')
  assert.equal(await has(c1, 'default', 'secret'), false)
  assert.equal(await has(c2, 'default', 'secret'), false)

  // A restarted node comes back into the federation from its own disk (same port, same identity).
  await h2.kill('SIGTERM')
  await h2.up().ready()
  await applyIn(c1, 'shared', 'while-restarted')
  await waitFor('h2 back in the federation and receiving', () => has(h2, 'shared', 'while-restarted'), 20_000)

  const list = await ok(c2, ['federation', 'list'])
  assert.match(list, /lab\s+cloud\s+shared\s+(cloud,home|home,cloud)\s+joined/)

  // Leave from c1: every cloud node stops, home drops cloud, cloud keeps its copies.
  assert.match(await ok(c1, ['federation', 'leave', 'lab']), /left federation\/lab/)
  await waitFor(
    'cloud out of the federation on every node',
    async () => {
      for (const n of [c1, c2]) if (JSON.parse(await ok(n, ['federation', 'list', '-o', 'json'])).length !== 0) return false
      for (const n of [h1, h2]) if (JSON.parse(await ok(n, ['federation', 'status', 'lab', '-o', 'json'])).clusters.length !== 1) return false
      return true
    },
    20_000,
  )
  assert.equal(await has(c2, 'shared', 'web'), true, 'cloud keeps its copy of shared/web')
  await applyIn(h1, 'shared', 'after-leave')
  await applyIn(c1, 'shared', 'cloud-only')
  await waitFor('after-leave on h2 (home still replicates inside)', () => has(h2, 'shared', 'after-leave'), 20_000)
  await waitFor('cloud-only on c2 (cloud keeps its namespace as its own)', () => has(c2, 'shared', 'cloud-only'), 20_000)
  assert.equal(await has(c2, 'shared', 'after-leave'), false)
  assert.equal(await has(h2, 'shared', 'cloud-only'), false)
})
