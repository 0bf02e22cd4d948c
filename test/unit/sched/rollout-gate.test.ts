/** Readiness-gated rollouts: maxSurge / maxUnavailable steps, and the progress deadline that aborts. */
import assert from 'node:assert/strict'
import { test } from 'node:test'
import type { RolloutProgress } from '../../../src/model/index.ts'
import { gateRolloutStep, rolloutLimits, rolloutProgress } from '../../../src/sched/index.ts'

const pods = (spec: string) => spec.split(' ').map((s) => ({ name: s.replace(/[+-]$/, ''), ready: s.endsWith('+') }))

test('limits default to 25% up (at least 1) and 25% down, as Kubernetes', () => {
  assert.deepEqual(rolloutLimits(1), { maxSurge: 1, maxUnavailable: 0 })
  assert.deepEqual(rolloutLimits(8), { maxSurge: 2, maxUnavailable: 2 })
  assert.deepEqual(rolloutLimits(3, { maxSurge: 0, maxUnavailable: 1 }), { maxSurge: 0, maxUnavailable: 1 })
  assert.deepEqual(rolloutLimits(3, { maxSurge: 0, maxUnavailable: 0 }), { maxSurge: 1, maxUnavailable: 0 }, 'never stuck by construction')
})

test('a new pod that is not Ready holds the old ones in place; once Ready the step goes on', () => {
  const limits = { maxSurge: 1, maxUnavailable: 0 }
  // 3 replicas, next on 1: one new pod, then one old pod goes.
  let step = gateRolloutStep(3, limits, pods('a0+ a1+ a2+'), ['b0'], ['a2'])
  assert.deepEqual(step.create, ['b0'])
  assert.deepEqual(step.remove, [])
  assert.match(step.held ?? '', /1 old pod\(s\) wait for new pods to be Ready \(maxUnavailable 0\)/)
  step = gateRolloutStep(3, limits, pods('a0+ a1+ a2+ b0-'), [], ['a2'])
  assert.deepEqual(step.remove, [], 'b0 not Ready: a2 stays')
  step = gateRolloutStep(3, limits, pods('a0+ a1+ a2+ b0+'), [], ['a2'])
  assert.deepEqual(step.remove, ['a2'])
  // All three to next: one at a time.
  step = gateRolloutStep(3, limits, pods('a0+ a1+ a2+'), ['b0', 'b1', 'b2'], ['a0', 'a1', 'a2'])
  assert.deepEqual(step, {
    create: ['b0'],
    remove: [],
    held: '2 pod(s) wait for room (maxSurge 1); 3 old pod(s) wait for new pods to be Ready (maxUnavailable 0)',
  })
})

test('pods that are not Ready are removed first and freely; maxUnavailable lets Ready ones go', () => {
  assert.deepEqual(gateRolloutStep(4, { maxSurge: 0, maxUnavailable: 1 }, pods('a0+ a1+ a2- a3+'), [], ['a1', 'a2', 'a3']).remove, ['a2'])
  assert.deepEqual(gateRolloutStep(4, { maxSurge: 0, maxUnavailable: 1 }, pods('a0+ a1+ a2- a3+ a4+'), [], ['a1', 'a2', 'a4']).remove, ['a2', 'a4'])
  // A first creation of all replicas is not held.
  assert.deepEqual(gateRolloutStep(3, rolloutLimits(3), [], ['a0', 'a1', 'a2'], []).create, ['a0', 'a1', 'a2'])
})

test('a rollout with no progress past its deadline is aborted, and stays aborted for that template', () => {
  const t0 = Date.parse('2026-01-01T00:00:00Z')
  const why = () => 'pod/web-b-0 not Ready (readiness probe failed: HTTP 503)'
  let r = rolloutProgress(undefined, { template: 'b', marker: 'm1', done: false }, t0, 30_000, why)
  assert.deepEqual(r, { template: 'b', state: 'Progressing', marker: 'm1', lastProgress: '2026-01-01T00:00:00.000Z' })
  r = rolloutProgress(r, { template: 'b', marker: 'm2', done: false }, t0 + 20_000, 30_000, why)
  assert.equal(r?.lastProgress, '2026-01-01T00:00:20.000Z', 'a new pod counted: progress')
  const same = rolloutProgress(r, { template: 'b', marker: 'm2', done: false }, t0 + 49_999, 30_000, why)
  assert.equal(same, r, 'nothing to write before the deadline')
  const aborted = rolloutProgress(r, { template: 'b', marker: 'm2', done: false }, t0 + 50_000, 30_000, why) as RolloutProgress
  assert.equal(aborted.state, 'Aborted')
  assert.equal(aborted.reason, 'no progress for 30s (progressDeadlineSeconds): pod/web-b-0 not Ready (readiness probe failed: HTTP 503)')
  assert.equal(rolloutProgress(aborted, { template: 'b', marker: 'm9', done: true }, t0 + 90_000, 30_000, why), aborted, 'a latch')
  assert.equal(rolloutProgress(aborted, { template: 'c', marker: 'm9', done: false }, t0 + 90_000, 30_000, why)?.state, 'Progressing', 'a new next template')
  assert.equal(rolloutProgress(aborted, undefined, t0, 30_000, why), undefined, 'no next: no rollout')
  const done = rolloutProgress(r, { template: 'b', marker: 'm2', done: true }, t0 + 99_000, 30_000, why)
  assert.equal(done?.state, 'Complete', 'a finished step is never aborted')
})
