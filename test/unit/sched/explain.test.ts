import assert from 'node:assert/strict'
import { test } from 'node:test'
import { isOrcError } from '../../../src/model/index.ts'
import { explainPod, formatExplanation } from '../../../src/sched/index.ts'
import { node, pod, view } from './helpers.ts'

const nodes = [
  node('node-1', { labels: { disktype: 'ssd' }, taints: [{ key: 'dedicated', value: 'gpu', effect: 'NoSchedule' }] }),
  node('node-2', { labels: { disktype: 'hdd' } }),
  node('node-3', { labels: { disktype: 'ssd' }, capacity: { cpu: '4', memory: '1Gi' } }),
]
const pods = [
  pod('filler', { node: 'node-3', requests: { cpu: '100m', memory: '512Mi' } }),
  pod('db', { nodeSelector: { disktype: 'ssd' }, requests: { cpu: '500m', memory: '2Gi' } }),
]

test('why a pod is pending: every node with what ruled it out, in words', () => {
  const e = explainPod(view(nodes, pods), 'default/db')
  assert.equal(e.status, 'pending')
  assert.equal(
    formatExplanation(e),
    [
      'pod/default/db: pending: 0/3 nodes can run it: 1 insufficient memory, 1 nodeSelector mismatch, 1 taint not tolerated',
      '  node-1: taint dedicated=gpu:NoSchedule not tolerated',
      '  node-2: nodeSelector disktype=ssd does not match',
      '  node-3: insufficient memory (requests 2Gi, free 512Mi)',
    ].join('\n'),
  )
})

test('the same explanation as JSON, for tools', () => {
  const e = JSON.parse(JSON.stringify(explainPod(view(nodes, pods), 'default/db')))
  assert.deepEqual(e.nodes, [
    { node: 'node-1', fits: false, reasons: ['taint dedicated=gpu:NoSchedule not tolerated'], code: 9 },
    { node: 'node-2', fits: false, reasons: ['nodeSelector disktype=ssd does not match'], code: 7 },
    { node: 'node-3', fits: false, reasons: ['insufficient memory (requests 2Gi, free 512Mi)'], code: 11 },
  ])
})

test('a node failing several checks lists all of them', () => {
  const e = explainPod(
    view(
      [node('n', { unschedulable: true, state: 'suspect', since: 1_000_000 - 12_000, capacity: { cpu: '100m', memory: '1Gi' } })],
      [pod('p', { requests: { cpu: '2', memory: '2Gi' } })],
    ),
    'default/p',
  )
  assert.deepEqual(e.nodes[0]!.reasons, [
    'node suspect (unreachable for 12s)',
    'node cordoned (unschedulable)',
    'insufficient cpu (requests 2, free 100m)',
    'insufficient memory (requests 2Gi, free 1Gi)',
  ])
})

test('affinity reasons name the selector and the topology domain', () => {
  const ns = [node('a', { labels: { site: 'eu' } }), node('b', { labels: { site: 'us' } }), node('c')]
  const ps = [
    pod('web-0', { node: 'a', labels: { app: 'web' } }),
    pod('web-1', {
      labels: { app: 'web' },
      requests: { cpu: '100' },
      affinity: {
        podAntiAffinity: { required: [{ labelSelector: { matchLabels: { app: 'web' } }, topologyKey: 'site' }] },
        podAffinity: { required: [{ labelSelector: { matchLabels: { app: 'db' } }, topologyKey: 'node' }] },
      },
    }),
  ]
  const lines = formatExplanation(explainPod(view(ns, ps), 'default/web-1'))
    .split('\n')
    .slice(1)
  assert.deepEqual(lines, [
    '  a: insufficient cpu (requests 100, free 3900m)',
    '  a: pod affinity: no pod matching app=db on this node',
    '  a: pod anti-affinity: a pod matching app=web already runs in site=eu',
    '  b: insufficient cpu (requests 100, free 4)',
    '  b: pod affinity: no pod matching app=db on this node',
    '  c: insufficient cpu (requests 100, free 4)',
    '  c: pod affinity: no pod matching app=db on this node',
  ])
})

test('a bound pod says where it runs and what its policy is waiting for', () => {
  const ns = [node('lost', { state: 'suspect', since: 1_000_000 - 10_000 }), node('ok')]
  const e = explainPod(view(ns, [pod('web', { node: 'lost', policy: 'ha' })]), 'default/web')
  assert.equal(formatExplanation(e), 'pod/default/web: bound on lost: node lost suspect for 10s; ha pod moves after 30s')
  const moving = explainPod(view(ns, [pod('web', { node: 'lost', policy: 'ha' })], 1_000_000 + 20_000), 'default/web')
  assert.equal(moving.status, 'moving')
  assert.equal(moving.target, 'ok')
  assert.equal(moving.summary, 'node lost suspect for 30s (ha: moves after 30s); will be bound to ok')
})

test('a pending pod that fits is reported as placeable with its target', () => {
  const e = explainPod(view([node('a')], [pod('p')]), 'default/p')
  assert.equal(e.status, 'placeable')
  assert.equal(e.target, 'a')
  assert.equal(e.nodes[0]!.fits, true)
})

test('the explanation sees what the plan sees: capacity taken by pods placed before it', () => {
  const ns = [node('a', { capacity: { cpu: '1', memory: '1Gi' } })]
  const ps = [pod('first', { requests: { cpu: '1' }, priority: 5 }), pod('second', { requests: { cpu: '1' } })]
  assert.equal(explainPod(view(ns, ps), 'default/second').nodes[0]!.reasons[0], 'insufficient cpu (requests 1, free 0)')
})

test('unknown pod: not_found', () => {
  assert.throws(
    () => explainPod(view([], []), 'default/nope'),
    (e: unknown) => isOrcError(e, 'not_found'),
  )
})
