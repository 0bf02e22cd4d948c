import { OrcError } from '../model/index.ts'
import { checkNode, type ReasonCode, scoreNode } from './constraints.ts'
import { resolveOptions, type SchedOptionsInput } from './options.ts'
import { runPlan, summarize } from './placement.ts'
import type { ClusterView } from './view.ts'

/**
 * `orc why pod/NAME`: where a pod is or would go, and for a pod that cannot be placed, what ruled out
 * each node. Nodes are judged exactly as the placement loop judges them at this pod's turn (the same
 * checkNode, with every failure spelled out instead of stopping at the first).
 */
export interface NodeVerdict {
  node: string
  fits: boolean
  /** Empty when it fits; else one line per failed check, e.g. `insufficient memory (requests 2Gi, free 512Mi)`. */
  reasons: string[]
  /** First failed check, as counted in the summary (0 when it fits). */
  code: ReasonCode
  /** Placement score when it fits (higher is better). */
  score?: number
}

export interface PodExplanation {
  pod: string
  /**
   * bound: stays where it is; moving: will be unbound/evicted (and maybe rebound, see `target`);
   * placeable: pending and the next plan binds it to `target`; pending: no node can take it;
   * finished: Succeeded/Failed, holds nothing.
   */
  status: 'bound' | 'moving' | 'placeable' | 'pending' | 'finished'
  /** Current `status.node`. */
  node?: string
  /** Where the plan binds it. */
  target?: string
  /** One line: the policy decision or the pending summary. */
  summary: string
  /** Per node, sorted by name; filled for pods that need a node. */
  nodes: NodeVerdict[]
}

export function explainPod(view: ClusterView, pod: string, optsIn: SchedOptionsInput = {}): PodExplanation {
  const opts = resolveOptions(optsIn)
  let verdicts: NodeVerdict[] = []
  const run = runPlan(view, opts, {
    key: pod,
    onTurn(state, turn) {
      verdicts = state.nodes.map((n) => {
        const reasons: string[] = []
        const code = checkNode(turn, n, reasons, view.now)
        return code === 0 ? { node: n.name, fits: true, reasons, code, score: scoreNode(state, turn, n) } : { node: n.name, fits: false, reasons, code }
      })
    },
  })
  const info = run.state.podByKey.get(pod)
  if (!info) throw new OrcError('not_found', `pod ${pod} not found`, { pod })
  const node = info.view.node
  const base = { pod, ...(node === undefined ? {} : { node }) }
  if (info.terminal) return { ...base, status: 'finished', summary: `pod ${info.view.phase?.toLowerCase()}; it holds no node`, nodes: [] }
  const decision = run.decisions.get(pod)
  if (decision && decision.action === 'keep') return { ...base, status: 'bound', summary: decision.reason, nodes: [] }
  const target = run.bound.get(pod)
  const pending = run.pending.find((p) => p.pod === pod)
  let summary: string
  if (target !== undefined) {
    summary = `${decision ? `${decision.reason}; ` : ''}will be bound to ${target}`
  } else if (pending && info.invalid !== undefined) {
    summary = pending.reason
  } else {
    const counts = new Array<number>(18).fill(0)
    for (const v of verdicts) counts[v.code]!++
    summary = `${decision ? `${decision.reason}; ` : ''}${summarize(verdicts.length, counts).text}`
  }
  return {
    ...base,
    status: decision ? 'moving' : target !== undefined ? 'placeable' : 'pending',
    ...(target === undefined ? {} : { target }),
    summary,
    nodes: verdicts,
  }
}

/**
 * Text for a terminal:
 * ```
 * pod/default/web: pending: 0/3 nodes can run it: 1 insufficient memory, 1 nodeSelector mismatch, …
 *   node-1: taint dedicated=gpu:NoSchedule not tolerated
 *   node-2: nodeSelector disktype=ssd does not match
 *   node-3: insufficient memory (requests 2Gi, free 512Mi)
 * ```
 */
export function formatExplanation(e: PodExplanation, o: { showFitting?: boolean } = {}): string {
  const where = e.status === 'bound' ? ` on ${e.node}` : ''
  const lines = [`pod/${e.pod}: ${e.status}${where}: ${e.summary}`]
  for (const v of e.nodes) {
    if (v.fits) {
      if (o.showFitting || e.status === 'pending') lines.push(`  ${v.node}: fits (score ${v.score})`)
    } else if (e.status === 'pending' || o.showFitting) {
      for (const r of v.reasons) lines.push(`  ${v.node}: ${r}`)
    }
  }
  return lines.join('\n')
}
