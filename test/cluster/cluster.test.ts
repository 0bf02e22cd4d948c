// A three-node cluster of real agents (separate processes, real libp2p on 127.0.0.1, real LevelDB):
// join through two different members, replication both ways, kill -9 and restart, a node alone,
// remote CLI with and without the credential, and removing a node.

import assert from 'node:assert/strict'
import { existsSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { test } from 'node:test'
import { applyPod, hasPod, type NodeProcess, newNode, nodeNames, orc, podManifest, tokenFrom, Workspace, waitFor } from './helpers.ts'

interface WideRow {
  name: string
  member: string
}

async function wide(node: NodeProcess): Promise<Map<string, WideRow>> {
  const r = await node.cli(['get', 'nodes', '-o', 'wide'])
  if (r.exitCode !== 0) throw new Error(r.stderr)
  const lines = r.stdout.trim().split('\n')
  const header = lines[0]!
  const col = header.indexOf('MEMBER')
  const next = header.indexOf('LAST SEEN')
  const out = new Map<string, WideRow>()
  for (const l of lines.slice(1)) out.set(l.split(/\s+/)[0]!, { name: l.split(/\s+/)[0]!, member: l.slice(col, next).trim() })
  return out
}

test('a cluster of real agents: join, replicate, survive kill -9, work alone, remote CLI, remove a node', async (t) => {
  const ws = new Workspace()
  t.after(() => ws.close())
  const [a, b, c] = [await newNode(ws, 'a'), await newNode(ws, 'b'), await newNode(ws, 'c')]

  await t.test('orc up creates the cluster and says how to join it', async () => {
    await a.up(['--labels', 'zone=lab']).ready()
    // The banner follows the last component's start; the socket answers a moment before.
    await waitFor('the banner', async () => (/Stop with Ctrl-C/.test(a.stdout) ? true : undefined))
    assert.match(a.stdout, /orc token create/)
    assert.match(a.stdout, new RegExp(`orc join 127\\.0\\.0\\.1:${a.port} --token`))
    for (const f of ['peer.key', 'swarm.key', 'cluster.json', 'admin.credential']) {
      assert.equal(statSync(join(a.dataDir, f)).mode & 0o777, 0o600, `${f} is private`)
    }
    const s = JSON.parse((await a.cli(['status', '-o', 'json'])).stdout)
    assert.equal(s.node.name, 'a')
    assert.equal(s.mesh.clusterId, s.node.cluster.id, 'the mesh and the Cluster object share one id')
    assert.deepEqual(s.mesh.addresses, [`/ip4/127.0.0.1/tcp/${a.port}`])
  })

  await t.test('two nodes join, the second through the first joiner; every node lists all three', async () => {
    const tb = await tokenFrom(a)
    b.join(a.addr, tb)
    await b.ready()
    assert.match(b.stdout, /connecting to .*127\.0\.0\.1/)
    assert.match(b.stdout, /syncing: received \d+ revisions, \d+ objects/)
    assert.match(b.stdout, /ready: /)
    // A joined node's root is node-admin: it may not let others in until the admin grants it more.
    const refused = await b.cli(['token', 'create'])
    assert.equal(refused.exitCode, 1)
    assert.match(refused.stderr, /user:root.b may not admin/)
    const grant = 'apiVersion: orc/v1\nkind: RoleBinding\nmetadata:\n  name: root-b\nspec:\n  role: admin\n  users: [root.b]\n'
    assert.equal((await orc(a.socket, ['apply', '-f', '-'], {}, grant)).exitCode, 0)
    await waitFor('b to hold the grant', async () => (await b.cli(['whoami'])).stdout.includes('node-admin, admin'))
    const tc = await tokenFrom(b)
    await c.join(b.addr, tc).ready()
    for (const n of [a, b, c]) {
      await waitFor(`${n.name} to list a, b and c`, async () => (await nodeNames(n)).join() === 'a,b,c')
    }
    const s = JSON.parse((await c.cli(['status', '-o', 'json'])).stdout)
    const sa = JSON.parse((await a.cli(['status', '-o', 'json'])).stdout)
    assert.equal(s.node.cluster.id, sa.node.cluster.id, 'one cluster id everywhere')
    const node = JSON.parse((await a.cli(['get', 'node', 'c', '-o', 'json'])).stdout)
    assert.deepEqual(node.status.addresses, [`/ip4/127.0.0.1/tcp/${c.port}`])
    assert.ok(node.status.capacity.cpu)
  })

  await t.test('get nodes -o wide shows every member alive with its latency', async () => {
    const rows = await waitFor('a to see b and c alive', async () => {
      const w = await wide(a)
      return w.get('b')?.member === 'alive' && w.get('c')?.member === 'alive' ? w : undefined
    })
    assert.equal(rows.get('a')?.member, 'alive (self)')
    const text = (await a.cli(['get', 'nodes', '-o', 'wide'])).stdout
    assert.match(text, /LAST SEEN\s+LATENCY/)
  })

  await t.test('a write on one node appears on every node, in both directions', async () => {
    await applyPod(a, 'from-a')
    await applyPod(c, 'from-c')
    for (const n of [a, b, c]) {
      await waitFor(`${n.name} to have both pods`, async () => (await hasPod(n, 'from-a')) && (await hasPod(n, 'from-c')))
    }
    const h = JSON.parse((await b.cli(['history', 'pod/from-c', '-o', 'json'])).stdout)
    assert.equal(h[0].author, 'user:root.c', "history travels with the object, authored by the joined node c's root")
  })

  await t.test('kill -9 a node, write elsewhere, restart it: it converges', async () => {
    await c.kill('SIGKILL')
    await applyPod(a, 'while-c-down')
    await c.up().ready()
    await waitFor('c to receive the write made while it was down', () => hasPod(c, 'while-c-down'))
  })

  await t.test('alone, a node restarts from its disk, serves reads and writes; they replicate when peers return', async () => {
    await Promise.all([a.kill(), b.kill(), c.kill()])
    await c.up().ready()
    assert.equal(await hasPod(c, 'from-a'), true, 'reads from local state')
    await applyPod(c, 'written-alone')
    assert.deepEqual(await nodeNames(c), ['a', 'b', 'c'])
    await Promise.all([a.up().ready(), b.up().ready()])
    for (const n of [a, b]) await waitFor(`${n.name} to receive c's lone write`, () => hasPod(n, 'written-alone'))
  })

  await t.test('orc --node runs a command on a remote node with the credential, and refuses without one', async () => {
    const ex = await a.cli(['credential', 'export'])
    assert.equal(ex.exitCode, 0, ex.stderr)
    const cred = ex.stdout.trim()
    assert.match(cred, /^orccred1\./)
    // From "elsewhere": no socket at all, only the address and the credential.
    const r = await orc(undefined, ['--node', b.addr, '--credential', cred, 'get', 'nodes', '-o', 'name'])
    assert.equal(r.exitCode, 0, r.stderr)
    assert.deepEqual(r.stdout.trim().split('\n').sort(), ['node/a', 'node/b', 'node/c'])
    const file = join(ws.root, 'cred')
    writeFileSync(file, cred + '\n', { mode: 0o600 })
    const w = await orc(undefined, ['apply', '-f', '-'], { ORC_NODE: c.addr, ORC_CREDENTIAL: file }, podManifest('remote-write'))
    assert.equal(w.exitCode, 0, w.stderr)
    assert.match(w.stdout, /pod\/remote-write created/)
    await waitFor('the remote write to reach a', () => hasPod(a, 'remote-write'))
    const s = await orc(undefined, ['status', '-o', 'json'], { ORC_NODE: c.addr, ORC_CREDENTIAL: file })
    assert.equal(s.exitCode, 0, s.stderr)
    assert.equal(JSON.parse(s.stdout).node.name, 'c')

    const none = await orc(undefined, ['--node', b.addr, 'get', 'nodes'])
    assert.equal(none.exitCode, 1)
    assert.match(none.stderr, /^error: --node needs the cluster's admin credential/)

    const joiner = await b.cli(['credential', 'export'])
    assert.equal(joiner.exitCode, 1)
    assert.match(joiner.stderr, /does not hold the admin credential/, 'b was granted admin, but the key stays on a')

    // The cluster's key but another admin: the node's gater does not know its peer id (and the
    // mesh port takes no strangers, token live or not).
    const body = JSON.parse(Buffer.from(cred.slice('orccred1.'.length), 'base64url').toString())
    const { generateKeyPair } = await import('@libp2p/crypto/keys')
    const { encodeAdminCredential, encodeRemoteCredential } = await import('../../src/mesh/index.ts')
    const other = encodeRemoteCredential(
      { clusterId: body.cluster, psk: new Uint8Array(Buffer.from(body.psk, 'hex')) },
      encodeAdminCredential(await generateKeyPair('Ed25519')),
    )
    const forged = await orc(undefined, ['--node', b.addr, '--credential', other, 'get', 'nodes'])
    assert.equal(forged.exitCode, 1)
    assert.match(forged.stderr, /belongs to no user of this cluster/)
  })

  await t.test('orc node remove: the removed node is refused by every node', async () => {
    const r = await a.cli(['node', 'remove', 'c', '--reason', 'decommissioned'])
    assert.equal(r.exitCode, 0, r.stderr)
    assert.match(r.stdout, /node\/c removed/)
    for (const n of [a, b]) {
      await waitFor(`${n.name} to show c removed`, async () => (await wide(n)).get('c')?.member === 'removed')
    }
    // c keeps running on its own but nobody takes its connections (refused at the gater: it shows
    // them "(indirect)", not connected): it loses sight of a and b.
    await waitFor('c to lose a and b', async () => {
      const w = await wide(c)
      const lost = (n: string) => /^(suspect|dead)\b/.test(w.get(n)?.member ?? '')
      return lost('a') && lost('b')
    })
    // Even after a restart it cannot get back in.
    await c.kill('SIGKILL')
    await c.up().ready()
    await applyPod(c, 'from-removed')
    await applyPod(a, 'after-removal')
    await waitFor('b to receive a write from a member', () => hasPod(b, 'after-removal'))
    assert.equal(await hasPod(b, 'from-removed'), false, 'nothing from the removed node arrives')
    assert.equal(await hasPod(c, 'after-removal'), false, 'nothing reaches the removed node')
    const hist = JSON.parse((await a.cli(['history', 'cluster/default', '-o', 'json'])).stdout)
    assert.match(hist.at(-1).reason, /user:admin removed node c: decommissioned/)
  })

  assert.ok(existsSync(a.dataDir))
})
