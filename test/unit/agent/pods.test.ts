import assert from 'node:assert/strict'
import { test } from 'node:test'
import { checkAgentControllers } from '../../../src/agent/controllers.ts'
import { decideBindings } from '../../../src/agent/pods/binder.ts'
import { admitPod, admitPolicy, anyUserIsAdmin, asksOf, type GrantContext, runtimeRefusal, ungranted } from '../../../src/agent/pods/security.ts'
import { assignedTo, podDefaultResourcesOf } from '../../../src/agent/pods/spec.ts'
import type { SecurityPolicy, UnsafeFeature } from '../../../src/model/index.ts'

const pod = (name: string, extra: Record<string, unknown> = {}, labels?: Record<string, string>): any => ({
  apiVersion: 'orc/v1',
  kind: 'Pod',
  metadata: { name, namespace: 'default', createdAt: '2026-01-01T00:00:00Z', ...(labels ? { labels } : {}) },
  spec: { containers: [{ name: 'main', image: 'busybox' }], ...extra },
})
const policy = (
  allow: UnsafeFeature[],
  ns = 'default',
  selector?: { names?: string[]; matchLabels?: Record<string, string> },
  by = 'user:admin',
  extra = {},
): SecurityPolicy =>
  ({
    apiVersion: 'orc/v1',
    kind: 'SecurityPolicy',
    metadata: { name: 'p', namespace: ns, updatedBy: by },
    spec: { allow, ...(selector ? { selector } : {}), ...extra },
  }) as SecurityPolicy
const ctx = (podAuthors: string[] = ['user:dev']): GrantContext => ({
  podAuthors: new Set(podAuthors),
  policyAuthor: (p) => (p.metadata as { updatedBy?: string }).updatedBy ?? '',
  isAdmin: anyUserIsAdmin,
  imageStores: ['/var/lib/orc/images'],
})

