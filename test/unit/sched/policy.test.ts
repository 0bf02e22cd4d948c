import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import { decideBoundPod, formatPlan, type NodeView, nextDecisionTime, plan } from '../../../src/sched/index.ts'
import { node, pod, view } from './helpers.ts'

const NOW = 10_000_000_000
const SEC = 1000
const DAY = 24 * 3600 * SEC

function suspectFor(ms: number, o: Partial<NodeView> = {}): NodeView {
  return node('lost', { state: 'suspect', since: NOW - ms, ...o })
}

test('ha pod: stays while its node has been suspect less than 30s, moves at 30s', () => {
  const p = pod('web', { node: 'lost', policy: 'ha' })
  assert.deepEqual(plan(view([suspectFor(29 * SEC), node('ok')], [p], NOW)), [])
  assert.deepEqual(formatPlan(plan(view([suspectFor(30 * SEC), node('ok')], [p], NOW))).split('\n'), [
    'unbind pod/default/web from lost: node lost suspect for 30s (ha: moves after 30s)',
    'bind pod/default/web to ok (from lost): best of 1 feasible nodes (2 checked)',
  ])
})

test('ha pod: per-pod haAfterSeconds and the cluster default both count', () => {
  const p = pod('web', { node: 'lost', policy: 'ha', haAfterSeconds: 5 })
  assert.equal(plan(view([suspectFor(4 * SEC), node('ok')], [p], NOW)).length, 0)
  assert.equal(plan(view([suspectFor(5 * SEC), node('ok')], [p], NOW)).length, 2)
  const q = pod('api', { node: 'lost', policy: 'ha' })
  assert.equal(plan(view([suspectFor(60 * SEC), node('ok')], [q], NOW), { haAfterSeconds: 120 }).length, 0)
  assert.equal(plan(view([suspectFor(120 * SEC), node('ok')], [q], NOW), { haAfterSeconds: 120 }).length, 2)
})

test('property: an ha pod is rebound exactly when its node has been unreachable for haAfter', () => {
  fc.assert(
    fc.property(fc.integer({ min: 0, max: 600 }), fc.integer({ min: 0, max: 600_000 }), fc.constantFrom('suspect', 'dead'), (after, down, state) => {
      const p = pod('web', { node: 'lost', policy: 'ha', haAfterSeconds: after })
      const ops = plan(view([suspectFor(down, { state: state as 'suspect' }), node('ok')], [p], NOW))
      assert.equal(ops.length > 0, down >= after * SEC)
    }),
    { seed: 42, numRuns: 200 },
  )
})

test('best-effort pod: stays on a node that is down for days, moves after goneAfter or when forgotten', () => {
  const p = pod('batch', { node: 'lost' })
  assert.deepEqual(plan(view([suspectFor(6 * DAY), node('ok')], [p], NOW)), [])
  assert.match(
    plan(view([suspectFor(7 * DAY), node('ok')], [p], NOW))[0]!.format(),
    /^unbind pod\/default\/batch from lost: node lost suspect for 7d \(best-effort: moves after 7d\)$/,
  )
  assert.equal(
    plan(view([node('lost', { forgotten: true }), node('ok')], [p], NOW))[0]!.format(),
    'unbind pod/default/batch from lost: node lost was forgotten',
  )
})

test('property: best-effort pods never move before their node is forgotten or gone for goneAfter', () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 0, max: 30 * DAY }),
      fc.integer({ min: 1, max: 14 * 24 * 3600 }),
      fc.constantFrom('alive', 'suspect', 'dead'),
      fc.boolean(),
      (down, goneAfterSeconds, state, forgotten) => {
        const n = node('home', { state: state as 'alive', since: NOW - down, forgotten })
        const pods = [pod('a', { node: 'home' }), pod('b', { node: 'home', policy: 'best-effort', requests: { cpu: '2' } })]
        const ops = plan(view([n, node('other')], pods, NOW), { goneAfterSeconds })
        const mayMove = forgotten || (state !== 'alive' && down >= goneAfterSeconds * 1000)
        if (!mayMove) assert.deepEqual(ops, [])
        else
          assert.deepEqual(
            ops.filter((o) => o.type === 'unbind').map((o) => o.pod),
            ['default/a', 'default/b'],
          )
      },
    ),
    { seed: 7, numRuns: 300 },
  )
})

test('a pinned pod never moves off an unreachable node', () => {
  const p = pod('local', { node: 'lost', pin: 'lost', policy: 'ha' })
  assert.deepEqual(plan(view([suspectFor(DAY * 30), node('ok')], [p], NOW)), [])
})

test('a pod bound to a node not in the view (yet) is left alone', () => {
  assert.deepEqual(plan(view([node('ok')], [pod('p', { node: 'unknown' })], NOW)), [])
  assert.equal(decideBoundPod(pod('p', { node: 'unknown' }), undefined, NOW, { haAfterSeconds: 30, goneAfterSeconds: 60 }).action, 'keep')
})

test('a returning node: its moved-away pod is no longer bound to it, nothing is planned for it', () => {
  // After the ha move the store says the pod is on `ok`; `lost` comes back alive: no churn.
  const p = pod('web', { node: 'ok', policy: 'ha' })
  assert.deepEqual(plan(view([node('lost'), node('ok')], [p], NOW)), [])
})

test('nextDecisionTime: when the agent must re-plan without any new view', () => {
  const nodes = [suspectFor(10 * SEC), node('ok')]
  const pods = [pod('ha', { node: 'lost', policy: 'ha' }), pod('be', { node: 'lost' })]
  assert.equal(nextDecisionTime(view(nodes, pods, NOW), { haAfterSeconds: 30, goneAfterSeconds: 7 * 24 * 3600 }), NOW + 20 * SEC)
  assert.equal(nextDecisionTime(view(nodes, [pods[1]!], NOW), { haAfterSeconds: 30, goneAfterSeconds: 7 * 24 * 3600 }), NOW - 10 * SEC + 7 * DAY)
  assert.equal(nextDecisionTime(view([node('ok')], [pod('x', { node: 'ok' })], NOW), { haAfterSeconds: 30, goneAfterSeconds: 60 }), undefined)
})
