/**
 * Tombstone pruning across the cluster (docs/architecture.md, "Tombstone pruning"). The store
 * prunes only against the durable state vector of every other replica; this module gathers them.
 * Every replica of the cluster document is a member, so: ask every member in this node's
 * directory for its stability report and its own member list over the member API, and prune only
 * when all answered and none knows a member this node does not — a member admitted elsewhere that
 * this node has not heard of may hold an old copy, and would be left out of the reports.
 */
import type { ObjectStore } from '../store/index.ts'
import type { StabilityAnswer } from './api-types.ts'
import type { RouteHandlers } from './router.ts'

export type { StabilityAnswer } from './api-types.ts'

export interface StabilityDeps {
  store: Pick<ObjectStore, 'pruneTombstones' | 'encodeStabilityReport'>
  selfPeerId: string
  /** Peer ids of this node's member directory (itself may or may not be listed). */
  members(): string[]
  /** Ask a member for its StabilityAnswer (member API, with a timeout). */
  ask(peerId: string): Promise<unknown>
}

/** This node's answer to another member's question. */
export function stabilityAnswer(deps: Pick<StabilityDeps, 'store' | 'selfPeerId' | 'members'>): StabilityAnswer {
  const r = deps.store.encodeStabilityReport()
  return { report: r === null ? null : Buffer.from(r).toString('base64'), members: [...new Set([deps.selfPeerId, ...deps.members()])].sort() }
}

const MAX_MEMBERS = 10000
const MAX_REPORT_CHARS = 4 * 1024 * 1024

/** Validate an answer from a peer (untrusted input). */
export function parseStabilityAnswer(v: unknown): StabilityAnswer | string {
  if (typeof v !== 'object' || v === null) return 'answer is not an object'
  const a = v as Record<string, unknown>
  if (a.report !== null && (typeof a.report !== 'string' || a.report.length > MAX_REPORT_CHARS)) return 'report is not a bounded base64 string'
  if (!Array.isArray(a.members) || a.members.length > MAX_MEMBERS || a.members.some((m) => typeof m !== 'string' || m.length > 128)) {
    return 'members is not a bounded list of peer ids'
  }
  return { report: a.report as string | null, members: a.members as string[] }
}

/**
 * Gather every other member's report: the reports, or why pruning must wait. A node alone in its
 * directory gets [] (it is the only replica).
 */
export async function gatherReports(deps: StabilityDeps): Promise<Uint8Array[] | string> {
  const ours = new Set([deps.selfPeerId, ...deps.members()])
  const others = [...ours].filter((p) => p !== deps.selfPeerId)
  const answers = await Promise.all(
    others.map(async (p) => {
      try {
        return { p, a: parseStabilityAnswer(await deps.ask(p)) }
      } catch (err) {
        return { p, a: `did not answer (${(err as Error).message})` }
      }
    }),
  )
  const reports: Uint8Array[] = []
  for (const { p, a } of answers) {
    if (typeof a === 'string') return `member ${p}: ${a}`
    if (a.report === null) return `member ${p} has writes in flight`
    const unknown = a.members.find((m) => !ours.has(m))
    if (unknown !== undefined) return `member ${p} knows member ${unknown}, this node does not yet`
    reports.push(new Uint8Array(Buffer.from(a.report, 'base64')))
  }
  return reports
}

/** One pruning pass: gather, then prune. Returns what happened, for logs and metrics. */
export async function pruneClusterTombstones(deps: StabilityDeps): Promise<{ pruned: number; skipped?: string }> {
  const reports = await gatherReports(deps)
  if (typeof reports === 'string') return { pruned: 0, skipped: reports }
  return deps.store.pruneTombstones(reports)
}

/** GET /v1/stability (to members through the member API, and locally). */
export function stabilityRoutes(deps: Pick<StabilityDeps, 'store' | 'selfPeerId' | 'members'> | undefined) {
  return {
    stability: () => (deps ? stabilityAnswer(deps) : { report: null, members: [] }),
  } satisfies RouteHandlers
}
