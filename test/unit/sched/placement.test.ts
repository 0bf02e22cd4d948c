import assert from 'node:assert/strict'
import { test } from 'node:test'
import { BindOp, formatPlan, type NodeView, type Operation, type PodView, plan, planPlacements } from '../../../src/sched/index.ts'
import { node, pod, view } from './helpers.ts'

const binds = (ops: Operation[]) => Object.fromEntries(ops.filter((o) => o.type === 'bind').map((o) => [o.pod, o.node]))

test('a pending pod is bound to a node that fits it', () => {
  const ops = plan(view([node('a'), node('b')], [pod('web')]))
  assert.equal(ops.length, 1)
  assert.ok(ops[0] instanceof BindOp)
  assert.equal(ops[0]!.pod, 'default/web')
  assert.ok(['a', 'b'].includes(ops[0]!.node))
  assert.match(ops[0]!.format(), /^bind pod\/default\/web to [ab]: best of 2 feasible nodes/)
})

test('resources: a pod goes only where its cpu and memory fit, and fills nodes no further', () => {
  const nodes = [node('small', { capacity: { cpu: '1', memory: '1Gi' } }), node('big', { capacity: { cpu: '8', memory: '16Gi' } })]
  const r = planPlacements(view(nodes, [pod('hungry', { requests: { cpu: '2', memory: '4Gi' } })]))
  assert.deepEqual(binds(r.operations), { 'default/hungry': 'big' })

  // Three 600m pods on two 1-cpu nodes: two fit, one stays pending with the reason.
  const two = [node('a', { capacity: { cpu: '1', memory: '1Gi' } }), node('b', { capacity: { cpu: '1', memory: '1Gi' } })]
  const pods = ['x', 'y', 'z'].map((n) => pod(n, { requests: { cpu: '600m', memory: '100Mi' } }))
  const r2 = planPlacements(view(two, pods))
  assert.equal(r2.operations.length, 2)
  assert.deepEqual(new Set(Object.values(binds(r2.operations))), new Set(['a', 'b']))
  assert.deepEqual(r2.pending, [{ pod: 'default/z', reason: '0/2 nodes can run it: 2 insufficient cpu', counts: { 10: 2 } }])
})

test('resources held by pods already bound count against their node', () => {
  const nodes = [node('a', { capacity: { cpu: '1', memory: '1Gi' } }), node('b', { capacity: { cpu: '1', memory: '1Gi' } })]
  const pods = [pod('old', { node: 'a', requests: { cpu: '900m', memory: '1Mi' } }), pod('new', { requests: { cpu: '500m', memory: '1Mi' } })]
  assert.deepEqual(binds(plan(view(nodes, pods))), { 'default/new': 'b' })
})

test('allocatable, not capacity, is what pods may use; pod count limits too', () => {
  const n = node('a', { capacity: { cpu: '4', memory: '4Gi' }, allocatable: { cpu: '1', memory: '4Gi', pods: 1 } })
  const r = planPlacements(view([n], [pod('p1', { requests: { cpu: '2' } })]))
  assert.equal(r.operations.length, 0)
  assert.match(r.pending[0]!.reason, /insufficient cpu/)
  const r2 = planPlacements(view([n], [pod('p1'), pod('p2')]))
  assert.equal(r2.operations.length, 1)
  assert.match(r2.pending[0]!.reason, /1 too many pods/)
})

test('nodeSelector: only nodes carrying every selected label', () => {
  const nodes = [node('hdd', { labels: { disktype: 'hdd' } }), node('ssd', { labels: { disktype: 'ssd', site: 'eu' } }), node('plain')]
  const ops = plan(view(nodes, [pod('db', { nodeSelector: { disktype: 'ssd', site: 'eu' } })]))
  assert.deepEqual(binds(ops), { 'default/db': 'ssd' })
  const r = planPlacements(view(nodes, [pod('db', { nodeSelector: { disktype: 'nvme' } })]))
  assert.equal(r.pending[0]!.reason, '0/3 nodes can run it: 3 nodeSelector mismatch')
})

