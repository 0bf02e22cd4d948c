import { byCodeUnits as cmp, OrcError } from '../model/index.ts'
import { hashString } from './hash.ts'
import type { SchedOptions } from './options.ts'
import { parseCpu, parseMemory } from './quantity.ts'
import { matchSelector, selectorKey } from './selector.ts'
import type { ClusterView, LabelSelector, NodeView, PodAffinityTerm, PodView, Taint, Toleration } from './view.ts'
import { podKey } from './view.ts'

/**
 * The scheduler's working copy of a view: nodes and pods parsed once (quantities to integers, terms
 * compiled), sorted by name so input order never matters, plus the occupancy that placements update.
 */

/** Topology key meaning "the node itself" (no label needed). */
export const NODE_TOPOLOGY_KEY = 'node'
/** Topology key meaning "the node's cluster" in a federation (NodeView.cluster; else a `cluster` label). */
export const CLUSTER_TOPOLOGY_KEY = 'cluster'
/** Shared by every pod without a cluster preference (read only). */
const NO_CLUSTERS: readonly string[] = []

export interface NodeInfo {
  idx: number
  name: string
  view: NodeView
  labels: Record<string, string>
  allocCpu: number
  allocMem: number
  allocPods: number
  usedCpu: number
  usedMem: number
  usedPods: number
  /** VMs on the node (`NodeView.vms`, parsed): already counted in usedCpu/usedMem; named in explanations. */
  vms: { name: string; cpu: number; mem: number }[]
  /** NoSchedule and NoExecute taints: must be tolerated. */
  hardTaints: Taint[]
  /** PreferNoSchedule taints: lower the score. */
  softTaints: Taint[]
  /** Alive, not cordoned, not forgotten, readable: may take new pods. */
  schedulable: boolean
  invalid?: string
  hash: number
  /** Numbered spread-topology domains this node is in (one per spread key it has a label for). */
  spreadDomains: number[]
}

export interface CompiledTerm {
  sel: LabelSelector
  topologyKey: string
  /** Sorted; the namespaces whose pods the term looks at. */
  namespaces: string[]
  /** Identity of (selector, topology, namespaces): pods with the same term share one counter. */
  id: string
}

export interface PodInfo {
  key: string
  view: PodView
  namespace: string
  labels: Record<string, string>
  cpu: number
  mem: number
  invalid?: string
  pin?: string
  /** The node holding the pod's persistent Volumes. */
  volumeNode?: string
  volumeBlock?: string
  nodeSelector?: [string, string][]
  tolerations: Toleration[]
  requiredNodeTerms?: LabelSelector[]
  preferredNodeTerms: { weight: number; selector: LabelSelector }[]
  affinityRequired: CompiledTerm[]
  antiAffinityRequired: CompiledTerm[]
  affinityPreferred: { weight: number; term: CompiledTerm }[]
  antiAffinityPreferred: { weight: number; term: CompiledTerm }[]
  group?: string
  priority: number
  createdAt: number
  hash: number
  terminal: boolean
  /** Allowed clusters (sorted), if constrained. */
  clusters?: string[]
  /** Preferred clusters, most preferred first. */
  preferClusters: readonly string[]
}

/** Counts of pods matching one term, per topology domain (label value, or node name). */
export class TermCounter {
  readonly domains = new Map<string, number>()
  total = 0
  constructor(readonly term: CompiledTerm) {}
  add(domain: string | undefined): void {
    this.total++
    if (domain === undefined) return
    this.domains.set(domain, (this.domains.get(domain) ?? 0) + 1)
  }
}

/** Replicas of one group per node and per spread-topology domain (`site=eu-1`, numbered). */
export interface GroupCounts {
  byNode: Map<number, number>
  byDomain: Int32Array
}

/**
 * Items keyed by a label selector, found from a pod's labels without testing every selector: each
 * item is filed under one `key=value` of its matchLabels (selectors without matchLabels are scanned).
 */
