import assert from 'node:assert/strict'
import { test } from 'node:test'
import { isOrcError } from '../../../src/model/index.ts'
import {
  abortRollout,
  desiredRolloutPods,
  everyNodePods,
  type PinnedDeploymentSpec,
  promoteRollout,
  rolloutCounts,
  rolloutStatus,
  setRollout,
  templateHash,
} from '../../../src/sched/index.ts'
import { node } from './helpers.ts'

const v1 = { labels: { app: 'web' }, spec: { containers: [{ name: 'web', image: 'web:1' }] } }
const v2 = { labels: { app: 'web' }, spec: { containers: [{ name: 'web', image: 'web:2' }] } }
const h1 = templateHash(v1)
const h2 = templateHash(v2)

test('split by count and by percent (rounded up so a small canary still gets one pod)', () => {
  assert.deepEqual(rolloutCounts({ replicas: 5, previous: v1, next: v2, nextReplicas: 2 }), { previous: 3, next: 2 })
  assert.deepEqual(rolloutCounts({ replicas: 3, previous: v1, next: v2, nextPercent: 10 }), { previous: 2, next: 1 })
  assert.deepEqual(rolloutCounts({ replicas: 4, previous: v1, next: v2, nextPercent: 50 }), { previous: 2, next: 2 })
  assert.deepEqual(rolloutCounts({ replicas: 4, previous: v1, next: v2, nextPercent: 0 }), { previous: 4, next: 0 })
  assert.deepEqual(rolloutCounts({ replicas: 4, previous: v1, next: v2 }), { previous: 4, next: 0 })
  // A next equal to previous (in any key order) is no rollout at all.
  assert.deepEqual(rolloutCounts({ replicas: 2, previous: v1, next: { spec: v1.spec, labels: v1.labels }, nextReplicas: 1 }), { previous: 2, next: 0 })
})

test('bad splits are refused', () => {
  const bad: PinnedDeploymentSpec[] = [
    { replicas: 2, previous: v1, next: v2, nextReplicas: 3 },
    { replicas: 2, previous: v1, next: v2, nextPercent: 101 },
    { replicas: 2, previous: v1, next: v2, nextPercent: 10, nextReplicas: 1 },
    { replicas: -1, previous: v1 },
    { replicas: 1.5, previous: v1 },
  ]
  for (const s of bad)
    assert.throws(
      () => rolloutCounts(s),
      (e: unknown) => isOrcError(e, 'invalid'),
    )
})

test('pod names are stable: shifting the split only adds or removes the highest ordinals', () => {
  const at = (n: number) => desiredRolloutPods('web', { replicas: 4, previous: v1, next: v2, nextReplicas: n }).map((p) => p.name)
  assert.deepEqual(at(1), [`web-${h1}-0`, `web-${h1}-1`, `web-${h1}-2`, `web-${h2}-0`])
  assert.deepEqual(at(2), [`web-${h1}-0`, `web-${h1}-1`, `web-${h2}-0`, `web-${h2}-1`])
  const pods = desiredRolloutPods('web', { replicas: 2, previous: v1, next: v2, nextReplicas: 1 })
  assert.deepEqual(pods[1]!.labels, { app: 'web', 'orc/deployment': 'web', 'orc/template': h2 })
  assert.equal(pods[1]!.version, 'next')
})

test('promote keeps the next pods as they are; abort keeps the previous ones', () => {
  const spec: PinnedDeploymentSpec = { replicas: 3, previous: v1, next: v2, nextReplicas: 1 }
  const canary = desiredRolloutPods('web', spec).find((p) => p.version === 'next')!.name
  const promoted = desiredRolloutPods('web', promoteRollout(spec)).map((p) => p.name)
  assert.deepEqual(promoted, [`web-${h2}-0`, `web-${h2}-1`, `web-${h2}-2`])
  assert.ok(promoted.includes(canary))
  assert.deepEqual(
    desiredRolloutPods('web', abortRollout(spec)).map((p) => p.name),
    [`web-${h1}-0`, `web-${h1}-1`, `web-${h1}-2`],
  )
  assert.deepEqual(rolloutCounts(setRollout(spec, { nextPercent: 100 })), { previous: 0, next: 3 })
  assert.throws(
    () => promoteRollout(abortRollout(spec)),
    (e: unknown) => isOrcError(e, 'conflict'),
  )
})

