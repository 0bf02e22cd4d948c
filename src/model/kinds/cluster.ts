import { defineKind, type ObjectOfKind } from '../kind.ts'
import { s } from '../schema.ts'
import { age, createdAt, text } from './common.ts'
import { ISO_UTC } from './rbac.ts'

/** Written by controller:cluster on any node of the cluster. */
export type ClusterStatus = {
  /** Peers removed with `orc node remove`, by peer id. */
  removedPeers?: Record<string, { name: string; at: string; by: string; reason?: string }>
  /** In a federation's document: a summary of each node of this member cluster (src/agent/federation/scheduling.ts). */
  nodes?: Record<string, unknown>
  [field: string]: unknown
}

export const clusterKind = defineKind({
  kind: 'Cluster',
  plural: 'clusters',
  aliases: ['cluster'],
  namespaced: false,
  spec: s.object({
    id: s.string({ pattern: /^[0-9a-f]{16,64}$/, patternName: 'a hex cluster id' }),
    description: s.string({ maxLength: 1024 }),
    /** Scheduler defaults for every node (all nodes must agree). */
    scheduling: s.object({
      haAfterSeconds: s.int({ min: 1, max: 30 * 24 * 3600 }),
      goneAfterSeconds: s.int({ min: 1, max: 365 * 24 * 3600 }),
      /** Nodes (this one included) a node must hear to run ha pods; 0 = a majority, 1 = no fencing. */
      fenceQuorum: s.int({ min: 0, max: 10_000 }),
      /** An ha pod's copy is dead this long before another node may start one (src/sched/fencing.ts). */
      fenceMarginSeconds: s.int({ min: 0, max: 3600 }),
    }),
    /** Limits each container of a pod gets when it sets none (cgroups; 0 = no default limit). */
    podDefaults: s.object({
      pids: s.int({ min: 0, max: 4_194_304 }),
      memory: s.quantity(),
    }),
    /**
     * Users' signatures on their writes (docs/security.md): with `required`, every replica refuses a
     * `user:*` revision (timed at or after `since`) that does not carry the user's signed request,
     * except the local sockets' users: `root.NODE` from its own node, `admin` from `adminSocketNodes`.
     */
    userSignatures: s.object({
      required: s.bool(),
      /** Required: the history before it holds user records without signatures that later joiners must accept. */
      since: s.required(s.string({ pattern: ISO_UTC, patternName: 'a UTC time like 2027-01-31T12:00:00Z' })),
      adminSocketNodes: s.array(s.string({ minLength: 1, maxLength: 253 }), { maxItems: 1024 }),
    }),
  }),
  status: s.open<ClusterStatus>(),
  owned: [{ path: 'status', owner: 'controller:cluster' }],
  columns: [
    { header: 'NAME', value: (o) => o.metadata.name },
    { header: 'ID', value: (o) => text(o.spec?.id) },
    { header: 'AGE', value: (o, now) => age(createdAt(o), now) },
  ],
})

// An interface (not an alias) so that type errors name it.
export interface Cluster extends ObjectOfKind<typeof clusterKind> {}
export type ClusterSpec = NonNullable<Cluster['spec']>