class SelectorIndex<T extends { term: CompiledTerm }> {
  private readonly byLabel = new Map<string, T[]>()
  private readonly scan: T[] = []
  add(item: T): void {
    const ml = item.term.sel.matchLabels
    const keys = ml ? Object.keys(ml) : []
    if (keys.length === 0) {
      this.scan.push(item)
      return
    }
    keys.sort()
    const k = `${keys[0]}=${ml![keys[0]!]}`
    const list = this.byLabel.get(k)
    if (list) list.push(item)
    else this.byLabel.set(k, [item])
  }
  /** Items whose term selects a pod with these labels in this namespace. */
  matching(namespace: string, labels: Record<string, string>, out: T[]): T[] {
    for (const k in labels) {
      const list = this.byLabel.get(`${k}=${labels[k]}`)
      if (list) for (const it of list) if (termSelects(it.term, namespace, labels)) out.push(it)
    }
    for (const it of this.scan) if (termSelects(it.term, namespace, labels)) out.push(it)
    return out
  }
}

export function termSelects(term: CompiledTerm, namespace: string, labels: Record<string, string>): boolean {
  return term.namespaces.includes(namespace) && matchSelector(labels, term.sel)
}

export function domainOf(node: NodeInfo, topologyKey: string): string | undefined {
  if (topologyKey === NODE_TOPOLOGY_KEY) return node.name
  if (topologyKey === CLUSTER_TOPOLOGY_KEY) return node.view.cluster ?? node.labels[topologyKey]
  return node.labels[topologyKey]
}

function compileTerm(t: PodAffinityTerm, ownNamespace: string): CompiledTerm {
  const namespaces = [...new Set(t.namespaces && t.namespaces.length > 0 ? t.namespaces : [ownNamespace])].sort()
  return {
    sel: t.labelSelector ?? {},
    topologyKey: t.topologyKey,
    namespaces,
    id: `${selectorKey(t.labelSelector ?? {})}|${t.topologyKey}|${namespaces.join(',')}`,
  }
}

function resourcesOf(n: NodeView): { cpu: number; mem: number; pods: number } {
  const a = n.allocatable
  const c = n.capacity
  return { cpu: parseCpu(a?.cpu ?? c?.cpu), mem: parseMemory(a?.memory ?? c?.memory), pods: a?.pods ?? c?.pods ?? Infinity }
}

export function taintOrder(a: Taint, b: Taint): number {
  return cmp(a.key, b.key) || cmp(a.value ?? '', b.value ?? '') || cmp(a.effect, b.effect)
}

export function compileNode(n: NodeView, idx: number, seed: number): NodeInfo {
  let alloc = { cpu: 0, mem: 0, pods: 0 }
  let vms: NodeInfo['vms'] = []
  let invalid: string | undefined
  try {
    alloc = resourcesOf(n)
    vms = (n.vms ?? []).map((v) => ({ name: v.name, cpu: parseCpu(v.cpu), mem: parseMemory(v.memory) })).sort((a, b) => cmp(a.name, b.name))
  } catch (err) {
    invalid = `node capacity unreadable: ${(err as Error).message}`
  }
  const taints = [...(n.taints ?? [])].sort(taintOrder)
  return {
    idx,
    name: n.name,
    view: n,
    labels: n.labels ?? {},
    allocCpu: alloc.cpu,
    allocMem: alloc.mem,
    allocPods: alloc.pods,
    // VMs hold their share from the start: pods fit in what they leave.
    usedCpu: vms.reduce((sum, v) => sum + v.cpu, 0),
    usedMem: vms.reduce((sum, v) => sum + v.mem, 0),
    usedPods: 0,
    vms,
    hardTaints: taints.filter((t) => t.effect !== 'PreferNoSchedule'),
    softTaints: taints.filter((t) => t.effect === 'PreferNoSchedule'),
    schedulable: invalid === undefined && n.state === 'alive' && !n.unschedulable && !n.forgotten,
    invalid,
    hash: hashString(n.name, seed),
    spreadDomains: [],
  }
}