test('status: what exists, what is missing, what is extra', () => {
  const spec: PinnedDeploymentSpec = { replicas: 2, previous: v1, next: v2, nextReplicas: 1 }
  const s = rolloutStatus('web', spec, [
    { name: `web-${h1}-0`, ready: true },
    { name: `web-${h1}-1`, ready: true },
  ])
  assert.deepEqual(s.desired, { previous: 1, next: 1 })
  assert.deepEqual(s.current, { previous: 2, next: 0, ready: { previous: 2, next: 0 } })
  assert.deepEqual(s.create, [`web-${h2}-0`])
  assert.deepEqual(s.remove, [`web-${h1}-1`])
  assert.equal(s.done, false)
  const done = rolloutStatus('web', spec, [
    { name: `web-${h1}-0`, ready: true },
    { name: `web-${h2}-0`, ready: true },
  ])
  assert.equal(done.done, true)
})

test('every-node workloads: one pinned pod per eligible node', () => {
  const nodes = [
    node('b', { labels: { role: 'edge' } }),
    node('a', { labels: { role: 'edge' }, unschedulable: true }),
    node('c', { labels: { role: 'core' } }),
    node('d', { labels: { role: 'edge' }, taints: [{ key: 'dedicated', effect: 'NoSchedule' }] }),
    node('e', { labels: { role: 'edge' }, forgotten: true }),
  ]
  assert.deepEqual(everyNodePods('proxy', { nodeSelector: { role: 'edge' } }, nodes), [
    { name: 'proxy-a', node: 'a' },
    { name: 'proxy-b', node: 'b' },
  ])
  assert.deepEqual(
    everyNodePods('proxy', { nodeSelector: { role: 'edge' }, tolerations: [{ operator: 'Exists' }] }, nodes).map((p) => p.node),
    ['a', 'b', 'd'],
  )
  const long = everyNodePods('x'.repeat(60), {}, [node('node-1')])[0]!
  assert.ok(long.name.length <= 63)
})

test('planDeploymentPods: replicas by ordinal; everyNode one pinned copy per eligible node, split by name order', async () => {
  const { planDeploymentPods, deploymentStatus } = await import('../../../src/sched/index.ts')
  const r = planDeploymentPods('web', { replicas: 3, previous: v1, next: v2, nextPercent: 34 }, [])
  // 34 % of 3 rounds up to 2 on next.
  assert.deepEqual(
    r.map((p) => [p.name, p.version]),
    [
      [`web-${h1}-0`, 'previous'],
      [`web-${h2}-0`, 'next'],
      [`web-${h2}-1`, 'next'],
    ],
  )
  const nodes = [node('c'), node('a'), node('b', { taints: [{ key: 'x', effect: 'NoSchedule' }] }), node('d', { forgotten: true })]
  const e = planDeploymentPods('logs', { replicas: 0, everyNode: true, previous: v1, next: v2, nextPercent: 50 }, nodes)
  assert.deepEqual(
    e.map((p) => [p.name, p.node, p.version]),
    [
      ['logs-a', 'a', 'next'],
      ['logs-c', 'c', 'previous'],
    ],
    'b untolerated, d forgotten; 50 % of 2 is 1',
  )
  assert.deepEqual((e[0]!.spec as any).placement, { node: 'a' })
  assert.equal(e[0]!.labels['orc/template'], h2)
  // nextReplicas beyond the number of nodes means all of them.
  assert.equal(
    planDeploymentPods('logs', { replicas: 0, everyNode: true, previous: v1, next: v2, nextReplicas: 9 }, nodes).filter((p) => p.version === 'next').length,
    2,
  )
  const s = deploymentStatus(
    { replicas: 3, previous: v1, next: v2, nextReplicas: 1 },
    planDeploymentPods('web', { replicas: 3, previous: v1, next: v2, nextReplicas: 1 }, []),
    [
      { name: `web-${h1}-0`, template: h1, running: true, ready: true },
      { name: `web-${h1}-2`, template: h1, running: true, ready: false },
      { name: `web-${h2}-0`, template: h2, running: true, ready: true },
    ],
  )
  assert.deepEqual(s.previous, { template: h1, desired: 2, created: 2, running: 2, ready: 1 })
  assert.deepEqual(s.next, { template: h2, desired: 1, created: 1, running: 1, ready: 1 })
  assert.deepEqual(s.create, [`web-${h1}-1`])
  assert.deepEqual(s.remove, [`web-${h1}-2`])
  assert.equal(s.done, false)
})
