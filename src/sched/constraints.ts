import { reasonDuration } from './duration.ts'
import { formatCpu, formatMemory } from './quantity.ts'
import { formatSelector, matchSelector } from './selector.ts'
import {
  type CompiledTerm,
  domainOf,
  formatTaint,
  type GroupCounts,
  NODE_TOPOLOGY_KEY,
  type NodeInfo,
  type PodInfo,
  type SchedState,
  type SymmetricAnti,
  type TermCounter,
  termSelects,
  tolerationFor,
} from './state.ts'

/**
 * Filters and scores. One function decides whether a node can take a pod — the placement loop calls
 * it with `out = null` and stops at the first failure; `orc why` calls it with a list and gets every
 * reason in words. Keeping one function means the explanation can never disagree with the decision.
 */

/** Why a node was ruled out; 0 = it fits. Codes are stable (JSON output of `orc why`). */
export const Reason = {
  ok: 0,
  nodeForgotten: 1,
  nodeUnreachable: 2,
  nodeCordoned: 3,
  nodeInvalid: 4,
  podInvalid: 5,
  pinned: 6,
  nodeSelector: 7,
  nodeAffinity: 8,
  taint: 9,
  cpu: 10,
  memory: 11,
  podCount: 12,
  podAffinity: 13,
  podAntiAffinity: 14,
  cluster: 15,
  volume: 16,
  volumeNode: 17,
} as const
export type ReasonCode = (typeof Reason)[keyof typeof Reason]

/** Short words per reason, for summaries like `0/5 nodes can run it: 3 insufficient memory, …`. */
export const REASON_SUMMARY: Record<ReasonCode, string> = {
  0: 'fits',
  1: 'node forgotten',
  2: 'node unreachable',
  3: 'node cordoned',
  4: 'node capacity unreadable',
  5: 'pod requests unreadable',
  6: 'not the pinned node',
  7: 'nodeSelector mismatch',
  8: 'node affinity mismatch',
  9: 'taint not tolerated',
  10: 'insufficient cpu',
  11: 'insufficient memory',
  12: 'too many pods',
  13: 'pod affinity not met',
  14: 'pod anti-affinity',
  15: 'cluster not allowed',
  16: 'volume unavailable',
  17: 'not the node holding its volumes',
}

/** What is computed once per pod before its nodes are checked. */
export interface Turn {
  pod: PodInfo
  affinity: { term: CompiledTerm; counter: TermCounter; waived: boolean }[]
  anti: { term: CompiledTerm; counter: TermCounter }[]
  symmetric: SymmetricAnti[]
  affinityPreferred: { weight: number; counter: TermCounter }[]
  antiPreferred: { weight: number; counter: TermCounter }[]
  preferredPodWeight: number
  preferredNodeWeight: number
  group?: GroupCounts
  spreadByDomain: Int32Array | null
  wLeast: number
  wBalanced: number
  wSpread100: number
  /** Score bonus per node index of preferClusters rank (empty: no preference). */
  wClusters100: number
}

export function prepareTurn(state: SchedState, pod: PodInfo): Turn {
  const affinityPreferred = pod.affinityPreferred.map((w) => ({ weight: w.weight, counter: state.counter(w.term) }))
  const antiPreferred = pod.antiAffinityPreferred.map((w) => ({ weight: w.weight, counter: state.counter(w.term) }))
  const group = pod.group === undefined ? undefined : state.groups.get(pod.group)
  return {
    pod,
    affinity: pod.affinityRequired.map((term) => {
      const counter = state.counter(term)
      // Like Kubernetes: the first pod of a group that must be co-located with its own kind may go
      // anywhere, or no such group could ever start.
      return { term, counter, waived: counter.total === 0 && termSelects(term, pod.namespace, pod.labels) }
    }),
    anti: pod.antiAffinityRequired.map((term) => ({ term, counter: state.counter(term) })),
    // Pods' anti-affinity selects pods, not VMs.
    symmetric: pod.view.vm !== undefined ? [] : state.symmetricFor(pod),
    affinityPreferred,
    antiPreferred,
    preferredPodWeight: [...affinityPreferred, ...antiPreferred].reduce((s, w) => s + w.weight, 0),
    preferredNodeWeight: pod.preferredNodeTerms.reduce((s, w) => s + w.weight, 0),
    group,
    spreadByDomain: group ? group.byDomain : null,
    wLeast: state.opts.weights.leastAllocated,
    wBalanced: state.opts.weights.balanced,
    wSpread100: state.opts.weights.spread * 100,
    wClusters100: state.opts.weights.clusters * 100,
  }
}

function whereText(topologyKey: string, domain: string): string {
  return topologyKey === NODE_TOPOLOGY_KEY ? 'on this node' : `in ${topologyKey}=${domain}`
}