export function compilePod(p: PodView, seed: number): PodInfo {
  const key = podKey(p)
  let cpu = 0
  let mem = 0
  let invalid: string | undefined
  try {
    cpu = parseCpu(p.requests?.cpu)
    mem = parseMemory(p.requests?.memory)
  } catch (err) {
    invalid = `pod requests unreadable: ${(err as Error).message}`
  }
  const a = p.affinity
  const ns = p.namespace
  const sel = p.nodeSelector ? Object.entries(p.nodeSelector).sort((x, y) => cmp(x[0], y[0])) : undefined
  return {
    key,
    view: p,
    namespace: ns,
    labels: p.labels ?? {},
    cpu,
    mem,
    invalid,
    pin: p.pin,
    ...(p.volumeNode !== undefined ? { volumeNode: p.volumeNode } : {}),
    ...(p.volumeBlock !== undefined ? { volumeBlock: p.volumeBlock } : {}),
    nodeSelector: sel && sel.length > 0 ? sel : undefined,
    tolerations: p.tolerations ?? [],
    requiredNodeTerms: a?.nodeAffinity?.required && a.nodeAffinity.required.length > 0 ? a.nodeAffinity.required : undefined,
    preferredNodeTerms: a?.nodeAffinity?.preferred ?? [],
    affinityRequired: (a?.podAffinity?.required ?? []).map((t) => compileTerm(t, ns)),
    antiAffinityRequired: (a?.podAntiAffinity?.required ?? []).map((t) => compileTerm(t, ns)),
    affinityPreferred: (a?.podAffinity?.preferred ?? []).map((w) => ({ weight: w.weight, term: compileTerm(w.term, ns) })),
    antiAffinityPreferred: (a?.podAntiAffinity?.preferred ?? []).map((w) => ({ weight: w.weight, term: compileTerm(w.term, ns) })),
    group: p.group,
    priority: p.priority ?? 0,
    createdAt: p.createdAt ?? 0,
    hash: hashString(key, seed),
    terminal: p.phase === 'Succeeded' || p.phase === 'Failed',
    ...(p.clusters !== undefined ? { clusters: [...new Set(p.clusters)].sort() } : {}),
    preferClusters: p.preferClusters?.length ? [...new Set(p.preferClusters)] : NO_CLUSTERS,
  }
}

/** Placement order: higher priority, then pinned (no alternatives), then older, then by key. */
export function podOrder(a: PodInfo, b: PodInfo): number {
  return b.priority - a.priority || ((a.pin ?? a.volumeNode) ? 0 : 1) - ((b.pin ?? b.volumeNode) ? 0 : 1) || a.createdAt - b.createdAt || cmp(a.key, b.key)
}

export function tolerationFor(tols: readonly Toleration[], taint: Taint): Toleration | undefined {
  for (const t of tols) {
    if (t.effect !== undefined && t.effect !== taint.effect) continue
    if (t.operator === 'Exists') {
      if (!t.key || t.key === taint.key) return t
    } else if (t.key === taint.key && (t.value ?? '') === (taint.value ?? '')) return t
  }
  return undefined
}

export function formatTaint(t: Taint): string {
  return `${t.key}${t.value ? `=${t.value}` : ''}:${t.effect}`
}

/** Existing pods' required anti-affinity, so a newcomer does not land beside a pod that refuses it. */
export interface SymmetricAnti {
  term: CompiledTerm
  counter: TermCounter
}

export class SchedState {
  readonly nodes: NodeInfo[]
  readonly nodeByName = new Map<string, NodeInfo>()
  readonly pods: PodInfo[]
  readonly podByKey = new Map<string, PodInfo>()
  /** Node indexes per `key=value` label, ascending. */
  readonly labelIndex = new Map<string, number[]>()
  /** Pods holding resources on a node, in the order they were added. */
  readonly placed: { pod: PodInfo; node: NodeInfo }[] = []
  readonly counters = new Map<string, TermCounter>()
  private readonly counterIndex = new SelectorIndex<TermCounter>()
  private readonly symmetric = new Map<string, SymmetricAnti>()
  private readonly symmetricIndex = new SelectorIndex<SymmetricAnti>()
  readonly groups = new Map<string, GroupCounts>()
  /** Number of distinct spread domains. */
  readonly spreadDomainCount: number
  /**
   * Replicas of the current pod's group per node index, filled for one turn only (see
   * beginSpread): a typed-array read per node instead of a map lookup in the hottest loop.
   */
  readonly spreadScratch: Int32Array
  /** Placed pods per `key=value` label, so a new term counts only pods that can match it. */
  private readonly placedByLabel = new Map<string, { pod: PodInfo; node: NodeInfo }[]>()

