import assert from 'node:assert/strict'
import { test } from 'node:test'
import { agentOptionsFromEnv } from '../../../src/agent/index.ts'
import { parseNodeCapacity } from '../../../src/agent/options.ts'
import { decideBindings } from '../../../src/agent/pods/binder.ts'
import { buildSchedView, vmUsesByNode, withVmUses } from '../../../src/agent/sched/index.ts'
import { VM_MEMORY_OVERHEAD_BYTES } from '../../../src/model/index.ts'

const node = (name: string, status: Record<string, unknown> = {}): any => ({
  apiVersion: 'orc/v1',
  kind: 'Node',
  metadata: { name },
  spec: {},
  status: { capacity: { cpu: '4', memory: '8Gi' }, ...status },
})
const pod = (name: string, spec: Record<string, unknown>, boundTo: string): any => ({
  apiVersion: 'orc/v1',
  kind: 'Pod',
  metadata: { name, namespace: 'default', createdAt: '2026-01-01T00:00:00Z' },
  spec: { containers: [{ name: 'main', image: '/img' }], ...spec },
  status: { node: boundTo },
})

test('binder policies: an ha pod leaves a suspect node after haAfter, a best-effort pod only when the node is forgotten', () => {
  const members = [
    { name: 'a', state: 'alive' as const },
    { name: 'b', state: 'alive' as const },
    { name: 'x', state: 'suspect' as const },
  ]
  const pods = [pod('ha', { policy: 'ha', haAfterSeconds: 5 }, 'x'), pod('be', {}, 'x')]
  const bindsAt = (nodes: any[], now: number, since = 0) =>
    ['a', 'b'].flatMap((me) =>
      decideBindings(pods, nodes, me, members, now, {}, (n) => (n === 'x' ? since : undefined)).map((d) => `${d.pod.metadata.name}->${me}`),
    )
  assert.deepEqual(bindsAt([node('a'), node('b'), node('x')], 4000), [], 'within haAfter nothing moves')
  const moved = bindsAt([node('a'), node('b'), node('x')], 6000)
  assert.equal(moved.length, 1, 'exactly one node binds the ha pod')
  assert.match(moved[0]!, /^ha->/)
  const forgotten = bindsAt([node('a'), node('b'), node('x', { forgotten: { at: '2026-01-01T00:00:00Z', by: 'user:t' } })], 1000)
  assert.deepEqual(forgotten.map((s) => s.split('->')[0]).sort(), ['be', 'ha'], 'forget moves best-effort (and ha) pods at once')
})

test('finished pods release their capacity and are never moved off a lost node', () => {
  const cpu = (n: string) => ({ containers: [{ name: 'main', image: '/img', resources: { requests: { cpu: n } } }] })
  const finished = (name: string, phase: string, boundTo: string, spec: Record<string, unknown> = {}): any => {
    const p = pod(name, { ...cpu('3'), restartPolicy: 'Never', ...spec }, boundTo)
    p.status.phase = phase
    return p
  }
  const waiting: any = { ...pod('next', cpu('2'), 'a'), status: {} }
  const alive = [{ name: 'a', state: 'alive' as const }]
  const binds = (pods: any[], me = 'a', members: any[] = alive, nodes = [node('a')]) =>
    decideBindings(pods, nodes, me, members, 0).map((d) => d.pod.metadata.name)
  assert.deepEqual(binds([finished('busy', 'Running', 'a'), waiting]), [], 'a running pod holds its 3 of 4 CPUs')
  assert.deepEqual(binds([finished('done', 'Succeeded', 'a'), waiting]), ['next'], 'a Succeeded pod holds none')
  assert.deepEqual(binds([finished('broke', 'Failed', 'a'), waiting]), ['next'], 'a Failed pod holds none')
  // Not finished for good: its node runs it again (restartPolicy OnFailure or Always), so it keeps its place.
  assert.deepEqual(binds([finished('retry', 'Failed', 'a', { restartPolicy: 'OnFailure' }), waiting]), [])
  assert.deepEqual(binds([finished('always', 'Succeeded', 'a', { restartPolicy: 'Always' }), waiting]), [])
  assert.deepEqual(binds([finished('once', 'Succeeded', 'a', { restartPolicy: 'OnFailure' }), waiting]), ['next'])
  // An ha pod that finished on a node now lost stays where it ran: it is not run again elsewhere.
  const members = [
    { name: 'a', state: 'alive' as const },
    { name: 'x', state: 'dead' as const },
  ]
  const lost = finished('ran', 'Succeeded', 'x', { policy: 'ha', haAfterSeconds: 1 })
  assert.deepEqual(
    decideBindings([lost], [node('a'), node('x')], 'a', members, 60_000, {}, () => 0).map((d) => d.pod.metadata.name),
    [],
  )
  const running = finished('running', 'Running', 'x', { policy: 'ha', haAfterSeconds: 1 })
  assert.deepEqual(
    decideBindings([running], [node('a'), node('x')], 'a', members, 60_000, {}, () => 0).map((d) => d.pod.metadata.name),
    ['running'],
    'a running ha pod does move',
  )
})