/** `; vm/default/db holds 1.1Gi, vm/default/ci holds 384Mi` (largest first, at most 3 named), or '' without VMs. */
export function vmsHolding(n: Pick<NodeInfo, 'vms'>, what: 'cpu' | 'mem'): string {
  const held = n.vms.filter((v) => v[what] > 0).sort((a, b) => b[what] - a[what] || (a.name < b.name ? -1 : 1))
  if (held.length === 0) return ''
  const fmt = what === 'cpu' ? formatCpu : formatMemory
  const named = held.slice(0, 3).map((v) => `vm/${v.name} holds ${fmt(v[what])}`)
  if (held.length > 3) named.push(`${held.length - 3} more VMs hold ${fmt(held.slice(3).reduce((s, v) => s + v[what], 0))}`)
  return `; ${named.join(', ')}`
}

/**
 * Can `n` take the pod now? Returns the first failing Reason (0 if it fits). With `out`, checks
 * everything and appends one line per failure, e.g. `insufficient memory (requests 2Gi, free 512Mi)`.
 */
export function checkNode(t: Turn, n: NodeInfo, out: string[] | null, now: number): ReasonCode {
  const p = t.pod
  let first: ReasonCode = 0
  if (!n.schedulable) {
    const v = n.view
    if (v.forgotten) {
      if (!out) return Reason.nodeForgotten
      first ||= Reason.nodeForgotten
      out.push('node forgotten')
    } else if (v.state !== 'alive') {
      if (!out) return Reason.nodeUnreachable
      first ||= Reason.nodeUnreachable
      out.push(v.since === undefined ? `node ${v.state}` : `node ${v.state} (unreachable for ${reasonDuration(now - v.since)})`)
    }
    if (n.invalid !== undefined) {
      if (!out) return Reason.nodeInvalid
      first ||= Reason.nodeInvalid
      out.push(n.invalid)
    }
    if (v.unschedulable) {
      if (!out) return Reason.nodeCordoned
      first ||= Reason.nodeCordoned
      out.push('node cordoned (unschedulable)')
    }
  }
  if (p.invalid !== undefined) {
    if (!out) return Reason.podInvalid
    first ||= Reason.podInvalid
    out.push(p.invalid)
  }
  if (p.pin !== undefined && p.pin !== n.name) {
    if (!out) return Reason.pinned
    first ||= Reason.pinned
    out.push(`pod is pinned to ${p.pin}`)
  }
  if (p.volumeBlock !== undefined) {
    if (!out) return Reason.volume
    first ||= Reason.volume
    out.push(p.volumeBlock)
  }
  if (p.volumeNode !== undefined && p.volumeNode !== n.name) {
    if (!out) return Reason.volumeNode
    first ||= Reason.volumeNode
    out.push(`its volumes' data lives on node ${p.volumeNode}`)
  }
  if (p.clusters !== undefined) {
    const c = n.view.cluster
    if (c === undefined || !p.clusters.includes(c)) {
      if (!out) return Reason.cluster
      first ||= Reason.cluster
      out.push(
        c === undefined
          ? `placement.clusters applies in shared namespaces only (this node is in no federation's view)`
          : `cluster ${c} is not in placement.clusters [${p.clusters.join(', ')}]`,
      )
    }
  }
  if (p.nodeSelector) {
    for (const [k, v] of p.nodeSelector) {
      if (n.labels[k] !== v) {
        if (!out) return Reason.nodeSelector
        first ||= Reason.nodeSelector
        out.push(`nodeSelector ${k}=${v} does not match`)
      }
    }
  }
  if (p.requiredNodeTerms && !p.requiredNodeTerms.some((s) => matchSelector(n.labels, s))) {
    if (!out) return Reason.nodeAffinity
    first ||= Reason.nodeAffinity
    out.push(`node affinity does not match (needs one of: ${p.requiredNodeTerms.map(formatSelector).join(' | ')})`)
  }
  for (const taint of n.hardTaints) {
    const tol = tolerationFor(p.tolerations, taint)
    // A NoExecute toleration that has run out would be evicted again at once (see policy.ts).
    const expired =
      tol !== undefined &&
      taint.effect === 'NoExecute' &&
      tol.tolerationSeconds !== undefined &&
      now >= (taint.since ?? -Infinity) + tol.tolerationSeconds * 1000
    if (!tol || expired) {
      if (!out) return Reason.taint
      first ||= Reason.taint
      out.push(expired ? `taint ${formatTaint(taint)} tolerated for ${tol!.tolerationSeconds}s only` : `taint ${formatTaint(taint)} not tolerated`)
    }
  }
  const freeCpu = n.allocCpu - n.usedCpu
  if (p.cpu > freeCpu) {
    if (!out) return Reason.cpu
    first ||= Reason.cpu
    out.push(`insufficient cpu (requests ${formatCpu(p.cpu)}, free ${formatCpu(Math.max(0, freeCpu))}${vmsHolding(n, 'cpu')})`)
  }
  const freeMem = n.allocMem - n.usedMem
  if (p.mem > freeMem) {
    if (!out) return Reason.memory
    first ||= Reason.memory
    out.push(`insufficient memory (requests ${formatMemory(p.mem)}, free ${formatMemory(Math.max(0, freeMem))}${vmsHolding(n, 'mem')})`)
  }
  if (p.view.vm === undefined && n.usedPods + 1 > n.allocPods) {
    if (!out) return Reason.podCount
    first ||= Reason.podCount
    out.push(`too many pods (max ${n.allocPods})`)
  }
  for (const a of t.affinity) {
    if (a.waived) continue
    const d = domainOf(n, a.term.topologyKey)
    if (d === undefined || !a.counter.domains.has(d)) {
      if (!out) return Reason.podAffinity
      first ||= Reason.podAffinity
      out.push(
        d === undefined
          ? `pod affinity: node has no ${a.term.topologyKey} label`
          : `pod affinity: no pod matching ${formatSelector(a.term.sel)} ${whereText(a.term.topologyKey, d)}`,
      )
    }
  }
  for (const a of t.anti) {
    const d = domainOf(n, a.term.topologyKey)
    if (d !== undefined && a.counter.domains.has(d)) {
      if (!out) return Reason.podAntiAffinity
      first ||= Reason.podAntiAffinity
      out.push(`pod anti-affinity: a pod matching ${formatSelector(a.term.sel)} already runs ${whereText(a.term.topologyKey, d)}`)
    }
  }
  for (const s of t.symmetric) {
    const d = domainOf(n, s.term.topologyKey)
    if (d !== undefined && s.counter.domains.has(d)) {
      if (!out) return Reason.podAntiAffinity
      first ||= Reason.podAntiAffinity
      out.push(`pod anti-affinity of a pod ${whereText(s.term.topologyKey, d)} keeps away pods matching ${formatSelector(s.term.sel)}`)
    }
  }
  return first
}

