// Identities and roles with real agents: users with their own keys over the remote CLI, roles
// enforced on every request, the author derived from the credential, and a joined node's root
// that cannot evict the node that created the cluster.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { newNode, orc, podManifest, tokenFrom, Workspace, waitFor } from './helpers.ts'

test('users, roles and derived authors across a two-node cluster', async (t) => {
  const ws = new Workspace()
  t.after(() => ws.close())
  const [a, b] = [await newNode(ws, 'a'), await newNode(ws, 'b')]
  await a.up().ready()
  await b.join(a.addr, await tokenFrom(a)).ready()
  const remote = (cred: string, args: string[], input = '') => orc(undefined, ['--node', b.addr, '--credential', cred, ...args], {}, input)

  await t.test('a member that just joined cannot remove the node that created the cluster from its own socket', async () => {
    const who = await b.cli(['whoami'])
    assert.match(who.stdout, /^user:root.b \(roles: node-admin; via socket\)/)
    const r = await b.cli(['node', 'remove', 'a', '--reason', 'takeover'])
    assert.equal(r.exitCode, 1)
    assert.match(r.stderr, /^error: user:root.b may not admin Node in cluster scope/)
    assert.equal((await b.cli(['user', 'add', 'mallory', '--role', 'admin'])).exitCode, 1, 'nor make itself an admin')
    assert.equal((await a.cli(['get', 'node', 'a', '-o', 'json'])).exitCode, 0)
    assert.match((await a.cli(['whoami'])).stdout, /^user:admin \(roles: admin; via socket\)/)
  })

  let vera = ''
  let eddie = ''
  await t.test('orc user add prints a credential once; the store keeps only the public key', async () => {
    const v = await a.cli(['user', 'add', 'vera', '--role', 'view'])
    assert.equal(v.exitCode, 0, v.stderr)
    vera = v.stdout.trim()
    assert.match(vera, /^orccred1\./)
    assert.match(v.stderr, /shown once/)
    eddie = (await a.cli(['user', 'add', 'eddie', '--role', 'edit'])).stdout.trim()
    const u = JSON.parse((await a.cli(['get', 'user', 'eddie', '-o', 'json'])).stdout)
    assert.ok(!JSON.stringify(u).includes(JSON.parse(Buffer.from(eddie.slice(9), 'base64url').toString()).admin.slice(10)), 'no private key in the store')
    const list = await a.cli(['user', 'list'])
    assert.match(list.stdout, /^admin +admin /m)
    assert.match(list.stdout, /^eddie +edit /m)
    assert.match(list.stdout, /^vera +view /m)
    // b learns the users by replication; the remote API of b knows them then.
    await waitFor('b to know eddie', async () => (await remote(eddie, ['whoami'])).stdout.startsWith('user:eddie (roles: edit; via remote)'))
  })

  await t.test('a view user reads but cannot apply; an edit user applies as itself but cannot remove nodes, add users or stop an agent', async () => {
    assert.equal((await remote(vera, ['get', 'nodes', '-o', 'name'])).exitCode, 0)
    const v = await remote(vera, ['apply', '-f', '-'], podManifest('by-vera'))
    assert.equal(v.exitCode, 1)
    assert.match(v.stderr, /user:vera may not apply Pod in namespace default/)

    const e = await remote(eddie, ['apply', '-f', '-', '--reason', 'ship it'], podManifest('by-eddie'))
    assert.equal(e.exitCode, 0, e.stderr)
    await waitFor('the write to reach a', async () => (await a.cli(['get', 'pod/by-eddie'])).exitCode === 0)
    const hist = JSON.parse((await a.cli(['history', 'pod/by-eddie', '-o', 'json'])).stdout)
    assert.equal(hist[0].author, 'user:eddie', 'history shows the author derived from the credential')
    assert.equal(hist[0].reason, 'ship it')

    const forged = await remote(eddie, ['apply', '-f', '-', '--author', 'controller:scheduler'], podManifest('by-eddie'))
    assert.equal(forged.exitCode, 1)
    assert.match(forged.stderr, /--author is no longer accepted/)
    for (const args of [
      ['node', 'remove', 'a'],
      ['user', 'add', 'x', '--role', 'admin'],
      ['token', 'create'],
    ]) {
      const r = await remote(eddie, args)
      assert.equal(r.exitCode, 1, args.join(' '))
      assert.match(r.stderr, /user:eddie may not admin/, args.join(' '))
    }
    // `orc down` refuses --node itself; the API behind it refuses the edit user too.
    const { callRemoteApi, decodeRemoteCredential } = await import('../../src/mesh/index.ts')
    const down = await callRemoteApi({
      addrs: [`/ip4/127.0.0.1/tcp/${b.port}`],
      credential: decodeRemoteCredential(eddie),
      req: { method: 'POST', path: '/v1/down' },
    })
    assert.equal(down.status, 403)
    assert.match(JSON.stringify(down.body), /user:eddie may not admin any kind in every namespace/)
    assert.equal((await b.cli(['status'])).exitCode, 0, 'b still runs')
  })

  await t.test('rotate invalidates the old key; remove refuses the credential', async () => {
    const r = await a.cli(['user', 'rotate', 'eddie'])
    assert.equal(r.exitCode, 0, r.stderr)
    const fresh = r.stdout.trim()
    await waitFor('b to refuse the old key', async () => /belongs to no user of this cluster/.test((await remote(eddie, ['get', 'nodes'])).stderr))
    assert.equal((await remote(fresh, ['get', 'nodes'])).exitCode, 0)
    assert.equal((await a.cli(['user', 'remove', 'vera'])).exitCode, 0)
    await waitFor('b to refuse the removed user', async () => /belongs to no user of this cluster/.test((await remote(vera, ['get', 'nodes'])).stderr))
    assert.match((await a.cli(['user', 'remove', 'admin'])).stderr, /cannot be removed/)
  })

  await t.test('a key given --expires is refused by name once it expires, on every node; rotate gives a new one; a bad --expires stores nothing', async () => {
    const long = await a.cli(['user', 'add', 'lena', '--role', 'view', '--expires', '30d'])
    assert.equal(long.exitCode, 0, long.stderr)
    assert.match(long.stderr, /it expires at 20[0-9]{2}-/)
    const lena = long.stdout.trim()
    await waitFor('b to know lena', async () => /credential expires at 20[0-9]{2}-.*Z\)/.test((await remote(lena, ['whoami'])).stdout))
    const list = (await a.cli(['user', 'list'])).stdout
    assert.match(list, /^lena +view +\S+ +20[0-9]{2}-[0-9-]+T/m)
    assert.match(list, /^eddie +edit +\S+ +never$/m)
    const short = await a.cli(['user', 'add', 'tess', '--role', 'edit', '--expires', '2s'])
    assert.equal(short.exitCode, 0, short.stderr)
    const tess = short.stdout.trim()
    for (const via of [a, b]) {
      const refused = await waitFor(`${via.name} to refuse the expired key by name`, async () => {
        const r = await orc(undefined, ['--node', via.addr, '--credential', tess, 'get', 'nodes'])
        return /expired at/.test(r.stderr) ? r : undefined
      })
      assert.equal(refused.exitCode, 1)
      assert.match(refused.stderr, /the credential of user tess expired at 20[0-9-]+T[0-9:.]+Z \(an admin gives it a new one: orc user rotate tess\)/)
    }
    const renewed = await a.cli(['user', 'rotate', 'tess', '--expires', '1h'])
    assert.equal(renewed.exitCode, 0, renewed.stderr)
    await waitFor('b to accept the new key', async () => (await remote(renewed.stdout.trim(), ['get', 'nodes'])).exitCode === 0)
    for (const [flag, msg] of [
      ['yesterday', /--expires "yesterday": a duration \(90d, 12h\) or a UTC time/],
      ['2020-01-01T00:00:00Z', /expiresAt 2020-01-01T00:00:00.000Z is not in the future/],
      ['4000d', /at most ten years/],
    ] as const) {
      const bad = await a.cli(['user', 'add', 'never-made', '--role', 'view', '--expires', flag])
      assert.equal(bad.exitCode, 1, flag)
      assert.match(bad.stderr, msg)
    }
    assert.equal((await a.cli(['get', 'user', 'never-made'])).exitCode, 1, 'no User stored')
    assert.equal((await a.cli(['get', 'rolebinding', 'never-made'])).exitCode, 1, 'no RoleBinding stored')
  })

  await t.test("the cluster's first admin credential works as user:admin until admin's key is rotated", async () => {
    const cred = (await a.cli(['credential', 'export'])).stdout.trim()
    assert.match((await remote(cred, ['whoami'])).stdout, /^user:admin \(roles: admin; via remote\)/)
    const next = (await a.cli(['user', 'rotate', 'admin'])).stdout.trim()
    await waitFor('b to refuse the first key', async () => (await remote(cred, ['get', 'nodes'])).exitCode === 1)
    assert.match((await remote(next, ['whoami'])).stdout, /^user:admin/)
    const stale = await a.cli(['credential', 'export'])
    assert.equal(stale.exitCode, 1)
    assert.match(stale.stderr, /retired by 'orc user rotate admin'/)
  })
})
