import { byCodeUnits as cmpStr, OrcError } from '../model/index.ts'

/**
 * Conflicting bindings. Two sides of a partition can each bind the same pending pod (or each rebind
 * an ha pod) before they hear of each other; after they merge, several nodes may run a copy. Every
 * node applies the same rule to the same set of claims, so they all agree which copy survives and
 * the others stop — without talking to each other.
 *
 * Contract of `resolveBinding(claims)`:
 * 1. A claim that another claim `supersedes` (its writer had seen it and replaced it — e.g. an ha
 *    rebind replacing the binding to a lost node) is out. This is what makes a returning node stop
 *    the copy that was moved away.
 * 2. Of the claims left (concurrent: neither saw the other), the earliest `time` wins — the copy
 *    that has most likely run longest — then the smallest `revisionId`, `node`, `author`.
 * 3. The result depends only on the set of claims: not on the order they were observed, duplicates,
 *    or which node computes it. `time` is the author's clock; skew can only change which concurrent
 *    claim wins, never whether all nodes agree.
 */
export interface BindingClaim {
  /** The node the binding names (`status.node`). */
  node: string
  /** The store revision that wrote this binding. */
  revisionId: string
  /** Who wrote it, e.g. `controller:scheduler` on node-2. */
  author: string
  /** The author's clock when it wrote the binding (ms). */
  time: number
  /** Revision ids of bindings the writer had observed and replaced. */
  supersedes?: readonly string[]
}

export interface BindingResolution {
  winner: BindingClaim
  /** Claims whose copies must stop, sorted by revisionId. */
  losers: BindingClaim[]
  /** Claims that were concurrent (not superseded), winner included, in rule order. */
  concurrent: BindingClaim[]
}

/** The total order of rule 2 (and, for duplicates of one revision, which copy is canonical). */
export function compareClaims(a: BindingClaim, b: BindingClaim): number {
  return (
    a.time - b.time ||
    cmpStr(a.revisionId, b.revisionId) ||
    cmpStr(a.node, b.node) ||
    cmpStr(a.author, b.author) ||
    cmpStr([...(a.supersedes ?? [])].sort().join(','), [...(b.supersedes ?? [])].sort().join(','))
  )
}

export function resolveBinding(claims: readonly BindingClaim[]): BindingResolution {
  if (claims.length === 0) throw new OrcError('invalid', 'resolve binding: no claims', {})
  for (const c of claims) {
    if (!Number.isFinite(c.time)) throw new OrcError('invalid', `resolve binding: claim ${c.revisionId} has no valid time`, { revisionId: c.revisionId })
  }
  const sorted = [...claims].sort(compareClaims)
  // One claim per revision (the same write observed twice).
  const unique: BindingClaim[] = []
  const seen = new Set<string>()
  for (const c of sorted) {
    if (seen.has(c.revisionId)) continue
    seen.add(c.revisionId)
    unique.push(c)
  }
  const superseded = new Set<string>()
  for (const c of unique) for (const r of c.supersedes ?? []) if (r !== c.revisionId) superseded.add(r)
  let concurrent = unique.filter((c) => !superseded.has(c.revisionId))
  // Only a cycle of supersedes (corrupt or hostile input) can leave nothing; fall back to rule 2.
  if (concurrent.length === 0) concurrent = unique
  const winner = concurrent[0]!
  const losers = unique.filter((c) => c !== winner && c.node !== winner.node).sort((a, b) => cmpStr(a.revisionId, b.revisionId))
  return { winner, losers, concurrent }
}

export type LocalCopyAction = 'run' | 'stop' | 'none'

export interface LocalCopyDecision {
  action: LocalCopyAction
  winner: BindingClaim
  reason: string
}

/**
 * What this node does with its copy of a pod, given every binding it has observed:
 * `run` if it won, `stop` if it runs a copy but another node won, `none` otherwise.
 */
export function decideLocalCopy(localNode: string, claims: readonly BindingClaim[], runningLocally: boolean): LocalCopyDecision {
  const { winner } = resolveBinding(claims)
  if (winner.node === localNode) return { action: 'run', winner, reason: `bound here by revision ${winner.revisionId}` }
  if (runningLocally) {
    return { action: 'stop', winner, reason: `bound to ${winner.node} by revision ${winner.revisionId} (${winner.author}); stopping the copy here` }
  }
  return { action: 'none', winner, reason: `bound to ${winner.node}` }
}
