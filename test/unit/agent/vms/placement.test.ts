// Placement of unpinned VirtualMachines by the pods' scheduler (docs/runtimes.md, "Placement and
// failover"): one plan over pods and VMs, bound by the chosen node only, moved by the pods' policy
// rules, explained per node; and the receipt rules for the binding and the VM's status.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { decideBindings } from '../../../../src/agent/pods/binder.ts'
import { buildSchedView, nodeAllocation, vmPodViewOf, vmSchedKey, withVmUses, withVolumeConstraints } from '../../../../src/agent/sched/index.ts'
import { defaultOwnership, normalizeManifest, vmNodeOf } from '../../../../src/model/index.ts'
import { explainPod, formatExplanation } from '../../../../src/sched/index.ts'
import { defaultAuthorize } from '../../../../src/store/index.ts'

const node = (name: string, cap: { cpu?: string; memory?: string } = {}, extra: Record<string, unknown> = {}): any => ({
  apiVersion: 'orc/v1',
  kind: 'Node',
  metadata: { name, ...(extra.labels ? { labels: extra.labels } : {}) },
  spec: extra.spec ?? {},
  status: { capacity: { cpu: '4', memory: '1Gi', ...cap }, ...(extra.status ?? {}) },
})
const vm = (name: string, spec: Record<string, unknown> = {}, status?: Record<string, unknown>, createdAt = '2026-01-01T00:00:00Z'): any => ({
  apiVersion: 'orc/v1',
  kind: 'VirtualMachine',
  metadata: { name, namespace: 'default', createdAt },
  spec: { kernel: { image: 'vmlinuz' }, memory: '256Mi', ...spec },
  ...(status ? { status } : {}),
})
const pod = (name: string, memory: string, boundTo?: string): any => ({
  apiVersion: 'orc/v1',
  kind: 'Pod',
  metadata: { name, namespace: 'default', createdAt: '2026-01-01T00:00:00Z' },
  spec: { containers: [{ name: 'main', image: '/img', resources: { requests: { memory } } }] },
  status: boundTo === undefined ? {} : { node: boundTo },
})
const alive = (...names: string[]) => names.map((name) => ({ name, state: 'alive' as const }))

/** What every node of `members` binds in one pass: `name->node` (a bind) or `name-x node` (an evict). */
function bindsOf(pods: any[], vms: any[], nodes: any[], members: any[], now = 0, downSince?: (n: string) => number | undefined): string[] {
  return members
    .filter((m) => m.state === 'alive')
    .flatMap((m) =>
      decideBindings(pods, nodes, m.name, members, now, {}, downSince, undefined, undefined, vms).map(
        (d) =>
          `${d.kind === 'VirtualMachine' ? 'vm/' : ''}${d.pod.metadata.name}${d.action === 'bind' ? '->' : '-x '}${m.name}${d.from ? ` (from ${d.from})` : ''}`,
      ),
    )
    .sort()
}

test('an unpinned VM is bound by exactly one node: the one with room for its vCPUs, memory and qemu', () => {
  // 256Mi guest + 128Mi qemu = 384Mi. a: 512Mi less a 256Mi pod; b: 1Gi less 768Mi of pods; c: room.
  const nodes = [node('a', { memory: '512Mi' }), node('b'), node('c', { memory: '512Mi' })]
  const pods = [pod('p1', '256Mi', 'a'), pod('p2', '768Mi', 'b')]
  assert.deepEqual(bindsOf(pods, [vm('g')], nodes, alive('a', 'b', 'c')), ['vm/g->c'])
  // cpus count as whole cores: 4 vCPUs fit only on a node with 4 free cores.
  const cores = [node('a', { cpu: '2' }), node('b', { cpu: '4' })]
  assert.deepEqual(bindsOf([], [vm('wide', { cpus: 4 })], cores, alive('a', 'b')), ['vm/wide->b'])
  // Two VMs applied at once on nodes with room for one each: the same plan spreads them, one per node.
  const two = bindsOf([], [vm('x'), vm('y')], [node('a', { memory: '512Mi' }), node('b', { memory: '512Mi' })], alive('a', 'b'))
  assert.equal(two.length, 2)
  assert.notEqual(two[0]!.split('->')[1], two[1]!.split('->')[1], `one per node: ${two}`)
})

