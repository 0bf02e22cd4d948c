// The simulator's convergence probe must see replication state, not only current objects: a write
// that lost a concurrent-edit conflict leaves no trace in the objects, yet its Yjs update and its
// revision record must still reach every replica (netsim partition --nodes 30 --seed 1009 was
// declared converged while one acknowledged revision was still spreading by anti-entropy).

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { digest, storesAgree } from '../../netsim/invariants.ts'
import { LocalScheduler } from '../../netsim/scheduler.ts'
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

// The ha overlap invariant must see two copies: without fencing, a minority cut off keeps running its
// ha pods after the majority moved them (~30 s in: haAfter after it last heard them), so a 60 s split
// must be reported; with fencing the minority stops them at 25–27 s and no pod runs twice.
for (const fencing of [false, {}] as const) {
  test(`ha overlap invariant, 3|2 split for 60 s, fencing ${fencing === false ? 'off: reported' : 'on: holds'}`, async () => {
    const sim = new Simulator({ seed: 3, nodes: 5 })
    await sim.start()
    const sched = new LocalScheduler(sim, {}, undefined, fencing)
    await sched.createPods(sim.nodes[0]!, 10, () => 'ha')
    await sim.runFor(20_000)
    // Cut off two nodes that run ha pods.
    const run = sched.runners()
    const holders = [...new Set([...run.values()].flat())].map((name) => Number(name.slice('node-'.length)))
    const minority = holders.slice(0, 2)
    sim.net.split([minority, sim.nodes.map((n) => n.idx).filter((k) => !minority.includes(k))], sim.now)
    sched.beginFault('3|2 split')
    await sim.runFor(60_000)
    sim.net.heal(sim.now)
    sched.endFault()
    await sim.runFor(15_000)
    const ep = sched.closeEpisode()!
    if (fencing === false) {
      assert.ok(ep.overlapFault >= 20_000, `overlap ${ep.overlapFault} ms: the minority's copies should have run on after the move`)
      assert.ok(
        sim.violations.some((v) => /runs on .* into the fault/.test(v.what)),
        sim.violations.map((v) => v.what).join('\n'),
      )
    } else {
      assert.equal(ep.overlapFault, 0)
      assert.ok(ep.down > 0 && ep.down <= 10_000, `ha pods of the minority down ${ep.down} ms (fenced at 25–27 s, moved at ~30 s)`)
      assert.deepEqual(sim.violations, [])
    }
  })
}