/**
 * Score of a feasible node, higher is better; an integer so comparisons are exact on every node.
 * Each part is 0..100 and weighted by options: least-allocated and balanced resource use after the
 * pod lands, spread of the pod's group over nodes and spread topology domains, preferred node and pod
 * (anti-)affinity, untolerated PreferNoSchedule taints.
 */
export function scoreNode(state: SchedState, t: Turn, n: NodeInfo): number {
  const w = state.opts.weights
  const p = t.pod
  const fc = n.allocCpu > 0 ? (n.usedCpu + p.cpu) / n.allocCpu : 1
  const fm = n.allocMem > 0 ? (n.usedMem + p.mem) / n.allocMem : 1
  let s = t.wLeast * (100 - 50 * (fc + fm)) + t.wBalanced * (100 - 100 * (fc > fm ? fc - fm : fm - fc))
  const byDomain = t.spreadByDomain
  if (byDomain !== null) {
    // state.beginSpread(t.group) filled the scratch array for this turn.
    let c = state.spreadScratch[n.idx]!
    const ds = n.spreadDomains
    for (let i = 0; i < ds.length; i++) c += byDomain[ds[i]!]!
    s += t.wSpread100 / (1 + c)
  } else s += t.wSpread100
  if (t.preferredNodeWeight > 0) {
    let m = 0
    for (const pt of p.preferredNodeTerms) if (matchSelector(n.labels, pt.selector)) m += pt.weight
    s += (w.nodeAffinity * 100 * m) / t.preferredNodeWeight
  }
  if (t.preferredPodWeight > 0) {
    let m = 0
    for (const a of t.affinityPreferred) {
      const d = domainOf(n, a.counter.term.topologyKey)
      if (d !== undefined && a.counter.domains.has(d)) m += a.weight
    }
    for (const a of t.antiPreferred) {
      const d = domainOf(n, a.counter.term.topologyKey)
      if (d === undefined || !a.counter.domains.has(d)) m += a.weight
    }
    s += (w.podAffinity * 100 * m) / t.preferredPodWeight
  }
  const pc = p.preferClusters
  if (pc.length > 0) {
    // First preferred cluster: the whole weight; the k-th of m: (m-k)/m of it; others nothing.
    const rank = n.view.cluster === undefined ? -1 : pc.indexOf(n.view.cluster)
    if (rank >= 0) s += (t.wClusters100 * (pc.length - rank)) / pc.length
  }
  if (n.softTaints.length > 0) {
    let u = 0
    for (const taint of n.softTaints) if (!tolerationFor(p.tolerations, taint)) u++
    s += (w.taints * 100) / (1 + u)
  } else s += w.taints * 100
  return Math.round(s * 64)
}
