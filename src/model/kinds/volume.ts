import { parseCron } from '../cron.ts'
import { formatDuration } from '../duration.ts'
import { defineKind, type ObjectOfKind } from '../kind.ts'
import { parseQuantity } from '../quantity.ts'
import type { Issue } from '../schema.ts'
import { s } from '../schema.ts'
import { age, createdAt, dnsName, text } from './common.ts'

/**
 * Volume: a named, persistent local volume of a namespace (docs/storage.md). It lives on one node —
 * `spec.node`, or the node of the first pod that uses it — as a loop-mounted ext4 image with a hard
 * size (a plain directory where loop devices are unavailable, said in `status.backing`), or through
 * an external driver (`spec.driver`). Pods name it in `spec.volumes[].volume.name`; one pod at a
 * time may mount it writable (single writer). Written by the node holding it (controller:volume):
 * `status.node`, what is attached to it, its snapshots.
 */

/** The driver names a node looks up as executables (`<driver dir>/<name>`): no path, no dot first. */
export const VOLUME_DRIVER_NAME = /^[a-z0-9][a-z0-9_-]{0,62}$/
/** The smallest local volume: mkfs.ext4 needs room for its journal and tables. */
export const MIN_VOLUME_BYTES = 8 * 1024 * 1024

export type VolumeBacking = 'loop' | 'directory' | 'driver'
export type VolumePhase = 'Pending' | 'Available' | 'Attached' | 'Failed' | 'Released'

export interface VolumeSnapshotEntry {
  name: string
  at: string
  bytes: number
  /** `freeze` (fsfreeze of the mounted ext4 while copying) or `stopped` (no pod had it mounted). */
  consistency: 'freeze' | 'stopped'
}

/** Written by controller:volume on the node holding the volume. */
export interface VolumeStatus {
  /** Where the volume's data lives. Set at the first attach (or from spec.node) and never moved. */
  node?: string
  phase?: VolumePhase
  reason?: string
  backing?: VolumeBacking
  /** Why the backing is not `loop` (no loop device, not root, …). */
  backingReason?: string
  /** The pod (`namespace/name`) that has it mounted, if one does. */
  attachedTo?: string
  attachedAt?: string
  capacityBytes?: number
  snapshots?: VolumeSnapshotEntry[]
  /** The last scheduled snapshot's time (spec.snapshotSchedule). */
  lastScheduledSnapshot?: string
  /**
   * The nodes keeping asynchronous copies (spec.replicas > 1), chosen by the primary (`node`):
   * `syncedAt` is the moment of the primary's last consistent copy the replica holds (lag = now −
   * syncedAt), `error` the last failed sync.
   */
  replicas?: Record<string, VolumeReplicaStatus>
  /** The last promotion of a replica to primary (an ha failover): when, and from which node. */
  promotedAt?: string
  promotedFrom?: string
  [field: string]: unknown
}

export interface VolumeReplicaStatus {
  syncedAt?: string
  /** Bytes sent by the last sync that changed something. */
  lastSentBytes?: number
  error?: string
  [field: string]: unknown
}

const volumeSpec = s.object({
  /** Hard size: `1Gi`, `500Mi` (the ext4 image's size; a directory backing cannot enforce it). */
  size: s.required(s.quantity()),
  /** Pin the volume to a node (default: the node of the first pod that uses it). */
  node: dnsName,
  /** An external driver (an executable in the node's volume driver directory; docs/storage.md). */
  driver: s.string({ pattern: VOLUME_DRIVER_NAME, patternName: 'a driver name (lowercase letters, digits, - and _)' }),
  /** Passed to the driver as `options` (a server, an export path, …). */
  options: s.map(s.string({ maxLength: 4096 }), { maxEntries: 32 }),
  /** Five cron fields (UTC): take a snapshot at each tick, keeping `snapshotsToKeep` (default 3). */
  snapshotSchedule: s.string({ minLength: 1, maxLength: 256 }),
  snapshotsToKeep: s.int({ min: 1, max: 100 }),
  /** Copies of the data: the primary plus `replicas − 1` asynchronous copies on other nodes (docs/storage.md). */
  replicas: s.int({ min: 1, max: 16 }),
  /** How often the primary ships a consistent copy to its replicas (the RPO); default 15. */
  syncIntervalSeconds: s.int({ min: 2, max: 86400 }),
  /**
   * The data of a deleted volume to take back (`orc volume restore`): its uid. Set by the API,
   * with `node` the node that kept the data.
   */
  restoreFrom: s.string({ pattern: /^[A-Za-z0-9_-]{1,64}$/, patternName: 'a volume uid' }),
})

