/**
 * The revision log: every change of every object as a record (docs/architecture.md, "Revisions"),
 * stored under `r:<replica>:<seq>` with an index `o:<key>\0<id>` per object, and the vector of what
 * this replica holds — per replica, the contiguous sequence prefix plus stragglers.
 */
import type { AbstractLevel } from 'abstract-level'
import { applyChanges, type ObjectRef, OrcError, refOfKey } from '../model/index.ts'
import { decodeChanges, type LogVector, parseRevisionId, type RevisionRecord } from './codec.ts'
import { enc, IDX, idxKey, json, REV, revKey, unjson } from './keys.ts'
import type { CompactionPolicy } from './options.ts'
import type { Revision } from './types.ts'
import type { BatchOp } from './writer.ts'

const byHistory = (a: RevisionRecord, b: RevisionRecord) => a.s - b.s || a.t - b.t || (a.i < b.i ? -1 : a.i > b.i ? 1 : 0)

export class RevisionLog {
  /** Revision log positions per replica: contiguous prefix plus stragglers. */
  private readonly have = new Map<string, { upTo: number; extra: Set<number> }>()

  /** `beforeRead` waits for queued writes, so history is never behind the objects. */
  constructor(
    private readonly db: AbstractLevel<any, string, Uint8Array>,
    private readonly beforeRead: () => Promise<void>,
  ) {}

  /** Restore the vector saved on disk. */
  load(vector: LogVector): void {
    for (const [r, v] of Object.entries(vector)) this.have.set(r, { upTo: v.upTo, extra: new Set(v.extra ?? []) })
  }

  /** The highest contiguous sequence held of `replica`'s records. */
  upTo(replica: string): number {
    return this.have.get(replica)?.upTo ?? 0
  }

  noteSeen(replica: string, seq: number): void {
    let h = this.have.get(replica)
    if (!h) this.have.set(replica, (h = { upTo: 0, extra: new Set() }))
    if (seq <= h.upTo) return
    if (seq === h.upTo + 1) {
      h.upTo = seq
      while (h.extra.delete(h.upTo + 1)) h.upTo++
    } else {
      h.extra.add(seq)
    }
  }

  has(id: string): boolean {
    const p = parseRevisionId(id)
    if (!p) return false
    const h = this.have.get(p.replica)
    return h !== undefined && (p.seq <= h.upTo || h.extra.has(p.seq))
  }

  vector(): LogVector {
    const out: LogVector = {}
    for (const [r, h] of this.have) out[r] = h.extra.size > 0 ? { upTo: h.upTo, extra: [...h.extra].sort((a, b) => a - b) } : { upTo: h.upTo }
    return out
  }

