// The agent's side of federated scheduling, without a network: node summaries (what a node says
// about itself, and how summaries from other clusters are read: untrusted input), the origin
// annotation the API records on shared pods, and writes as `controller:<name>@<cluster>`.

import assert from 'node:assert/strict'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import pino from 'pino'
import {
  clusterOwnership,
  federatedView,
  federationNodesOf,
  NodeSummaryPublisher,
  nodeSummaryOf,
  overcommitYields,
  routedStore,
  taggedStore,
} from '../../src/agent/federation/index.ts'
import { systemClock } from '../../src/effects/index.ts'
import { normalizeManifest } from '../../src/model/index.ts'
import { plan } from '../../src/sched/index.ts'
import { openStore } from '../../src/store/index.ts'
import { tempStore } from '../helpers/store.ts'

const now = Date.parse('2026-06-01T00:00:00Z')
const silent = pino({ level: 'silent' })

function cluster(name: string, nodes: unknown): any {
  return {
    apiVersion: 'orc/v1',
    kind: 'Cluster',
    metadata: { name, uid: name, revision: 1, revisionId: '', createdAt: '', updatedAt: '', updatedBy: 'x' },
    spec: {},
    status: { nodes },
  }
}

test('summaries from other clusters are untrusted: bad entries are skipped, the rest kept', () => {
  const nodes = federationNodesOf([
    cluster('home', {
      h1: {
        capacity: { cpu: '4000m', memory: '8589934592' },
        allocatable: { cpu: '3000m', memory: '4294967296' },
        labels: { disk: 'ssd', big: 'x'.repeat(100) },
        ready: true,
      },
      'BAD NAME': { capacity: { cpu: '1', memory: '1Gi' }, ready: true },
      h2: 'not an object',
      h3: {
        capacity: { cpu: 'lots', memory: '1Gi' },
        ready: false,
        taints: [
          { key: 'k', effect: 'Evil' },
          { key: 'gpu', effect: 'NoSchedule' },
        ],
      },
    }),
    cluster('Not-A-Cluster', { x: { capacity: { cpu: '1', memory: '1Gi' }, ready: true } }),
    cluster('cloud', ['array, not a map']),
  ])
  assert.deepEqual(
    nodes.map((n) => n.metadata.name),
    ['h1@home', 'h3@home'],
  )
  const h1 = nodes[0]!
  assert.deepEqual(h1.status!.capacity, { cpu: '3000m', memory: '4294967296' }, 'allocatable (after the cluster’s own pods) is what federated pods may use')
  assert.deepEqual(h1.metadata.labels, { disk: 'ssd' }, 'over-long label values are dropped')
  const h3 = nodes[1]!
  assert.equal(h3.spec!.unschedulable, true, 'NotReady: no new federated pods')
  assert.deepEqual(h3.spec!.taints, [{ key: 'gpu', effect: 'NoSchedule' }])
})

test('nodes of a removed cluster that pods are still bound to count as forgotten (their pods may move)', () => {
  const nodes = federationNodesOf([cluster('home', {})], ['c1@cloud', 'h9@home', 'x'], new Set(['cloud']))
  assert.deepEqual(
    nodes.map((n) => [n.metadata.name, n.status!.state]),
    [['c1@cloud', 'Removed']],
  )
})