test('two parties: a pod gets an unsafe feature only when a policy of its namespace naming it grants it', () => {
  const p = pod('x', { security: { unsafe: ['root', 'devices'] } }, { app: 'b' })
  assert.throws(
    () => admitPod(p, [], ctx()),
    /pod\/x asks for root and devices, but no SecurityPolicy in namespace default allows them \(an operator other than the pod's author must grant them\)/,
  )
  assert.deepEqual(ungranted(p, [policy(['root'])], ctx()).missing, ['devices'])
  assert.deepEqual(ungranted(p, [policy(['root', 'devices'], 'other')], ctx()).missing, ['root', 'devices'], 'another namespace grants nothing')
  assert.deepEqual(ungranted(p, [policy(['root', 'devices'], 'default', { names: ['y'] })], ctx()).missing, ['root', 'devices'], 'the names must match')
  assert.doesNotThrow(() => admitPod(p, [policy(['root']), policy(['devices'], 'default', { names: ['x'], matchLabels: { app: 'b' } })], ctx()))
  assert.doesNotThrow(() => admitPod(pod('plain'), [], ctx()))
  assert.deepEqual(ungranted(pod('build-7', { security: { unsafe: ['root'] } }), [policy(['root'], 'default', { names: ['build-*'] })], ctx()).missing, [])
})

test("two parties: a grant from one of the pod's own authors does not count, unless an admin self-approved it", () => {
  const p = pod('x', { security: { unsafe: ['root'] } })
  const mine = policy(['root'], 'default', undefined, 'user:dev')
  assert.throws(
    () => admitPod(p, [mine], ctx(['user:dev'])),
    /pod\/x asks for root, but no SecurityPolicy in namespace default allows it \(SecurityPolicy\/p was written by user:dev, also an author of the pod: a grant needs a second party/,
  )
  assert.throws(() => admitPod(p, [mine], ctx(['user:admin', 'user:dev'])), /second party/, 'any author of the pod counts, not just the last')
  assert.doesNotThrow(() => admitPod(p, [mine], ctx(['user:other'])))
  assert.doesNotThrow(() => admitPod(p, [policy(['root'], 'default', undefined, 'user:dev', { selfApprove: true })], ctx(['user:dev'])))
  const adminsOnly: GrantContext = { ...ctx(['user:dev']), isAdmin: (a) => a === 'user:admin' }
  assert.throws(
    () => admitPod(p, [policy(['root'], 'default', undefined, 'user:eve')], adminsOnly),
    /SecurityPolicy\/p was written by user:eve, who is not an admin/,
  )
  assert.throws(
    () => admitPolicy(policy(['root'], 'default', undefined, 'user:eve', { selfApprove: true }), 'user:eve', adminsOnly.isAdmin),
    /selfApprove needs an admin/,
  )
  assert.doesNotThrow(() => admitPolicy(policy(['root'], 'default', undefined, 'user:admin', { selfApprove: true }), 'user:admin', adminsOnly.isAdmin))
})

test('two parties: labels only narrow — a pod cannot label itself into a grant', () => {
  const p = pod('x', { security: { unsafe: ['root'] } }, { app: 'builder' })
  assert.deepEqual(ungranted(p, [policy(['root'], 'default', { matchLabels: { app: 'builder' } })], ctx()).missing, ['root'])
  assert.throws(
    () => admitPolicy(policy(['root'], 'default', { matchLabels: { app: 'builder' } }), 'user:admin', anyUserIsAdmin),
    /list the pods in selector\.names/,
  )
})

test('images are images: a host path asks for hostPath; names and paths in the image store do not', () => {
  const store = ['/var/lib/orc/images']
  const img = (image: string) => pod('x', { containers: [{ name: 'main', image }] })
  assert.deepEqual(asksOf(img('busybox'), store), [])
  assert.deepEqual(asksOf(img('/var/lib/orc/images/busybox'), store), [])
  for (const host of ['/', '/etc', '/etc/shadow', '/var/lib/orc/images', '/var/lib/orc/images/../../../etc', 'busybox/../..', './rootfs'])
    assert.deepEqual(asksOf(img(host), store), ['hostPath'], host)
  assert.throws(
    () => admitPod(img('/etc'), [], ctx()),
    /pod\/x image \/etc, a host path and not an image of the node's image store \(\/var\/lib\/orc\/images\), needs hostPath, but no SecurityPolicy in namespace default allows it .*orc image import/,
  )
  assert.doesNotThrow(() => admitPod(img('/etc'), [policy(['hostPath'])], ctx()))
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
  // A shared pod (federation scope, node@cluster): a full pin decides; a bare one was resolved by the binder.
  assert.equal(assignedTo(pod('p', { placement: { node: 'h1@home' } }), 'h1@home'), true)
  assert.equal(assignedTo(pod('p', { placement: { node: 'h1@home' } }), 'h1@cloud'), false)
  assert.equal(assignedTo({ ...pod('p', { placement: { node: 'h1' } }), status: { node: 'h1@home' } }, 'h1@home'), true, 'a bare pin, bound here')
  assert.equal(assignedTo(pod('p', { placement: { node: 'h1' } }), 'h1@home'), false, 'a bare pin not bound yet')
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

test('safe defaults: 1,024 processes and 1 GiB unless the Cluster says otherwise (0 turns one off)', () => {
  const cluster = (podDefaults?: Record<string, unknown>): any => ({
    apiVersion: 'orc/v1',
    kind: 'Cluster',
    metadata: { name: 'c' },
    spec: { ...(podDefaults ? { podDefaults } : {}) },
  })
  assert.deepEqual(podDefaultResourcesOf([]), { pids: 1024, memoryBytes: 1024 ** 3 })
  assert.deepEqual(podDefaultResourcesOf([cluster()]), { pids: 1024, memoryBytes: 1024 ** 3 })
  assert.deepEqual(podDefaultResourcesOf([cluster({ pids: 64, memory: '256Mi' })]), { pids: 64, memoryBytes: 256 * 1024 ** 2 })
  assert.deepEqual(podDefaultResourcesOf([cluster({ pids: 0, memory: 0 })]), {})
})

test('requireRuntime: a policy selecting a pod restricts its runtime, whoever wrote it; every such policy must allow it', () => {
  const only = (runtimes: string[], selector?: { names?: string[] }, ns = 'default', name = 'p') =>
    ({ ...policy([], ns, selector, 'user:dev', { requireRuntime: runtimes }), metadata: { name, namespace: ns, updatedBy: 'user:dev' } }) as SecurityPolicy
  // the default runtime is sandbox; a namespace-wide requirement refuses it, naming policy and fix
  assert.match(
    runtimeRefusal(pod('x'), [only(['gvisor'])])!.message,
    /^pod\/x asks for runtime sandbox, but namespace default requires gvisor \(SecurityPolicy\/p\) for it: set spec.runtime accordingly$/,
  )
  assert.equal(runtimeRefusal(pod('x', { runtime: 'gvisor' }), [only(['gvisor'])]), undefined)
  assert.equal(runtimeRefusal(pod('x', { runtime: 'oci' }), [only(['gvisor', 'oci'])]), undefined)
  // other namespaces and pods the policy does not name are not restricted
  assert.equal(runtimeRefusal(pod('x'), [only(['gvisor'], undefined, 'other')]), undefined)
  assert.equal(runtimeRefusal(pod('x'), [only(['gvisor'], { names: ['untrusted-*'] })]), undefined)
  assert.ok(runtimeRefusal(pod('untrusted-1', { runtime: 'oci' }), [only(['gvisor'], { names: ['untrusted-*'] })]))
  // two policies: the pod must satisfy both; both are named when it satisfies neither
  const both = [only(['gvisor', 'oci'], undefined, 'default', 'a'), only(['gvisor'], undefined, 'default', 'b')]
  assert.match(runtimeRefusal(pod('x', { runtime: 'oci' }), both)!.message, /requires gvisor \(SecurityPolicy\/b\) for it/)
  assert.match(runtimeRefusal(pod('x'), both)!.message, /requires gvisor or oci \(SecurityPolicy\/a\) and gvisor \(SecurityPolicy\/b\)/)
  // admission refuses the same, before any grant is looked at
  assert.throws(() => admitPod(pod('x'), [only(['gvisor'])], ctx()), /asks for runtime sandbox/)
  // a policy with only a grant restricts nothing
  assert.equal(runtimeRefusal(pod('x'), [policy(['root'])]), undefined)
})
