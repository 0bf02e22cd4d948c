// The data keyring across members, with a virtual clock and fake members: a node without the
// keyring keeps asking until a member that was offline answers; a Secret sealed with a key this
// node lacks makes it fetch that key; another cluster's keyring is refused; a rotation re-seals
// what it can, reports what it cannot, and leaves another cluster's shared Secrets alone.

import assert from 'node:assert/strict'
import { statSync } from 'node:fs'
import { join } from 'node:path'
import { test } from 'node:test'
import pino from 'pino'
import { KeyringDelivery, type KeyringPeers, rotateDataKey } from '../../../src/agent/secret-keys.ts'
import { ClusterKeyring, KEYRING_FILE } from '../../../src/agent/secrets.ts'
import { ManualClock } from '../../../src/effects/index.ts'
import type { MemberView } from '../../../src/mesh/index.ts'
import type { Secret } from '../../../src/model/index.ts'
import { Keyring, keyIdsOf, openSecret, sealSecret } from '../../../src/secrets/index.ts'
import { seededBytes, tempDir, tempStore } from '../../helpers/store.ts'

const silent = pino({ level: 'silent' })
const random = seededBytes(11)

/** The keyring file is written with real I/O: let the event loop run (virtual time stands still) until `cond` holds. */
async function until(clock: ManualClock, what: string, cond: () => boolean): Promise<void> {
  const deadline = Date.now() + 5_000
  for (;;) {
    await clock.advance(0)
    if (cond()) return
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 10))
  }
}

const member = (peerId: string, state: MemberView['state'] = 'alive'): MemberView => ({
  peerId,
  name: peerId,
  addresses: [],
  state,
  lastSeen: null,
  rttMs: null,
  self: false,
})

function fakePeers(rings: Map<string, Keyring | 'offline'>): KeyringPeers & { asked: string[] } {
  const asked: string[] = []
  return {
    asked,
    peerId: 'self',
    members: () => [...rings.keys()].map((p) => member(p)),
    fetchKeyring: async (p) => {
      asked.push(p)
      const r = rings.get(p)
      if (r === undefined || r === 'offline') throw new Error(`dial ${p}: timed out`)
      return r.toJSON()
    },
    offerKeyring: async () => {},
  }
}

function secret(ring: Keyring, name: string, value = `${name}-marker`): Secret {
  return sealSecret(ring, random, { apiVersion: 'orc/v1', kind: 'Secret', metadata: { name, namespace: 'default' }, spec: { data: { v: value } } })
}

async function setup(t: { after(fn: () => unknown): void }, rings: Map<string, Keyring | 'offline'>) {
  const { store, cleanup } = await tempStore()
  const dir = tempDir()
  t.after(cleanup)
  t.after(dir.cleanup)
  const clock = new ManualClock(1_000)
  const keyring = new ClusterKeyring(dir.dir, silent)
  const peers = fakePeers(rings)
  const delivery = new KeyringDelivery({ keyring, store, peers: () => peers, clock, log: silent, retryMs: 500, maxRetryMs: 4_000 })
  t.after(() => delivery.stop())
  return { store, clock, keyring, peers, delivery, dir: dir.dir }
}

test('a node without the keyring keeps asking until a member that was offline answers; the file is 0600', async (t) => {
  const ring = Keyring.generate(random, 1)
  const rings = new Map<string, Keyring | 'offline'>([
    ['m1', 'offline'],
    ['m2', 'offline'],
  ])
  const { clock, keyring, peers, delivery, dir } = await setup(t, rings)
  delivery.start()
  await clock.advance(0)
  assert.equal(keyring.get(), undefined)
  assert.deepEqual(peers.asked.sort(), ['m1', 'm2'], 'every member was asked once')
  await clock.advance(2_000)
  assert.ok(peers.asked.length >= 4, 'and again after the retry delay')
  assert.equal(keyring.get(), undefined)
  rings.set('m2', ring)
  await clock.advance(4_000)
  await until(clock, 'the keyring from m2', () => keyring.get() !== undefined)
  assert.deepEqual(keyring.get()?.toJSON(), ring.toJSON())
  assert.equal(statSync(join(dir, KEYRING_FILE)).mode & 0o777, 0o600)
  const asked = peers.asked.length
  await clock.advance(60_000)
  assert.equal(peers.asked.length, asked, 'it stops asking once it holds what it needs')
})

test('a Secret sealed with a key this node lacks makes it fetch the key; the old key retires once unused', async (t) => {
  const old = Keyring.generate(random, 1)
  const rotated = Keyring.fromJSON(old.toJSON())
  const newId = rotated.rotate(random, 2)
  const rings = new Map<string, Keyring | 'offline'>([['m1', rotated]])
  const { store, clock, keyring, peers, delivery } = await setup(t, rings)
  await keyring.save(old)
  delivery.start()
  await clock.advance(0)
  assert.deepEqual(peers.asked, [], 'nothing missing: nobody asked')
  // A Secret re-sealed under the new key arrives (as replication would bring it).
  await store.apply(secret(rotated, 'db'), { author: 'user:admin', now: 3 })
  await until(clock, 'the new key from m1', () => keyring.get()?.current().id === newId)
  assert.deepEqual(peers.asked, ['m1'])
  assert.deepEqual(Object.fromEntries(openSecret(keyring.get()!, store.get({ kind: 'Secret', namespace: 'default', name: 'db' }) as Secret)), {
    v: Buffer.from('db-marker'),
  })
  await until(clock, 'the old key retired (no Secret uses it)', () => keyring.get()?.get(old.current().id) === undefined)
})