  /** The vector, canonically (replicas and stragglers sorted), for syncDigest. */
  digest(): Array<[string, number, number[]]> {
    return [...this.have].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([r, h]) => [r, h.upTo, [...h.extra].sort((a, b) => a - b)])
  }

  /** The latest record of each replica, which must be on disk (a skipped LevelDB block shows here). */
  heads(): Array<{ replica: string; seq: number; key: string }> {
    return [...this.have].filter(([, h]) => h.upTo > 0).map(([r, h]) => ({ replica: r, seq: h.upTo, key: revKey(r, h.upTo) }))
  }

  /** The batch ops storing a record (given as its JSON when already encoded) and its index entry. */
  putOps(r: RevisionRecord, recordJson?: string): BatchOp[] {
    const p = parseRevisionId(r.i)!
    return [
      { type: 'put', key: revKey(p.replica, p.seq), value: recordJson !== undefined ? enc.encode(recordJson) : json(r) },
      { type: 'put', key: idxKey(r.k, r.i), value: new Uint8Array(0) },
    ]
  }

  /** The batch op replacing a stored record (compaction). */
  replaceOp(r: RevisionRecord): BatchOp {
    const p = parseRevisionId(r.i)!
    return { type: 'put', key: revKey(p.replica, p.seq), value: json(r) }
  }

  async get(id: string): Promise<RevisionRecord | undefined> {
    const p = parseRevisionId(id)
    if (!p) return undefined
    const v = await this.db.get(revKey(p.replica, p.seq))
    return v === undefined ? undefined : unjson<RevisionRecord>(v)
  }

  /** All revision records of an object, in history order: (sequence, time, id). */
  async records(key: string): Promise<RevisionRecord[]> {
    await this.beforeRead()
    const ids: string[] = []
    const prefix = `${IDX}${key}\x00`
    for await (const k of this.db.keys({ gte: prefix, lt: `${prefix}\xff` })) ids.push(k.slice(prefix.length))
    const keys = ids.map((id) => {
      const p = parseRevisionId(id)!
      return revKey(p.replica, p.seq)
    })
    const vals = keys.length ? await this.db.getMany(keys) : []
    const out = vals.filter((v): v is Uint8Array => v !== undefined).map((v) => unjson<RevisionRecord>(v))
    return out.sort(byHistory)
  }

  /** Every record, in a total order all converged replicas share: (time, id). */
  async all(): Promise<RevisionRecord[]> {
    const out: RevisionRecord[] = []
    for await (const v of this.db.values({ gte: REV, lt: `${REV}\xff` })) out.push(unjson<RevisionRecord>(v))
    return out.sort((a, b) => a.t - b.t || (a.i < b.i ? -1 : a.i > b.i ? 1 : 0))
  }

  /** The keys of every object with history. */
  async objectKeys(): Promise<string[]> {
    const keys: string[] = []
    let currentKey: string | undefined
    for await (const k of this.db.keys({ gte: IDX, lt: `${IDX}\xff` })) {
      const objKey = k.slice(IDX.length, k.indexOf('\x00'))
      if (objKey !== currentKey) keys.push((currentKey = objKey))
    }
    return keys
  }

  /** The records a replica with log vector `theirs` lacks, at most `max`. */
  async missing(theirs: LogVector, max: number): Promise<RevisionRecord[]> {
    const records: RevisionRecord[] = []
    for (const [replica, ours] of this.have) {
      const t = theirs[replica]
      const from = t?.upTo ?? 0
      const theirExtra = new Set(t?.extra ?? [])
      const last = Math.max(ours.upTo, ...ours.extra)
      if (last <= from) continue
      for await (const v of this.db.values({ gt: revKey(replica, from), lte: revKey(replica, last) })) {
        const r = unjson<RevisionRecord>(v)
        if (theirExtra.has(parseRevisionId(r.i)!.seq)) continue
        records.push(r)
        if (records.length >= max) break
      }
      if (records.length >= max) break
    }
    return records
  }

  /** Reconstruct an object's content as it was right after a revision. */
  async contentOf(r: RevisionRecord, policy: CompactionPolicy): Promise<Record<string, unknown>> {
    const chain: RevisionRecord[] = []
    let cur: RevisionRecord | undefined = r
    while (cur && cur.f === undefined) {
      if (cur.x === 1) {
        throw new OrcError(
          'not_found',
          `revision ${r.s} (${r.i}) of ${refOfKey(r.k).kind.toLowerCase()}/${refOfKey(r.k).name} was compacted: its author, reason and time remain, its content does not (policy keeps the last ${policy.keepRevisions} revisions and those newer than ${Math.round(policy.keepNewerThanMs / 86400000)}d)`,
          { revision: r.i, compacted: true },
        )
      }
      if (cur.o === 'delete') return {}
      chain.push(cur)
      if (!cur.p) break
      const parent: RevisionRecord | undefined = await this.get(cur.p)
      if (!parent) throw new OrcError('not_found', `revision ${r.i}: its history is incomplete on this node (missing ${cur.p}); it arrives with replication`)
      cur = parent
    }
    let content: Record<string, unknown> = cur?.f ? structuredClone(cur.f) : {}
    for (const c of chain.reverse()) content = applyChanges(content, decodeChanges(c.c ?? []))
    return content
  }
}

export function toRevision(r: RevisionRecord, number: number): Revision {
  const rev: Revision = {
    id: r.i,
    key: r.k,
    ref: refOfKey(r.k),
    number,
    op: r.o,
    author: r.a,
    reason: r.r,
    time: r.t,
    compacted: r.x === 1,
  }
  if (r.rt) rev.rollbackTo = r.rt
  if (r.rf) rev.rollbackFrom = r.rf
  if (r.c) rev.changes = decodeChanges(r.c)
  if (r.u) rev.userSigned = { key: r.u.key, at: r.u.at, node: r.u.peer }
  return rev
}

/** The one revision of `history` that `rev` (a number or an id or id prefix) names. */
export function resolveRevision(ref: ObjectRef, history: RevisionRecord[], rev: number | string): RevisionRecord {
  const name = `${ref.kind.toLowerCase()}/${ref.name}`
  let hits: RevisionRecord[]
  if (typeof rev === 'number' || /^[0-9]+$/.test(rev)) {
    const n = Number(rev)
    hits = history.filter((r) => r.s === n)
  } else {
    hits = history.filter((r) => r.i === rev || r.i.startsWith(rev))
  }
  if (hits.length === 0) {
    const range = history.length ? ` (it has revisions ${history[0]!.s}–${history[history.length - 1]!.s})` : ''
    throw new OrcError('not_found', `${name} has no revision ${rev}${range}`, { ref: name, revision: rev })
  }
  if (hits.length > 1) {
    throw new OrcError(
      'conflict',
      `revision ${rev} of ${name} is ambiguous (concurrent writes): ${hits.map((h) => `${h.i} by ${h.a}`).join(', ')}; name it by id`,
      {
        candidates: hits.map((h) => h.i),
      },
    )
  }
  return hits[0]!
}
