import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import { memoryChannelPair } from '../../../src/mesh/framing.ts'
import { initiateSync, respondSync } from '../../../src/mesh/sync.ts'
import { isPeerFault, Tag, writeBytes, writeJson } from '../../../src/mesh/wire.ts'
import { DocReplica, SEED } from '../../mesh/helpers.ts'

const limits = { maxFrameBytes: 256, maxSyncBytes: 1 << 20 }
const members = [{ peerId: 'p1', name: 'one', addresses: [] }]

async function session(a: DocReplica, b: DocReplica) {
  const [ca, cb] = memoryChannelPair(limits.maxFrameBytes)
  return Promise.all([initiateSync(ca, 'cluster', a, members, limits), respondSync(cb, (s) => (s === 'cluster' ? b : undefined), [], limits)])
}

test('one session converges both sides, in chunks when large', async () => {
  const a = new DocReplica(),
    b = new DocReplica()
  a.set('x', 'a'.repeat(2000))
  b.set('y', 1)
  const [ra, rb] = await session(a, b)
  assert.equal(b.get('x'), 'a'.repeat(2000))
  assert.equal(a.get('y'), 1)
  assert.ok(ra.sentBytes > limits.maxFrameBytes) // needed several chunk frames
  assert.deepEqual(rb.remoteMembers, members)
})

test('replicas converge whatever writes and lost messages happen, given one final sync per pair', async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.array(fc.record({ node: fc.nat(2), key: fc.constantFrom('a', 'b', 'c', 'd'), v: fc.nat(100), deliver: fc.boolean() }), { maxLength: 30 }),
      async (ops) => {
        const rs = [new DocReplica(), new DocReplica(), new DocReplica()]
        // gossip: each write is delivered to the others only if `deliver`
        const pending: { to: number; u: Uint8Array }[] = []
        rs.forEach((r, i) => r.onLocalUpdate((u) => pending.push(...[0, 1, 2].filter((j) => j !== i).map((to) => ({ to, u })))))
        for (const op of ops) {
          rs[op.node].set(op.key, op.v)
          const batch = pending.splice(0)
          if (op.deliver) for (const m of batch) await rs[m.to].applyRemote(m.u)
        }
        await session(rs[0], rs[1])
        await session(rs[1], rs[2])
        await session(rs[0], rs[1])
        const snap = (r: DocReplica) => JSON.stringify(Object.entries(r.map.toJSON()).sort()) // key order follows arrival order
        assert.equal(snap(rs[0]), snap(rs[1]))
        assert.equal(snap(rs[1]), snap(rs[2]))
      },
    ),
    { seed: SEED, numRuns: 40 },
  )
})

test('garbage in a sync session is a peer fault; an unknown scope is refused', async () => {
  const b = new DocReplica()
  const [ca, cb] = memoryChannelPair(limits.maxFrameBytes)
  const responder = respondSync(cb, () => b, [], limits)
  await writeJson(ca, Tag.hello, { v: 1, scope: 'cluster', members: [] })
  await writeBytes(ca, Tag.state, new Uint8Array([0]))
  for (;;) {
    const f = await ca.read()
    if (f === null || f[0] === Tag.end) break
  }
  await writeBytes(ca, Tag.chunk, new Uint8Array([0xff, 0xff, 0xff, 9]))
  await writeBytes(ca, Tag.end, new Uint8Array(0))
  await assert.rejects(responder, (err) => isPeerFault(err))

  const [c1, c2] = memoryChannelPair()
  const r2 = respondSync(c2, () => undefined, [], limits)
  await assert.rejects(initiateSync(c1, 'nope', new DocReplica(), [], limits), /scope nope is not replicated here/)
  await assert.rejects(r2, /unknown scope/)

  const [d1, d2] = memoryChannelPair()
  const r3 = respondSync(d2, () => b, [], limits)
  await d1.write(new Uint8Array([Tag.hello, 0x7b]))
  await assert.rejects(r3, (err) => isPeerFault(err))
})