test('node affinity: required terms are ORed, preferred terms steer', () => {
  const nodes = [node('a', { labels: { zone: 'z1' } }), node('b', { labels: { zone: 'z2' } }), node('c', { labels: { zone: 'z3' } })]
  const req = pod('p', { affinity: { nodeAffinity: { required: [{ matchExpressions: [{ key: 'zone', operator: 'In', values: ['z2', 'z3'] }] }] } } })
  const got = binds(plan(view(nodes, [req])))['default/p']
  assert.ok(got === 'b' || got === 'c')
  const pref = pod('q', { affinity: { nodeAffinity: { preferred: [{ weight: 100, selector: { matchLabels: { zone: 'z3' } } }] } } })
  assert.equal(binds(plan(view(nodes, [pref])))['default/q'], 'c')
})

test('taints: NoSchedule needs a toleration, PreferNoSchedule is avoided when possible', () => {
  const gpu: NodeView = node('gpu', { taints: [{ key: 'dedicated', value: 'gpu', effect: 'NoSchedule' }] })
  const r = planPlacements(view([gpu], [pod('web')]))
  assert.equal(r.operations.length, 0)
  assert.equal(r.pending[0]!.reason, '0/1 nodes can run it: 1 taint not tolerated')
  const tolerant = pod('train', { tolerations: [{ key: 'dedicated', operator: 'Equal', value: 'gpu', effect: 'NoSchedule' }] })
  assert.deepEqual(binds(plan(view([gpu], [tolerant]))), { 'default/train': 'gpu' })
  const wrongValue = pod('x', { tolerations: [{ key: 'dedicated', operator: 'Equal', value: 'tpu' }] })
  assert.equal(plan(view([gpu], [wrongValue])).length, 0)

  const spot = node('spot', { taints: [{ key: 'spot', effect: 'PreferNoSchedule' }], capacity: { cpu: '64', memory: '256Gi' } })
  const plain = node('plain', { capacity: { cpu: '2', memory: '2Gi' } })
  // Although `spot` is far emptier, the untolerated PreferNoSchedule taint keeps the pod away.
  assert.deepEqual(binds(plan(view([spot, plain], [pod('web')]))), { 'default/web': 'plain' })
  // With nowhere else to go it still lands there.
  assert.deepEqual(binds(plan(view([spot], [pod('web')]))), { 'default/web': 'spot' })
})

test('taints: NoExecute evicts running pods that do not tolerate it, then they are placed elsewhere', () => {
  const tainted = node('a', { taints: [{ key: 'maintenance', effect: 'NoExecute', since: 1_000_000 - 5000 }] })
  const pods = [
    pod('intolerant', { node: 'a' }),
    pod('tolerant', { node: 'a', tolerations: [{ key: 'maintenance', operator: 'Exists', effect: 'NoExecute' }] }),
    pod('brief', { node: 'a', tolerations: [{ key: 'maintenance', operator: 'Exists', tolerationSeconds: 3 }] }),
    pod('patient', { node: 'a', tolerations: [{ key: 'maintenance', operator: 'Exists', tolerationSeconds: 60 }] }),
  ]
  const ops = plan(view([tainted, node('b')], pods))
  assert.deepEqual(formatPlan(ops).split('\n'), [
    'evict pod/default/brief from a: taint maintenance:NoExecute tolerated for 3s only',
    'evict pod/default/intolerant from a: taint maintenance:NoExecute not tolerated',
    'bind pod/default/brief to b (from a): best of 1 feasible nodes (2 checked)',
    'bind pod/default/intolerant to b (from a): best of 1 feasible nodes (2 checked)',
  ])
})

test('cordoned, suspect, dead and forgotten nodes take no new pods', () => {
  const nodes = [
    node('cordoned', { unschedulable: true }),
    node('suspect', { state: 'suspect', since: 0 }),
    node('dead', { state: 'dead', since: 0 }),
    node('gone', { forgotten: true }),
    node('ok', { capacity: { cpu: '100m', memory: '128Mi' } }),
  ]
  const pods = Array.from({ length: 5 }, (_, i) => pod(`p${i}`))
  const r = planPlacements(view(nodes, pods))
  assert.deepEqual(Object.values(binds(r.operations)), ['ok'])
  assert.equal(r.pending.length, 4)
  assert.equal(r.pending[0]!.reason, '0/5 nodes can run it: 2 node unreachable, 1 insufficient cpu, 1 node cordoned, 1 node forgotten')
})