test('a node summary: capacity less the cluster’s own pods bound here; labels, taints, readiness', () => {
  const self: any = {
    metadata: { name: 'h1', labels: { site: 'lab' } },
    spec: { taints: [{ key: 'gpu', effect: 'NoSchedule' }] },
    status: { state: 'Ready', capacity: { cpu: '4', memory: '8Gi' } },
  }
  const pod = (node: string, cpu: string, phase?: string): any => ({
    metadata: { name: 'p' },
    spec: { containers: [{ name: 'm', image: 'i', resources: { requests: { cpu, memory: '1Gi' } } }] },
    status: { node, ...(phase ? { phase } : {}) },
  })
  const s = nodeSummaryOf(self, [pod('h1', '500m'), pod('h1', '1', 'Succeeded'), pod('h2', '2')], 'h1')!
  assert.deepEqual(s.capacity, { cpu: '4000m', memory: String(8 * 1024 ** 3) })
  assert.deepEqual(s.allocatable, { cpu: '3500m', memory: String(7 * 1024 ** 3) })
  assert.equal(s.ready, true)
  assert.deepEqual(s.labels, { site: 'lab' })
  assert.equal(nodeSummaryOf({ ...self, status: { ...self.status, state: 'NotReady' } }, [], 'h1')!.ready, false)
  // The cluster's VMs pinned here: 2 vCPUs, 2Gi + 128Mi for qemu; one on another node counts there.
  const vm = (node: string): any => ({ metadata: { name: 'v', createdAt: '' }, spec: { node, cpus: 2, memory: '2Gi', kernel: { path: '/boot/k' } } })
  assert.deepEqual(nodeSummaryOf(self, [pod('h1', '500m')], 'h1', [vm('h1'), vm('h2')])!.allocatable, {
    cpu: '1500m',
    memory: String(5 * 1024 ** 3 - 128 * 1024 ** 2),
  })
  assert.equal(nodeSummaryOf(undefined, [], 'h1'), undefined)
  // The network part, with what relays between clusters need (reach as /64s, behind NAT).
  const network = {
    publicKey: 'k',
    prefix: 'fd00:1:2:3::/64',
    endpoints: ['10.77.0.2:51820'],
    reachPrefixes: ['fd00:1:2:4::/64', 7],
    behindNat: true,
    seen: {},
  }
  assert.deepEqual(nodeSummaryOf({ ...self, status: { ...self.status, network } }, [], 'h1')!.network, {
    publicKey: 'k',
    prefix: 'fd00:1:2:3::/64',
    endpoints: ['10.77.0.2:51820'],
    reach: ['fd00:1:2:4::/64'],
    nat: true,
  })
})

/**
 * Home's side of a federation document with node h1 of home: the federation store (written as
 * home), the cluster's own store with h1 at `capacity`, and home's Cluster object in the document.
 */
async function homeWithNode(t: { after(fn: () => unknown): void }, capacity: { cpu: string; memory: string }) {
  const dir = await mkdtemp(join(tmpdir(), 'orc-fedsched-'))
  t.after(() => rm(dir, { recursive: true, force: true }))
  const fed = await openStore({ dir: join(dir, 'fed'), ownership: clusterOwnership('home') })
  t.after(() => fed.close())
  const own = await tempStore()
  t.after(own.cleanup)
  const asHome = taggedStore(fed, 'home')
  await asHome.apply({ apiVersion: 'orc/v1', kind: 'Cluster', metadata: { name: 'home' }, spec: { id: 'aa'.repeat(8) } } as never, {
    author: 'controller:federation',
    now,
  })
  await own.store.apply({ apiVersion: 'orc/v1', kind: 'Node', metadata: { name: 'h1' } } as never, { author: 'controller:node', now })
  await own.store.patch({ kind: 'Node', namespace: '', name: 'h1' }, [{ path: ['status', 'capacity'], value: capacity }], {
    author: 'controller:node',
    now,
  })
  return { fed, own, asHome }
}

test('the federation document as written from home: controllers write as controller:<name>@home, nobody else does', async (t) => {
  // Node summary publishing into Cluster/home.status.nodes.
  const { fed, own, asHome } = await homeWithNode(t, { cpu: '2', memory: '4Gi' })
  const pub = new NodeSummaryPublisher({ own: own.store, fed: asHome, nodeName: 'h1', cluster: 'home', clock: { ...systemClock, now: () => now }, log: silent })
  await pub.publish()
  const c = fed.get({ kind: 'Cluster', namespace: '', name: 'home' })!
  assert.equal((c.status as any).nodes.h1.capacity.cpu, '2000m')
  assert.equal((await fed.history({ kind: 'Cluster', namespace: '', name: 'home' })).at(-1)!.author, 'controller:cluster@home')
  const revs = (await fed.history({ kind: 'Cluster', namespace: '', name: 'home' })).length
  await pub.publish()
  assert.equal((await fed.history({ kind: 'Cluster', namespace: '', name: 'home' })).length, revs, 'an unchanged summary is not written again')
  // Only the owning controller of this cluster may write a pod's binding.
  await asHome.apply(
    { apiVersion: 'orc/v1', kind: 'Pod', metadata: { name: 'web', namespace: 'shared' }, spec: { containers: [{ name: 'm', image: 'i' }] } } as never,
    { author: 'user:alice', now },
  )
  const ref = { kind: 'Pod', namespace: 'shared', name: 'web' }
  await asHome.patch(ref, [{ path: ['status', 'node'], value: 'h1@home' }], { author: 'controller:scheduler', now })
  await assert.rejects(
    asHome.patch(ref, [{ path: ['status', 'node'], value: 'x@home' }], { author: 'controller:lifecycle', now }),
    /owned by controller:scheduler@home/,
  )
  await assert.rejects(
    fed.patch(ref, [{ path: ['status', 'node'], value: 'x@home' }], { author: 'controller:scheduler@cloud', now }),
    /owned by controller:scheduler@home/,
  )
})

