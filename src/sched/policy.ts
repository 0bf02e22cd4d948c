import { reasonDuration } from './duration.ts'
import type { SchedOptions } from './options.ts'
import { formatTaint, taintOrder, tolerationFor } from './state.ts'
import type { NodeView, PodView } from './view.ts'

/**
 * What happens to a pod that is bound to a node (principle 7: local scheduling with stated policy).
 *
 * - `ha` pods are rebound once their node has been unreachable (suspect or dead) for `haAfter`
 *   (pod's `haAfterSeconds`, else the cluster's).
 * - `best-effort` pods (the default) move only when the node is forgotten by an operator or has been
 *   unreachable for `goneAfter` (7 days by default): a flapping link must not move them.
 * - A pinned pod never moves (it has nowhere else to go); it is evicted only when its pin changes.
 * - Untolerated NoExecute taints evict from live nodes (after `tolerationSeconds` if tolerated for a time).
 * - A pod bound to a node missing from the view is kept: on a partial view the Node object may simply
 *   not have arrived yet, and `orc node forget` marks nodes forgotten rather than deleting them.
 */
export type BoundDecision =
  | { action: 'keep'; reason: string /** When this decision may change without a new view (ms). */; until?: number }
  | { action: 'unbind'; reason: string }
  | { action: 'evict'; reason: string }

export function haAfterMs(pod: PodView, opts: Pick<SchedOptions, 'haAfterSeconds'>): number {
  return (pod.haAfterSeconds ?? opts.haAfterSeconds) * 1000
}

export function decideBoundPod(
  pod: PodView,
  node: NodeView | undefined,
  now: number,
  opts: Pick<SchedOptions, 'haAfterSeconds' | 'goneAfterSeconds'>,
  noQuorum?: string,
): BoundDecision {
  const name = pod.node!
  if (pod.pin !== undefined && pod.pin !== name) {
    const reason = `pod is pinned to ${pod.pin}`
    return node && node.state === 'alive' && !node.forgotten ? { action: 'evict', reason } : { action: 'unbind', reason }
  }
  if (!node) return { action: 'keep', reason: `node ${name} is not in this node's view yet` }
  if (pod.clusters !== undefined && node.cluster !== undefined && !pod.clusters.includes(node.cluster)) {
    // placement.clusters was changed: like a moved pin, the pod leaves (a live node stops it).
    const reason = `cluster ${node.cluster} is no longer in placement.clusters [${[...pod.clusters].sort().join(', ')}]`
    return node.state === 'alive' && !node.forgotten ? { action: 'evict', reason } : { action: 'unbind', reason }
  }
  if (node.forgotten) {
    return pod.pin === undefined ? { action: 'unbind', reason: `node ${name} was forgotten` } : { action: 'keep', reason: `pinned to forgotten node ${name}` }
  }
  if (node.state !== 'alive') {
    const since = node.since ?? now
    const down = now - since
    if (pod.pin !== undefined) return { action: 'keep', reason: `pinned to ${node.state} node ${name}` }
    if (pod.policy === 'ha') {
      const after = haAfterMs(pod, opts)
      if (down >= after && noQuorum !== undefined)
        return { action: 'keep', reason: `node ${name} ${node.state} for ${reasonDuration(down)}, but this node does not move ha pods: ${noQuorum}` }
      if (down >= after)
        return { action: 'unbind', reason: `node ${name} ${node.state} for ${reasonDuration(down)} (ha: moves after ${reasonDuration(after)})` }
      return {
        action: 'keep',
        reason: `node ${name} ${node.state} for ${reasonDuration(down)}; ha pod moves after ${reasonDuration(after)}`,
        until: since + after,
      }
    }
    const after = opts.goneAfterSeconds * 1000
    if (down >= after)
      return { action: 'unbind', reason: `node ${name} ${node.state} for ${reasonDuration(down)} (best-effort: moves after ${reasonDuration(after)})` }
    return {
      action: 'keep',
      reason: `node ${name} ${node.state} for ${reasonDuration(down)}; best-effort pod moves when the node is forgotten or after ${reasonDuration(after)}`,
      until: since + after,
    }
  }
  let until: number | undefined
  const taints = (node.taints ?? []).filter((t) => t.effect === 'NoExecute').sort(taintOrder)
  for (const taint of taints) {
    const tol = tolerationFor(pod.tolerations ?? [], taint)
    if (!tol) return { action: 'evict', reason: `taint ${formatTaint(taint)} not tolerated` }
    if (tol.tolerationSeconds !== undefined) {
      // A taint without a time is treated as old: the toleration has run out.
      const end = (taint.since ?? -Infinity) + tol.tolerationSeconds * 1000
      if (now >= end) return { action: 'evict', reason: `taint ${formatTaint(taint)} tolerated for ${tol.tolerationSeconds}s only` }
      until = until === undefined ? end : Math.min(until, end)
    }
  }
  return { action: 'keep', reason: `running on ${name}`, ...(until === undefined ? {} : { until }) }
}

/**
 * The earliest time after `now` at which some bound pod's decision changes with no change to the
 * view (an ha timer or goneAfter runs out): the agent re-plans then. Undefined if nothing is waiting.
 */
export function nextDecisionTime(
  view: { pods: readonly PodView[]; nodes: readonly NodeView[]; now: number; noQuorum?: string },
  opts: Pick<SchedOptions, 'haAfterSeconds' | 'goneAfterSeconds'>,
): number | undefined {
  const nodes = new Map(view.nodes.map((n) => [n.name, n]))
  let next: number | undefined
  for (const p of view.pods) {
    if (p.node === undefined || p.phase === 'Succeeded' || p.phase === 'Failed') continue
    const d = decideBoundPod(p, nodes.get(p.node), view.now, opts, view.noQuorum)
    if (d.action === 'keep' && d.until !== undefined && d.until > view.now) next = next === undefined ? d.until : Math.min(next, d.until)
  }
  return next
}