test('a node’s VMs (pinned, not Halted) hold its room with qemu’s allowance; pods go where they fit', () => {
  const vm = (name: string, node: string, spec: Record<string, unknown> = {}): any => ({
    apiVersion: 'orc/v1',
    kind: 'VirtualMachine',
    metadata: { name, namespace: 'default', createdAt: '2026-01-01T00:00:00Z' },
    spec: { node, kernel: { path: '/boot/vmlinuz' }, ...spec },
  })
  const vms = [vm('db', 'a', { cpus: 2, memory: '4Gi' }), vm('off', 'a', { memory: '4Gi', runStrategy: 'Halted' }), vm('ci', 'b')]
  const uses = vmUsesByNode(vms)
  assert.deepEqual(uses.get('a'), [{ name: 'default/db', cpu: '2000m', memory: String(4 * 2 ** 30 + VM_MEMORY_OVERHEAD_BYTES) }], 'a Halted VM holds nothing')
  assert.deepEqual(uses.get('b'), [{ name: 'default/ci', cpu: '1000m', memory: String(256 * 2 ** 20 + VM_MEMORY_OVERHEAD_BYTES) }], 'defaults: 1 cpu, 256Mi')
  // A pod of 4Gi: node a (8Gi) has 4Gi - 128Mi left beside vm/db, so it goes to b (the only one it fits).
  const p = { ...pod('web', { containers: [{ name: 'main', image: '/img', resources: { requests: { memory: '4Gi' } } }] }, ''), status: {} }
  const members = [
    { name: 'a', state: 'alive' as const },
    { name: 'b', state: 'alive' as const },
  ]
  const build = (...args: Parameters<typeof buildSchedView>) => withVmUses(buildSchedView(...args), vms)
  const binds = (me: string) => decideBindings([p], [node('a'), node('b')], me, members, 0, {}, undefined, undefined, build).map((d) => d.pod.metadata.name)
  assert.deepEqual(binds('a'), [])
  assert.deepEqual(binds('b'), ['web'])
  // On a alone: it fits when the VMs are not counted, and not when they are.
  const alone = (b?: typeof build) => decideBindings([p], [node('a')], 'a', ['a'], 0, {}, undefined, undefined, b).length
  assert.equal(alone(), 1)
  assert.equal(alone(build), 0)
})

test('ORC_NODE_CAPACITY: what a node offers, checked with the variable named', () => {
  assert.deepEqual(parseNodeCapacity('cpu=2,memory=1536Mi'), { cpu: '2', memory: '1536Mi' })
  assert.deepEqual(parseNodeCapacity('memory=4Gi'), { memory: '4Gi' })
  assert.deepEqual(agentOptionsFromEnv({ ORC_NODE_CAPACITY: 'cpu=500m' }).capacity, { cpu: '500m' })
  assert.equal(agentOptionsFromEnv({}).capacity, undefined)
  for (const [bad, re] of [
    ['cpu=2,disk=1Gi', /ORC_NODE_CAPACITY "cpu=2,disk=1Gi": "disk=1Gi" is not cpu=N or memory=N/],
    ['memory=lots', /ORC_NODE_CAPACITY memory=lots: /],
    ['cpu=0', /ORC_NODE_CAPACITY cpu=0: must be more than 0/],
    ['cpu=1,cpu=2', /"cpu=2" is not cpu=N/],
  ] as const)
    assert.throws(() => parseNodeCapacity(bad), re)
})
