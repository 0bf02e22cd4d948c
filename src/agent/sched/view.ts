/**
 * The scheduler's view, built from this node's replica of the store and its membership table. Pure:
 * the binder passes in `now` and the moments it first saw each node unreachable.
 */
import { field, isPlainObject } from '../../model/index.ts'
import { DEPLOYMENT_LABEL, podRequests, type ClusterView, type MemberState, type NodeView, type PodView, type SchedOptionsInput, type Taint } from '../../sched/index.ts'
import type { StoredObject } from '../../store/index.ts'

/** One node as this node's membership sees it (the mesh's MemberView, or a name believed alive). */
export interface NodeMember {
  name: string
  state: MemberState
  /** Last time this node heard from it (ms); null/absent if never. */
  lastSeen?: number | null
  self?: boolean
}

/** `status.forgotten` of a Node (`orc node forget`), or a node removed with `orc node remove`. */
export function isForgotten(node: StoredObject): boolean {
  return isPlainObject(field(node, 'status.forgotten')) || field(node, 'status.state') === 'Removed'
}

/** Cluster-wide scheduler defaults: `Cluster.spec.scheduling` (haAfterSeconds, goneAfterSeconds). */
export function schedOptionsOf(clusters: readonly StoredObject[]): SchedOptionsInput {
  const out: SchedOptionsInput = {}
  for (const c of clusters) {
    const s = field(c, 'spec.scheduling')
    if (!isPlainObject(s)) continue
    if (typeof s.haAfterSeconds === 'number') out.haAfterSeconds = s.haAfterSeconds
    if (typeof s.goneAfterSeconds === 'number') out.goneAfterSeconds = s.goneAfterSeconds
  }
  return out
}

export function podViewOf(p: StoredObject): PodView {
  const containers = (field(p, 'spec.containers') as { resources?: { requests?: { cpu?: string; memory?: string } } }[] | undefined) ?? []
  const v: PodView = {
    namespace: p.metadata.namespace ?? 'default',
    name: p.metadata.name,
    requests: podRequests(containers),
    createdAt: Date.parse(p.metadata.createdAt),
  }
  if (p.metadata.labels) v.labels = p.metadata.labels
  const node = field(p, 'status.node')
  if (typeof node === 'string' && node !== '') v.node = node
  const pin = field(p, 'spec.placement.node')
  if (typeof pin === 'string' && pin !== '') v.pin = pin
  const clusters = field(p, 'spec.placement.clusters')
  if (Array.isArray(clusters)) v.clusters = clusters.filter((c): c is string => typeof c === 'string')
  const prefer = field(p, 'spec.placement.preferClusters')
  if (Array.isArray(prefer)) v.preferClusters = prefer.filter((c): c is string => typeof c === 'string')
  const sel = field(p, 'spec.nodeSelector')
  if (isPlainObject(sel)) v.nodeSelector = sel as Record<string, string>
  const policy = field(p, 'spec.policy')
  if (policy === 'ha' || policy === 'best-effort') v.policy = policy
  const ha = field(p, 'spec.haAfterSeconds')
  if (typeof ha === 'number') v.haAfterSeconds = ha
  const affinity = field(p, 'spec.affinity')
  if (isPlainObject(affinity)) v.affinity = affinity as PodView['affinity']
  const tolerations = field(p, 'spec.tolerations')
  if (Array.isArray(tolerations)) v.tolerations = tolerations as PodView['tolerations']
  const priority = field(p, 'spec.priority')
  if (typeof priority === 'number') v.priority = priority
  // Replicas of one PinnedDeployment are spread across nodes and sites.
  const deployment = p.metadata.labels?.[DEPLOYMENT_LABEL]
  if (deployment !== undefined) v.group = `${v.namespace}/${deployment}`
  // status.phase is not read: the lifecycle controller writes it after reading status.node, and
  // reading it here would make the two controllers a loop (see controllers.ts).
  return v
}

/** Since when this node has seen a taint on a node (the taint itself carries no time). */
export type TaintSince = (node: string, taint: Taint) => number | undefined

export function nodeViewOf(n: StoredObject, member: NodeMember | undefined, downSince: number | undefined, taintSince?: TaintSince): NodeView {
  const state: MemberState = member?.state ?? 'dead'
  const v: NodeView = { name: n.metadata.name, state }
  if (state !== 'alive' && downSince !== undefined) v.since = downSince
  if (n.metadata.labels) v.labels = n.metadata.labels
  const cap = field(n, 'status.capacity') as { cpu?: string; memory?: string } | undefined
  if (cap) v.capacity = { ...(cap.cpu !== undefined ? { cpu: cap.cpu } : {}), ...(cap.memory !== undefined ? { memory: cap.memory } : {}) }
  if (field(n, 'spec.unschedulable') === true) v.unschedulable = true
  const taints = field(n, 'spec.taints')
  if (Array.isArray(taints)) {
    v.taints = taints as Taint[]
    // NoExecute tolerationSeconds count from when the taint appeared; this node's first sight of it.
    if (taintSince) {
      v.taints = v.taints.map((t) => {
        if (t.effect !== 'NoExecute' || t.since !== undefined) return t
        const since = taintSince(v.name, t)
        return since === undefined ? t : { ...t, since }
      })
    }
  }
  if (isForgotten(n)) v.forgotten = true
  return v
}

/**
 * The view `plan()` runs on. `members` is this node's membership (a node missing from it counts as
 * dead; this node is always alive); `downSince(name)` says since when a node has been unreachable.
 */
export function buildSchedView(
  pods: readonly StoredObject[],
  nodes: readonly StoredObject[],
  me: string,
  members: readonly NodeMember[],
  now: number,
  downSince: (name: string) => number | undefined = () => undefined,
  taintSince?: TaintSince,
): ClusterView {
  const byName = new Map(members.map((m) => [m.name, m]))
  byName.set(me, { name: me, state: 'alive', self: true })
  return {
    nodes: nodes.map((n) => nodeViewOf(n, byName.get(n.metadata.name), downSince(n.metadata.name), taintSince)),
    pods: pods.map(podViewOf),
    now,
  }
}