test('a bound VM holds its node for pods and other VMs; pinned VMs are bound on their own node only; Halted VMs need no node', () => {
  const nodes = [node('a', { memory: '1Gi' })]
  // Bound there: 384Mi held, a 768Mi pod no longer fits — and the reason names the VM.
  const bound = vm('g', {}, { node: 'a' })
  assert.deepEqual(bindsOf([pod('big', '768Mi')], [bound], nodes, alive('a')), [])
  assert.deepEqual(bindsOf([pod('big', '768Mi')], [], nodes, alive('a')), ['big->a'])
  const view = withVmUses(buildSchedView([pod('big', '768Mi')], nodes, 'a', alive('a'), 0), [bound])
  const e = explainPod(view, 'default/big')
  assert.equal(e.status, 'pending')
  assert.match(e.nodes[0]!.reasons.join('; '), /insufficient memory \(requests 768Mi, free 640Mi; vm\/default\/g holds 384Mi\)/)
  // A pinned VM: only its node writes its binding; nobody places it.
  const pinned = vm('p', { node: 'a' })
  assert.equal(vmPodViewOf(pinned), undefined)
  assert.deepEqual(bindsOf([], [pinned], [node('a'), node('b')], alive('a', 'b')), ['vm/p->a'])
  assert.deepEqual(bindsOf([], [vm('p', { node: 'a' }, { node: 'a' })], [node('a'), node('b')], alive('a', 'b')), [])
  // Halted: no entry, no binding, holds nothing.
  assert.equal(vmPodViewOf(vm('h', { runStrategy: 'Halted' })), undefined)
  assert.deepEqual(bindsOf([], [vm('h', { runStrategy: 'Halted' })], nodes, alive('a')), [])
  // The node's allocation (describe, and the VM controller's admission) counts bound VMs as pinned ones.
  const a = nodeAllocation(nodes[0], [], [bound, pinned, vm('elsewhere', {}, { node: 'b' })])
  assert.deepEqual(
    a.vms.map((v) => v.name),
    ['default/g', 'default/p'],
  )
  assert.equal(vmNodeOf(bound), 'a')
  assert.equal(vmNodeOf(vm('q', { node: 'b' }, { node: 'a' })), 'b', 'the pin wins over a stale binding')
})

