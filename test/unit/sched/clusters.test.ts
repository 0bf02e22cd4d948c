// Placement across the clusters of a federation (placement.clusters, preferClusters, spread over
// the `cluster` topology key, ha failover between clusters). Pure: views in, operations out.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import { federatedView } from '../../../src/agent/federation/scheduling.ts'
import { type ClusterView, explainPod, type NodeView, type PodView, plan } from '../../../src/sched/index.ts'
import { node, pod, shuffled, view } from './helpers.ts'

const CLUSTERS = ['cloud', 'edge', 'home']

function fedNode(n: string, cluster: string, o: Partial<NodeView> = {}): NodeView {
  return node(`${n}@${cluster}`, { cluster, ...o })
}

function nodesOf(perCluster: number, o: (c: string, i: number) => Partial<NodeView> = () => ({})): NodeView[] {
  return CLUSTERS.flatMap((c) => Array.from({ length: perCluster }, (_, i) => fedNode(`n${i}`, c, o(c, i))))
}

const clusterOf = (nodeName: string) => nodeName.slice(nodeName.indexOf('@') + 1)

test('placement.clusters: a pod runs only in an allowed cluster; none allowed alive → pending with the reason', () => {
  const nodes = nodesOf(3)
  const ops = plan(view(nodes, [pod('web', { clusters: ['cloud'] }), pod('db', { clusters: ['edge', 'home'] })]))
  const where = new Map(ops.map((o) => [o.pod, o.node]))
  assert.equal(clusterOf(where.get('default/web')!), 'cloud')
  assert.notEqual(clusterOf(where.get('default/db')!), 'cloud')

  const cloudDown = nodes.map((n) => (n.cluster === 'cloud' ? { ...n, state: 'dead' as const, since: 0 } : n))
  const e = explainPod(view(cloudDown, [pod('web', { clusters: ['cloud'] })]), 'default/web')
  assert.equal(e.status, 'pending')
  assert.match(e.summary, /0\/9 nodes can run it: 6 cluster not allowed, 3 node unreachable/)
  const homeVerdict = e.nodes.find((v) => v.node === 'n0@home')!
  assert.deepEqual(homeVerdict.reasons, ['cluster home is not in placement.clusters [cloud]'])
})

test('a pod with placement.clusters in a cluster scope (no federation) stays pending and says why', () => {
  const e = explainPod(view([node('a'), node('b')], [pod('web', { clusters: ['cloud'] })]), 'default/web')
  assert.equal(e.status, 'pending')
  assert.match(e.nodes[0]!.reasons[0]!, /placement.clusters applies in shared namespaces only/)
})

test('shared pods without placement.clusters run only where they were created (orc/cluster); none recorded → pending', () => {
  const nodes = nodesOf(2)
  const mk = (name: string, origin?: string) => ({
    apiVersion: 'orc/v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default', ...(origin ? { annotations: { 'orc/cluster': origin } } : {}) },
  })
  const v = federatedView(view(nodes, [pod('a'), pod('b'), pod('c', { clusters: ['home', 'edge'] })]), [mk('a', 'edge'), mk('b'), mk('c', 'cloud')] as never)
  const where = new Map(plan(v).map((o) => [o.pod, o.node]))
  assert.equal(clusterOf(where.get('default/a')!), 'edge')
  assert.equal(where.get('default/b'), undefined, 'no origin, no clusters: pending')
  assert.notEqual(clusterOf(where.get('default/c')!), 'cloud', 'explicit clusters win over the origin')
})

test('preferClusters: the first preferred cluster while it has room; the next when it is full or lost', () => {
  const nodes = nodesOf(2, () => ({ capacity: { cpu: '1', memory: '8Gi' } }))
  const pods = Array.from({ length: 5 }, (_, i) =>
    pod(`p${i}`, { clusters: CLUSTERS, preferClusters: ['home', 'edge'], requests: { cpu: '1', memory: '1Gi' } }),
  )
  const where = plan(view(nodes, pods)).map((o) => clusterOf(o.node))
  // 2 nodes × 1 cpu in home, then edge, then cloud.
  assert.deepEqual(where.sort(), ['edge', 'edge', 'home', 'home', 'cloud'].sort())
  const homeLost = nodes.map((n) => (n.cluster === 'home' ? { ...n, state: 'suspect' as const, since: 0 } : n))
  const w2 = plan(view(homeLost, pods.slice(0, 2))).map((o) => clusterOf(o.node))
  assert.deepEqual(w2, ['edge', 'edge'])
})

