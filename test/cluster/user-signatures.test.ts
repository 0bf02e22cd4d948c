// Users' signatures on their writes with real agents (docs/security.md, "Users' signatures on their
// writes"): a remote CLI write taken by one node lands on the other with the user's signed request,
// which that replica verified; with the cluster's policy on, a user write that cannot carry the
// signature is refused where it is made, and the local sockets keep working.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { newNode, orc, podManifest, tokenFrom, Workspace, waitFor } from './helpers.ts'

test("a remote CLI write carries the user's signature to every replica; the policy refuses user writes without it", async (t) => {
  const ws = new Workspace()
  t.after(() => ws.close())
  const [a, b] = [await newNode(ws, 'a'), await newNode(ws, 'b')]
  await a.up().ready()
  await b.join(a.addr, await tokenFrom(a)).ready()
  const remote = (cred: string, args: string[], input = '') => orc(undefined, ['--node', b.addr, '--credential', cred, ...args], {}, input)
  const eddie = (await a.cli(['user', 'add', 'eddie', '--role', 'edit'])).stdout.trim()
  assert.match(eddie, /^orccred1\./)
  await waitFor('b to know eddie', async () => (await remote(eddie, ['whoami'])).stdout.startsWith('user:eddie'), 60_000)
  const history = async (node: typeof a, ref: string) => JSON.parse((await node.cli(['history', ref, '-o', 'json'])).stdout)

  await t.test('an apply through b lands on a with the signature, which a checked', async () => {
    const r = await remote(eddie, ['apply', '-f', '-', '--reason', 'signed'], podManifest('by-eddie'))
    assert.equal(r.exitCode, 0, r.stderr)
    await waitFor('the write to reach a', async () => (await a.cli(['get', 'pod/by-eddie'])).exitCode === 0, 60_000)
    const [rev] = await history(a, 'pod/by-eddie')
    assert.equal(rev.author, 'user:eddie')
    assert.ok(rev.userSigned, `a holds the user's signature: ${JSON.stringify(rev)}`)
    const bPeer = JSON.parse((await b.cli(['get', 'node', 'b', '-o', 'json'])).stdout).status?.peerId
    if (bPeer !== undefined) assert.equal(rev.userSigned.node, bPeer, 'signed for the node that took it')
    // A local write (a's socket, user:admin) is the node's word alone.
    const l = await orc(a.socket, ['apply', '-f', '-'], {}, podManifest('by-admin'))
    assert.equal(l.exitCode, 0, l.stderr)
    assert.equal((await history(a, 'pod/by-admin'))[0].userSigned, undefined)
  })

  await t.test('with spec.userSignatures.required: unsigned user writes are refused where they are made; signed and socket writes replicate', async () => {
    const cluster = JSON.parse((await a.cli(['get', 'clusters', '-o', 'json'])).stdout)
    const c = Array.isArray(cluster.items) ? cluster.items[0] : Array.isArray(cluster) ? cluster[0] : cluster
    const manifest = {
      apiVersion: 'orc/v1',
      kind: 'Cluster',
      metadata: { name: c.metadata.name },
      spec: { ...c.spec, userSignatures: { required: true, since: new Date().toISOString().replace(/\.\d+Z$/, 'Z'), adminSocketNodes: ['a'] } },
    }
    const on = await orc(a.socket, ['apply', '-f', '-', '--reason', 'require users signatures'], {}, JSON.stringify(manifest))
    assert.equal(on.exitCode, 0, on.stderr)
    await waitFor(
      'b to hold the policy',
      async () => (await b.cli(['get', `cluster/${c.metadata.name}`, '-o', 'json'])).stdout.includes('"required": true'),
      60_000,
    )

    // A signed remote write and delete still go through and replicate.
    const r = await remote(eddie, ['apply', '-f', '-'], podManifest('signed-2'))
    assert.equal(r.exitCode, 0, r.stderr)
    await waitFor('signed-2 on a', async () => (await a.cli(['get', 'pod/signed-2'])).exitCode === 0, 60_000)
    assert.equal((await remote(eddie, ['apply', '-f', '-'], podManifest('signed-2', 'busybox2'))).exitCode, 0)
    const d = await remote(eddie, ['delete', 'pod/by-eddie'])
    assert.equal(d.exitCode, 0, d.stderr)
    await waitFor('the delete on a', async () => (await a.cli(['get', 'pod/by-eddie'])).exitCode !== 0, 60_000)
    assert.ok((await history(a, 'pod/by-eddie')).at(-1).userSigned, 'the delete carries the signature')

    // A rollback cannot carry it (its content comes from history, not from the request): refused at b.
    const rb = await remote(eddie, ['rollback', 'pod/signed-2'])
    assert.equal(rb.exitCode, 1)
    assert.match(rb.stderr, /without the user's signature/)

    // The sockets: root.b on b, admin on a (listed) — their writes replicate.
    assert.equal((await orc(b.socket, ['apply', '-f', '-'], {}, podManifest('by-root-b'))).exitCode, 0)
    await waitFor('by-root-b on a', async () => (await a.cli(['get', 'pod/by-root-b'])).exitCode === 0, 60_000)
    assert.equal((await orc(a.socket, ['apply', '-f', '-'], {}, podManifest('by-admin-2'))).exitCode, 0)
    await waitFor('by-admin-2 on b', async () => (await b.cli(['get', 'pod/by-admin-2'])).exitCode === 0, 60_000)
    // Nothing was refused on receipt.
    const events = await a.cli(['events', '-o', 'json'])
    assert.ok(!events.stdout.includes('user_unsigned') && !events.stdout.includes('user_signature'), events.stdout.slice(0, 2000))
  })

  await t.test('a node that joins later takes the whole history: signed records, socket writes, unsigned ones from before `since`', async () => {
    const c = await newNode(ws, 'c')
    await c.join(a.addr, await tokenFrom(a)).ready()
    for (const pod of ['signed-2', 'by-root-b', 'by-admin-2', 'by-admin'])
      await waitFor(`${pod} on c`, async () => (await c.cli(['get', `pod/${pod}`])).exitCode === 0, 60_000)
    assert.ok((await history(c, 'pod/signed-2'))[0].userSigned, 'c verified and kept the signature')
    const events = await c.cli(['events', '-o', 'json'])
    assert.ok(!events.stdout.includes('UpdateRefused'), events.stdout.slice(0, 2000))
  })
})
