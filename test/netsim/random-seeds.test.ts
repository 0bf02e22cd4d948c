// A handful of fresh random seeds per run (printed, so a failure can be replayed), and a check that
// one seed reproduces a run exactly.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { randomSeed } from '../../netsim/rng.ts'
import { SCENARIOS } from '../../netsim/scenarios.ts'
import { runChecked } from './helpers.ts'

const seeds = process.env.NETSIM_SEEDS ? process.env.NETSIM_SEEDS.split(',').map(Number) : [randomSeed(), randomSeed()]

for (const seed of seeds) {
  test(`partition at 100 nodes, random seed ${seed}`, async () => {
    console.log(`netsim random seed: ${seed}`)
    await runChecked('partition', 100, seed)
  })
  test(`churn at 60 nodes, random seed ${seed}`, async () => {
    await runChecked('churn', 60, seed)
  })
  test(`ha fencing at 5 nodes, random seed ${seed}`, async () => {
    await runChecked('ha-fencing', 5, seed)
  })
}

test('one seed reproduces a run exactly', async () => {
  const strip = (f: Record<string, unknown>) => Object.fromEntries(Object.entries(f).filter(([k]) => !/wall|heap|per wall/.test(k)))
  const a = await SCENARIOS.churn!.run({ nodes: 40, seed: 77 })
  const b = await SCENARIOS.churn!.run({ nodes: 40, seed: 77 })
  assert.deepEqual(strip(b.figures), strip(a.figures))
  assert.deepEqual(b.violations, a.violations)
})
