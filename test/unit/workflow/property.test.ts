import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import { ManualClock } from '../../../src/effects/index.ts'
import { WorkflowGraph, WorkflowRun } from '../../../src/workflow/index.ts'
import { sleep } from './helpers.ts'

type Rel = 'after' | 'requires' | 'before'

interface Plan {
  n: number
  /** edges [i, j, rel] with i < j: unit j depends on unit i (i must finish first) */
  edges: [number, number, Rel][]
  durations: number[]
  fails: boolean[]
}

const plan = fc.integer({ min: 1, max: 12 }).chain((n) =>
  fc.record({
    n: fc.constant(n),
    edges: fc.array(
      fc
        .tuple(fc.nat(n - 1), fc.nat(n - 1), fc.constantFrom<Rel>('after', 'requires', 'before'))
        .filter(([i, j]) => i !== j)
        .map(([i, j, rel]): [number, number, Rel] => [Math.min(i, j), Math.max(i, j), rel]),
      // a single unit has no pair to link (and the filter above could never pass)
      { maxLength: n === 1 ? 0 : n * 2 },
    ),
    durations: fc.array(fc.integer({ min: 0, max: 50 }), { minLength: n, maxLength: n }),
    fails: fc.array(fc.boolean(), { minLength: n, maxLength: n }),
  }),
)

test('for random DAGs, every unit starts only after all its after/requires are finished, and required ones done', async () => {
  await fc.assert(
    fc.asyncProperty(plan, async (p: Plan) => {
      const clock = new ManualClock()
      const name = (i: number) => `u${i}`
      const started = new Map<string, number>()
      const ended = new Map<string, number>()
      const g = new WorkflowGraph()
      for (let j = 0; j < p.n; j++) {
        const after = new Set<string>()
        const requires = new Set<string>()
        const before = new Set<string>()
        for (const [a, b, rel] of p.edges) {
          if (rel === 'before' && a === j) before.add(name(b)) // a before b: b waits for a
          if (b !== j) continue
          if (rel === 'after') after.add(name(a))
          if (rel === 'requires') requires.add(name(a))
        }
        g.addUnit({
          name: name(j),
          after: [...after],
          requires: [...requires],
          before: [...before],
          run: async ({ signal }) => {
            started.set(name(j), clock.now())
            await sleep(clock, p.durations[j]!, signal)
            ended.set(name(j), clock.now())
            if (p.fails[j]) throw new Error(`u${j} broke`)
          },
        })
      }
      // reach every unit directly, so a failure does not hide the units after it
      const run = new WorkflowRun(g, { clock })
      const results = Array.from({ length: p.n }, (_, i) => run.reach(name(i)))
      await clock.runAll()
      await Promise.all(results)
      assert.ok(run.idle(), 'nothing left running or waiting')

      const snap = run.snapshot()
      const state = new Map(snap.units.map((u) => [u.name, u.state]))
      const skippedAt = new Map(snap.units.map((u) => [u.name, u.endedAt]))
      for (const [a, b, rel] of p.edges) {
        const dep = name(a)
        const unit = name(b)
        const s = started.get(unit)
        if (s === undefined) continue
        // b started: a must have finished by then (its run returned, or it was skipped)
        const depEnd = ended.get(dep) ?? (state.get(dep) === 'skipped' ? skippedAt.get(dep) : undefined)
        assert.ok(depEnd !== undefined, `${unit} started at ${s} but ${dep} never finished (${rel})`)
        assert.ok(depEnd <= s, `${unit} started at ${s}, ${dep} finished at ${depEnd} (${rel})`)
        if (rel === 'requires') assert.equal(state.get(dep), 'done', `${unit} ran although required ${dep} is ${state.get(dep)}`)
      }
      // …and no later than that: everything ready starts at once (in virtual time, exactly when its
      // last dependency finished), which is what makes independent units run in parallel
      for (const [unit, s] of started) {
        const j = Number(unit.slice(1))
        const deps = p.edges.filter(([, b]) => b === j).map(([a]) => name(a))
        const ready = Math.max(0, ...deps.map((d) => ended.get(d) ?? skippedAt.get(d) ?? 0))
        assert.equal(s, ready, `${unit} started at ${s} although ready at ${ready}`)
      }
      // a unit is skipped exactly when something it requires did not get done
      for (let j = 0; j < p.n; j++) {
        const reqs = p.edges.filter(([, b, rel]) => b === j && rel === 'requires').map(([a]) => name(a))
        const blocked = reqs.some((r) => state.get(r) !== 'done')
        assert.equal(state.get(name(j)) === 'skipped', blocked, `u${j} is ${state.get(name(j))}, requires ${reqs.join(',')}`)
        if (!blocked) assert.equal(state.get(name(j)), p.fails[j] ? 'failed' : 'done')
      }
    }),
    { seed: 20240611, numRuns: 150 },
  )
})
