/**
 * The scheduler's view, built from this node's replica of the store and its membership table. Pure:
 * the binder passes in `now` and the moments it first saw each node unreachable.
 */
import {
  type Cluster,
  type ClusterSpec,
  isPlainObject,
  type Node,
  type Pod,
  type VirtualMachine,
  type Volume,
  vmMemoryBytes,
  vmNodeOf,
  vmNodeRequests,
  vmWantsToRun,
} from '../../model/index.ts'
import {
  type ClusterView,
  DEPLOYMENT_LABEL,
  type MemberState,
  type NodeView,
  type PodView,
  type PodVolumeUse,
  parseCpu,
  parseMemory,
  podRequests,
  type SchedOptionsInput,
  type Taint,
  type VmUse,
  volumeConstraints,
} from '../../sched/index.ts'
import type { Stored } from '../../store/index.ts'

/** One node as this node's membership sees it (the mesh's MemberView, or a name believed alive). */
export interface NodeMember {
  name: string
  state: MemberState
  /** Last time this node heard from it (ms); null/absent if never. */
  lastSeen?: number | null
  /** failureDetector swim: since when this node's view of it is not alive (MemberView.downSince). */
  downSince?: number
  self?: boolean
}

/** `status.forgotten` of a Node (`orc node forget`), or a node removed with `orc node remove`. */
export function isForgotten(node: Stored<Node>): boolean {
  return isPlainObject(node.status?.forgotten) || node.status?.state === 'Removed'
}

/** Cluster-wide scheduler defaults: `Cluster.spec.scheduling` (haAfterSeconds, goneAfterSeconds). */
export function schedOptionsOf(clusters: readonly Stored<Cluster>[]): SchedOptionsInput {
  const s = clusterSchedulingOf(clusters)
  const out: SchedOptionsInput = {}
  if (s.haAfterSeconds !== undefined) out.haAfterSeconds = s.haAfterSeconds
  if (s.goneAfterSeconds !== undefined) out.goneAfterSeconds = s.goneAfterSeconds
  return out
}

/**
 * `Cluster.spec.scheduling`, the numeric fields only (the scheduler's and the fence's options are
 * read from it); with several Cluster objects (a merge), a later one's fields win.
 */
export function clusterSchedulingOf(clusters: readonly Stored<Cluster>[]): NonNullable<ClusterSpec['scheduling']> {
  const out: NonNullable<ClusterSpec['scheduling']> = {}
  for (const c of clusters) {
    const s = c.spec?.scheduling
    if (!isPlainObject(s)) continue
    for (const k of ['haAfterSeconds', 'goneAfterSeconds', 'fenceQuorum', 'fenceMarginSeconds'] as const) if (typeof s[k] === 'number') out[k] = s[k]
  }
  return out
}

// Objects from other nodes are not checked against their schema on receipt yet (the trust issue,
// #17), so fields are still tested for their type before use: garbage must not stop the binder.
export function podViewOf(p: Stored<Pod>): PodView {
  const spec = p.spec ?? ({} as Partial<NonNullable<Pod['spec']>>)
  const containers = spec.containers ?? []
  const v: PodView = {
    namespace: p.metadata.namespace ?? 'default',
    name: p.metadata.name,
    requests: podRequests(containers),
    createdAt: Date.parse(p.metadata.createdAt),
  }
  if (p.metadata.labels) v.labels = p.metadata.labels
  const node = p.status?.node
  if (typeof node === 'string' && node !== '') v.node = node
  const pin = spec.placement?.node
  if (typeof pin === 'string' && pin !== '') v.pin = pin
  const clusters = spec.placement?.clusters
  if (Array.isArray(clusters)) v.clusters = clusters.filter((c): c is string => typeof c === 'string')
  const prefer = spec.placement?.preferClusters
  if (Array.isArray(prefer)) v.preferClusters = prefer.filter((c): c is string => typeof c === 'string')
  if (isPlainObject(spec.nodeSelector)) v.nodeSelector = spec.nodeSelector
  if (spec.policy === 'ha' || spec.policy === 'best-effort') v.policy = spec.policy
  if (typeof spec.haAfterSeconds === 'number') v.haAfterSeconds = spec.haAfterSeconds
  if (isPlainObject(spec.affinity)) v.affinity = spec.affinity
  if (Array.isArray(spec.tolerations)) v.tolerations = spec.tolerations
  if (typeof spec.priority === 'number') v.priority = spec.priority
  // Replicas of one PinnedDeployment are spread across nodes and sites.
  const deployment = p.metadata.labels?.[DEPLOYMENT_LABEL]
  if (deployment !== undefined) v.group = `${v.namespace}/${deployment}`
  // Only a final phase is read: a pod finished for good holds no capacity and is never bound again,
  // so this read settles (controllers.ts); other phases would make a loop with the lifecycle.
  const phase = p.status?.phase
  if (finishedForGood(phase, spec.restartPolicy)) v.phase = phase as 'Succeeded' | 'Failed'
  return v
}