test('spread: replicas of a group spread over clusters by default; anti-affinity on `cluster` is a hard rule', () => {
  const nodes = nodesOf(4)
  const replicas = Array.from({ length: 3 }, (_, i) => pod(`web-${i}`, { clusters: CLUSTERS, group: 'default/web' }))
  const clusters = plan(view(nodes, replicas)).map((o) => clusterOf(o.node))
  assert.deepEqual([...new Set(clusters)].sort(), CLUSTERS, `one replica per cluster, got ${clusters}`)

  const anti = { podAntiAffinity: { required: [{ labelSelector: { matchLabels: { app: 'db' } }, topologyKey: 'cluster' }] } }
  const dbs = Array.from({ length: 4 }, (_, i) => pod(`db-${i}`, { clusters: CLUSTERS, labels: { app: 'db' }, affinity: anti }))
  const ops = plan(view(nodes, dbs))
  assert.equal(ops.length, 3, 'three clusters take three; the fourth waits')
  assert.equal(new Set(ops.map((o) => clusterOf(o.node))).size, 3)
  const e = explainPod(view(nodes, dbs), 'default/db-3')
  assert.match(e.summary, /pod anti-affinity/)
})

test('ha: a pod whose whole cluster is lost moves to another allowed cluster after haAfter; best-effort stays', () => {
  const nodes = nodesOf(2)
  const now = 1_000_000
  const lost = nodes.map((n) => (n.cluster === 'home' ? { ...n, state: 'suspect' as const, since: now - 31_000 } : n))
  const pods: PodView[] = [
    pod('ha', { clusters: ['home', 'cloud'], policy: 'ha', node: 'n0@home' }),
    pod('be', { clusters: ['home', 'cloud'], node: 'n1@home' }),
    pod('only-home', { clusters: ['home'], policy: 'ha', node: 'n1@home' }),
  ]
  const ops = plan(view(lost, pods, now))
  const fmt = ops.map((o) => o.format())
  const bind = ops.find((o) => o.type === 'bind' && o.pod === 'default/ha')
  assert.ok(bind, fmt.join('\n'))
  assert.equal(clusterOf(bind.node), 'cloud')
  assert.equal((bind as { from?: string }).from, 'n0@home')
  assert.ok(!ops.some((o) => o.pod === 'default/be'), 'best-effort waits for its node')
  // Allowed only at home: unbound, but nowhere to go.
  assert.ok(ops.some((o) => o.type === 'unbind' && o.pod === 'default/only-home'))
  assert.ok(!ops.some((o) => o.type === 'bind' && o.pod === 'default/only-home'))
  // Before haAfter nothing moves.
  const early = nodes.map((n) => (n.cluster === 'home' ? { ...n, state: 'suspect' as const, since: now - 10_000 } : n))
  assert.deepEqual(plan(view(early, pods, now)), [])
})

test('placement.clusters changed: a pod on a cluster no longer allowed is evicted and placed in an allowed one', () => {
  const nodes = nodesOf(1)
  const ops = plan(view(nodes, [pod('web', { clusters: ['cloud'], node: 'n0@home' })]))
  assert.deepEqual(
    ops.map((o) => o.format()),
    [
      'evict pod/default/web from n0@home: cluster home is no longer in placement.clusters [cloud]',
      'bind pod/default/web to n0@cloud (from n0@home): best of 1 feasible nodes (3 checked)',
    ],
  )
})

// ---- properties ---------------------------------------------------------------------------------