test('the API records which cluster created a shared pod (orc/cluster), keeps it, and refuses another value', async (t) => {
  const own = await tempStore()
  const fed = await tempStore()
  t.after(own.cleanup)
  t.after(fed.cleanup)
  const scope = { store: fed.store, cluster: 'home', federation: 'lab' }
  const api = routedStore(own.store, { scopeOf: (ns) => (ns === 'shared' ? scope : undefined), scopes: () => [{ namespaces: ['shared'], scope }] })
  const web = { apiVersion: 'orc/v1', kind: 'Pod', metadata: { name: 'web', namespace: 'shared' }, spec: { containers: [{ name: 'm', image: 'i' }] } }
  await api.apply(web as never, { author: 'user:alice', now })
  const ref = { kind: 'Pod', namespace: 'shared', name: 'web' }
  assert.equal(api.get(ref)!.metadata.annotations!['orc/cluster'], 'home')
  // Re-applied without the annotation (the usual manifest): kept, no change.
  const again = await api.apply({ ...web, spec: { ...web.spec, policy: 'ha' } } as never, { author: 'user:alice', now })
  assert.equal(again.object!.metadata.annotations!['orc/cluster'], 'home')
  await assert.rejects(
    api.apply({ ...web, metadata: { ...web.metadata, annotations: { 'orc/cluster': 'cloud' } } } as never, { author: 'user:alice', now }),
    /metadata.annotations.orc\/cluster: set by orc to the cluster that created the pod \(home\); use spec.placement.clusters/,
  )
  // Private namespaces are untouched.
  await api.apply({ ...web, metadata: { name: 'p', namespace: 'default' } } as never, { author: 'user:alice', now })
  assert.equal(api.get({ kind: 'Pod', namespace: 'default', name: 'p' })!.metadata.annotations, undefined)
})

test('the cluster’s own scheduler counts federated pods on its nodes (no oversubscription across scopes)', async () => {
  const { federatedLoad } = await import('../../src/agent/pods/controller.ts')
  const { explainPod } = await import('../../src/sched/index.ts')
  const fedPod = (name: string, node: string, cpu: string, phase?: string): any => ({
    metadata: { name, namespace: 'shared', createdAt: '2026-06-01T00:00:00Z' },
    spec: { containers: [{ name: 'm', image: 'i', resources: { requests: { cpu } } }] },
    status: { node, ...(phase ? { phase } : {}) },
  })
  const load = federatedLoad('federation/x', '@home', [fedPod('a', 'h1@home', '800m'), fedPod('b', 'c1@cloud', '2'), fedPod('c', 'h1@home', '2', 'Failed')])
  assert.deepEqual(
    load.map((p) => [p.namespace, p.name, p.node, p.pin]),
    [['federation/x:shared', 'a', 'h1', 'h1']],
  )
  const view = {
    now,
    nodes: [{ name: 'h1', state: 'alive' as const, capacity: { cpu: '1', memory: '1Gi' } }],
    pods: [{ namespace: 'default', name: 'local', requests: { cpu: '500m', memory: '0' } }, ...load],
  }
  const e = explainPod(view, 'default/local')
  assert.equal(e.status, 'pending')
  assert.match(e.nodes[0]!.reasons.join(), /insufficient cpu \(requests 500m, free 200m\)/)
})