/**
 * A phase its node will not leave by itself: `Succeeded` unless restartPolicy is Always (the default),
 * `Failed` only with restartPolicy Never (otherwise the node runs the pod again, docs/lifecycle.md).
 */
export function finishedForGood(phase: unknown, restartPolicy: unknown): boolean {
  const policy = restartPolicy ?? 'Always'
  return (phase === 'Succeeded' && policy !== 'Always') || (phase === 'Failed' && policy === 'Never')
}

/** Since when this node has seen a taint on a node (the taint itself carries no time). */
export type TaintSince = (node: string, taint: Taint) => number | undefined

export function nodeViewOf(n: Stored<Node>, member: NodeMember | undefined, downSince: number | undefined, taintSince?: TaintSince): NodeView {
  const state: MemberState = member?.state ?? 'dead'
  const v: NodeView = { name: n.metadata.name, state }
  if (state !== 'alive' && downSince !== undefined) v.since = downSince
  if (n.metadata.labels) v.labels = n.metadata.labels
  const cap = n.status?.capacity
  if (cap) v.capacity = { ...(cap.cpu !== undefined ? { cpu: cap.cpu as string } : {}), ...(cap.memory !== undefined ? { memory: cap.memory as string } : {}) }
  if (n.spec?.unschedulable === true) v.unschedulable = true
  const taints = n.spec?.taints
  if (Array.isArray(taints)) {
    v.taints = taints
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
  pods: readonly Stored<Pod>[],
  nodes: readonly Stored<Node>[],
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

/**
 * What one VirtualMachine holds of its node while its node wants it running (`vmWantsToRun`: pinned
 * or bound, not Halted, whether booted yet or waiting for room): its vCPUs (millicores) and its guest
 * memory plus qemu's allowance (bytes). Undefined when it holds nothing: not wanted, or its memory is
 * unreadable (its node never boots it).
 */
export function vmHolds(
  v: Stored<VirtualMachine>,
): { node: string; name: string; cpu: number; mem: number; guestMem: number; createdAt: number; phase: string } | undefined {
  const node = vmNodeOf(v)
  if (node === undefined || !vmWantsToRun(v)) return undefined
  try {
    const r = vmNodeRequests(v.spec)
    const at = Date.parse(v.metadata.createdAt)
    return {
      node,
      name: `${v.metadata.namespace ?? 'default'}/${v.metadata.name}`,
      cpu: r.cpu,
      mem: r.memory,
      guestMem: vmMemoryBytes(v.spec),
      createdAt: Number.isNaN(at) ? 0 : at,
      phase: typeof v.status?.phase === 'string' ? v.status.phase : 'Pending',
    }
  } catch {
    return undefined
  }
}

/** What the VMs pinned to each node hold of it, for the scheduler's view (vmHolds; unpinned VMs are placed as entries of their own, vmPodViewOf). */
export function vmUsesByNode(vms: readonly Stored<VirtualMachine>[]): Map<string, VmUse[]> {
  const out = new Map<string, VmUse[]>()
  for (const v of vms) {
    if (typeof v.spec?.node !== 'string' || v.spec.node === '') continue
    const h = vmHolds(v)
    if (h === undefined) continue
    const uses = out.get(h.node) ?? []
    uses.push({ name: h.name, cpu: `${h.cpu}m`, memory: String(h.mem) })
    out.set(h.node, uses)
  }
  return out
}

/** The scheduler's key of an unpinned VM's entry: `namespace/vm/NAME` (no pod's key has two slashes). */
export function vmSchedKey(namespace: string, name: string): string {
  return `${namespace}/vm/${name}`
}

/**
 * An unpinned VirtualMachine as the scheduler places it: an entry like a pod's with the VM's node
 * requests (vCPUs as cores, guest memory plus qemu's allowance), its binding, policy, nodeSelector,
 * node affinity and tolerations. Undefined for a pinned VM (it holds its node through NodeView.vms)
 * and for a Halted one (it holds nothing and needs no node until it is started).
 */
export function vmPodViewOf(v: Stored<VirtualMachine>): PodView | undefined {
  const spec = v.spec
  if (spec === undefined || (typeof spec.node === 'string' && spec.node !== '') || spec.runStrategy === 'Halted') return undefined
  const namespace = v.metadata.namespace ?? 'default'
  let requests: PodView['requests']
  try {
    const r = vmNodeRequests(spec)
    requests = { cpu: `${r.cpu}m`, memory: String(r.memory) }
  } catch {
    // Unreadable: the scheduler reports the entry's requests unreadable and places it nowhere.
    requests = { memory: String(spec.memory) }
  }
  const at = Date.parse(v.metadata.createdAt)
  const out: PodView = { namespace, name: `vm/${v.metadata.name}`, vm: `${namespace}/${v.metadata.name}`, requests, createdAt: Number.isNaN(at) ? 0 : at }
  const node = v.status?.node
  if (typeof node === 'string' && node !== '') out.node = node
  if (spec.policy === 'ha' || spec.policy === 'best-effort') out.policy = spec.policy
  if (typeof spec.haAfterSeconds === 'number') out.haAfterSeconds = spec.haAfterSeconds
  if (isPlainObject(spec.nodeSelector)) out.nodeSelector = spec.nodeSelector
  if (isPlainObject(spec.affinity) && isPlainObject(spec.affinity.nodeAffinity)) out.affinity = { nodeAffinity: spec.affinity.nodeAffinity }
  if (Array.isArray(spec.tolerations)) out.tolerations = spec.tolerations
  return out
}

/** What a node's pods and VMs hold of its capacity (`orc describe node/NAME`): cpu in millicores, memory in bytes. */
export interface NodeAllocation {
  capacity: { cpu?: number; mem?: number }
  /** The pods bound here and not finished for good: how many, and the sum of their requests. */
  pods: { count: number; cpu: number; mem: number }
  /** The VMs pinned here that their node wants running, oldest first, each with its phase. */
  vms: { name: string; cpu: number; mem: number; guestMem: number; createdAt: number; phase: string }[]
}

/** What the scheduler and the VM controller count as held on `node` (pure; unreadable entries hold nothing). */
export function nodeAllocation(node: Stored<Node>, pods: readonly Stored<Pod>[], vms: readonly Stored<VirtualMachine>[]): NodeAllocation {
  const me = node.metadata.name
  const cap = node.status?.capacity
  const capacity: NodeAllocation['capacity'] = {}
  try {
    if (cap?.cpu !== undefined) capacity.cpu = parseCpu(cap.cpu as string)
    if (cap?.memory !== undefined) capacity.mem = parseMemory(cap.memory as string)
  } catch {}
  const held = { count: 0, cpu: 0, mem: 0 }
  for (const p of pods) {
    if (p.status?.node !== me || finishedForGood(p.status?.phase, p.spec?.restartPolicy)) continue
    try {
      const r = podRequests(p.spec?.containers ?? [])
      held.cpu += parseCpu(r.cpu)
      held.mem += parseMemory(r.memory)
      held.count++
    } catch {}
  }
  const out: NodeAllocation['vms'] = []
  for (const v of vms) {
    const h = vmHolds(v)
    if (h === undefined || h.node !== me) continue
    const { node: _n, ...held } = h
    out.push(held)
  }
  out.sort((a, b) => a.createdAt - b.createdAt || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
  return { capacity, pods: held, vms: out }
}

/**
 * The view with the VirtualMachines: each node's pinned VMs (`NodeView.vms`: pods are placed in what
 * they leave), and every unpinned VM as an entry of its own (vmPodViewOf) that the plan places, keeps
 * and moves by its policy as it does a pod.
 */
export function withVmUses(view: ClusterView, vms: readonly Stored<VirtualMachine>[]): ClusterView {
  const uses = vmUsesByNode(vms)
  const entries = vms.flatMap((v) => vmPodViewOf(v) ?? [])
  if (uses.size === 0 && entries.length === 0) return view
  return {
    ...view,
    nodes: uses.size === 0 ? view.nodes : view.nodes.map((n) => (uses.has(n.name) ? { ...n, vms: uses.get(n.name)! } : n)),
    pods: entries.length === 0 ? view.pods : [...view.pods, ...entries],
  }
}

/**
 * The persistent Volumes a pod uses, and whether it writes them: a writer unless every mount of the
 * volume is `readOnly: true` (a volume listed but never mounted still counts as written: it is
 * attached).
 */
export function podVolumeUses(spec: unknown): PodVolumeUse[] {
  const sp = (isPlainObject(spec) ? spec : {}) as Record<string, any>
  const out: PodVolumeUse[] = []
  const containers: any[] = Array.isArray(sp.containers) ? sp.containers : []
  for (const v of Array.isArray(sp.volumes) ? sp.volumes : []) {
    const name = v?.volume?.name
    if (typeof name !== 'string' || out.some((u) => u.name === name)) continue
    const mounts = containers.flatMap((c) => (Array.isArray(c?.volumeMounts) ? c.volumeMounts : [])).filter((m: any) => m?.name === v.name)
    out.push({ name, writer: mounts.length === 0 || mounts.some((m: any) => m?.readOnly !== true) })
  }
  return out
}

/** The view with each pod's Volume constraint (src/sched/volumes.ts) filled in. */
export function withVolumeConstraints(
  view: ClusterView,
  pods: readonly Stored<Pod>[],
  volumes: readonly Stored<Volume>[],
  nodes: readonly Stored<Node>[],
  haAfterSeconds = 30,
  vms: readonly Stored<VirtualMachine>[] = [],
): ClusterView {
  const uses = new Map<string, PodVolumeUse[]>()
  for (const p of pods) {
    const u = podVolumeUses(p.spec)
    if (u.length > 0) uses.set(`${p.metadata.namespace ?? 'default'}/${p.metadata.name}`, u)
  }
  // An unpinned VM's Volume disks tie it to the Volume's node as a pod's volumes do (its entry is `vm/NAME`).
  for (const v of vms) {
    const disks: unknown[] = Array.isArray(v.spec?.disks) ? v.spec.disks : []
    const u = disks.flatMap((d) =>
      isPlainObject(d) && isPlainObject(d.volume) && typeof d.volume.name === 'string' ? [{ name: d.volume.name, writer: true }] : [],
    )
    if (u.length > 0) uses.set(`${v.metadata.namespace ?? 'default'}/vm/${v.metadata.name}`, u)
  }
  if (uses.size === 0) return view
  const gone = new Set(nodes.filter(isForgotten).map((n) => n.metadata.name))
  const nodeViews = new Map(view.nodes.map((n) => [n.name, n]))
  const downMs = (name: string): number | undefined => {
    const n = nodeViews.get(name)
    return n === undefined || n.state === 'alive' ? undefined : view.now - (n.since ?? view.now)
  }
  const vols = volumes.map((v) => {
    const node = typeof v.status?.node === 'string' ? v.status.node : typeof v.spec?.node === 'string' ? v.spec.node : undefined
    const reps = isPlainObject(v.status?.replicas) ? (v.status.replicas as Record<string, { syncedAt?: unknown }>) : {}
    const replicas = Object.entries(reps).map(([n, r]) => {
      const at = Date.parse(String(isPlainObject(r) ? r.syncedAt : ''))
      return { node: n, alive: nodeViews.get(n)?.state === 'alive' && !gone.has(n), ...(Number.isNaN(at) ? {} : { syncedAt: at }) }
    })
    const down = node !== undefined ? downMs(node) : undefined
    return {
      namespace: v.metadata.namespace ?? 'default',
      name: v.metadata.name,
      ...(node !== undefined ? { node, nodeGone: gone.has(node) } : {}),
      ...(down !== undefined ? { nodeDownMs: down } : {}),
      ...(replicas.length > 0 ? { replicas } : {}),
    }
  })
  const c = volumeConstraints(
    view.pods.map((p) => {
      const u = uses.get(`${p.namespace}/${p.name}`)
      return {
        namespace: p.namespace,
        name: p.name,
        ...(u ? { volumes: u } : {}),
        ...(p.node !== undefined ? { node: p.node } : {}),
        ...(p.createdAt !== undefined ? { createdAt: p.createdAt } : {}),
        ...(p.policy === 'ha' ? { haAfterMs: (p.haAfterSeconds ?? haAfterSeconds) * 1000 } : {}),
        finished: p.phase !== undefined,
      }
    }),
    vols,
  )
  return {
    ...view,
    pods: view.pods.map((p) => {
      const k = c.get(`${p.namespace}/${p.name}`)
      if (k === undefined) return p
      return { ...p, ...(k.node !== undefined ? { volumeNode: k.node } : {}), ...(k.block !== undefined ? { volumeBlock: k.block } : {}) }
    }),
  }
}