test('a keyring of another cluster is refused and changes nothing', async (t) => {
  const mine = Keyring.generate(random, 1)
  const { keyring, delivery, clock } = await setup(t, new Map())
  await keyring.save(mine)
  await assert.rejects(delivery.provider().offered(Keyring.generate(random, 5).toJSON(), 'm9'), /another cluster/)
  await assert.rejects(delivery.provider().offered({ version: 1, keys: [] }, 'm9'), /keyring: /)
  assert.deepEqual(keyring.get()?.toJSON(), mine.toJSON())
  // A key dated far in the future would stay current through every later rotation: refused.
  const future = Keyring.fromJSON(mine.toJSON())
  future.rotate(random, clock.now() + 3_600_000)
  await assert.rejects(delivery.provider().offered(future.toJSON(), 'm9'), /in the future: refused/)
  assert.deepEqual(keyring.get()?.toJSON(), mine.toJSON())
})

test('a rotation wins over every key the ring holds, even one dated a little ahead (clock skew)', async (t) => {
  const { keyring, delivery, clock } = await setup(t, new Map())
  const ahead = Keyring.generate(random, clock.now() + 5 * 60_000)
  await keyring.save(ahead)
  const r = await rotateDataKey({ delivery, random, now: () => clock.now() }, 'user:admin')
  assert.equal(keyring.get()?.current().id, r.key)
  // Another member still on the old key merges the rotated ring: the new key is current there too.
  const other = Keyring.fromJSON(ahead.toJSON())
  other.merge(keyring.get()!)
  assert.equal(other.current().id, r.key)
})

test('rotation: own Secrets re-sealed, one sealed with a key this node lacks reported, another cluster’s shared Secret left alone', async (t) => {
  const ring = Keyring.generate(random, 1)
  const lost = Keyring.generate(random, 1)
  const { store, clock, keyring, delivery } = await setup(t, new Map())
  await keyring.save(ring)
  const w = { author: 'user:admin', now: 3 }
  await store.apply(secret(ring, 'a'), w)
  await store.apply(secret(ring, 'b'), w)
  const orphan = sealSecret(lost, random, {
    apiVersion: 'orc/v1',
    kind: 'Secret',
    metadata: { name: 'orphan', namespace: 'default' },
    spec: { data: { v: 'x' } },
  })
  await store.apply(orphan, w)
  // The API's store also holds a federation's shared Secret, sealed by the other cluster.
  const theirs = { ...secret(Keyring.generate(random, 1), 'theirs'), metadata: { name: 'theirs', namespace: 'shared' } } as Secret
  const patched: string[] = []
  delivery.useStore({
    list: ((kind: string) => [...store.list('Secret'), theirs].filter((o) => o.kind === kind)) as never,
    patch: (async (ref: { namespace: string; name: string }, fields: never, opts: never) => {
      patched.push(`${ref.namespace}/${ref.name}`)
      return store.patch(ref as never, fields, opts)
    }) as never,
  })
  const r = await rotateDataKey({ delivery, random, now: () => clock.now() }, 'user:admin')
  assert.deepEqual(r.resealed.sort(), ['default/a', 'default/b'])
  assert.deepEqual(patched.sort(), ['default/a', 'default/b'])
  assert.equal(r.failed.length, 1)
  assert.match(r.failed[0]!.error, /default\/orphan key v: sealed with data key [0-9a-f]{16}, which this node does not hold yet/)
  assert.deepEqual(r.retired, [ring.current().id], 'the old key seals nothing any more')
  for (const n of ['a', 'b']) {
    const s = store.get({ kind: 'Secret', namespace: 'default', name: n }) as Secret
    assert.deepEqual([...keyIdsOf(s)], [r.key])
    assert.equal(openSecret(keyring.get()!, s).get('v')?.toString(), `${n}-marker`)
  }
  const hist = await store.history({ kind: 'Secret', namespace: 'default', name: 'a' })
  assert.equal(hist.at(-1)?.reason, 'data key rotated')
  assert.equal(hist.at(-1)?.author, 'user:admin')
})

test('waiting for the keyring at join gives up after its timeout, and asks no faster than the backoff meanwhile', async (t) => {
  const rings = new Map<string, Keyring | 'offline'>([
    ['m1', 'offline'],
    ['m2', 'offline'],
  ])
  const { clock, peers, delivery } = await setup(t, rings)
  delivery.start()
  let outcome: string | undefined
  const waiting = delivery.ready(3_000).then(
    () => (outcome = 'ready'),
    (err: Error) => (outcome = err.message),
  )
  for (let i = 0; i < 40 && outcome === undefined; i++) await clock.advance(100)
  await waiting
  assert.match(outcome ?? '', /no member gave the cluster keyring within 3000 ms/)
  // Rounds at 0, 0.5, 1.5 and 3.5 s (0.5 s doubling), each asking both members.
  assert.ok(peers.asked.length <= 8, `asked ${peers.asked.length} times in 3 s`)
})
