/**
 * `orc events`: what happened in the cluster, from replicated state only — every object's revisions
 * (who changed what, and why) and the lifecycle units of pods (`status.workflow`: started, done,
 * failed with the error). Works on any node, for any object, including while peers are away.
 */
import { byCodeUnits, getKind, KINDS, type ObjectRef, parseRef } from '../../model/index.ts'
import type { ObjectStore, StoredObject } from '../../store/index.ts'
import { parseWorkflowSnapshot } from '../../workflow/index.ts'
import type { ClusterEvent } from '../api-types.ts'

export type { ClusterEvent } from '../api-types.ts'

export interface EventQuery {
  since?: number
  /** Only this object (`pod/web`) … */
  ref?: ObjectRef
  /** … or only this kind. */
  kind?: string
  namespace?: string
  limit?: number
}

function refText(kind: string, name: string): string {
  return `${kind.toLowerCase()}/${name}`
}

function revisionType(op: string, rollback: boolean): string {
  if (rollback) return 'RolledBack'
  return op === 'create' ? 'Created' : op === 'delete' ? 'Deleted' : 'Updated'
}

function unitEvents(obj: StoredObject, since: number): ClusterEvent[] {
  const st = (obj.status ?? {}) as Record<string, unknown>
  if (st.workflow === undefined) return []
  let snap
  try {
    snap = parseWorkflowSnapshot(st.workflow)
  } catch {
    return [] // written by another node; unreadable is not an event
  }
  const node = typeof st.node === 'string' ? `node/${st.node}` : 'node/?'
  const base = { object: refText(obj.kind, obj.metadata.name), namespace: obj.metadata.namespace ?? '', source: node }
  const run = snap.id ?? String(snap.startedAt)
  const rev = typeof st.targetRevision === 'number' ? st.targetRevision : undefined
  const out: ClusterEvent[] = []
  for (const u of snap.units) {
    if (u.kind !== 'unit') continue
    const key = `${obj.metadata.uid}:${run}:${u.name}`
    if (u.startedAt !== undefined && u.startedAt >= since) {
      out.push({ ...base, id: `${key}:start`, time: u.startedAt, type: 'UnitStarted', message: `${u.name} started`, revision: rev })
    }
    // A failed attempt the unit retries (a pull the registry refused): the snapshot keeps the last
    // one — waiting out its backoff (retryAt), or followed by the attempt now running.
    if (u.state === 'running' && u.lastError !== undefined && u.attemptStartedAt !== undefined && u.attemptStartedAt >= since) {
      const failed = u.retryAt !== undefined ? u.attempts : u.attempts - 1
      if (failed >= 1)
        out.push({
          ...base,
          id: `${key}:attempt${failed}`,
          time: u.attemptStartedAt,
          type: 'UnitRetrying',
          message: `${u.name} attempt ${failed}/${u.maxAttempts} failed: ${u.lastError}`,
          revision: rev,
        })
    }
    if (u.endedAt !== undefined && u.endedAt >= since) {
      const took = u.startedAt !== undefined ? ` in ${formatMs(u.endedAt - u.startedAt)}` : ''
      if (u.state === 'done') out.push({ ...base, id: `${key}:end`, time: u.endedAt, type: 'UnitDone', message: `${u.name} done${took}`, revision: rev })
      else if (u.state === 'failed') {
        out.push({
          ...base,
          id: `${key}:end`,
          time: u.endedAt,
          type: 'UnitFailed',
          message: `${u.name} failed${took}: ${u.lastError ?? 'unknown error'}`,
          revision: rev,
        })
      } else if (u.state === 'skipped') {
        out.push({
          ...base,
          id: `${key}:end`,
          time: u.endedAt,
          type: 'UnitSkipped',
          message: `${u.name} skipped: ${u.reason ?? u.cause ?? ''}`.trim(),
          revision: rev,
        })
      }
    }
  }
  return out
}

/** `Unhealthy`: a container stopped because a probe failed (its status' lastTermination), then restarted by policy. */
function probeKillEvents(obj: StoredObject, since: number): ClusterEvent[] {
  const st = (obj.status ?? {}) as Record<string, unknown>
  if (!Array.isArray(st.containers)) return []
  const node = typeof st.node === 'string' ? `node/${st.node}` : 'node/?'
  const out: ClusterEvent[] = []
  for (const c of st.containers as Record<string, any>[]) {
    const last = c?.lastTermination
    if (typeof last?.reason !== 'string' || !/ probe failed/.test(last.reason)) continue
    const time = Date.parse(String(last.at))
    if (!(time >= since)) continue
    out.push({
      id: `${obj.metadata.uid}:${String(c.name)}:ended:${time}`,
      time,
      object: refText(obj.kind, obj.metadata.name),
      namespace: obj.metadata.namespace ?? '',
      type: 'Unhealthy',
      source: node,
      message: `container ${String(c.name)} stopped: ${last.reason}; the restart policy applies`,
      revision: typeof st.targetRevision === 'number' ? st.targetRevision : undefined,
    })
  }
  return out
}

