import { checkNode, prepareTurn, REASON_SUMMARY, Reason, type ReasonCode, scoreNode, type Turn } from './constraints.ts'
import { mix32 } from './hash.ts'
import { BindOp, EvictOp, type Operation, UnbindOp } from './operations.ts'
import { resolveOptions, type SchedOptions, type SchedOptionsInput } from './options.ts'
import { type BoundDecision, decideBoundPod } from './policy.ts'
import { type NodeInfo, type PodInfo, podOrder, SchedState } from './state.ts'
import type { ClusterView } from './view.ts'

/**
 * Placement: the same view gives the same operations on every node.
 *
 * 1. Every bound pod is judged by its policy (policy.ts): kept, unbound (node lost for it) or
 *    evicted (live node it may no longer run on). Kept pods hold their node's resources.
 * 2. Pending pods are placed one by one in a fixed order (priority, pinned first, age, key). Each
 *    placement updates free resources, affinity and spread counts before the next pod is placed.
 *
 * Speed: nodes are parsed once into integers; a pinned pod looks at one node, a pod with a
 * nodeSelector only at the nodes carrying its rarest label pair (label index). The others scan nodes
 * from a rotating start and stop once enough feasible nodes were found (Kubernetes'
 * percentageOfNodesToScore): each pod costs O(sample) instead of O(nodes). The trade-off is that the
 * best node may be outside the sample — a slightly less even spread, never a wrong placement, since
 * every hard constraint is checked on whatever node is chosen and the scan runs to the end when
 * fewer feasible nodes exist. Pods with preferred affinity terms are scored over all nodes, because
 * the nodes they prefer are few and a sample would usually miss them.
 */

export interface PendingPod {
  pod: string
  /** `0/5 nodes can run it: 3 insufficient memory, 2 taint not tolerated`. */
  reason: string
  /** Nodes ruled out, per reason (first failing check per node). */
  counts: Partial<Record<ReasonCode, number>>
}

export interface PlanResult {
  operations: Operation[]
  /** Pods left without a node, with the reason in one line. */
  pending: PendingPod[]
}

/** The operations that bring the view to where it should be. */
export function plan(view: ClusterView, opts: SchedOptionsInput = {}): Operation[] {
  return planPlacements(view, opts).operations
}

export function planPlacements(view: ClusterView, opts: SchedOptionsInput = {}): PlanResult {
  const r = runPlan(view, resolveOptions(opts))
  return { operations: r.operations, pending: r.pending }
}

/** Internal: lets `orc why` look at the state exactly when one pod's turn comes. */
export interface PlanWatch {
  key: string
  onTurn(state: SchedState, turn: Turn): void
}

export interface PlanRun extends PlanResult {
  state: SchedState
  decisions: Map<string, BoundDecision>
  bound: Map<string, string>
}

