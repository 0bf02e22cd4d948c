/**
 * Where a pod that uses persistent Volumes may run (docs/storage.md). Pure: a function of the
 * volumes and the pods that name them, so every node reaches the same answer from the same view.
 *
 * - A volume placed on a node (`status.node`, or `spec.node` before its first attach) takes its
 *   pods there: its data lives on that node's disk.
 * - One writer at a time: among the pods mounting a volume writable, the one already bound holds
 *   it (the oldest bound if a merge left two); with none bound, the oldest (then by name) may be
 *   placed; the others stay Pending, naming the holder. Readers (every mount `readOnly`) go to the
 *   volume's node and wait while it is not placed yet.
 * - A volume that does not exist, or lives on a forgotten node, holds its pods Pending.
 * - A replicated volume (`status.replicas`) whose primary node is lost — unreachable for the pod's
 *   haAfter, or forgotten — sends its `ha` pods to the replica holding the newest copy (alive, synced;
 *   then by name): the node they are bound to promotes its copy (volumes/replicas.ts). Other pods
 *   wait for the primary.
 */

export interface VolumeView {
  namespace: string
  name: string
  /** `status.node`, else `spec.node`: where its data is (or will be). Absent: placed at first use. */
  node?: string
  /** The node is forgotten or removed: its data is out of reach. */
  nodeGone?: boolean
  /** How long the node has been unreachable (suspect or dead), ms; absent while it is alive. */
  nodeDownMs?: number
  /** Nodes keeping copies (replicated volumes): whether each is alive, and its copy's time (ms). */
  replicas?: { node: string; alive: boolean; syncedAt?: number }[]
}

/** A pod's use of one persistent Volume. */
export interface PodVolumeUse {
  name: string
  /** Some container mounts it writable (or it is not mounted read-only anywhere). */
  writer: boolean
}

export interface VolumePodView {
  namespace: string
  name: string
  volumes?: PodVolumeUse[]
  /** `status.node`. */
  node?: string
  createdAt?: number
  /** Finished for good: holds nothing. */
  finished?: boolean
  /** An `ha` pod, and after how long (ms) its node counts as lost: it may fail over to a replica. */
  haAfterMs?: number
}

export interface VolumeConstraint {
  /** The node the pod must run on (its volumes' node). */
  node?: string
  /** Why it can run nowhere now (missing volume, another writer, volumes on different nodes). */
  block?: string
}

function key(ns: string, name: string): string {
  return `${ns}/${name}`
}

/** `namespace/name` of a pod → its volume constraint; pods without persistent volumes are absent. */
export function volumeConstraints(pods: readonly VolumePodView[], volumes: readonly VolumeView[]): Map<string, VolumeConstraint> {
  const byKey = new Map(volumes.map((v) => [key(v.namespace, v.name), v]))
  // The writer of each volume: bound first, then oldest, then by name.
  const writers = new Map<string, VolumePodView>()
  const rank = (p: VolumePodView) => [p.node !== undefined ? 0 : 1, p.createdAt ?? 0, p.name] as const
  const before = (a: VolumePodView, b: VolumePodView) => {
    const [x, y] = [rank(a), rank(b)]
    return x[0] - y[0] || x[1] - y[1] || (x[2] < y[2] ? -1 : x[2] > y[2] ? 1 : 0)
  }
  for (const p of pods) {
    if (p.finished) continue
    for (const u of p.volumes ?? []) {
      if (!u.writer) continue
      const k = key(p.namespace, u.name)
      const cur = writers.get(k)
      if (cur === undefined || before(p, cur) < 0) writers.set(k, p)
    }
  }
  const out = new Map<string, VolumeConstraint>()
  for (const p of pods) {
    if (p.finished || (p.volumes ?? []).length === 0) continue
    const c: VolumeConstraint = {}
    const reasons: string[] = []
    for (const u of p.volumes ?? []) {
      const v = byKey.get(key(p.namespace, u.name))
      if (v === undefined) {
        reasons.push(`volume ${u.name} does not exist in namespace ${p.namespace}`)
        continue
      }
      const failover = v.node !== undefined && p.haAfterMs !== undefined && (v.replicas ?? []).length > 0 ? failoverNode(v, p.haAfterMs) : undefined
      if (failover !== undefined) {
        if (failover.node === undefined) reasons.push(failover.reason)
        else if (c.node !== undefined && c.node !== failover.node)
          reasons.push(`volumes on different nodes (${c.node}, ${failover.node}): no node holds them all`)
        else c.node = failover.node
        if (u.writer) {
          const w = writers.get(key(p.namespace, u.name))
          if (w !== undefined && w !== p) reasons.push(`volume ${u.name} is in use by pod ${w.name} (one writer at a time)`)
        }
        continue
      }
      if (v.node !== undefined && v.nodeGone) reasons.push(`volume ${u.name} lives on node ${v.node}, which is forgotten (its data is out of reach)`)
      const w = writers.get(key(p.namespace, u.name))
      if (u.writer && w !== undefined && w !== p)
        reasons.push(`volume ${u.name} is in use by pod ${w.name} (one writer at a time)${w.node !== undefined ? ` on node ${w.node}` : ''}`)
      if (!u.writer && v.node === undefined) reasons.push(`volume ${u.name} is not placed yet (it is placed with its first writer)`)
      if (v.node !== undefined) {
        if (c.node !== undefined && c.node !== v.node) reasons.push(`volumes on different nodes (${c.node}, ${v.node}): no node holds them all`)
        else c.node = v.node
      }
    }
    if (reasons.length > 0) c.block = reasons.join('; ')
    out.set(key(p.namespace, p.name), c)
  }
  return out
}

/**
 * Where an `ha` pod of replicated volume `v` goes when the primary's node is lost for it: the alive
 * replica with the newest synced copy (then by name). Undefined while the primary is not lost.
 */
export function failoverNode(v: VolumeView, haAfterMs: number): { node?: string; reason: string } | undefined {
  const lost = v.nodeGone === true || (v.nodeDownMs !== undefined && v.nodeDownMs >= haAfterMs)
  if (!lost) return undefined
  const best = (v.replicas ?? [])
    .filter((r) => r.alive && r.syncedAt !== undefined)
    .sort((a, b) => b.syncedAt! - a.syncedAt! || (a.node < b.node ? -1 : a.node > b.node ? 1 : 0))[0]
  if (best === undefined)
    return {
      reason: `volume ${v.name} lives on node ${v.node}, which is lost, and none of its replicas (${(v.replicas ?? []).map((r) => r.node).join(', ')}) is alive and synced`,
    }
  return { node: best.node, reason: `volume ${v.name} fails over to its replica on node ${best.node}` }
}