test('pins in a shared namespace: node@cluster names a node of any member cluster, a bare name one of the pod’s cluster', () => {
  const pv = (name: string, extra: Record<string, unknown>) => ({ namespace: 'shared', name, requests: {}, ...extra })
  const pod = (name: string) => ({ metadata: { name, namespace: 'shared', annotations: { 'orc/cluster': 'home' } } }) as never
  const view = federatedView(
    {
      now,
      nodes: [
        { name: 'h1@home', state: 'alive' },
        { name: 'c1@cloud', state: 'alive' },
      ],
      pods: [pv('far', { pin: 'c1@cloud' }), pv('bare', { pin: 'h1' }), pv('bare-one', { pin: 'c1', clusters: ['cloud'] }), pv('free', {})],
    },
    [pod('far'), pod('bare'), pod('bare-one'), pod('free')],
  )
  const by = new Map(view.pods.map((p) => [p.name, p]))
  assert.deepEqual([by.get('far')!.pin, by.get('far')!.clusters], ['c1@cloud', ['cloud']], 'a pin to another cluster allows that cluster')
  assert.deepEqual([by.get('bare')!.pin, by.get('bare')!.clusters], ['h1@home', ['home']], 'a bare pin: the creating cluster')
  assert.deepEqual([by.get('bare-one')!.pin, by.get('bare-one')!.clusters], ['c1@cloud', ['cloud']], 'a bare pin: the one allowed cluster')
  assert.deepEqual(by.get('free')!.clusters, ['home'])
  // The planner places each on its pinned node.
  const binds = new Map(
    plan(view)
      .filter((a) => a.type === 'bind')
      .map((a) => [String((a as { pod: string }).pod).replace(/^shared\//, ''), (a as { node: string }).node]),
  )
  assert.equal(binds.get('far'), 'c1@cloud')
  assert.equal(binds.get('bare'), 'h1@home')
  assert.equal(binds.get('bare-one'), 'c1@cloud')
  // The pod schema takes node@cluster; a pin whose cluster placement.clusters leaves out is refused.
  assert.throws(
    () =>
      normalizeManifest({
        apiVersion: 'orc/v1',
        kind: 'Pod',
        metadata: { name: 'x', namespace: 'shared' },
        spec: { placement: { node: 'c1@cloud', clusters: ['home'] }, containers: [{ name: 'm', image: 'busybox' }] },
      }),
    /spec\.placement\.node: pinned to a node of cluster cloud, which is not in placement\.clusters/,
  )
  assert.ok(
    normalizeManifest({
      apiVersion: 'orc/v1',
      kind: 'Pod',
      metadata: { name: 'x' },
      spec: { placement: { node: 'c1@cloud' }, containers: [{ name: 'm', image: 'busybox' }] },
    }),
  )
})

test('node summaries: a change of free resources alone is coalesced (one revision per window), readiness goes at once', async (t) => {
  const { fed, own, asHome } = await homeWithNode(t, { cpu: '4', memory: '8Gi' })
  const ref = { kind: 'Cluster', namespace: '', name: 'home' }
  const nodeRef = { kind: 'Node', namespace: '', name: 'h1' }
  let clock = now
  const pub = new NodeSummaryPublisher({
    own: own.store,
    fed: asHome,
    nodeName: 'h1',
    cluster: 'home',
    clock: { ...systemClock, now: () => clock },
    log: silent,
    coalesceMs: 30_000,
  })
  const revisions = async () => (await fed.history(ref)).length
  const free = () => ((fed.get(ref)!.status as any).nodes.h1.allocatable as { cpu: string }).cpu
  await pub.publish()
  const first = await revisions()
  assert.equal(free(), '4000m')
  // Ten pods of the cluster start on h1, one a second: no revision until the window has passed.
  for (let i = 0; i < 10; i++) {
    clock += 1000
    await own.store.apply(
      {
        apiVersion: 'orc/v1',
        kind: 'Pod',
        metadata: { name: `p${i}` },
        spec: { placement: { node: 'h1' }, containers: [{ name: 'm', image: 'i', resources: { requests: { cpu: '100m' } } }] },
      } as never,
      { author: 'user:alice', now: clock },
    )
    await pub.publish()
  }
  assert.equal(await revisions(), first, 'resources alone: coalesced')
  assert.equal(free(), '4000m')
  clock += 20_000
  await pub.publish()
  assert.equal(await revisions(), first + 1, 'one revision once the window has passed')
  assert.equal(free(), '3000m', 'with the latest value')
  // A readiness change is written at once, inside the window.
  clock += 1000
  await own.store.patch(nodeRef, [{ path: ['status', 'state'], value: 'NotReady' }], { author: 'controller:node', now: clock })
  await pub.publish()
  assert.equal(await revisions(), first + 2)
  assert.equal((fed.get(ref)!.status as any).nodes.h1.ready, false)
})

test('a cluster pod and federated pods bound to one node at once: the latest federated bindings yield until the rest fit', async (t) => {
  const node = (cpu: string) =>
    ({
      metadata: { name: 'h1', uid: 'h1', revision: 1, revisionId: '', createdAt: '', updatedAt: '', updatedBy: 'x' },
      status: { capacity: { cpu, memory: '8Gi' } },
    }) as never
  const pod = (name: string, cpu: string, status: Record<string, unknown>, spec: Record<string, unknown> = {}) =>
    ({
      metadata: { name, namespace: 'shared', uid: name, revision: 1, revisionId: '', createdAt: '', updatedAt: '', updatedBy: 'x' },
      spec: { containers: [{ name: 'm', image: 'i', resources: { requests: { cpu } } }], ...spec },
      status,
    }) as never
  const at = (s: number) => ({ at: new Date(now + s * 1000).toISOString() })
  const own = [pod('local', '2', { node: 'h1', phase: 'Running' }), pod('done', '4', { node: 'h1', phase: 'Succeeded' })]
  const fed = [
    pod('early', '1', { node: 'h1@home', scheduling: at(1) }),
    pod('late', '1', { node: 'h1@home', scheduling: at(3) }),
    pod('mid', '1', { node: 'h1@home', scheduling: at(2) }),
    pod('elsewhere', '1', { node: 'h1@cloud', scheduling: at(0) }),
  ]
  const names = (ps: { metadata: { name: string } }[]) => ps.map((p) => p.metadata.name)
  assert.deepEqual(names(overcommitYields(node('4'), own, fed, 'h1', 'home')), ['late'], '4 CPUs: local 2 + early 1 + mid 1; late yields')
  assert.deepEqual(names(overcommitYields(node('3'), own, fed, 'h1', 'home')), ['mid', 'late'])
  assert.deepEqual(names(overcommitYields(node('8'), own, fed, 'h1', 'home')), [], 'room for all: nobody yields')
  assert.deepEqual(names(overcommitYields(node('1'), own, fed, 'h1', 'home')), ['early', 'mid', 'late'], 'the cluster pods alone fill it')
  // The cluster's VMs on the node hold their room too (one vCPU here; a Halted one nothing).
  const vm = (name: string, spec: Record<string, unknown> = {}) =>
    ({ metadata: { name, namespace: 'default', createdAt: '' }, spec: { node: 'h1', kernel: { path: '/boot/k' }, ...spec } }) as never
  assert.deepEqual(names(overcommitYields(node('4'), own, fed, 'h1', 'home', [vm('v'), vm('off', { runStrategy: 'Halted' })])), ['mid', 'late'])

  // The publisher on h1 unbinds the yielding pod (as controller:scheduler@home) and writes the summary at once.
  const { fed: fedStore, own: ownStore, asHome } = await homeWithNode(t, { cpu: '2', memory: '8Gi' })
  const pub = new NodeSummaryPublisher({
    own: ownStore.store,
    fed: asHome,
    nodeName: 'h1',
    cluster: 'home',
    clock: { ...systemClock, now: () => now },
    log: silent,
  })
  await pub.publish()
  const spec = (cpu: string) => ({ containers: [{ name: 'm', image: 'i', resources: { requests: { cpu } } }] })
  await asHome.apply({ apiVersion: 'orc/v1', kind: 'Pod', metadata: { name: 'fed', namespace: 'shared' }, spec: spec('1') } as never, {
    author: 'user:alice',
    now,
  })
  await asHome.patch(
    { kind: 'Pod', namespace: 'shared', name: 'fed' },
    [
      { path: ['status', 'node'], value: 'h1@home' },
      { path: ['status', 'scheduling'], value: at(1) },
    ],
    { author: 'controller:scheduler', now },
  )
  // At the same moment, the cluster's scheduler bound a 2-CPU pod of its own to h1.
  await ownStore.store.apply({ apiVersion: 'orc/v1', kind: 'Pod', metadata: { name: 'big' }, spec: { ...spec('2'), placement: { node: 'h1' } } } as never, {
    author: 'user:alice',
    now,
  })
  await pub.publish()
  const yielded = fedStore.get({ kind: 'Pod', namespace: 'shared', name: 'fed' })!
  assert.equal(yielded.status?.node, undefined, 'the federated pod left h1')
  assert.equal((yielded.status?.scheduling as { evictedFrom?: string } | undefined)?.evictedFrom, 'h1@home')
  assert.equal((await fedStore.history({ kind: 'Pod', namespace: 'shared', name: 'fed' })).at(-1)!.author, 'controller:scheduler@home')
  assert.equal((fedStore.get({ kind: 'Cluster', namespace: '', name: 'home' })!.status as any).nodes.h1.allocatable.cpu, '0m', 'the summary says h1 is full')
})