test('an explicit pin (spec.placement.node) is the only node considered', () => {
  const nodes = [node('a', { capacity: { cpu: '64', memory: '64Gi' } }), node('b', { capacity: { cpu: '1', memory: '1Gi' } })]
  assert.deepEqual(binds(plan(view(nodes, [pod('p', { pin: 'b' })]))), { 'default/p': 'b' })
  const r = planPlacements(view(nodes, [pod('p', { pin: 'b', requests: { cpu: '2' } })]))
  assert.equal(r.pending[0]!.reason, '0/2 nodes can run it: 1 insufficient cpu, 1 not the pinned node')
  // Changing the pin of a running pod moves it.
  const ops = plan(view(nodes, [pod('p', { pin: 'a', node: 'b' })]))
  assert.deepEqual(formatPlan(ops).split('\n'), [
    'evict pod/default/p from b: pod is pinned to a',
    'bind pod/default/p to a (from b): best of 1 feasible nodes (1 checked)',
  ])
})

function sites(n: number, perSite: number): NodeView[] {
  const out: NodeView[] = []
  for (let s = 0; s < n; s++) for (let i = 0; i < perSite; i++) out.push(node(`s${s}-n${i}`, { labels: { site: `site-${s}` } }))
  return out
}

test('pod anti-affinity on site: replicas land in different sites, the extra one waits', () => {
  const anti = { podAntiAffinity: { required: [{ labelSelector: { matchLabels: { app: 'web' } }, topologyKey: 'site' }] } }
  const replicas = Array.from({ length: 4 }, (_, i) => pod(`web-${i}`, { labels: { app: 'web' }, affinity: anti }))
  const r = planPlacements(view(sites(3, 4), replicas))
  const used = Object.values(binds(r.operations)).map((n) => n.split('-')[0])
  assert.equal(used.length, 3)
  assert.deepEqual(new Set(used), new Set(['s0', 's1', 's2']))
  assert.equal(r.pending.length, 1)
  assert.equal(r.pending[0]!.reason, '0/12 nodes can run it: 12 pod anti-affinity')
})

test('pod anti-affinity on node: replicas never share a node', () => {
  const anti = { podAntiAffinity: { required: [{ labelSelector: { matchLabels: { app: 'web' } }, topologyKey: 'node' }] } }
  const replicas = Array.from({ length: 6 }, (_, i) => pod(`web-${i}`, { labels: { app: 'web' }, affinity: anti }))
  const ops = plan(view(sites(2, 3), replicas))
  assert.equal(new Set(Object.values(binds(ops))).size, 6)
})

test('existing pods anti-affinity keeps newcomers they select away (symmetry)', () => {
  const loner = pod('loner', {
    node: 'a',
    labels: { app: 'loner' },
    affinity: { podAntiAffinity: { required: [{ labelSelector: { matchLabels: { app: 'noisy' } }, topologyKey: 'node' }] } },
  })
  const noisy = pod('noisy', { labels: { app: 'noisy' } })
  assert.deepEqual(binds(plan(view([node('a', { capacity: { cpu: '64', memory: '64Gi' } }), node('b')], [loner, noisy]))), { 'default/noisy': 'b' })
})

test('spread: replicas of a group spread over sites without any affinity', () => {
  const replicas = Array.from({ length: 3 }, (_, i) => pod(`api-${i}`, { group: 'api' }))
  const used = Object.values(binds(plan(view(sites(3, 3), replicas)))).map((n) => n.split('-')[0])
  assert.deepEqual(new Set(used), new Set(['s0', 's1', 's2']))
})

