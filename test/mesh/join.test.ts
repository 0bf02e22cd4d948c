import assert from 'node:assert/strict'
import { test } from 'node:test'
import { generateIdentity, peerIdOf } from '../../src/mesh/identity.ts'
import { DocReplica, Fixture, seededRandom, waitFor } from './helpers.ts'

test('A creates a cluster, B joins with a token, C joins through B: all see each other alive', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const { mesh: a } = await fx.create('a')
  const phases: string[] = []
  const b = await fx.join('b', a, { onProgress: (p: { phase: string }) => phases.push(p.phase) })
  assert.deepEqual(phases, ['connecting', 'joining', 'admitted', 'ready'])
  assert.equal(b.clusterId, a.clusterId)
  const c = await fx.join('c', b)
  const all = [a, b, c]
  await waitFor('every node sees every other alive', () =>
    all.every((m) => m.members().length === 3 && m.members().every((x) => x.state === 'alive' && x.lastSeen !== null)),
  )
  for (const m of all) {
    assert.deepEqual(
      m.members().map((x) => x.name),
      ['a', 'b', 'c'],
    )
  }
  // C learned A transitively and connected to it.
  await waitFor('C connected to A', () => c.libp2p.getConnections().some((x) => x.remotePeer.toString() === a.peerId))
})

test('a joiner takes the issuer store in once: the issuer starts no sync session beside the one the joiner starts', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const ra = new DocReplica()
  for (let i = 0; i < 200; i++) ra.set(`k${i}`, 'x'.repeat(200))
  const { mesh: a } = await fx.create('a', { scopes: { cluster: ra } })
  // The case that doubled the work: the issuer has the lower peer id, the side that starts
  // anti-entropy on a new connection.
  let seed = 1000
  while (peerIdOf(await generateIdentity(seededRandom(seed))) <= a.peerId) seed++
  const rb = new DocReplica()
  let sessions = 0
  let received = 0
  a.on('sync:done', () => sessions++)
  const b = await fx.join('b', a, { scopes: { cluster: rb }, random: seededRandom(seed) })
  assert.ok(b.peerId > a.peerId)
  b.on('sync:done', (r) => (received += r.receivedBytes))
  assert.equal(rb.get('k199'), 'x'.repeat(200), 'the join brought the store in')
  // Any session the issuer started on the new connection would be over well within this.
  await new Promise((r) => setTimeout(r, 1500))
  assert.equal(sessions, 1, 'the issuer took part in one sync session with the joiner (its own)')
  assert.ok(received < 1000, `the joiner received ${received} more bytes of sync data after its join`)
})
