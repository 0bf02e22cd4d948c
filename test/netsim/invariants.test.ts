// The simulator's convergence probe must see replication state, not only current objects: a write
// that lost a concurrent-edit conflict leaves no trace in the objects, yet its Yjs update and its
// revision record must still reach every replica (netsim partition --nodes 30 --seed 1009 was
// declared converged while one acknowledged revision was still spreading by anti-entropy).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { digest, storesAgree } from '../../netsim/invariants.ts'
import { Simulator } from '../../netsim/sim.ts'

test('stores holding the same objects but not the same revisions do not count as converged', async () => {
  const sim = new Simulator({ seed: 1, nodes: 4 })
  await sim.start() // no events are run: the test delivers every message itself
  const [a, b, c, d] = sim.nodes.map((n) => n.store!)
  const msgs: Uint8Array[] = []
  for (const s of [a!, b!]) s.onLocalUpdate((u) => msgs.push(u))
  const pod = (by: string) => ({
    apiVersion: 'orc/v1',
    kind: 'Pod',
    metadata: { name: 'shared', namespace: 'w', labels: { by } },
    spec: { containers: [{ name: 'main', image: '/images/app' }] },
  })
  // Two concurrent creations of one object: one wins on every replica, the other is history only.
  const ra = await a!.apply(pod('a') as never, { author: 'user:netsim', now: 1 })
  const rb = await b!.apply(pod('b') as never, { author: 'user:netsim', now: 1 })
  const [ma, mb] = msgs as [Uint8Array, Uint8Array]
  await a!.applyRemote(mb)
  await b!.applyRemote(ma)
  await c!.applyRemote(ma)
  await c!.applyRemote(mb)
  const winner = a!.get({ kind: 'Pod', namespace: 'w', name: 'shared' })!.metadata.revisionId
  const [win, lose] = winner === ra.revision!.id ? [ma, mb] : [mb, ma]
  assert.ok([ra.revision!.id, rb.revision!.id].includes(winner))
  // d sees only the winning write: its objects are already everyone's, its log is not.
  await d!.applyRemote(win)
  assert.equal(new Set([a, b, c, d].map((s) => digest(s!))).size, 1, 'premise: the losing write is invisible in the objects')
  assert.equal(storesAgree(sim), false, 'a replica lacking an acknowledged revision counted as converged')
  await d!.applyRemote(lose)
  assert.equal(storesAgree(sim), true)
})