test('pod affinity: required co-locates with the matching pod; the first of a self-affine group may go anywhere', () => {
  const nodes = sites(3, 2)
  const db = pod('db', { node: 's2-n1', labels: { app: 'db' } })
  const cache = pod('cache', { affinity: { podAffinity: { required: [{ labelSelector: { matchLabels: { app: 'db' } }, topologyKey: 'site' }] } } })
  const got = binds(plan(view(nodes, [db, cache])))['default/cache']
  assert.ok(got?.startsWith('s2-'), got)
  const onNode = pod('sidecar', { affinity: { podAffinity: { required: [{ labelSelector: { matchLabels: { app: 'db' } }, topologyKey: 'node' }] } } })
  assert.equal(binds(plan(view(nodes, [db, onNode])))['default/sidecar'], 's2-n1')
  const nothing = planPlacements(view(nodes, [onNode]))
  assert.equal(nothing.pending[0]!.reason, '0/6 nodes can run it: 6 pod affinity not met')
  const selfAffine = { podAffinity: { required: [{ labelSelector: { matchLabels: { app: 'pack' } }, topologyKey: 'site' }] } }
  const pack = Array.from({ length: 3 }, (_, i) => pod(`pack-${i}`, { labels: { app: 'pack' }, affinity: selfAffine }))
  const sitesUsed = new Set(Object.values(binds(plan(view(nodes, pack)))).map((n) => n.split('-')[0]))
  assert.equal(sitesUsed.size, 1)
})

test('higher priority pods are placed first when capacity is short', () => {
  const nodes = [node('a', { capacity: { cpu: '1', memory: '1Gi' } })]
  const pods: PodView[] = [pod('aaa-low', { requests: { cpu: '1' } }), pod('zzz-high', { requests: { cpu: '1' }, priority: 10 })]
  assert.deepEqual(binds(plan(view(nodes, pods))), { 'default/zzz-high': 'a' })
})

test('finished pods hold nothing and are never placed', () => {
  const nodes = [node('a', { capacity: { cpu: '1', memory: '1Gi' } })]
  const pods: PodView[] = [
    pod('done', { node: 'a', phase: 'Succeeded', requests: { cpu: '1' } }),
    pod('failed', { phase: 'Failed' }),
    pod('next', { requests: { cpu: '1' } }),
  ]
  assert.deepEqual(binds(plan(view(nodes, pods))), { 'default/next': 'a' })
})

test('an unreadable quantity leaves that pod pending without stopping the others', () => {
  const r = planPlacements(view([node('a')], [pod('bad', { requests: { memory: 'lots' } }), pod('good')]))
  assert.deepEqual(binds(r.operations), { 'default/good': 'a' })
  assert.match(r.pending[0]!.reason, /^pod requests unreadable: must be a quantity/)
})

test('a view naming a pod twice is refused', () => {
  assert.throws(() => plan(view([node('a')], [pod('x'), pod('x')])), /pod default\/x twice/)
})

test('equal nodes: the seeded tie-break spreads different pods over different nodes', () => {
  const nodes = Array.from({ length: 20 }, (_, i) => node(`n${String(i).padStart(2, '0')}`, { capacity: { cpu: '1000', memory: '1000Gi' } }))
  const pods = Array.from({ length: 20 }, (_, i) => pod(`p${i}`, { requests: {} }))
  const used = new Set(Object.values(binds(plan(view(nodes, pods)))))
  assert.ok(used.size > 5, `only ${used.size} distinct nodes`)
  // A different seed gives a different (but again deterministic) choice.
  const a = plan(view(nodes, pods), { seed: 1 }).map((o) => o.format())
  const b = plan(view(nodes, pods), { seed: 2 }).map((o) => o.format())
  assert.deepEqual(
    a,
    plan(view(nodes, pods), { seed: 1 }).map((o) => o.format()),
  )
  assert.notDeepEqual(a, b)
})

test('operations are plain data in JSON', () => {
  const ops = plan(view([node('a', { state: 'dead', since: 0 }), node('b')], [pod('p', { node: 'a', policy: 'ha' })]))
  assert.deepEqual(JSON.parse(JSON.stringify(ops)), [
    { type: 'unbind', pod: 'default/p', node: 'a', reason: 'node a dead for 16m (ha: moves after 30s)' },
    { type: 'bind', pod: 'default/p', node: 'b', from: 'a', reason: 'best of 1 feasible nodes (2 checked)' },
  ])
})