  constructor(
    view: ClusterView,
    readonly opts: SchedOptions,
  ) {
    const nodes = [...view.nodes].sort((a, b) => cmp(a.name, b.name))
    for (let i = 1; i < nodes.length; i++) {
      if (nodes[i]!.name === nodes[i - 1]!.name) throw new OrcError('invalid', `view has node ${nodes[i]!.name} twice`, { node: nodes[i]!.name })
    }
    this.nodes = nodes.map((n, i) => compileNode(n, i, opts.seed))
    for (const n of this.nodes) {
      this.nodeByName.set(n.name, n)
      for (const k in n.labels) {
        const lk = `${k}=${n.labels[k]}`
        const list = this.labelIndex.get(lk)
        if (list) list.push(n.idx)
        else this.labelIndex.set(lk, [n.idx])
      }
    }
    this.pods = view.pods.map((p) => compilePod(p, opts.seed)).sort((a, b) => cmp(a.key, b.key))
    for (let i = 1; i < this.pods.length; i++) {
      if (this.pods[i]!.key === this.pods[i - 1]!.key) throw new OrcError('invalid', `view has pod ${this.pods[i]!.key} twice`, { pod: this.pods[i]!.key })
    }
    for (const p of this.pods) this.podByKey.set(p.key, p)
    const domainIds = new Map<string, number>()
    for (const n of this.nodes) {
      for (const k of opts.spreadTopologyKeys) {
        const v = domainOf(n, k)
        if (v === undefined) continue
        const dk = `${k}=${v}`
        let id = domainIds.get(dk)
        if (id === undefined) {
          id = domainIds.size
          domainIds.set(dk, id)
        }
        n.spreadDomains.push(id)
      }
    }
    this.spreadDomainCount = domainIds.size
    this.spreadScratch = new Int32Array(this.nodes.length)
  }

  /** Fill spreadScratch with the group's replicas per node; endSpread clears it. */
  beginSpread(g: GroupCounts | undefined): void {
    if (g) for (const [idx, c] of g.byNode) this.spreadScratch[idx] = c
  }
  endSpread(g: GroupCounts | undefined): void {
    if (g) for (const idx of g.byNode.keys()) this.spreadScratch[idx] = 0
  }

  /** The pod now holds resources on the node and counts for affinity and spread. */
  place(pod: PodInfo, node: NodeInfo): void {
    node.usedCpu += pod.cpu
    node.usedMem += pod.mem
    if (pod.view.vm !== undefined) {
      // A VM holds room as a VM (explanations name it); it is no pod for counts and affinity.
      node.vms.push({ name: pod.view.vm, cpu: pod.cpu, mem: pod.mem })
      return
    }
    node.usedPods++
    this.placed.push({ pod, node })
    const hits: TermCounter[] = []
    this.counterIndex.matching(pod.namespace, pod.labels, hits)
    for (const c of hits) c.add(domainOf(node, c.term.topologyKey))
    for (const term of pod.antiAffinityRequired) {
      let s = this.symmetric.get(term.id)
      if (!s) {
        s = { term, counter: new TermCounter(term) }
        this.symmetric.set(term.id, s)
        this.symmetricIndex.add(s)
      }
      s.counter.add(domainOf(node, term.topologyKey))
    }
    if (pod.group !== undefined) {
      let g = this.groups.get(pod.group)
      if (!g) {
        g = { byNode: new Map(), byDomain: new Int32Array(this.spreadDomainCount) }
        this.groups.set(pod.group, g)
      }
      g.byNode.set(node.idx, (g.byNode.get(node.idx) ?? 0) + 1)
      for (const d of node.spreadDomains) g.byDomain[d]!++
    }
    for (const k in pod.labels) {
      const lk = `${k}=${pod.labels[k]}`
      const list = this.placedByLabel.get(lk)
      if (list) list.push({ pod, node })
      else this.placedByLabel.set(lk, [{ pod, node }])
    }
  }

  /** Counts for a term, built from every placed pod the first time it is asked for, then kept current. */
  counter(term: CompiledTerm): TermCounter {
    let c = this.counters.get(term.id)
    if (c) return c
    c = new TermCounter(term)
    const ml = term.sel.matchLabels
    const first = ml ? Object.keys(ml).sort()[0] : undefined
    const pool = first === undefined ? this.placed : (this.placedByLabel.get(`${first}=${ml![first]}`) ?? [])
    for (const { pod, node } of pool) if (termSelects(term, pod.namespace, pod.labels)) c.add(domainOf(node, term.topologyKey))
    this.counters.set(term.id, c)
    this.counterIndex.add(c)
    return c
  }

  /** Required anti-affinity terms of placed pods that select this pod. */
  symmetricFor(pod: PodInfo): SymmetricAnti[] {
    return this.symmetricIndex.matching(pod.namespace, pod.labels, [])
  }
}
