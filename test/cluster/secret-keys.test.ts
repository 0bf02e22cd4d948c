// The cluster data key across real agents (separate processes, real libp2p, real LevelDB): every
// joined node ends `orc join` with the keyring (0600, the same keys) and opens a Secret sealed
// elsewhere; a rotation while a node is stopped re-seals every Secret under the new key, and the
// stopped node fetches that key from a member when it comes back; a removed node gets nothing.

import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { existsSync, readFileSync, rmSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { test } from 'node:test'
import type { Secret } from '../../src/model/index.ts'
import { Keyring, keyIdsOf, openSecret, sealSecret } from '../../src/secrets/index.ts'
import { type NodeProcess, newNode, nodeNames, orc, tokenFrom, Workspace, waitFor } from './helpers.ts'

const KEYRING = 'secrets.keyring'

function ringOf(n: NodeProcess): Keyring | undefined {
  const path = join(n.dataDir, KEYRING)
  if (!existsSync(path)) return undefined
  return Keyring.fromJSON(JSON.parse(readFileSync(path, 'utf8')))
}

async function secretOn(n: NodeProcess, name: string): Promise<Secret | undefined> {
  try {
    return (await n.client.call<{ object: Secret }>('GET', `/v1/objects/Secret/default/${name}`)).object
  } catch {
    return undefined
  }
}

/** The Secret's values opened with the node's own keyring file, or undefined when they do not open (yet). */
async function openedOn(n: NodeProcess, name: string): Promise<Record<string, string> | undefined> {
  const ring = ringOf(n)
  const s = await secretOn(n, name)
  if (ring === undefined || s === undefined) return undefined
  try {
    return Object.fromEntries([...openSecret(ring, s)].map(([k, v]) => [k, v.toString('utf8')]))
  } catch {
    return undefined
  }
}

test('the cluster data key reaches every member, rotates with a node offline, and never reaches a removed node', async (t) => {
  const ws = new Workspace()
  t.after(() => ws.close())
  const [a, b, c] = [await newNode(ws, 'a'), await newNode(ws, 'b'), await newNode(ws, 'c')]
  await a.up().ready()

  await t.test('orc join ends with the keyring on disk, 0600, the same keys as the creator', async () => {
    await b.join(a.addr, await tokenFrom(a)).ready()
    await c.join(a.addr, await tokenFrom(a)).ready()
    for (const n of [a, b, c]) await waitFor(`${n.name} to list a, b and c`, async () => (await nodeNames(n)).join() === 'a,b,c')
    const ra = ringOf(a)!
    for (const n of [b, c]) {
      assert.match(n.stdout, /received the cluster data key/, `${n.name}'s join says so`)
      assert.equal(statSync(join(n.dataDir, KEYRING)).mode & 0o777, 0o600, `${n.name}'s keyring is private`)
      assert.deepEqual(ringOf(n)!.toJSON(), ra.toJSON(), `${n.name} holds the same keyring`)
    }
  })

  let firstKey = ''
  await t.test('a Secret sealed on one node opens on a node that joined', async () => {
    const ring = ringOf(a)!
    firstKey = ring.current().id
    const sealed = sealSecret(ring, (n) => new Uint8Array(randomBytes(n)), {
      apiVersion: 'orc/v1',
      kind: 'Secret',
      metadata: { name: 'db', namespace: 'default' },
      spec: { data: { password: 'hunter2-marker' } },
    })
    const r = await orc(a.socket, ['apply', '-f', '-'], {}, JSON.stringify(sealed))
    assert.equal(r.exitCode, 0, r.stderr)
    assert.deepEqual(await waitFor('c to open the Secret', () => openedOn(c, 'db')), { password: 'hunter2-marker' })
  })

  let newKey = ''
  await t.test('rotate-key with c stopped: every Secret re-sealed under the new key, old key retired, b receives it', async () => {
    await c.kill('SIGTERM')
    const denied = await b.cli(['secret', 'rotate-key'])
    assert.equal(denied.exitCode, 1, 'a joined node root (node-admin) may not rotate')
    assert.match(denied.stderr, /may not admin Secret/)
    const r = await a.cli(['secret', 'rotate-key', '-o', 'json'])
    assert.equal(r.exitCode, 0, r.stderr)
    const answer = JSON.parse(r.stdout)
    newKey = answer.key
    assert.notEqual(newKey, firstKey)
    assert.deepEqual(answer.resealed, ['default/db'])
    assert.deepEqual(answer.retired, [firstKey], 'no Secret uses the old key any more')
    assert.deepEqual(answer.failed, [])
    const s = (await secretOn(a, 'db'))!
    assert.deepEqual([...keyIdsOf(s)], [newKey])
    assert.deepEqual(ringOf(a)!.ids(), [newKey])
    const hist = JSON.parse((await a.cli(['history', 'secret/db', '-o', 'json'])).stdout)
    assert.equal(hist.at(-1).reason, 'data key rotated')
    assert.equal(hist.at(-1).author, 'user:admin')
    await waitFor('b to hold the new key and open the re-sealed Secret', async () => ringOf(b)?.current().id === newKey && (await openedOn(b, 'db')))
  })

  await t.test('c comes back: it fetches the new key from a member and opens the re-sealed Secret', async () => {
    assert.equal(ringOf(c)!.get(newKey), undefined, 'c was offline: it lacks the new key')
    await c.up().ready()
    assert.deepEqual(
      await waitFor('c to open the re-sealed Secret', async () => {
        const s = await secretOn(c, 'db')
        return s !== undefined && keyIdsOf(s).has(newKey) ? openedOn(c, 'db') : undefined
      }),
      { password: 'hunter2-marker' },
    )
    assert.equal(ringOf(c)!.current().id, newKey)
    await waitFor('c to retire the old key once its Secrets no longer use it', () => ringOf(c)!.get(firstKey) === undefined)
    assert.equal(statSync(join(c.dataDir, KEYRING)).mode & 0o777, 0o600)
  })

  await t.test('a removed node cannot fetch the keyring', async () => {
    const r = await a.cli(['node', 'remove', 'c'])
    assert.equal(r.exitCode, 0, r.stderr)
    await c.kill('SIGKILL')
    rmSync(join(c.dataDir, KEYRING))
    c.env = { ORC_LOG_LEVEL: 'info' }
    let rounds = 0
    c.onStderrLine = (l) => {
      if (l.includes('waiting for the cluster keyring from a member')) rounds++
    }
    await c.up().ready()
    await waitFor('c to have asked every member and been refused, twice', () => rounds >= 2, 30_000)
    assert.equal(existsSync(join(c.dataDir, KEYRING)), false, 'no member gave c the keyring')
  })
})
