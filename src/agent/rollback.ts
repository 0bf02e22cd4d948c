/**
 * What `orc rollback KIND/NAME` without `--to` restores: the newest earlier revision whose user
 * content differs from the current one. The store's own default is the revision before the head,
 * which for a pod is almost always a status write by a controller — restoring it would change
 * nothing the user wrote.
 */
import { isPlainObject, type ObjectRef, OrcError } from '../model/index.ts'
import { canonicalJson } from '../sched/index.ts'
import type { ObjectStore } from '../store/index.ts'

const MAX_LOOKBACK = 200

function userContent(obj: Record<string, unknown>): string {
  const { status: _status, metadata, ...rest } = obj
  const md = isPlainObject(metadata) ? metadata : {}
  // Sorted keys: the store may hand back an object's keys in another order than it was written.
  return canonicalJson({ ...rest, labels: md.labels ?? null, annotations: md.annotations ?? null })
}

export async function previousUserRevision(store: ObjectStore, ref: ObjectRef): Promise<string | undefined> {
  const cur = store.get(ref)
  if (!cur) return undefined
  const now = userContent(cur as unknown as Record<string, unknown>)
  const revs = await store.history(ref)
  const headIdx = revs.findIndex((r) => r.id === cur.metadata.revisionId)
  const earlier = revs
    .slice(0, headIdx < 0 ? revs.length : headIdx)
    .reverse()
    .slice(0, MAX_LOOKBACK)
  for (const r of earlier) {
    if (r.op === 'delete' || r.compacted) continue
    const old = await store.at(ref, r.id)
    if (userContent(old as unknown as Record<string, unknown>) !== now) return r.id
  }
  throw new OrcError('not_found', `${ref.kind.toLowerCase()}/${ref.name} has no earlier revision with different content to roll back to`, { ...ref })
}