const arbFed = fc
  .record({
    nodes: fc.array(
      fc.record({
        cluster: fc.constantFrom(...CLUSTERS),
        cpu: fc.integer({ min: 0, max: 4000 }),
        state: fc.constantFrom('alive', 'alive', 'alive', 'suspect', 'dead'),
        downFor: fc.integer({ min: 0, max: 120 }),
      }),
      { minLength: 0, maxLength: 15 },
    ),
    pods: fc.array(
      fc.record({
        clusters: fc.subarray(CLUSTERS, { minLength: 1 }),
        prefer: fc.boolean(),
        cpu: fc.integer({ min: 0, max: 2000 }),
        ha: fc.boolean(),
        bindTo: fc.option(fc.integer({ min: 0, max: 20 }), { nil: undefined }),
        group: fc.constantFrom(undefined, 'g1', 'g2'),
        anti: fc.boolean(),
      }),
      { minLength: 0, maxLength: 20 },
    ),
  })
  .map(({ nodes, pods }): ClusterView => {
    const now = 1_000_000
    const ns = nodes.map((n, i) =>
      fedNode(`n${i}`, n.cluster, {
        capacity: { cpu: `${n.cpu}m`, memory: '8Gi' },
        state: n.state as NodeView['state'],
        ...(n.state !== 'alive' ? { since: now - n.downFor * 1000 } : {}),
      }),
    )
    const ps = pods.map((p, i) =>
      pod(`p${i}`, {
        clusters: p.clusters,
        ...(p.prefer ? { preferClusters: [...p.clusters].reverse() } : {}),
        requests: { cpu: `${p.cpu}m`, memory: '64Mi' },
        ...(p.ha ? { policy: 'ha' as const } : {}),
        ...(p.bindTo !== undefined && p.bindTo < ns.length ? { node: ns[p.bindTo]!.name } : {}),
        ...(p.group ? { group: `default/${p.group}`, labels: { app: p.group } } : {}),
        ...(p.anti && p.group
          ? { affinity: { podAntiAffinity: { required: [{ labelSelector: { matchLabels: { app: p.group } }, topologyKey: 'cluster' }] } } }
          : {}),
      }),
    )
    return { nodes: ns, pods: ps, now }
  })

test('property: every bind lands in an allowed cluster, on a live node, and members with the same view (in any order) agree', () => {
  fc.assert(
    fc.property(arbFed, fc.integer(), (v, seed) => {
      const ops = plan(v)
      const podsBy = new Map(v.pods.map((p) => [`${p.namespace}/${p.name}`, p]))
      const nodesBy = new Map(v.nodes.map((n) => [n.name, n]))
      for (const o of ops) {
        if (o.type !== 'bind') continue
        const p = podsBy.get(o.pod)!
        const n = nodesBy.get(o.node)!
        assert.ok(p.clusters!.includes(n.cluster!), `${o.format()} but clusters [${p.clusters}]`)
        assert.equal(n.state, 'alive')
      }
      // Each member of each cluster computes from the same view, listed in its own order.
      const other = plan({ now: v.now, nodes: shuffled(v.nodes, seed), pods: shuffled(v.pods, seed + 1) })
      assert.deepEqual(
        other.map((o) => o.format()),
        ops.map((o) => o.format()),
      )
    }),
    { numRuns: 300 },
  )
})

test('property: best-effort pods never move off a lost cluster; required anti-affinity on `cluster` is never broken by a bind', () => {
  fc.assert(
    fc.property(arbFed, (v) => {
      const ops = plan(v)
      for (const o of ops) {
        const p = v.pods.find((x) => `${x.namespace}/${x.name}` === o.pod)!
        if (p.node !== undefined && p.policy !== 'ha' && o.type !== 'bind') {
          const n = v.nodes.find((x) => x.name === p.node)!
          // (A pod bound in a cluster no longer allowed leaves by design, like a moved pin.)
          if (p.clusters!.includes(n.cluster!)) assert.ok(n.state === 'alive', `best-effort ${o.format()}`)
        }
      }
      // Anti-affinity: after the plan, no two pods of one anti group share a cluster unless both were already bound there.
      const final = new Map<string, string>()
      for (const p of v.pods) if (p.node !== undefined) final.set(`${p.namespace}/${p.name}`, p.node)
      for (const o of ops) {
        if (o.type === 'bind') final.set(o.pod, o.node)
        else final.delete(o.pod)
      }
      const newBinds = new Set(ops.filter((o) => o.type === 'bind').map((o) => o.pod))
      for (const o of newBinds) {
        const p = v.pods.find((x) => `${x.namespace}/${x.name}` === o)!
        if (!p.affinity) continue
        const c = clusterOf(final.get(o)!)
        for (const [k, nn] of final) {
          if (k === o) continue
          const q = v.pods.find((x) => `${x.namespace}/${x.name}` === k)!
          if (q.labels?.app === p.labels?.app) assert.notEqual(clusterOf(nn), c, `${o} placed beside ${k} in ${c}`)
        }
      }
    }),
    { numRuns: 300 },
  )
})
