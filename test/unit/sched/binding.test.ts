import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import { isOrcError } from '../../../src/model/index.ts'
import { type BindingClaim, decideLocalCopy, resolveBinding } from '../../../src/sched/index.ts'

const claim = (node: string, revisionId: string, time: number, supersedes?: string[]): BindingClaim => ({
  node,
  revisionId,
  author: `controller:scheduler@${node}`,
  time,
  ...(supersedes ? { supersedes } : {}),
})

test('concurrent bindings: the earliest wins, the others must stop', () => {
  const claims = [claim('b', 'r2', 200), claim('a', 'r1', 100), claim('c', 'r3', 300)]
  const r = resolveBinding(claims)
  assert.equal(r.winner.node, 'a')
  assert.deepEqual(
    r.losers.map((c) => c.node),
    ['b', 'c'],
  )
  assert.equal(decideLocalCopy('b', claims, true).action, 'stop')
  assert.equal(decideLocalCopy('a', claims, false).action, 'run')
  assert.equal(decideLocalCopy('c', claims, false).action, 'none')
  assert.equal(decideLocalCopy('b', claims, true).reason, 'bound to a by revision r1 (controller:scheduler@a); stopping the copy here')
})

test('a binding that replaced another wins over it: the returning node stops its copy', () => {
  // `home` ran the pod (r1); while it was lost the pod was rebound to `spare` (r2 supersedes r1).
  const claims = [claim('home', 'r1', 100), claim('spare', 'r2', 5000, ['r1'])]
  assert.equal(resolveBinding(claims).winner.node, 'spare')
  assert.equal(decideLocalCopy('home', claims, true).action, 'stop')
})

test('equal times fall back to revision id, so there is always one winner', () => {
  assert.equal(resolveBinding([claim('x', 'rb', 1), claim('y', 'ra', 1)]).winner.node, 'y')
})

test('the same revision seen twice counts once', () => {
  const r = resolveBinding([claim('a', 'r1', 1), claim('a', 'r1', 1), claim('b', 'r2', 2)])
  assert.equal(r.concurrent.length, 2)
  assert.deepEqual(
    r.losers.map((c) => c.revisionId),
    ['r2'],
  )
})

test('no claims is an error, not a guess', () => {
  assert.throws(
    () => resolveBinding([]),
    (e: unknown) => isOrcError(e, 'invalid'),
  )
})

const arbClaims = fc
  .array(
    fc.record({
      node: fc.constantFrom('a', 'b', 'c', 'd'),
      time: fc.integer({ min: 0, max: 20 }),
      supersedes: fc.array(fc.integer({ min: 0, max: 7 }), { maxLength: 2 }),
    }),
    { minLength: 1, maxLength: 8 },
  )
  .map((xs) =>
    xs.map((x, i) =>
      claim(
        x.node,
        `r${i}`,
        x.time,
        x.supersedes.filter((s) => s < i).map((s) => `r${s}`),
      ),
    ),
  )

test('property: every node picks the same winner whatever order it observed the claims in', () => {
  fc.assert(
    fc.property(
      arbClaims.chain((cs) => fc.tuple(fc.constant(cs), fc.shuffledSubarray(cs, { minLength: cs.length, maxLength: cs.length }))),
      ([a, b]) => {
        const ra = resolveBinding(a)
        const rb = resolveBinding([...b, ...b.slice(0, 2)]) // duplicates too
        assert.deepEqual(rb.winner, ra.winner)
        assert.deepEqual(rb.losers, ra.losers)
        // Exactly one node keeps running it.
        const runners = ['a', 'b', 'c', 'd'].filter((n) => decideLocalCopy(n, b, true).action === 'run')
        assert.deepEqual(runners, [ra.winner.node])
        // The winner is never a binding that another claim replaced.
        assert.ok(!a.some((c) => c.supersedes?.includes(ra.winner.revisionId)))
      },
    ),
    { seed: 3, numRuns: 300 },
  )
})