export const volumeKind = defineKind({
  kind: 'Volume',
  plural: 'volumes',
  aliases: ['volume', 'vol', 'pv'],
  namespaced: true,
  spec: volumeSpec,
  status: s.open<VolumeStatus>(),
  owned: [{ path: 'status', owner: 'controller:volume' }],
  columns: [
    { header: 'NAME', value: (o) => o.metadata.name },
    { header: 'SIZE', value: (o) => text(o.spec?.size) },
    { header: 'NODE', value: (o) => text(o.status?.node ?? o.spec?.node, '<unplaced>') },
    { header: 'REPLICAS', value: (o) => replicaNodes(o.status).join(',') || '-' },
    { header: 'LAG', value: (o, now) => replicaLag(o.status, now) },
    { header: 'STATUS', value: (o) => text(o.status?.phase, 'Pending') },
    { header: 'USED BY', value: (o) => text(o.status?.attachedTo) },
    { header: 'BACKING', value: (o) => text(o.spec?.driver ? `driver:${o.spec.driver}` : o.status?.backing), wide: true },
    { header: 'SNAPSHOTS', value: (o) => String(Array.isArray(o.status?.snapshots) ? o.status.snapshots.length : 0), wide: true },
    { header: 'AGE', value: (o, now) => age(createdAt(o), now) },
  ],
  check(obj) {
    const issues: Issue[] = []
    const spec = obj.spec
    if (spec?.size !== undefined) {
      const bytes = parseQuantity(spec.size)
      if (!(bytes >= MIN_VOLUME_BYTES)) issues.push({ path: 'spec.size', rule: `must be at least 8Mi (got ${spec.size})` })
    }
    if (typeof spec?.replicas === 'number' && spec.replicas > 1 && spec.driver !== undefined)
      issues.push({ path: 'spec.replicas', rule: "a driver volume's copies are the driver's business: replicas must be 1 with spec.driver" })
    if (typeof spec?.snapshotSchedule === 'string') {
      try {
        parseCron(spec.snapshotSchedule)
      } catch (err) {
        issues.push({ path: 'spec.snapshotSchedule', rule: (err as Error).message })
      }
    }
    if (spec?.restoreFrom !== undefined && spec.node === undefined)
      issues.push({ path: 'spec.restoreFrom', rule: 'needs spec.node (the node that kept the data)' })
    return issues
  },
})

// An interface (not an alias) so that type errors name it.
export interface Volume extends ObjectOfKind<typeof volumeKind> {}
export type VolumeSpec = NonNullable<Volume['spec']>

/** The replica nodes of a Volume's status, sorted. */
export function replicaNodes(st: { replicas?: unknown } | undefined): string[] {
  const r = st?.replicas
  return r !== null && typeof r === 'object' && !Array.isArray(r) ? Object.keys(r).sort() : []
}

/** The largest replica lag (now − syncedAt) as a duration, `never` for a replica not synced yet, `-` without replicas. */
export function replicaLag(st: VolumeStatus | undefined, now: number): string {
  const nodes = replicaNodes(st)
  if (nodes.length === 0) return '-'
  let worst = 0
  for (const n of nodes) {
    const at = Date.parse(String(st?.replicas?.[n]?.syncedAt ?? ''))
    if (Number.isNaN(at)) return 'never'
    worst = Math.max(worst, now - at)
  }
  return formatDuration(Math.max(0, worst))
}

/** Bytes of a Volume's `spec.size` (NaN when unreadable). */
export function volumeBytes(spec: { size?: unknown } | undefined): number {
  try {
    return parseQuantity(spec?.size as string)
  } catch {
    return Number.NaN
  }
}
