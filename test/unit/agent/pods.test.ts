import assert from 'node:assert/strict'
import { test } from 'node:test'
import { checkAgentControllers } from '../../../src/agent/controllers.ts'
import { decideBindings } from '../../../src/agent/pods/binder.ts'
import { admitPod, ungranted } from '../../../src/agent/pods/security.ts'
import { assignedTo } from '../../../src/agent/pods/spec.ts'
import type { SecurityPolicy, UnsafeFeature } from '../../../src/model/index.ts'

const pod = (name: string, extra: Record<string, unknown> = {}, labels?: Record<string, string>): any => ({
  apiVersion: 'orc/v1',
  kind: 'Pod',
  metadata: { name, namespace: 'default', createdAt: '2026-01-01T00:00:00Z', ...(labels ? { labels } : {}) },
  spec: { containers: [{ name: 'main', image: '/img' }], ...extra },
})
const policy = (allow: UnsafeFeature[], ns = 'default', matchLabels?: Record<string, string>): SecurityPolicy => ({
  apiVersion: 'orc/v1',
  kind: 'SecurityPolicy',
  metadata: { name: 'p', namespace: ns },
  spec: { allow, ...(matchLabels ? { selector: { matchLabels } } : {}) },
})

test('two parties: a pod gets an unsafe feature only when a policy of its namespace selecting it grants it', () => {
  const p = pod('x', { security: { unsafe: ['root', 'devices'] } }, { app: 'b' })
  assert.throws(
    () => admitPod(p, []),
    /pod\/x asks for root and devices, but no SecurityPolicy in namespace default allows them \(an operator must grant them\)/,
  )
  assert.deepEqual(ungranted(p, [policy(['root'])]), ['devices'])
  assert.deepEqual(ungranted(p, [policy(['root', 'devices'], 'other')]), ['root', 'devices'], 'another namespace grants nothing')
  assert.deepEqual(ungranted(p, [policy(['root', 'devices'], 'default', { app: 'c' })]), ['root', 'devices'], 'the selector must match')
  assert.doesNotThrow(() => admitPod(p, [policy(['root']), policy(['devices'], 'default', { app: 'b' })]))
  assert.doesNotThrow(() => admitPod(pod('plain'), []))
})

test('binder: binds only to itself — pinned here, the only alive node, or what plan() picks', () => {
  const node = (name: string): any => ({ apiVersion: 'orc/v1', kind: 'Node', metadata: { name }, spec: {}, status: { capacity: { cpu: '4', memory: '8Gi' } } })
  const pods = [pod('free'), pod('pinned-here', { placement: { node: 'a' } }), pod('pinned-there', { placement: { node: 'b' } })]
  assert.deepEqual(
    decideBindings(pods, [node('a')], 'a', ['a'], 0)
      .map((d) => d.pod.metadata.name)
      .sort(),
    ['free', 'pinned-here'],
  )
  assert.deepEqual(
    decideBindings(pods, [node('a'), node('b')], 'b', ['a', 'b'], 0)
      .filter((d) => d.pod.metadata.name.startsWith('pinned'))
      .map((d) => d.pod.metadata.name),
    ['pinned-there'],
  )
  // with two alive nodes exactly one of them binds the free pod
  const byA = decideBindings([pod('free')], [node('a'), node('b')], 'a', ['a', 'b'], 0).length
  const byB = decideBindings([pod('free')], [node('a'), node('b')], 'b', ['a', 'b'], 0).length
  assert.equal(byA + byB, 1)
  assert.equal(assignedTo({ ...pod('p', { placement: { node: 'a' } }), status: { node: 'b' } }, 'a'), true, 'a pin decides alone')
})

test("the agent's controllers form no loop and no field has two writers", () => {
  const g = checkAgentControllers()
  assert.deepEqual(g.loops, [])
  assert.ok(g.edges.some((e) => e.from === 'controller:scheduler' && e.to === 'controller:lifecycle'))
  assert.throws(
    () =>
      checkAgentControllers([
        { name: 'controller:a', reads: ['Pod.status.phase'], writes: ['Pod.status.node'] },
        { name: 'controller:b', reads: ['Pod.status.node'], writes: ['Pod.status.phase'] },
      ]),
    /read\/write loop/,
  )
})
