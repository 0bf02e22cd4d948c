/**
 * What the CLI shows of liveness. Membership is ephemeral (not in the store), so a Node's stored
 * `status.state` says Ready and a pod's `status.phase` says Running for as long as their node is
 * unreachable: nobody else may write them. Tables join them with the answering node's live view of
 * the mesh (`/v1/members`): an unreachable node shows `NotReady` (suspect) or `Unreachable` (dead)
 * with how long, and the pods bound to it show `Unknown`. Only the display changes; `-o yaml/json`
 * print the stored objects.
 */

import type { MemberView } from '../mesh/index.ts'
import { type Node, OrcError, type Pod, vmNodeOf } from '../model/index.ts'
import type { Stored, StoredObject } from '../store/index.ts'
import { callRoute } from './call.ts'
import { ago } from './format.ts'
import type { ApiCaller } from './remote.ts'

/** A member as `/v1/members` lists it. */
export type Member = MemberView

/** This node's view of the mesh; undefined from an agent without one. */
export async function fetchMembers(client: ApiCaller): Promise<Member[] | undefined> {
  try {
    return (await callRoute(client, 'members')).members
  } catch (err) {
    if (err instanceof OrcError && err.code === 'not_found') return undefined
    throw err
  }
}

export interface Liveness {
  state: 'NotReady' | 'Unreachable'
  /** `NotReady (for 12s)`. */
  text: string
  lastSeen: number | null
}

/** Unreachable nodes by name, as the answering node sees them. */
export function unreachableNodes(members: readonly Member[], now: number): Map<string, Liveness> {
  const out = new Map<string, Liveness>()
  for (const m of members) {
    if (m.self || m.state === 'alive') continue
    const state = m.state === 'suspect' ? 'NotReady' : 'Unreachable'
    const since = m.lastSeen === null ? 'never heard' : `for ${ago(now - m.lastSeen).replace(' ago', '')}`
    out.set(m.name, { state, text: `${state} (${since})`, lastSeen: m.lastSeen })
  }
  return out
}

/** The node a pod runs on: its binding, else its pin. */
export function podNodeOf(pod: Stored<Pod>): string | undefined {
  const n = pod.status?.node ?? pod.spec?.placement?.node
  return typeof n === 'string' && n !== '' ? n : undefined
}

/** Display copies of `items` (Nodes or Pods) with liveness joined in; other kinds unchanged. */
export function withLiveness(kind: string, items: StoredObject[], down: ReadonlyMap<string, Liveness>): StoredObject[] {
  if (down.size === 0 || (kind !== 'Node' && kind !== 'Pod' && kind !== 'VirtualMachine')) return items
  return items.map((o) => {
    if (kind === 'Node') {
      const l = down.get(o.metadata.name)
      if (!l || (o as Stored<Node>).status?.state === 'Removed') return o
      return { ...o, status: { ...o.status, state: l.text } }
    }
    if (kind === 'VirtualMachine') {
      // Its node's last report stands in the store; the table says what this node knows.
      const node = vmNodeOf(o as { spec?: { node?: unknown }; status?: { node?: unknown } })
      const phase = (o.status as { phase?: unknown } | undefined)?.phase
      return node === undefined || !down.has(node) || phase === 'Stopped' ? o : { ...o, status: { ...o.status, phase: 'Unknown' } }
    }
    const pod = o as Stored<Pod>
    const node = podNodeOf(pod)
    const l = node === undefined ? undefined : down.get(node)
    const phase = pod.status?.phase
    if (!l || phase === 'Succeeded' || phase === 'Failed') return o
    return { ...o, status: { ...o.status, phase: 'Unknown' } }
  })
}