/** `CopyStopped`: a node stopped its copy of a pod bound elsewhere (its Node's status.stoppedCopies). */
function stoppedCopyEvents(nodes: readonly StoredObject[], since: number, ref: ObjectRef | undefined, namespace: string | undefined): ClusterEvent[] {
  const out: ClusterEvent[] = []
  for (const n of nodes) {
    const list = (n.status as Record<string, unknown> | undefined)?.stoppedCopies
    if (!Array.isArray(list)) continue
    for (const e of list as Record<string, unknown>[]) {
      const pod = typeof e?.pod === 'string' ? e.pod : ''
      const time = Date.parse(String(e?.at))
      const slash = pod.indexOf('/')
      if (slash < 0 || pod.includes(':') || !(time >= since)) continue
      const [ns, name] = [pod.slice(0, slash), pod.slice(slash + 1)]
      if (ref !== undefined && (ref.namespace !== ns || ref.name !== name)) continue
      if (namespace !== undefined && namespace !== ns) continue
      out.push({
        id: `${n.metadata.uid}:copy:${pod}:${time}`,
        time,
        object: refText('Pod', name),
        namespace: ns,
        type: 'CopyStopped',
        source: `node/${n.metadata.name}`,
        message: `copy on ${n.metadata.name} stopped: ${String(e.why)}`,
      })
    }
  }
  return out
}

/** `UpdateRefused`: a node refused a peer's update on receipt (its Node's status.refusedUpdates). */
function refusedEvents(nodes: readonly StoredObject[], since: number): ClusterEvent[] {
  const out: ClusterEvent[] = []
  for (const n of nodes) {
    const list = (n.status as Record<string, unknown> | undefined)?.refusedUpdates
    if (!Array.isArray(list)) continue
    for (const e of list as Record<string, unknown>[]) {
      const time = Date.parse(String(e?.at))
      if (!(time >= since)) continue
      const count = typeof e.count === 'number' && e.count > 1 ? ` (${e.count} refused since the last entry)` : ''
      out.push({
        id: `${n.metadata.uid}:refused:${time}`,
        time,
        object: refText('Node', n.metadata.name),
        namespace: '',
        type: 'UpdateRefused',
        source: `node/${n.metadata.name}`,
        message: `refused a peer update (${String(e.reason)}): ${String(e.detail)}${count}`,
      })
    }
  }
  return out
}

function formatMs(ms: number): string {
  return ms < 1000 ? `${Math.max(0, Math.round(ms))}ms` : `${(ms / 1000).toFixed(1)}s`
}

/** Events newer than `q.since`, oldest first, at most `q.limit` (the newest ones). */
export async function collectEvents(store: ObjectStore, q: EventQuery): Promise<ClusterEvent[]> {
  const since = q.since ?? 0
  const objects: StoredObject[] = []
  if (q.ref !== undefined) {
    const o = store.get(q.ref)
    if (o !== undefined) objects.push(o)
  } else {
    for (const def of KINDS) {
      if (q.kind !== undefined && def.kind !== q.kind) continue
      objects.push(...store.list(def.kind, def.namespaced ? q.namespace : undefined))
    }
  }
  const out: ClusterEvent[] = []
  const refs: ObjectRef[] = q.ref !== undefined ? [q.ref] : objects.map((o) => ({ kind: o.kind, namespace: o.metadata.namespace ?? '', name: o.metadata.name }))
  for (const ref of refs) {
    const revs = await store.history(ref, { since })
    for (const r of revs) {
      if (r.time < since) continue
      out.push({
        id: r.id,
        time: r.time,
        object: refText(ref.kind, ref.name),
        namespace: ref.namespace,
        type: revisionType(r.op, r.rollbackTo !== undefined),
        source: r.author,
        message: r.reason || (r.op === 'create' ? 'created' : r.op === 'delete' ? 'deleted' : `${r.changes?.length ?? 0} field(s) changed`),
        revision: r.number,
      })
    }
  }
  for (const o of objects) out.push(...unitEvents(o, since))
  for (const o of objects) if (o.kind === 'Pod') out.push(...probeKillEvents(o, since))
  if (q.ref === undefined ? q.kind === undefined || q.kind === 'Pod' : q.ref.kind === 'Pod')
    out.push(...stoppedCopyEvents(store.list('Node'), since, q.ref, q.namespace))
  if (q.ref === undefined ? q.kind === undefined || q.kind === 'Node' : q.ref.kind === 'Node') {
    const nodes = q.ref === undefined ? store.list('Node') : objects
    out.push(...refusedEvents(nodes, since))
  }
  out.sort((a, b) => a.time - b.time || byCodeUnits(a.id, b.id))
  const limit = q.limit ?? 500
  return out.length > limit ? out.slice(out.length - limit) : out
}

/** `pod/web` (or `pods`, `pod`) as a query; bad input is one clear error from parseRef/getKind. */
export function eventTarget(text: string | undefined, namespace: string | undefined): Pick<EventQuery, 'ref' | 'kind'> {
  if (text === undefined || text === '') return {}
  if (text.includes('/')) return { ref: parseRef(text, namespace) }
  return { kind: getKind(text).kind }
}
