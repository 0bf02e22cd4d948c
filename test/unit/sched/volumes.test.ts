// Where pods using persistent Volumes may run (src/sched/volumes.ts) and how `orc why` says it.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { BindOp, explainPod, planPlacements, type VolumePodView, volumeConstraints } from '../../../src/sched/index.ts'

const pod = (name: string, vols: [string, boolean][], extra: Partial<VolumePodView> = {}): VolumePodView => ({
  namespace: 'default',
  name,
  volumes: vols.map(([n, writer]) => ({ name: n, writer })),
  ...extra,
})

test('a placed volume takes its pods to its node; an unplaced one lets its first writer go anywhere', () => {
  const c = volumeConstraints(
    [pod('db', [['data', true]]), pod('new', [['fresh', true]])],
    [
      { namespace: 'default', name: 'data', node: 'b' },
      { namespace: 'default', name: 'fresh' },
    ],
  )
  assert.deepEqual(c.get('default/db'), { node: 'b' })
  assert.deepEqual(c.get('default/new'), {})
})

test('one writer at a time: the bound one holds it, even when another writer is older', () => {
  const c = volumeConstraints(
    [pod('old', [['data', true]], { createdAt: 1 }), pod('bound', [['data', true]], { createdAt: 5, node: 'a' })],
    [{ namespace: 'default', name: 'data', node: 'a' }],
  )
  assert.equal(c.get('default/bound')?.block, undefined)
  assert.equal(c.get('default/old')?.block, 'volume data is in use by pod bound (one writer at a time) on node a')
})

test('with no writer bound the oldest may go; a finished pod holds nothing; readers wait for placement', () => {
  const c = volumeConstraints(
    [
      pod('second', [['data', true]], { createdAt: 2 }),
      pod('first', [['data', true]], { createdAt: 1 }),
      pod('done', [['data', true]], { createdAt: 0, node: 'a', finished: true }),
      pod('reader', [['data', false]], { createdAt: 0 }),
    ],
    [{ namespace: 'default', name: 'data' }],
  )
  assert.equal(c.get('default/first')?.block, undefined)
  assert.match(c.get('default/second')?.block ?? '', /in use by pod first/)
  assert.equal(c.get('default/done'), undefined)
  assert.equal(c.get('default/reader')?.block, 'volume data is not placed yet (it is placed with its first writer)')
})

test('a missing volume, a volume on a forgotten node and volumes on two nodes each block with their reason', () => {
  const c = volumeConstraints(
    [
      pod('a', [['nope', true]]),
      pod('b', [['lost', true]]),
      pod('c', [
        ['on-x', true],
        ['on-y', true],
      ]),
    ],
    [
      { namespace: 'default', name: 'lost', node: 'gone', nodeGone: true },
      { namespace: 'default', name: 'on-x', node: 'x' },
      { namespace: 'default', name: 'on-y', node: 'y' },
    ],
  )
  assert.equal(c.get('default/a')?.block, 'volume nope does not exist in namespace default')
  assert.match(c.get('default/b')?.block ?? '', /lives on node gone, which is forgotten/)
  assert.match(c.get('default/c')?.block ?? '', /volumes on different nodes \(x, y\)/)
  // Another namespace's volume of the same name is not this one.
  const other = volumeConstraints([{ ...pod('p', [['data', true]]), namespace: 'prod' }], [{ namespace: 'default', name: 'data', node: 'a' }])
  assert.match(other.get('prod/p')?.block ?? '', /does not exist in namespace prod/)
})

test('the scheduler binds a pod only to its volume node, and explains a blocked one', () => {
  const nodes = ['a', 'b', 'c'].map((name) => ({ name, state: 'alive' as const, capacity: { cpu: '4', memory: '8Gi' } }))
  const view = {
    nodes,
    now: 0,
    pods: [
      { namespace: 'default', name: 'db', volumeNode: 'c' },
      { namespace: 'default', name: 'db2', volumeBlock: 'volume data is in use by pod db (one writer at a time)' },
    ],
  }
  const r = planPlacements(view)
  const binds = r.operations.filter((o): o is BindOp => o instanceof BindOp).map((o) => [o.pod, o.node])
  assert.deepEqual(binds, [['default/db', 'c']])
  assert.deepEqual(
    r.pending.map((p) => [p.pod, p.reason]),
    [['default/db2', '0/3 nodes can run it: 3 volume unavailable']],
  )
  const e = explainPod(view, 'default/db2')
  assert.ok(
    e.nodes.every((n) => n.reasons.some((x) => x.includes('in use by pod db'))),
    JSON.stringify(e.nodes),
  )
  const e1 = explainPod({ ...view, pods: [{ namespace: 'default', name: 'db', volumeNode: 'c' }] }, 'default/db')
  const a = e1.nodes.find((n) => n.node === 'a')
  assert.deepEqual(a?.reasons, ["its volumes' data lives on node c"])
})