test('nodeSelector, node affinity and taints apply to VMs as to pods; with no room, each node says why', () => {
  const nodes = [
    node('a', {}, { labels: { kvm: 'yes' } }),
    node('b', {}, { labels: { kvm: 'yes', site: 'x' }, spec: { taints: [{ key: 'gpu', effect: 'NoSchedule' }] } }),
    node('c', { memory: '256Mi' }, { labels: { site: 'x' } }),
  ]
  const members = alive('a', 'b', 'c')
  assert.deepEqual(bindsOf([], [vm('s', { nodeSelector: { site: 'x' } })], nodes, members), [], 'b is tainted, c too small')
  assert.deepEqual(bindsOf([], [vm('s', { nodeSelector: { site: 'x' }, tolerations: [{ key: 'gpu', operator: 'Exists' }] })], nodes, members), ['vm/s->b'])
  const req = { affinity: { nodeAffinity: { required: [{ matchExpressions: [{ key: 'kvm', operator: 'In', values: ['yes'] }] }] } } }
  assert.deepEqual(bindsOf([], [vm('k', req)], nodes, members), ['vm/k->a'])
  // orc why vm/NAME: the explanation of its entry, said as the VM.
  const big = vm('huge', { memory: '2Gi' })
  const view = withVmUses(buildSchedView([], nodes, 'a', members, 0), [big])
  const e = explainPod(view, vmSchedKey('default', 'huge'))
  assert.equal(e.status, 'pending')
  assert.match(e.summary, /0\/3 nodes can run it: .*insufficient memory/)
  const text = formatExplanation({ ...e, pod: 'default/huge' }).replace(/^pod\//, 'vm/')
  assert.match(text, /^vm\/default\/huge: pending: /)
  assert.match(text, /\n {2}a: insufficient memory \(requests 2176Mi, free 1Gi\)/)
  assert.match(text, /\n {2}b: taint gpu:NoSchedule not tolerated/)
  // Pods' anti-affinity selects pods, not VMs: a pod refusing every neighbour does not refuse a VM.
  const loner: any = pod('loner', '64Mi', 'a')
  loner.spec.affinity = {
    podAntiAffinity: { required: [{ labelSelector: { matchExpressions: [{ key: 'app', operator: 'DoesNotExist' }] }, topologyKey: 'node' }] },
  }
  assert.deepEqual(bindsOf([loner], [vm('k', req)], nodes, members), ['vm/k->a'])
})

test('a lost node: an ha VM moves after haAfter (one node rebinds it, from the old one); a best-effort VM when the node is forgotten', () => {
  const nodes = [node('a'), node('b'), node('x')]
  const members = [...alive('a', 'b'), { name: 'x', state: 'suspect' as const }]
  const vms = [vm('ha', { policy: 'ha', haAfterSeconds: 10 }, { node: 'x' }), vm('be', {}, { node: 'x' })]
  const down = (n: string) => (n === 'x' ? 0 : undefined)
  assert.deepEqual(bindsOf([], vms, nodes, members, 9_000, down), [], 'within haAfter nothing moves')
  const moved = bindsOf([], vms, nodes, members, 10_000, down)
  assert.equal(moved.length, 1, `exactly one node rebinds it: ${moved}`)
  assert.match(moved[0]!, /^vm\/ha->[ab] \(from x\)$/)
  // The cluster's haAfterSeconds applies without the VM's own.
  const clusterDefault = [vm('ha', { policy: 'ha' }, { node: 'x' })]
  assert.deepEqual(bindsOf([], clusterDefault, nodes, members, 29_000, down), [])
  assert.equal(bindsOf([], clusterDefault, nodes, members, 30_000, down).length, 1)
  // Forgotten: both move at once.
  const forgotten = [node('a'), node('b'), node('x', {}, { status: { forgotten: { at: '2026-01-01T00:00:00Z', by: 'user:t' } } })]
  const both = bindsOf([], vms, forgotten, members, 1_000, down)
  assert.deepEqual(both.map((s) => s.split('->')[0]).sort(), ['vm/be', 'vm/ha'])
  // A pinned VM never moves.
  assert.deepEqual(bindsOf([], [vm('p', { node: 'x', policy: 'ha' }, { node: 'x' })], forgotten, members, 60_000, down), [])
})

test('receipt rules: a node binds a VM only to itself; only the node a VM is pinned or bound to writes its status', () => {
  const authorize = defaultAuthorize(defaultOwnership(), () => true)
  const obj = (spec: Record<string, unknown>, status?: Record<string, unknown>) => ({
    kind: 'VirtualMachine',
    metadata: { name: 'g', namespace: 'default' },
    spec,
    ...(status ? { status } : {}),
  })
  const judge = (author: string, signer: string, before: Record<string, unknown>, after: Record<string, unknown>, changes: unknown[], boundTo?: Set<string>) =>
    authorize(
      { i: 'x.1', k: 'VirtualMachine/default/g', s: 2, o: 'update', a: author, r: 'w', t: 1 },
      {
        before,
        after,
        changes: changes as never,
        createdBy: 'user:admin',
        signer: { id: `peer-${signer}`, node: signer },
        ...(boundTo ? { boundTo } : {}),
        objects: { get: () => undefined, list: () => [] } as never,
      },
    )
  const bind = (to: string) => [{ op: 'set', path: ['status', 'node'], value: to }]
  assert.equal(judge('controller:scheduler', 'b', obj({}), obj({}, { node: 'b' }), bind('b')), undefined)
  assert.match(judge('controller:scheduler', 'b', obj({}), obj({}, { node: 'c' }), bind('c')) ?? '', /node b may not bind virtualmachine g to c/)
  // The binding is the scheduler's: the VM controller may not write it.
  assert.match(judge('controller:vm', 'b', obj({}, { node: 'b' }), obj({}, { node: 'c' }), bind('c')) ?? '', /status\.node is owned by controller:scheduler/)
  const running = [{ op: 'set', path: ['status', 'phase'], value: 'Running' }]
  assert.equal(judge('controller:vm', 'b', obj({}, { node: 'b' }), obj({}, { node: 'b', phase: 'Running' }), running), undefined)
  assert.match(
    judge('controller:vm', 'c', obj({}, { node: 'b' }), obj({}, { node: 'b', phase: 'Running' }), running) ?? '',
    /node c may not write virtualmachine\/g, which runs on node b/,
  )
  // The old node of a moved VM, as this replica saw it bound there, may still report while the move reaches it.
  assert.equal(judge('controller:vm', 'c', obj({}, { node: 'b' }), obj({}, { node: 'b', phase: 'Running' }), running, new Set(['c', 'b'])), undefined)
  // Unbound: nobody runs it, nobody writes its status.
  assert.match(judge('controller:vm', 'c', obj({}), obj({}, { phase: 'Running' }), running) ?? '', /may not write virtualmachine\/g/)
})

test('a VM spec without node is accepted, with the pods placement fields', () => {
  const o = normalizeManifest({
    apiVersion: 'orc/v1',
    kind: 'VirtualMachine',
    metadata: { name: 'free' },
    spec: {
      kernel: { image: 'vmlinuz' },
      policy: 'ha',
      haAfterSeconds: 12,
      nodeSelector: { kvm: 'yes' },
      affinity: { nodeAffinity: { preferred: [{ weight: 10, selector: { matchLabels: { site: 'x' } } }] } },
      tolerations: [{ key: 'gpu', operator: 'Exists' }],
    },
  })
  assert.equal((o.spec as { policy?: string }).policy, 'ha')
})

test('an unpinned VM with a Volume disk is placed only on the node that holds the Volume’s data', () => {
  // a has four times b's room: a VM without the disk goes there.
  const nodes = [node('a', { memory: '4Gi' }), node('b')]
  const volume: any = { apiVersion: 'orc/v1', kind: 'Volume', metadata: { name: 'data', namespace: 'default' }, spec: { size: '1Gi' }, status: { node: 'b' } }
  const g = vm('g', { disks: [{ name: 'data', volume: { name: 'data' } }] })
  const view = withVolumeConstraints(withVmUses(buildSchedView([], nodes, 'a', alive('a', 'b'), 0), [g]), [], [volume], nodes, 30, [g])
  const entry = view.pods.find((p) => p.vm === 'default/g')
  assert.equal(entry?.volumeNode, 'b', 'the VM entry carries its Volume’s node')
  // The plan binds it there; without the disk it would go to a.
  assert.match(formatExplanation(explainPod(view, vmSchedKey('default', 'g'))), /will be bound to b/)
  const free = vm('g')
  const without = withVmUses(buildSchedView([], nodes, 'a', alive('a', 'b'), 0), [free])
  assert.match(formatExplanation(explainPod(without, vmSchedKey('default', 'g'))), /will be bound to a/)
})

test('a replicated Volume disk: an ha VM goes to the newest alive synced replica once the primary is lost for its haAfter; a best-effort VM waits', () => {
  const nodes = [node('a'), node('b'), node('c')]
  const volume: any = {
    apiVersion: 'orc/v1',
    kind: 'Volume',
    metadata: { name: 'data', namespace: 'default' },
    spec: { size: '1Gi', replicas: 3 },
    status: { node: 'b', replicas: { a: { syncedAt: '2026-01-01T00:00:01Z' }, c: { syncedAt: '2026-01-01T00:00:02Z' } } },
  }
  const disks = [{ name: 'data', volume: { name: 'data' } }]
  const members = [...alive('a', 'c'), { name: 'b', state: 'dead' as const }]
  const entryOf = (v: any, now: number) =>
    withVolumeConstraints(
      withVmUses(
        buildSchedView([], nodes, 'a', members, now, (n) => (n === 'b' ? 0 : undefined)),
        [v],
      ),
      [],
      [volume],
      nodes,
      30,
      [v],
    ).pods.find((p) => p.vm === 'default/g')
  const ha = vm('g', { policy: 'ha', haAfterSeconds: 10, disks }, { node: 'b' })
  assert.equal(entryOf(ha, 5_000)?.volumeNode, 'b', 'lost for less than haAfter: stays with the primary')
  assert.equal(entryOf(ha, 11_000)?.volumeNode, 'c', 'lost: the newest copy')
  const be = vm('g', { policy: 'best-effort', disks }, { node: 'b' })
  assert.equal(entryOf(be, 11_000)?.volumeNode, 'b', 'a best-effort VM waits for the primary')
})
