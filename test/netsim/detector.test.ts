// The SWIM failure detector (failureDetector swim) in the simulator: the real src/mesh/swim.ts per
// node over the simulated network, every probe, ack and probe request a counted message.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { SCENARIOS } from '../../netsim/scenarios.ts'
import { runChecked } from './helpers.ts'

test('swim: messages per node a second are flat in N (20 and 100 nodes), a crash is found dead everywhere', async () => {
  const rate: number[] = []
  for (const [nodes, seed] of [
    [20, 1],
    [100, 2],
  ] as const) {
    const r = await runChecked('detector', nodes, seed)
    const f = r.figures
    rate.push(f['messages sent per node per second (idle)'] as number)
    assert.equal(f['false suspicions at the end of the idle minute'], 0, `seed ${seed}`)
    assert.ok(
      typeof f['crash → dead on every node (s)'] === 'number' && f['crash → dead on every node (s)'] < 60,
      `seed ${seed}: ${f['crash → dead on every node (s)']}`,
    )
    // The fence counts a quorum from evidence: it must stay fresher than the mesh's heard window (log2 N + 2 periods).
    assert.ok((f['quorum evidence lag max (s)'] as number) < Math.ceil(Math.log2(nodes)) + 2, `seed ${seed}: ${f['quorum evidence lag max (s)']}`)
  }
  for (const r of rate) assert.ok(r >= 1.8 && r <= 2.6, `messages/s per node at N = 20, 100: ${rate.join(', ')}`)
})

// Self-fencing with the SWIM detector: the same splits, pairwise drops and crashes as with heartbeats.
for (const [nodes, seed] of [
  [5, 9],
  [10, 10],
] as const) {
  test(`swim: ha fencing at ${nodes} nodes: no ha pod runs twice beyond haAfter + margin`, async () => {
    const r = await SCENARIOS['ha-fencing']!.run({ nodes, seed, sim: { detector: 'swim' } })
    assert.deepEqual(
      r.violations.map((v) => v.what),
      [],
      `seed ${seed}`,
    )
    assert.ok((r.figures['worst ha overlap in all (s)'] as number) <= (r.figures['overlap bound haAfter + margin (s)'] as number))
    assert.ok((r.figures['minority cut off: ha downtime (s)'] as number) > 0, 'the minority held no ha pod: fencing was not tested')
  })
}