export function runPlan(view: ClusterView, opts: SchedOptions, watch?: PlanWatch): PlanRun {
  const state = new SchedState(view, opts)
  const now = view.now
  const operations: Operation[] = []
  const pending: PendingPod[] = []
  const decisions = new Map<string, BoundDecision>()
  const bound = new Map<string, string>()
  const from = new Map<string, string>()
  const queue: PodInfo[] = []

  for (const p of state.pods) {
    if (p.terminal) continue
    const nodeName = p.view.node
    if (nodeName === undefined) {
      queue.push(p)
      continue
    }
    const node = state.nodeByName.get(nodeName)
    const d = decideBoundPod(p.view, node?.view, now, opts, view.noQuorum)
    decisions.set(p.key, d)
    if (d.action === 'keep') {
      if (node) state.place(p, node)
      continue
    }
    operations.push(d.action === 'unbind' ? new UnbindOp(p.key, nodeName, d.reason) : new EvictOp(p.key, nodeName, d.reason))
    from.set(p.key, nodeName)
    queue.push(p)
  }

  queue.sort(podOrder)
  const all = state.nodes
  let cursor = opts.seed >>> 0
  const counts = new Array<number>(18)
  for (const p of queue) {
    const turn = prepareTurn(state, p)
    state.beginSpread(turn.group)
    try {
      if (watch && watch.key === p.key) watch.onTurn(state, turn)
      placeOne(p, turn)
    } finally {
      state.endSpread(turn.group)
    }
  }
  return { operations, pending, state, decisions, bound }

  function placeOne(p: PodInfo, turn: Turn): void {
    counts.fill(0)
    if (p.invalid !== undefined) {
      pending.push({ pod: p.key, reason: p.invalid, counts: {} })
      return
    }
    const list = candidates(state, p)
    const len = list ? list.length : all.length
    // The nodes outside the candidate list were ruled out by the pin or nodeSelector.
    const skipped = all.length - len
    const scoreAll = turn.preferredNodeWeight > 0 || turn.preferredPodWeight > 0
    const want = scoreAll ? len : feasibleToFind(len, opts)
    const start = len > 0 ? cursor % len : 0
    let best: NodeInfo | undefined
    let bestScore = -Infinity
    let bestTie = 0
    let feasible = 0
    let examined = 0
    for (let i = 0; i < len && feasible < want; i++) {
      let j = start + i
      if (j >= len) j -= len
      const n = list ? all[list[j]!]! : all[j]!
      examined++
      const code = checkNode(turn, n, null, now)
      if (code !== 0) {
        counts[code]!++
        continue
      }
      feasible++
      const score = scoreNode(state, turn, n)
      if (score > bestScore) {
        best = n
        bestScore = score
        bestTie = mix32(p.hash, n.hash)
      } else if (score === bestScore) {
        // Equal scores: a seeded hash of (pod, node) decides, so replicas do not all pick the
        // alphabetically first node and every node still agrees.
        const tie = mix32(p.hash, n.hash)
        if (tie > bestTie) {
          best = n
          bestTie = tie
        }
      }
    }
    cursor += examined
    if (!best) {
      if (skipped > 0) counts[p.pin !== undefined ? Reason.pinned : p.volumeNode !== undefined ? Reason.volumeNode : Reason.nodeSelector]! += skipped
      pending.push(pendingOf(p.key, all.length, counts))
      return
    }
    state.place(p, best)
    bound.set(p.key, best.name)
    operations.push(new BindOp(p.key, best.name, `best of ${feasible} feasible nodes (${examined} checked)`, from.get(p.key)))
  }
}

/** Node indexes worth checking, or null for all nodes. */
function candidates(state: SchedState, p: PodInfo): number[] | null {
  const only = p.pin ?? p.volumeNode
  if (only !== undefined) {
    const n = state.nodeByName.get(only)
    return n ? [n.idx] : []
  }
  if (p.nodeSelector) {
    let smallest: number[] | null = null
    for (const [k, v] of p.nodeSelector) {
      const list = state.labelIndex.get(`${k}=${v}`)
      if (!list) return []
      if (!smallest || list.length < smallest.length) smallest = list
    }
    return smallest
  }
  return null
}

/** How many feasible nodes to find before choosing (see SchedOptions.percentageOfNodesToScore). */
export function feasibleToFind(nodes: number, opts: Pick<SchedOptions, 'percentageOfNodesToScore' | 'minFeasibleNodesToFind'>): number {
  if (nodes <= opts.minFeasibleNodesToFind || opts.percentageOfNodesToScore >= 100) return nodes
  const pct = opts.percentageOfNodesToScore > 0 ? opts.percentageOfNodesToScore : Math.max(5, 50 - Math.floor(nodes / 125))
  return Math.max(opts.minFeasibleNodesToFind, Math.floor((nodes * pct) / 100))
}

export function summarize(total: number, counts: ArrayLike<number>): { text: string; counts: Partial<Record<ReasonCode, number>> } {
  const out: Partial<Record<ReasonCode, number>> = {}
  const parts: [number, string][] = []
  for (let c = 1; c < counts.length; c++) {
    const k = counts[c] ?? 0
    if (k > 0) {
      out[c as ReasonCode] = k
      parts.push([k, `${k} ${REASON_SUMMARY[c as ReasonCode]}`])
    }
  }
  parts.sort((a, b) => b[0] - a[0] || (a[1] < b[1] ? -1 : 1))
  const text = total === 0 ? 'no nodes in the cluster' : `0/${total} nodes can run it${parts.length > 0 ? `: ${parts.map((x) => x[1]).join(', ')}` : ''}`
  return { text, counts: out }
}

function pendingOf(key: string, total: number, counts: number[]): PendingPod {
  const s = summarize(total, counts)
  return { pod: key, reason: s.text, counts: s.counts }
}
