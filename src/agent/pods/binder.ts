/**
 * Interim binder (the scheduling issue replaces it): binds a pod to this node, as
 * `controller:scheduler`, by patching `status.node` — only ever to this node, never to another:
 * - a pod pinned here (`spec.placement.node`) whose binding says otherwise;
 * - an unbound pod, when this node is the only alive node, or when `plan()` over this node's view
 *   of the cluster picks this node (every node computes the same plan from the same view, so the
 *   node that `plan()` picks is the only one that binds).
 */
import type { Logger } from 'pino'
import { field, type OrcObject } from '../../model/index.ts'
import { plan, podRequests, type ClusterView, type NodeView, type PodView } from '../../sched/index.ts'
import type { ObjectStore, StoredObject } from '../../store/index.ts'

export const SCHEDULER_CONTROLLER = 'controller:scheduler'

export interface BinderComponents {
  store: ObjectStore
  nodeName: string
  /** Names of the nodes this node believes alive (itself included). */
  aliveNodes(): string[]
  now(): number
  log: Logger
}

export interface BindDecision {
  pod: StoredObject
  reason: string
}

function podView(p: StoredObject): PodView {
  const containers = (field(p, 'spec.containers') as { resources?: { requests?: { cpu?: string; memory?: string } } }[] | undefined) ?? []
  const v: PodView = {
    namespace: p.metadata.namespace ?? 'default',
    name: p.metadata.name,
    requests: podRequests(containers),
    createdAt: Date.parse(p.metadata.createdAt),
  }
  if (p.metadata.labels) v.labels = p.metadata.labels
  const node = field(p, 'status.node')
  if (typeof node === 'string') v.node = node
  const pin = field(p, 'spec.placement.node')
  if (typeof pin === 'string') v.pin = pin
  const sel = field(p, 'spec.nodeSelector')
  if (sel && typeof sel === 'object') v.nodeSelector = sel as Record<string, string>
  const policy = field(p, 'spec.policy')
  if (policy === 'ha' || policy === 'best-effort') v.policy = policy
  return v
}

function nodeView(n: StoredObject, alive: ReadonlySet<string>): NodeView {
  const v: NodeView = { name: n.metadata.name, state: alive.has(n.metadata.name) ? 'alive' : 'dead' }
  if (n.metadata.labels) v.labels = n.metadata.labels
  const cap = field(n, 'status.capacity') as { cpu?: string; memory?: string } | undefined
  if (cap) v.capacity = { ...(cap.cpu !== undefined ? { cpu: cap.cpu } : {}), ...(cap.memory !== undefined ? { memory: cap.memory } : {}) }
  if (field(n, 'spec.unschedulable') === true) v.unschedulable = true
  const taints = field(n, 'spec.taints')
  if (Array.isArray(taints)) v.taints = taints as NodeView['taints']
  return v
}

/** Which pods this node should bind to itself now (pure given the store contents and membership). */
export function decideBindings(pods: readonly StoredObject[], nodes: readonly StoredObject[], me: string, alive: readonly string[], now: number): BindDecision[] {
  const out: BindDecision[] = []
  const unbound: StoredObject[] = []
  for (const p of pods) {
    const pin = field(p, 'spec.placement.node')
    const bound = field(p, 'status.node')
    if (typeof pin === 'string' && pin !== '') {
      if (pin === me && bound !== me) out.push({ pod: p, reason: 'pinned to this node' })
    } else if (bound === undefined || bound === null || bound === '') unbound.push(p)
  }
  if (unbound.length === 0) return out
  const aliveSet = new Set(alive)
  if (aliveSet.size <= 1 && (aliveSet.size === 0 || aliveSet.has(me))) {
    for (const p of unbound) out.push({ pod: p, reason: 'the only alive node' })
    return out
  }
  const view: ClusterView = { nodes: nodes.map((n) => nodeView(n, aliveSet)), pods: pods.map(podView), now }
  const mine = new Set(unbound.map((p) => `${p.metadata.namespace ?? 'default'}/${p.metadata.name}`))
  const byKey = new Map(unbound.map((p) => [`${p.metadata.namespace ?? 'default'}/${p.metadata.name}`, p]))
  for (const op of plan(view)) {
    if (op.type === 'bind' && op.node === me && mine.has(op.pod)) out.push({ pod: byKey.get(op.pod)!, reason: op.reason })
  }
  return out
}

export class Binder {
  private busy = false
  private again = false

  constructor(private readonly c: BinderComponents) {}

  /** Bind what should be bound here; coalesces calls made while a pass is running. */
  async pass(): Promise<void> {
    if (this.busy) {
      this.again = true
      return
    }
    this.busy = true
    try {
      do {
        this.again = false
        const decisions = decideBindings(this.c.store.list('Pod'), this.c.store.list('Node'), this.c.nodeName, this.c.aliveNodes(), this.c.now())
        for (const d of decisions) await this.bind(d.pod, d.reason)
      } while (this.again)
    } finally {
      this.busy = false
    }
  }

  private async bind(pod: OrcObject, reason: string): Promise<void> {
    const ref = { kind: 'Pod', namespace: pod.metadata.namespace ?? 'default', name: pod.metadata.name }
    try {
      const res = await this.c.store.patch(ref, [{ path: ['status', 'node'], value: this.c.nodeName }], {
        author: SCHEDULER_CONTROLLER,
        reason: `bind to ${this.c.nodeName}: ${reason}`,
        now: this.c.now(),
      })
      if (res.revision) this.c.log.info({ kind: 'Pod', ns: ref.namespace, name: ref.name, rev: res.revision.number, node: this.c.nodeName, reason }, 'pod bound')
    } catch (err) {
      // deleted meanwhile, or refused: the next pass sees the new state
      this.c.log.warn({ kind: 'Pod', ns: ref.namespace, name: ref.name, err: String(err) }, 'bind pod')
    }
  }
}
