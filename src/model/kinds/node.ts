import { defineKind, type ObjectOfKind } from '../kind.ts'
import { s } from '../schema.ts'
import { age, createdAt, labelsText, text } from './common.ts'

const taintEffect = s.enum('NoSchedule', 'PreferNoSchedule', 'NoExecute')

/** A node's network, as its agent publishes it (read by other nodes as untrusted input). */
export type NodeNetworkStatus = {
  publicKey?: string
  prefix?: string
  subnet?: number
  endpoints?: string[]
  state?: string
  reason?: string
  [field: string]: unknown
}

/** Written by the node's own agent (controller:node). */
export type NodeStatus = {
  state?: 'Ready' | 'NotReady' | 'Removed'
  addresses?: string[]
  peerId?: string
  version?: string
  capacity?: { cpu?: string | number; memory?: string | number }
  /** `orc node forget`: cleared by the node's agent when it starts again. */
  forgotten?: { at: string; by: string; reason?: string }
  removedAt?: string
  network?: NodeNetworkStatus
  workflow?: unknown
  /** Copies of pods bound elsewhere this node stopped (newest 20). */
  stoppedCopies?: { pod: string; boundTo: string; at: string; why: string }[]
  /** Peer updates this node refused on receipt (newest 20; at most one entry per 10 s, `count` refusals each). */
  refusedUpdates?: { at: string; reason: string; detail: string; count: number }[]
}

export const nodeKind = defineKind({
  kind: 'Node',
  plural: 'nodes',
  aliases: ['node', 'no'],
  namespaced: false,
  spec: s.object({
    unschedulable: s.bool(),
    taints: s.array(
      s.object({
        key: s.required(s.string({ minLength: 1, maxLength: 253 })),
        value: s.string({ maxLength: 63 }),
        effect: s.required(taintEffect),
      }),
      { maxItems: 64 },
    ),
  }),
  status: s.open<NodeStatus>(),
  owned: [{ path: 'status', owner: 'controller:node' }],
  columns: [
    { header: 'NAME', value: (o) => o.metadata.name },
    { header: 'STATUS', value: (o) => text(o.status?.state, 'Unknown') },
    { header: 'ADDRESSES', value: (o) => text(o.status?.addresses?.join(','), '<none>'), wide: true },
    { header: 'VERSION', value: (o) => text(o.status?.version) },
    { header: 'LABELS', value: (o) => labelsText(o.metadata.labels), wide: true },
    { header: 'AGE', value: (o, now) => age(createdAt(o), now) },
  ],
})

// An interface (not an alias) so that type errors name it.
export interface Node extends ObjectOfKind<typeof nodeKind> {}
export type NodeSpec = NonNullable<Node['spec']>
export type Taint = NonNullable<NodeSpec['taints']>[number]
