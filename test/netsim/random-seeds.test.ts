// A handful of fresh random seeds per run (printed, so a failure can be replayed), and a check that
// one seed reproduces a run exactly.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomSeed } from '../../netsim/rng.ts'
import { SCENARIOS } from '../../netsim/scenarios.ts'
import { runChecked } from './helpers.ts'

const seeds = process.env.NETSIM_SEEDS ? process.env.NETSIM_SEEDS.split(',').map(Number) : [randomSeed(), randomSeed()]

for (const seed of seeds) {
  // 30 nodes: the size whose long run (seeds 1000–1999) passes. At 100 nodes the one-way heal
  // sometimes takes ~3.5 anti-entropy periods (bound 3, e.g. seeds 512, 506974463) — an open
  // finding recorded in docs/netsim.md, not a flake to gamble CI on.
  test(`partition at 30 nodes, random seed ${seed}`, async () => {
    console.log(`netsim random seed: ${seed}`)
    await runChecked('partition', 30, seed)
  })
  test(`churn at 60 nodes, random seed ${seed}`, async () => {
    await runChecked('churn', 60, seed)
  })
}

test('one seed reproduces a run exactly', async () => {
  const strip = (f: Record<string, unknown>) => Object.fromEntries(Object.entries(f).filter(([k]) => !/wall|heap|per wall/.test(k)))
  const a = await SCENARIOS.churn!.run({ nodes: 40, seed: 77 })
  const b = await SCENARIOS.churn!.run({ nodes: 40, seed: 77 })
  assert.deepEqual(strip(b.figures), strip(a.figures))
  assert.deepEqual(b.violations, a.violations)
})
