// VirtualMachines and node capacity (pure): what pods are offered beside a node's VMs, how `orc why`
// names the VMs, and which waiting VMs may start (oldest first, running guests keep their room).
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { admitVms, explainPod, formatExplanation, plan, type VmClaim } from '../../../src/sched/index.ts'
import { node, pod, view } from './helpers.ts'

const Mi = 2 ** 20
const Gi = 2 ** 30

test('pods are placed in what the node’s VMs leave; why names the VMs holding the room', () => {
  const nodes = [
    node('n1', { capacity: { cpu: '2', memory: '2Gi' }, vms: [{ name: 'default/db', cpu: '1000m', memory: String(1152 * Mi) }] }),
    node('n2', { capacity: { cpu: '2', memory: '1Gi' } }),
  ]
  const web = pod('web', { requests: { cpu: '500m', memory: '1Gi' } })
  // Without the VM n1 (2Gi) would take it; with it only 896Mi are free there, and n2 has exactly 1Gi.
  assert.deepEqual(
    plan(view(nodes, [web])).map((o) => `${o.type} ${o.node}`),
    ['bind n2'],
  )
  const big = pod('big', { requests: { cpu: '1500m', memory: '1536Mi' } })
  const e = explainPod(view(nodes, [big]), 'default/big')
  assert.equal(e.status, 'pending')
  assert.equal(
    formatExplanation(e),
    [
      'pod/default/big: pending: 0/2 nodes can run it: 1 insufficient cpu, 1 insufficient memory',
      '  n1: insufficient cpu (requests 1500m, free 1; vm/default/db holds 1)',
      '  n1: insufficient memory (requests 1.5Gi, free 896Mi; vm/default/db holds 1152Mi)',
      '  n2: insufficient memory (requests 1.5Gi, free 1Gi)',
    ].join('\n'),
  )
  // The same pod fits n1 once the VM is gone.
  assert.deepEqual(
    plan(view([node('n1', { capacity: { cpu: '2', memory: '2Gi' } })], [big])).map((o) => `${o.type} ${o.node}`),
    ['bind n1'],
  )
})

test('many VMs: the three largest are named, the rest summed', () => {
  const vms = [1, 2, 3, 4, 5].map((i) => ({ name: `default/vm${i}`, cpu: '0', memory: String(i * 100 * Mi) }))
  const e = explainPod(view([node('n1', { capacity: { cpu: '4', memory: '2Gi' }, vms })], [pod('p', { requests: { memory: '1Gi' } })]), 'default/p')
  assert.deepEqual(e.nodes[0]!.reasons, [
    'insufficient memory (requests 1Gi, free 548Mi; vm/default/vm5 holds 500Mi, vm/default/vm4 holds 400Mi, vm/default/vm3 holds 300Mi, 2 more VMs hold 300Mi)',
  ])
})

test('a VM with an unreadable size makes the node unreadable, as its capacity would', () => {
  const e = explainPod(view([node('n1', { vms: [{ name: 'default/x', cpu: 'lots', memory: '1Gi' }] })], [pod('p')]), 'default/p')
  assert.match(e.nodes[0]!.reasons.join(), /node capacity unreadable/)
})

const claim = (name: string, memGi: number, createdAt: number, running = false, cpu = 1000): VmClaim => ({
  name: `default/${name}`,
  cpu,
  mem: memGi * Gi,
  createdAt,
  running,
})

test('admitVms: oldest first while they fit; the refusal names the pods and VMs holding the room', () => {
  const room = { name: 'n1', cpu: 4000, mem: 4 * Gi }
  const pods = { count: 2, cpu: 500, mem: 512 * Mi }
  const r = admitVms(room, pods, [claim('young', 2, 300), claim('old', 2, 100), claim('small', 1, 400)])
  assert.equal(r.get('default/old'), undefined)
  assert.equal(r.get('default/young'), 'needs 2Gi memory; node n1 has 1.5Gi free of 4Gi (2 pods 512Mi, vm/default/old 2Gi)')
  // A later, smaller VM still starts in what the refused one leaves.
  assert.equal(r.get('default/small'), undefined)
  // Any input order gives the same answer.
  assert.deepEqual([...admitVms(room, pods, [claim('small', 1, 400), claim('old', 2, 100), claim('young', 2, 300)])].sort(), [...r].sort())
})

test('admitVms: a running guest keeps its room even when it is younger; ties by name', () => {
  const room = { name: 'n1', cpu: 4000, mem: 3 * Gi }
  const none = { count: 0, cpu: 0, mem: 0 }
  const r = admitVms(room, none, [claim('old', 2, 100), claim('runs', 2, 500, true)])
  assert.equal(r.get('default/runs'), undefined)
  assert.equal(r.get('default/old'), 'needs 2Gi memory; node n1 has 1Gi free of 3Gi (vm/default/runs 2Gi)')
  const tie = admitVms(room, none, [claim('b', 2, 100), claim('a', 2, 100)])
  assert.equal(tie.get('default/a'), undefined)
  assert.match(tie.get('default/b')!, /vm\/default\/a 2Gi/)
})

test('admitVms: cpu counts too; a node with no recorded capacity refuses nothing', () => {
  const r = admitVms({ name: 'n1', cpu: 2000, mem: 8 * Gi }, { count: 1, cpu: 1500, mem: 0 }, [claim('vm', 1, 1, false, 1000)])
  assert.equal(r.get('default/vm'), 'needs 1 cpu; node n1 has 500m free of 2 (1 pod 1500m)')
  assert.equal(admitVms({ name: 'n1' }, { count: 9, cpu: 9000, mem: 9 * Gi }, [claim('vm', 64, 1)]).get('default/vm'), undefined)
})

test('a pod bound before a VM arrived keeps its place: a VM never evicts pods', () => {
  const n = node('n1', { capacity: { cpu: '2', memory: '1Gi' }, vms: [{ name: 'default/late', cpu: '1000m', memory: String(640 * Mi) }] })
  const bound = pod('web', { node: 'n1', requests: { cpu: '500m', memory: '768Mi' } })
  assert.deepEqual(plan(view([n], [bound])), [])
  assert.equal(explainPod(view([n], [bound]), 'default/web').status, 'bound')
})
