import { randomBytes as nodeRandomBytes } from 'node:crypto'
import { mkdirSync, readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { isDeepStrictEqual } from 'node:util'
import type { AbstractLevel } from 'abstract-level'
import { ClassicLevel } from 'classic-level'
import { getState, mergeUpdates } from 'yjs'
import {
  ADMIN_USER,
  applyChanges,
  type Change,
  defaultOwnership,
  diffValues,
  formatPath,
  getKind,
  isPlainObject,
  type KindArg,
  keyOf,
  normalizeManifest,
  type ObjectRef,
  OrcError,
  type OrcObject,
  type OwnershipTable,
  refOf,
  refOfKey,
  type SignedRequest,
  touchedPaths,
  USERS,
  valueAtPath,
} from '../model/index.ts'
import {
  checkRecord,
  decodeChanges,
  decodeUpdateMessage,
  encodeChanges,
  encodeUpdateMessage,
  isValidAuthor,
  type LogVector,
  parseRevisionId,
  type RevisionRecord,
} from './codec.ts'
import { mergeRanges, ObjectDocument, rangesCover, SYS, type Sys, withMeta } from './document.ts'
import {
  backdatedUnsigned,
  evidenceMismatch,
  publicKeySet,
  type ReplicaTime,
  replayKey,
  UserKeyHistory,
  type UserSignaturePolicy,
  unsignedRefused,
  userSignaturePolicy,
} from './evidence.ts'
import { MAX_EVIDENCE_BODY_BYTES } from './evidence-shape.ts'
import { BOUND, dec, enc, FORMAT, json, K_FORMAT, K_REPLICA, K_SNAPSHOT, K_VECTOR, K_YCOUNTER, MERGED, unjson, Y_LOG, yLogKey } from './keys.ts'
import { type CompactionPolicy, DEFAULT_COMPACTION, DEFAULTS, type StoreOptions } from './options.ts'
import type { PruneResult } from './prune.ts'
import { RevisionLog, resolveRevision, toRevision } from './revision-log.ts'
import { DurableSyncState, encodeMissingFor, stateVectorsOf, syncDigestOf, syncStateOf } from './sync.ts'
import {
  type Authorize,
  BINDING_UNKNOWN,
  bindingOf,
  changesOf,
  checkSchema,
  contentAfter,
  defaultAuthorize,
  deletesField,
  type ObjectsView,
  pinOf,
  type RecordSigner,
  type RecordVerifier,
  ROLE_DENIED,
  runsOn,
  SCHEDULER,
  signRecord,
  structMatches,
  tracksBinding,
  UNKNOWN_CREATION,
  verifyRecord,
  verifyRecordsAtOnce,
} from './trust.ts'
import type {
  ApplyPlan,
  ApplyRemoteOptions,
  FieldSet,
  HistoryQuery,
  ObjectStore,
  RemoteApplied,
  Revision,
  RollbackOptions,
  StoredObject,
  StoredOf,
  WriteOptions,
  WriteResult,
} from './types.ts'
import { type BatchOp, GroupCommitWriter } from './writer.ts'

/** Why a peer's update was refused (the `reason` label of orc_store_refused_updates_total). */
export type RefusalReason =
  | 'unsigned'
  | 'not_member'
  | 'bad_signature'
  | 'schema'
  | 'unauthorized'
  | 'role'
  | 'unbound'
  | 'unresolved'
  | 'malformed'
  /** A user's evidence that does not verify, does not ask for the record, or backs another record already. */
  | 'user_signature'
  /** A `user:*` record without the user's signature where the cluster requires one. */
  | 'user_unsigned'

/** Messages with this many records have their signatures checked at once (RecordVerifier.verifyMany). */
const VERIFY_AT_ONCE_MIN = 256

/** crypto.randomBytes per call costs ~7 µs; uids are drawn from a 4 KiB pool instead. */
function pooledRandomBytes(): (n: number) => Uint8Array {
  let pool = new Uint8Array(0)
  let at = 0
  return (n) => {
    if (n > 256) return new Uint8Array(nodeRandomBytes(n))
    if (at + n > pool.length) {
      pool = new Uint8Array(nodeRandomBytes(4096))
      at = 0
    }
    at += n
    return pool.slice(at - n, at)
  }
}

function iso(ms: number): string {
  return new Date(ms).toISOString()
}

/** A record's creation as `isKnownCreation` compares it: `createdBy|createdAt|uid` (uid empty when not signed). */
function creationOf(r: RevisionRecord): string {
  return `${r.a}|${new Date(r.t).toISOString()}|${r.d ?? ''}`
}

export async function openStore(opts: StoreOptions): Promise<Store> {
  const s = new Store(opts)
  await s.open()
  return s
}

/**
 * The versioned object store. Its parts: the replicated document (document.ts), the revision log
 * (revision-log.ts) and what replicas exchange (sync.ts); this class checks and orders writes,
 * keeps them durable (one synced LevelDB batch per group of writes) and tells listeners.
 */
export class Store implements ObjectStore {
  private readonly db: AbstractLevel<any, string, Uint8Array>
  private readonly ownership: OwnershipTable
  private readonly random: (n: number) => Uint8Array
  private readonly policy: CompactionPolicy
  private readonly snapshotEvery: number
  private readonly fullEvery: number
  private writer!: GroupCommitWriter
  private doc!: ObjectDocument
  private readonly log: RevisionLog
  private replica = ''
  private nextSeq = 1
  private yCounter = 0
  private ySinceSnapshot = 0
  private readonly plans = new WeakMap<object, { plan: ApplyPlan | null; rev: string | undefined; author: string }>()
  /** For each object: the revision whose reconstructed content equals the current content. */
  private readonly contentRev = new Map<string, string>()
  /**
   * Objects whose every field holds a value of one chain of revisions up to the head: no concurrent
   * branch was merged here since (equal content is not enough — a field may hold another branch's
   * Yjs entry of the same value, which a record built on the head can lose to). Empty after a
   * restart: what the receipt checks judge against the head only while it holds (checkRemote).
   */
  private readonly linearRev = new Map<string, string>()
  /**
   * Objects whose content here merged a concurrent branch (contentRev lost it), until a write here
   * or a chain of records gives it one revision's content again; on disk (MERGED), so a restart
   * still knows (checkRemote judges records over such a head like concurrent ones).
   */
  private readonly mergedKeys = new Set<string>()
  /** The batch op recording whether an object's content here is merged (none when that did not change). */
  private markMerged(key: string, merged: boolean): BatchOp[] {
    if (this.mergedKeys.has(key) === merged) return []
    if (merged) this.mergedKeys.add(key)
    else this.mergedKeys.delete(key)
    return [merged ? { type: 'put', key: `${MERGED}${key}`, value: new Uint8Array(0) } : { type: 'del', key: `${MERGED}${key}` }]
  }
  private readonly changeListeners = new Set<(keys: string[]) => void>()
  private readonly mergeListeners = new Set<(keys: string[]) => void>()
  private readonly updateListeners = new Set<(u: Uint8Array) => void>()
  private closed = true
  private snapshotting = false
  private readonly durable = new DurableSyncState(() => syncStateOf(this.doc, this.log))
  private stability: (() => Uint8Array[] | null) | undefined
  private readonly signer: RecordSigner | undefined
  private readonly verifier: RecordVerifier | undefined
  private readonly authorize: Authorize
  /** Yjs clientID → signer, from verified records (and this replica's own client). */
  private readonly bindings = new Map<number, string>()
  /**
   * Per Yjs client, the verified records whose Yjs content has not (all) arrived here yet, by the
   * clock they end at (ascending): a new struct of that client belongs to the first one ending
   * after it and may touch only that record's object.
   */
  private readonly covers = new Map<number, Array<{ yc: number; k: string; r: RevisionRecord }>>()
  /** Set while a large message's signatures are checked (applyRemote): later messages wait for it. */
  private verifyingAtOnce: Promise<void> | undefined
  /**
   * Pod key → the nodes it has been bound (or pinned) to as far as this replica has seen, current
   * binding included: the nodes whose lifecycle may write its status (trust.ts). Kept on disk
   * (`b:<key>`), so a restart does not forget a node that ran the pod before a move.
   */
  private readonly boundTo = new Map<string, Set<string>>()
  /** Per key, the creations (`createdBy|createdAt`) of the create records this replica holds. */
  private readonly creations = new Map<string, Set<string>>()
  private readonly refusedListeners = new Set<(reason: RefusalReason, detail: string) => void>()
  /**
   * Users' evidence (src/store/evidence.ts): which record each signed request backs, per object
   * (`nonce|key` → revision id), and which key each user held when. Both from the records this
   * replica holds (rebuilt at open), so a replay is refused however old it claims to be.
   */
  private readonly evidenceUses = new Map<string, string>()
  private readonly userKeys = new UserKeyHistory()
  /** Each replica's latest-timed record known here (the backdating bound, evidence.ts backdatedUnsigned). */
  private readonly replicaTimes = new Map<string, ReplicaTime>()

  constructor(private readonly opts: StoreOptions) {
    this.db = opts.db ?? new ClassicLevel<string, Uint8Array>(opts.dir, { keyEncoding: 'utf8', valueEncoding: 'view' })
    this.ownership = opts.ownership ?? defaultOwnership()
    this.random = opts.randomBytes ?? pooledRandomBytes()
    this.policy = { ...DEFAULT_COMPACTION, ...opts.compaction }
    this.snapshotEvery = opts.snapshotEvery ?? DEFAULTS.snapshotEvery
    this.fullEvery = opts.fullEvery ?? DEFAULTS.fullEvery
    this.stability = opts.stability
    this.signer = opts.signer
    this.verifier = opts.verifier
    this.authorize = opts.authorize ?? defaultAuthorize(this.ownership, opts.userMay ?? (() => true))
    // What a reader can see in the document may still be in the write queue; history waits for
    // it, so it is never behind the objects.
    this.log = new RevisionLog(this.db, () => this.writer.drain())
  }

  get replicaId(): string {
    return this.replica
  }

  // ---------------------------------------------------------------- open / close

  async open(): Promise<void> {
    if (!this.opts.db) mkdirSync(this.opts.dir, { recursive: true })
    try {
      await this.db.open()
    } catch (err) {
      const cause = (err as { cause?: { code?: string; message?: string } }).cause
      if (cause?.code === 'LEVEL_LOCKED') {
        throw new OrcError('locked', `open store ${this.opts.dir}: the data dir is in use by another orc process`, { dir: this.opts.dir }, err)
      }
      if (cause?.code === 'LEVEL_CORRUPTION') {
        throw new OrcError(
          'corrupt',
          `open store ${this.opts.dir}: database is corrupted (${cause.message}); restore the data dir from a backup or re-join the cluster`,
          { dir: this.opts.dir },
          err,
        )
      }
      throw new OrcError('corrupt', `open store ${this.opts.dir}: ${cause?.message ?? (err as Error).message}`, { dir: this.opts.dir }, err)
    }
    try {
      await this.load()
    } catch (err) {
      await this.db.close().catch(() => {})
      if (err instanceof OrcError) throw err
      throw new OrcError(
        'corrupt',
        `open store ${this.opts.dir}: ${(err as Error).message}; restore the data dir from a backup or re-join the cluster`,
        { dir: this.opts.dir },
        err,
      )
    }
    if (this.verifier !== undefined) await this.loadBindings()
    this.writer = new GroupCommitWriter(this.db, this.opts.sync ?? true, () => [
      { type: 'put', key: K_VECTOR, value: json(this.log.vector()) },
      { type: 'put', key: K_YCOUNTER, value: json(this.yCounter) },
    ])
    this.closed = false
  }

  /** Which Yjs client each signer wrote with, the records whose Yjs content is still to come, the pods' bindings. */
  private async loadBindings(): Promise<void> {
    for (const r of await this.log.all()) {
      this.noteCover(r)
      this.noteEvidence(r)
      this.noteReplicaTime(r)
    }
    const gone: BatchOp[] = []
    for await (const [k, v] of this.db.iterator({ gte: BOUND, lt: `${BOUND}\xff` })) {
      const key = k.slice(BOUND.length)
      // A pod whose tombstone is gone too: nothing of it can be written any more.
      if (this.doc.sysOf(key) === undefined) gone.push({ type: 'del', key: k })
      else this.boundTo.set(key, new Set(unjson<string[]>(v)))
    }
    for await (const k of this.db.keys({ gte: MERGED, lt: `${MERGED}\xff` })) {
      const key = k.slice(MERGED.length)
      if (this.doc.sysOf(key) === undefined) gone.push({ type: 'del', key: k })
      else this.mergedKeys.add(key)
    }
    if (gone.length > 0) await this.db.batch(gone)
    for (const kind of ['Pod', 'VirtualMachine'] as const)
      for (const p of this.doc.list(kind)) {
        const key = keyOf({ kind, namespace: p.metadata.namespace ?? '', name: p.metadata.name })
        this.noteBinding(key, runsOn(key, this.doc.content(key)))
      }
    if (this.signer) this.bindings.set(this.doc.doc.clientID, this.signer.id)
  }

  /**
   * Remember that pod `key` has been bound (or pinned) to `nodes` (the lifecycle rule: see trust.ts);
   * the LevelDB op that keeps it, when the set grew.
   */
  private noteBinding(key: string, nodes: Iterable<unknown>): BatchOp[] {
    if (!tracksBinding(key)) return []
    let set = this.boundTo.get(key)
    let grew = false
    for (const node of nodes) {
      if (typeof node !== 'string' || node === '' || set?.has(node)) continue
      if (!set) this.boundTo.set(key, (set = new Set()))
      // Bounded: a pod moved more than this many times keeps its first 64 nodes.
      if (set.size >= 64) break
      set.add(node)
      grew = true
    }
    return grew ? [{ type: 'put', key: `${BOUND}${key}`, value: json([...set!]) }] : []
  }

  /** Remember `r`'s node's latest-timed record (in `into`, default this store's). */
  private noteReplicaTime(r: Pick<RevisionRecord, 'i' | 't'>, into: Map<string, ReplicaTime> = this.replicaTimes): void {
    const p = parseRevisionId(r.i)
    if (p === undefined) return
    const cur = into.get(p.replica) ?? this.replicaTimes.get(p.replica)
    if (cur === undefined || r.t > cur.t) into.set(p.replica, { t: r.t, seq: p.seq })
  }

  /**
   * A creation of `key` some verified create record made (kept per key: concurrent creates each have
   * one): `createdBy|createdAt|uid`, the uid empty for records from before records signed it.
   */
  private isKnownCreation(key: string, by: string, at: string, uid: string, inMessage: ReadonlyMap<string, ReadonlySet<string>>): boolean {
    const known = (c: string) => inMessage.get(key)?.has(c) === true || this.creations.get(key)?.has(c) === true
    return known(`${by}|${at}|${uid}`) || known(`${by}|${at}|`)
  }

  private noteCreation(r: RevisionRecord): void {
    if (r.o !== 'create' && r.d === undefined) return
    let set = this.creations.get(r.k)
    if (!set) this.creations.set(r.k, (set = new Set()))
    if (set.size < 64) set.add(creationOf(r))
  }

  /** A record's user evidence (the request it used) and the user key it sets. */
  private noteEvidence(r: RevisionRecord): void {
    if (r.u !== undefined) this.evidenceUses.set(replayKey(r.u, r.k), r.i)
    const key = publicKeySet(r)
    if (key !== undefined) this.userKeys.note(refOfKey(r.k).name, key, r.t, r.i)
  }

  /** The cluster's policy on users' signatures (Cluster spec.userSignatures), when this store checks them. */
  private signaturePolicy(objects: ObjectsView): UserSignaturePolicy | undefined {
    return this.opts.userEvidence !== undefined && this.verifier !== undefined ? userSignaturePolicy(objects) : undefined
  }

  /**
   * The user evidence a local write's record carries: the signed request when it asks for exactly
   * this write (the same check every replica makes on receipt) and has not backed this object yet.
   */
  private evidenceFor(r: RevisionRecord, content: Record<string, unknown> | undefined, evidence: SignedRequest | undefined): SignedRequest | undefined {
    if (evidence === undefined || this.signer === undefined || this.opts.userEvidence === undefined) return undefined
    if (evidence.peer !== this.signer.id || this.evidenceUses.has(replayKey(evidence, r.k))) return undefined
    if (JSON.stringify(evidence.body ?? null).length > MAX_EVIDENCE_BODY_BYTES) return undefined
    return evidenceMismatch(r, evidence, content, this.ownership) === undefined ? evidence : undefined
  }

  private noteCover(r: RevisionRecord): void {
    this.noteCreation(r)
    if (r.y === undefined || r.n === undefined || r.yc === undefined) return
    this.bindings.set(r.y, r.n)
    if (r.yc <= this.doc.clockOf(r.y)) return
    let l = this.covers.get(r.y)
    if (!l) this.covers.set(r.y, (l = []))
    let i = l.length
    while (i > 0 && l[i - 1]!.yc > r.yc) i--
    l.splice(i, 0, { yc: r.yc, k: r.k, r })
  }

  /** Forget covers whose content has all arrived. */
  private trimCovers(): void {
    for (const [client, l] of this.covers) {
      const have = this.doc.clockOf(client)
      let n = 0
      while (n < l.length && l[n]!.yc <= have) n++
      if (n === l.length) this.covers.delete(client)
      else if (n > 0) l.splice(0, n)
    }
  }

  private async load(): Promise<void> {
    const [format, replica, vector, ycounter] = await this.db.getMany([K_FORMAT, K_REPLICA, K_VECTOR, K_YCOUNTER])
    const init: BatchOp[] = []
    if (format === undefined) {
      // A new database holds nothing; an old one without a format key is not ours, and one whose
      // files hold data LevelDB could not read back (it skips damaged log blocks) lost records.
      for await (const _ of this.db.keys({ limit: 1 })) {
        throw new OrcError('corrupt', `open store ${this.opts.dir}: no format marker: not an orc store, or its first records were damaged`)
      }
      const dataBytes = this.opts.db
        ? 0
        : readdirSync(this.opts.dir)
            .filter((f) => /^[0-9]+\.(log|ldb|sst)$/.test(f))
            .reduce((n, f) => n + statSync(join(this.opts.dir, f)).size, 0)
      if (dataBytes > 0) {
        throw new OrcError('corrupt', `open store ${this.opts.dir}: database files hold ${dataBytes} bytes but no readable records (damaged log)`)
      }
      init.push({ type: 'put', key: K_FORMAT, value: json(FORMAT) })
    } else if (unjson<number>(format) !== FORMAT) {
      throw new OrcError('corrupt', `open store ${this.opts.dir}: unsupported store format ${dec.decode(format)}`)
    }
    if (replica === undefined) {
      this.replica = this.opts.replicaId ?? Buffer.from(this.random(8)).toString('hex')
      init.push({ type: 'put', key: K_REPLICA, value: enc.encode(this.replica) })
    } else {
      this.replica = dec.decode(replica)
    }
    if (vector !== undefined) this.log.load(unjson<LogVector>(vector))
    this.nextSeq = this.log.upTo(this.replica) + 1
    this.yCounter = ycounter === undefined ? 0 : unjson<number>(ycounter)

    await this.checkContinuity()

    this.doc = new ObjectDocument(new DataView(this.random(4).buffer.slice(0)).getUint32(0) >>> 1)
    const snap = await this.db.get(K_SNAPSHOT)
    const updates: Uint8Array[] = []
    for await (const v of this.db.values({ gte: Y_LOG, lt: `${Y_LOG}~` })) updates.push(v)
    this.ySinceSnapshot = updates.length
    try {
      this.doc.load(snap, updates)
    } catch (err) {
      throw new OrcError('corrupt', `open store ${this.opts.dir}: document log unreadable (${(err as Error).message})`, {}, err)
    }
    if (init.length > 0) await this.db.batch(init, { sync: true } as never)
    this.doc.observe()
  }

  /**
   * Tell change listeners about the keys changed since the last call. Called once a write is on
   * disk — never from inside a Yjs transaction, so a listener may write (a controller reacting to
   * a change) and sees history that already holds the change.
   */
  private notifyChanges(): void {
    if (!this.doc.hasChanges()) return
    const list = this.doc.takeChanged()
    for (const fn of this.changeListeners) {
      try {
        fn(list)
      } catch (err) {
        this.opts.logger?.error({ err }, 'change listener failed')
      }
    }
  }

  /**
   * LevelDB skips log blocks it cannot read instead of failing the open. Every write adds one
   * numbered Yjs log entry and advances the revision log vector, so a skipped batch shows up as a
   * gap in the numbering or a missing latest record: refuse to start on it rather than serve (and
   * then replicate) a silently shortened history.
   */
  private async checkContinuity(): Promise<void> {
    const missing: string[] = []
    let expect: number | undefined
    for await (const k of this.db.keys({ gte: Y_LOG, lt: `${Y_LOG}~` })) {
      const n = Number(k.slice(Y_LOG.length))
      if (expect !== undefined && n !== expect) missing.push(`document log entries ${expect}–${n - 1}`)
      expect = n + 1
    }
    if (expect !== undefined && expect - 1 !== this.yCounter) missing.push(`document log entries after ${expect - 1} (counter says ${this.yCounter})`)
    const heads = this.log.heads()
    const got = heads.length ? await this.db.getMany(heads.map((h) => h.key)) : []
    got.forEach((v, i) => {
      if (v === undefined) missing.push(`revision ${heads[i]!.replica}.${heads[i]!.seq}`)
    })
    if (missing.length > 0) {
      throw new OrcError(
        'corrupt',
        `open store ${this.opts.dir}: records are missing (${missing.slice(0, 3).join('; ')}); the database was damaged — restore the data dir from a backup or re-join the cluster`,
      )
    }
  }

  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    await this.writer.drain().catch(() => {})
    this.doc.destroy()
    await this.db.close()
  }

  private ensureOpen(): void {
    if (this.closed) throw new OrcError('unavailable', 'store is closed')
    if (this.writer.error !== undefined) {
      throw new OrcError('unavailable', `store is failed after a disk error (${(this.writer.error as Error).message}); restart the agent`)
    }
  }

  // ---------------------------------------------------------------- reads

  // The kinds' types are the schemas' (src/model/kinds): everything stored passed them on write or
  // on receipt, so the casts to the kind's type below are the one place that trust is taken.
  get<K extends string>(ref: ObjectRef<K> & { kind: KindArg<K> }): StoredOf<K> | undefined {
    return this.doc.get(keyOf(ref)) as StoredOf<K> | undefined
  }

  list<K extends string>(kind: K & KindArg<K>, namespace?: string): StoredOf<K>[] {
    return this.doc.list(kind, namespace) as StoredOf<K>[]
  }

  count(): number {
    return this.doc.count()
  }

  // ---------------------------------------------------------------- writes

  private checkAuthor(author: string): void {
    if (!isValidAuthor(author)) {
      throw new OrcError('invalid', `author ${JSON.stringify(author)}: must be user:<name> or controller:<name>`)
    }
  }

  /**
   * Refuse changes to fields the author does not own. Controller-owned fields only by their
   * owner; user fields by users, and by the controller that created the object (a Node object
   * is created by its agent).
   */
  private checkOwnership(key: string, changes: readonly Change[], author: string, createdBy: string): void {
    const { kind, name } = refOfKey(key)
    const allowed = (owner: string) => (owner === USERS ? author.startsWith('user:') || author === createdBy : owner === author)
    for (const p of touchedPaths(changes)) {
      const owner = this.ownership.ownerOf(kind, p)
      if (!allowed(owner)) {
        const whose = owner === USERS ? 'users' : owner
        throw new OrcError('forbidden', `${kind.toLowerCase()}/${name}: ${formatPath(p)} is owned by ${whose}; ${author} may not change it`, {
          field: formatPath(p),
          owner: whose,
          author,
        })
      }
    }
  }

  /**
   * Everything `apply` would do, without writing: validation, the changes, and the ownership
   * check. Throws what `apply` would throw; returns null when the apply would change nothing.
   */
  planApply(manifest: OrcObject, opts: WriteOptions): ApplyPlan | null {
    this.ensureOpen()
    this.checkAuthor(opts.author)
    const obj = normalizeManifest(manifest)
    const plan = this.plan(obj, opts)
    // Kept for apply() of the same manifest (the API plans a whole batch, then applies it): if the
    // object has not changed since, the plan is committed as is — one diff per write.
    this.plans.set(obj, { plan, rev: this.doc.sysOf(keyOf(refOf(obj)))?.rev, author: opts.author })
    return plan
  }

  private plan(obj: OrcObject, opts: WriteOptions): ApplyPlan | null {
    const ref = refOf(obj)
    const key = keyOf(ref)
    const cur = this.doc.content(key)
    const desired = structuredClone(obj) as unknown as Record<string, unknown>
    if (cur) {
      // A user apply never clobbers controller-owned fields it does not mention.
      for (const claim of this.ownership.claims(ref.kind)) {
        const path = claim.path.split('.')
        if (valueAtPath(desired, path) === undefined && valueAtPath(cur, path) !== undefined) {
          const parent = valueAtPath(desired, path.slice(0, -1))
          const value = valueAtPath(cur, path)
          if (isPlainObject(parent)) parent[path[path.length - 1]!] = structuredClone(value)
          else Object.assign(desired, applyChanges(desired, [{ op: 'set', path, value }]))
        }
      }
    }
    const changes = diffValues(cur ?? {}, desired)
    if (cur && changes.length === 0) return null
    this.checkOwnership(key, changes, opts.author, cur ? this.doc.sysOf(key)!.createdBy : opts.author)
    return { key, op: cur ? 'update' : 'create', changes, desired }
  }

  async apply(manifest: OrcObject, opts: WriteOptions): Promise<WriteResult> {
    this.ensureOpen()
    const memo = this.plans.get(manifest)
    const plan =
      memo !== undefined && memo.author === opts.author && memo.rev === this.doc.sysOf(keyOf(refOf(manifest)))?.rev ? memo.plan : this.planApply(manifest, opts)
    this.plans.delete(manifest)
    if (!plan) return { object: this.get(refOf(manifest as OrcObject)), revision: null }
    return this.commit(plan.key, plan.op, plan.changes, plan.desired, opts)
  }

  async patch(ref: ObjectRef, fields: FieldSet[], opts: WriteOptions): Promise<WriteResult> {
    this.ensureOpen()
    this.checkAuthor(opts.author)
    getKind(ref.kind)
    const key = keyOf(ref)
    const cur = this.doc.content(key)
    if (!cur) throw new OrcError('not_found', `${ref.kind.toLowerCase()}/${ref.name} not found`, { ...ref })
    for (const f of fields) {
      if (f.path.length === 0 || f.path.some((s) => typeof s !== 'string' || s === '' || s === SYS)) {
        throw new OrcError('invalid', `patch path ${JSON.stringify(f.path)}: must be a non-empty list of field names`)
      }
    }
    const desired = applyChanges(
      cur,
      fields.map((f): Change => (f.value === undefined ? { op: 'unset', path: f.path, old: undefined } : { op: 'set', path: f.path, value: f.value })),
    )
    const changes = diffValues(cur, desired)
    if (changes.length === 0) return { object: this.get(ref), revision: null }
    this.checkOwnership(key, changes, opts.author, this.doc.sysOf(key)!.createdBy)
    const normalized = normalizeManifest(desired) as unknown as Record<string, unknown>
    return this.commit(key, 'update', diffValues(cur, normalized), normalized, opts)
  }

  async delete(ref: ObjectRef, opts: WriteOptions): Promise<Revision> {
    this.ensureOpen()
    this.checkAuthor(opts.author)
    const key = keyOf(ref)
    const cur = this.doc.content(key)
    if (!cur) throw new OrcError('not_found', `${ref.kind.toLowerCase()}/${ref.name} not found`, { ...ref })
    const res = await this.commit(key, 'delete', [], undefined, opts)
    return res.revision!
  }

  async rollback(ref: ObjectRef, opts: RollbackOptions): Promise<WriteResult> {
    this.ensureOpen()
    this.checkAuthor(opts.author)
    const key = keyOf(ref)
    const history = await this.log.records(key)
    if (history.length === 0) throw new OrcError('not_found', `${ref.kind.toLowerCase()}/${ref.name} has no history`, { ...ref })
    const sys = this.doc.sysOf(key)
    let target: RevisionRecord | undefined
    if (opts.to === undefined) {
      const headIdx = history.findIndex((r) => r.i === sys?.rev)
      target = history
        .slice(0, headIdx < 0 ? history.length : headIdx)
        .reverse()
        .find((r) => r.o !== 'delete')
      if (!target) throw new OrcError('not_found', `${ref.kind.toLowerCase()}/${ref.name} has no earlier revision to roll back to`)
    } else {
      target = resolveRevision(ref, history, opts.to)
    }
    if (target.o === 'delete') {
      throw new OrcError('invalid', `revision ${target.s} of ${ref.kind.toLowerCase()}/${ref.name} is a delete; roll back to a revision with content`)
    }
    const old = await this.log.contentOf(target, this.policy)
    const cur = this.doc.content(key)
    // User-owned content comes from the old revision; controller-owned fields stay as they are.
    let desired = structuredClone(old) as Record<string, unknown>
    for (const claim of this.ownership.claims(ref.kind)) {
      const path = claim.path.split('.')
      const now = valueAtPath(cur, path)
      desired = applyChanges(desired, [now === undefined ? { op: 'unset', path, old: undefined } : { op: 'set', path, value: now }])
    }
    if (opts.rewrite !== undefined) desired = opts.rewrite(desired)
    desired = normalizeManifest(desired) as unknown as Record<string, unknown>
    const changes = diffValues(cur ?? {}, desired)
    if (cur && changes.length === 0) return { object: this.get(ref), revision: null }
    this.checkOwnership(key, changes, opts.author, cur ? sys!.createdBy : opts.author)
    return this.commit(key, 'rollback', changes, desired, opts, { rt: target.i, rf: sys?.rev })
  }

  private async commit(
    key: string,
    op: RevisionRecord['o'],
    changes: Change[],
    content: Record<string, unknown> | undefined,
    opts: WriteOptions,
    extra: { rt?: string; rf?: string } = {},
  ): Promise<WriteResult> {
    const prev = this.doc.sysOf(key)
    const live = prev !== undefined && !prev.deleted
    const seq = (prev?.seq ?? 0) + 1
    const localSeq = this.nextSeq++
    const id = `${this.replica}.${localSeq}`
    const now = iso(opts.now)
    const sys: Sys = live
      ? { ...prev, seq, rev: id, updatedAt: now, updatedBy: opts.author }
      : {
          uid: Buffer.from(this.random(16)).toString('hex'),
          seq,
          rev: id,
          createdAt: now,
          createdBy: opts.author,
          updatedAt: now,
          updatedBy: opts.author,
        }
    if (op === 'delete') sys.deleted = true
    const record: RevisionRecord = { i: id, k: key, s: seq, o: op, a: opts.author, r: opts.reason ?? '', t: opts.now }
    if (prev) record.p = prev.rev
    // A new object's uid is signed with its record (checked on receipt: structMatches).
    if (!live && op !== 'delete' && this.signer !== undefined) record.d = sys.uid
    if (extra.rt) record.rt = extra.rt
    if (extra.rf) record.rf = extra.rf
    if (content !== undefined) {
      // Delta against the parent when the parent's content is exactly what we hold; a full copy
      // on create, periodically, and after merges (so reconstruction is always exact).
      const exactParent = live && this.contentRev.get(key) === prev!.rev
      if (!exactParent || seq % this.fullEvery === 1) record.f = content
      // After a merge the full copy also holds what concurrent writers changed since the parent:
      // the record carries its author's own changes beside it (both signed), so that a replica whose
      // content at the parent is known judges the author by what it changed, not by the merge.
      // Beside a periodic full copy too: a replica whose head merged a concurrent branch judges the
      // record by these, not by the copy's difference from its merged content (honest-fuzz).
      if (record.f === undefined || live) record.c = encodeChanges(changes)
    }

    const u = this.evidenceFor(record, content, opts.evidence)
    if (u !== undefined) {
      // A full copy: every replica compares it with what the request asked, whatever it holds.
      // After a merge the author's changes stay beside it (judged by those, as for any merged write).
      record.u = u
      if (content !== undefined && record.f === undefined) {
        record.f = content
        delete record.c
      }
    } else if (this.opts.userEvidence !== undefined && this.signer !== undefined && opts.author.startsWith('user:')) {
      // The cluster requires users' signatures: a write its replicas would refuse is refused here.
      const self = this.opts.userEvidence?.self?.() ?? this.verifier?.member(this.signer.id)?.node
      const why = unsignedRefused(record, self, this.signaturePolicy({ list: (k) => this.doc.list(k) }))
      if (why !== undefined) {
        throw new OrcError(
          'forbidden',
          `${why}: only orc apply and orc delete over the remote API (orc --node, with the user's credential) carry it${opts.evidence === undefined ? '' : '; this request does not (a rollback, a Secret, a body over 64 KiB, or one the store changed)'}`,
          { reason: 'user_unsigned' },
        )
      }
    }
    const yUpdate = this.doc.writeLocal(key, { op: op === 'delete' ? 'delete' : live ? 'update' : 'create', sys, content, changes })
    if (this.signer) {
      // What the write deleted, signed: a replica merges no other deletion under this record.
      record.e = this.doc.lastDeleted
      const client = this.doc.doc.clientID
      signRecord(record, this.signer, client, getState(this.doc.doc.store, client))
    }
    this.contentRev.set(key, id)
    const unmerged = this.markMerged(key, false)
    if (prev === undefined || this.linearRev.get(key) === prev.rev) this.linearRev.set(key, id)
    else this.linearRev.delete(key)
    let bound: BatchOp[] = []
    if (this.verifier !== undefined) {
      bound = this.noteBinding(key, runsOn(key, this.doc.content(key)))
      this.noteCreation(record)
      this.noteEvidence(record)
      this.noteReplicaTime(record)
    }
    const recordJson = JSON.stringify(record)
    this.log.noteSeen(this.replica, localSeq)

    await this.persist([...this.log.putOps(record, recordJson), ...this.yLogOps(yUpdate), ...bound, ...unmerged])
    this.notifyChanges()
    const msg = encodeUpdateMessage(yUpdate, `[${recordJson}]`)
    for (const fn of this.updateListeners) fn(msg)
    this.maybeSnapshot()
    const ref = refOfKey(key)
    return { object: op === 'delete' ? undefined : this.get(ref), revision: toRevision(record, seq) }
  }

  /** A document write: on disk before it resolves; tracks what is durable for stability reports. */
  private persist(ops: BatchOp[]): Promise<void> {
    return this.durable.persist(() => this.writer.write(ops))
  }

  /**
   * This replica's sync state for other replicas' tombstone pruning: like encodeSyncState, but
   * only what is on disk — a replica that crashed must not un-see an update a peer pruned against.
   * Null while writes are in flight and nothing durable has been captured since.
   */
  encodeStabilityReport(): Uint8Array | null {
    return this.durable.report()
  }

  private yLogOps(update: Uint8Array): BatchOp[] {
    this.yCounter++
    this.ySinceSnapshot++
    return [{ type: 'put', key: yLogKey(this.yCounter), value: update }]
  }

  /** Fold the Yjs update log into one snapshot so cold start reads one value, not thousands. */
  private maybeSnapshot(): void {
    if (this.ySinceSnapshot < this.snapshotEvery || this.snapshotting) return
    // A failed snapshot loses nothing (the log stays); the writer's own error fails later writes.
    this.snapshot().catch((err) => this.opts.logger?.error({ err }, 'store snapshot failed'))
  }

  async snapshot(): Promise<void> {
    if (this.snapshotting) return
    this.snapshotting = true
    try {
      const upTo = this.yCounter
      this.pruneTombstones()
      const state = this.doc.encodeUpdate()
      this.ySinceSnapshot = 0
      // Goes through the same queue, so every log entry it replaces is on disk before it. The
      // log is cleared only after the snapshot is durable; a crash in between leaves both, and
      // applying a Yjs update twice is harmless.
      await this.writer.write([{ type: 'put', key: K_SNAPSHOT, value: state }])
      await this.db.clear({ gte: Y_LOG, lte: yLogKey(upTo) })
    } finally {
      this.snapshotting = false
    }
  }

  /**
   * Who vouches for tombstone pruning: a function returning the latest sync state
   * (encodeSyncState) of every other replica that holds or was sent this document — [] when this
   * replica is alone — or null when that is not known right now. Without one, nothing is pruned.
   */
  setStability(fn: (() => Uint8Array[] | null) | undefined): void {
    this.stability = fn
  }

  /**
   * Drop the tombstones every replica is past (see prune.ts). Runs before every snapshot with the
   * stability source's reports; a caller that gathered every other replica's
   * encodeStabilityReport() may pass them instead.
   */
  pruneTombstones(given?: readonly Uint8Array[]): PruneResult {
    if (!this.doc) return { pruned: 0, skipped: 'store is not open' }
    const reports = given ?? this.stability?.()
    if (reports === undefined) return { pruned: 0, skipped: 'no stability source' }
    if (reports === null) return { pruned: 0, skipped: 'replica states unknown' }
    const svs = stateVectorsOf(reports)
    if (typeof svs === 'string') return { pruned: 0, skipped: svs }
    const res = this.doc.prune(svs)
    if (res.pruned > 0) this.opts.logger?.debug({ pruned: res.pruned }, 'pruned stable tombstones')
    return res
  }

  /** Size of the in-memory document, for metrics and tests. */
  docStats(): { structs: number } {
    return { structs: this.doc.structs() }
  }

  // ---------------------------------------------------------------- history

  async history(ref: ObjectRef, q: HistoryQuery = {}): Promise<Revision[]> {
    const records = await this.log.records(keyOf(ref))
    const match = (a: string, pats: string[]) => pats.some((p) => (p.endsWith(':') ? a.startsWith(p) : a === p))
    return records
      .filter((r) => !q.authors?.length || match(r.a, q.authors))
      .filter((r) => !q.excludeAuthors?.length || !match(r.a, q.excludeAuthors))
      .filter((r) => q.since === undefined || r.t >= q.since)
      .filter((r) => q.until === undefined || r.t <= q.until)
      .map((r) => toRevision(r, r.s))
  }

  async at(ref: ObjectRef, rev: number | string): Promise<StoredObject> {
    const key = keyOf(ref)
    const history = await this.log.records(key)
    const r = resolveRevision(ref, history, rev)
    if (r.o === 'delete') throw new OrcError('not_found', `revision ${r.s} of ${ref.kind.toLowerCase()}/${ref.name} is its deletion; it has no content`)
    const content = await this.log.contentOf(r, this.policy)
    const first = history[0]!
    return withMeta(content, {
      uid: this.doc.sysOf(key)?.uid ?? '',
      seq: r.s,
      rev: r.i,
      createdAt: iso(first.t),
      createdBy: first.a,
      updatedAt: iso(r.t),
      updatedBy: r.a,
    })
  }

  async diff(ref: ObjectRef, from: number | string, to: number | string): Promise<Change[]> {
    const history = await this.log.records(keyOf(ref))
    const a = resolveRevision(ref, history, from)
    const b = resolveRevision(ref, history, to)
    return diffValues(a.o === 'delete' ? {} : await this.log.contentOf(a, this.policy), b.o === 'delete' ? {} : await this.log.contentOf(b, this.policy))
  }

  // ---------------------------------------------------------------- compaction

  /**
   * Fold old revisions: for each object, the contents of revisions beyond the newest
   * `keepRevisions` that are also older than `keepNewerThanMs` are dropped; their metadata
   * (author, reason, time, op) stays. The oldest kept revision gets a full copy so every kept
   * revision stays reconstructable. The Yjs log is folded into a snapshot. Local only: peers
   * compact on their own schedule.
   */
  async compact(now: number, policy: Partial<CompactionPolicy> = {}): Promise<{ revisionsCompacted: number }> {
    this.ensureOpen()
    const p = { ...this.policy, ...policy }
    let n = 0
    let ops: BatchOp[] = []
    for (const key of await this.log.objectKeys()) {
      const history = await this.log.records(key)
      if (history.length <= p.keepRevisions) continue
      const cut = history.length - p.keepRevisions
      let firstKept = cut
      while (firstKept > 0 && history[firstKept - 1]!.t >= now - p.keepNewerThanMs) firstKept--
      if (firstKept === 0) continue
      const kept = history[firstKept]!
      if (kept.f === undefined && kept.o !== 'delete' && kept.x !== 1) {
        const full = await this.log.contentOf(kept, this.policy)
        const k2 = { ...kept, f: full }
        // A signed record's hash covers the changes its writer wrote: keep them beside the copy.
        if (k2.g === undefined) delete k2.c
        ops.push(this.log.replaceOp(k2))
      }
      for (const r of history.slice(0, firstKept)) {
        if (r.x === 1) continue
        const slim: RevisionRecord = { ...r, x: 1 }
        delete slim.c
        delete slim.f
        ops.push(this.log.replaceOp(slim))
        n++
      }
      if (ops.length > 5000) {
        await this.writer.write(ops)
        ops = []
      }
    }
    if (ops.length > 0) await this.writer.write(ops)
    await this.snapshot()
    if (this.db instanceof ClassicLevel) await this.db.compactRange('\x00', '\xff')
    return { revisionsCompacted: n }
  }

  // ---------------------------------------------------------------- replication

  encodeSyncState(): Uint8Array {
    return syncStateOf(this.doc, this.log)
  }

  /**
   * What this replica holds for replication, canonically (both vectors sorted): two replicas return
   * the same text when they hold the same Yjs updates and the same revision records. With
   * stateDigest() it is the convergence check: a write that lost a concurrent-edit conflict leaves
   * no trace in the current objects, but its update and its revision must still reach everyone.
   */
  syncDigest(): string {
    return syncDigestOf(this.doc, this.log)
  }

  async encodeMissing(remoteState: Uint8Array, opts: { maxRecords?: number } = {}): Promise<Uint8Array> {
    this.ensureOpen()
    return encodeMissingFor(this.doc, this.log, remoteState, opts.maxRecords ?? 20000, this.signer !== undefined, () => this.writer.drain())
  }

  async applyRemote(update: Uint8Array, opts: ApplyRemoteOptions = {}): Promise<RemoteApplied> {
    this.ensureOpen()
    // Messages are checked and merged in the order they arrive: one that came during a large
    // message's wait below waits for it (it may build on that message's records).
    while (this.verifyingAtOnce !== undefined) {
      await this.verifyingAtOnce
      this.ensureOpen()
    }
    const { yUpdate, records } = decodeUpdateMessage(update)
    // A large message (a join's sync) has its signatures checked at once, a worker thread taking a
    // share; everything after this await runs without yielding, on the store as it is then.
    let signatures: Map<RevisionRecord, boolean> | undefined
    if (this.verifier !== undefined && this.verifier.verifyMany !== undefined && records.length >= VERIFY_AT_ONCE_MIN) {
      const pending = verifyRecordsAtOnce(
        records.filter((r) => !this.log.has(r.i)),
        this.verifier,
      )
      this.verifyingAtOnce = pending.then(
        () => {},
        () => {},
      )
      try {
        signatures = await pending
      } finally {
        this.verifyingAtOnce = undefined
      }
      this.ensureOpen()
    }
    const fresh: RevisionRecord[] = []
    const seen = new Set<string>()
    for (const r of records) {
      if (this.log.has(r.i) || seen.has(r.i)) continue
      seen.add(r.i)
      fresh.push(r)
    }
    const msgBound = this.verifier !== undefined ? this.checkRemote(yUpdate, fresh, this.verifier, signatures) : undefined
    // The chains of records from each object's linear head (see linearRev), before the merge.
    const linear = new Map<string, string | undefined>()
    for (const r of fresh) {
      const first = !linear.has(r.k)
      const from = first ? this.linearRev.get(r.k) : linear.get(r.k)
      // A new object this replica never held starts a chain.
      const starts = first && r.p === undefined && this.doc.sysOf(r.k) === undefined
      linear.set(r.k, starts || (from !== undefined && from === r.p) ? r.i : undefined)
    }
    const { effective, touched } = this.doc.applyRemote(yUpdate)
    if (this.verifier !== undefined) {
      for (const r of fresh) {
        this.noteCover(r)
        this.noteEvidence(r)
        this.noteReplicaTime(r)
      }
      this.trimCovers()
    }
    // Track which objects still hold exactly one revision's content (see commit()): a chain of
    // records from the revision whose content this replica held exactly; a concurrent record in the
    // message breaks it.
    const byKey = new Map<string, RevisionRecord>()
    const chained = new Map<string, string | undefined>()
    for (const r of fresh) {
      byKey.set(r.k, r)
      const from = chained.has(r.k) ? chained.get(r.k) : this.contentRev.get(r.k)
      chained.set(r.k, from !== undefined && from === r.p ? r.i : undefined)
    }
    const bound: BatchOp[] = []
    // The bindings this message's records made.
    for (const [k, nodes] of msgBound ?? []) bound.push(...this.noteBinding(k, nodes))
    for (const k of touched) {
      const r = byKey.get(k)
      const head = this.doc.sysOf(k)?.rev
      // A full copy is this object's content only when nothing concurrent was merged beside it.
      if (r && head === r.i && (chained.get(k) === r.i || (r.f !== undefined && isDeepStrictEqual(this.doc.content(k), r.f)))) {
        this.contentRev.set(k, r.i)
        bound.push(...this.markMerged(k, false))
      } else {
        this.contentRev.delete(k)
        if (r !== undefined) bound.push(...this.markMerged(k, true))
      }
      if (r && head === r.i && linear.get(k) === r.i) this.linearRev.set(k, r.i)
      else this.linearRev.delete(k)
    }
    opts.onApplied?.()
    if (touched.size > 0 && this.mergeListeners.size > 0) {
      const keys = [...touched]
      for (const fn of this.mergeListeners) fn(keys)
    }
    if (fresh.length === 0 && effective.length === 0) return { revisions: 0, incomplete: this.doc.incomplete() }
    const ops: BatchOp[] = []
    for (const r of fresh) {
      const p = parseRevisionId(r.i)!
      ops.push(...this.log.putOps(r))
      this.log.noteSeen(p.replica, p.seq)
    }
    if (effective.length > 0) ops.push(...this.yLogOps(effective.length === 1 ? effective[0]! : mergeUpdates(effective)))
    ops.push(...bound)
    await this.persist(ops)
    this.notifyChanges()
    this.maybeSnapshot()
    return { revisions: fresh.length, incomplete: this.doc.incomplete() }
  }

  private refuse(reason: RefusalReason, detail: string): never {
    for (const fn of this.refusedListeners) {
      try {
        fn(reason, detail)
      } catch (err) {
        this.opts.logger?.error({ err }, 'refusal listener failed')
      }
    }
    throw new OrcError('forbidden', `replication message refused (${reason}): ${detail}`, { refused: reason })
  }

  /** Called for each peer update refused by the checks on receipt (nothing of it was merged). */
  onRefused(fn: (reason: RefusalReason, detail: string) => void): () => void {
    this.refusedListeners.add(fn)
    return () => this.refusedListeners.delete(fn)
  }

  /**
   * The checks on receipt (docs/security.md, "Signed history and checks on receipt"), before
   * anything is merged: each new record is signed by a member, within its signer's rights and (its
   * content) valid for its kind; each new Yjs struct comes from a client a signer is bound to and
   * touches only the object of the record that covers it; each deletion removes content of an
   * object a new record (here, or received without its content yet) is about. Throws on refusal.
   */
  private checkRemote(
    yUpdate: Uint8Array,
    fresh: readonly RevisionRecord[],
    verifier: RecordVerifier,
    signatures?: Map<RevisionRecord, boolean>,
  ): Map<string, Set<unknown>> {
    // Per pod, the nodes this message's records bind (or pin) it to: a lifecycle write later in the
    // message may come from one (returned, to be remembered once the message is merged).
    const msgBound = new Map<string, Set<unknown>>()
    const signers = new Map<string, { id: string; node?: string }>()
    const bound = new Map<number, string>()
    const msgCovers = new Map<number, Array<{ yc: number; k: string; r: RevisionRecord }>>()
    const afterById = new Map<string, Record<string, unknown> | undefined>()
    const createdBy = new Map<string, { createdBy: string; createdAt: string }>()
    // Every creation of a key in this message (concurrent creates in a partition: one message may carry several).
    const creationsInMessage = new Map<string, Set<string>>()
    const onHead = new Set<string>()
    // The objects as this message leaves them so far: a RoleBinding and the write it allows may come together.
    // By kind: the RBAC check lists RoleBindings for every record, and a join's sync writes 10k pods.
    const written = new Map<string, Map<string, Record<string, unknown> | null>>()
    const objects: ObjectsView = {
      list: (kind) => {
        const mine = written.get(kind)
        if (mine === undefined) return this.doc.list(kind)
        const out: OrcObject[] = this.doc.list(kind).filter((o) => !mine.has(keyOf(refOf(o))))
        for (const v of mine.values()) if (v !== null) out.push(v as unknown as OrcObject)
        return out
      },
    }
    const members = new Map<string, { node?: string; removedAt?: number } | undefined>()
    // Users' evidence: the requests and keys of this message's records, the policy as it leaves it.
    const evidence = this.opts.userEvidence
    const msgUses = new Map<string, string>()
    const msgKeys = new UserKeyHistory()
    let policy: { v: UserSignaturePolicy | undefined } | undefined
    // The latest-timed record of each node as this message's records add to what is known here.
    const msgTimes = new Map<string, ReplicaTime>()
    const timeById = new Map<string, number>()
    // The keys this message's User records set, whatever their place in it (a join's sync sends each
    // writer's records in turn, not in time order); a User record is itself checked below, and a
    // refusal refuses the whole message.
    if (evidence !== undefined)
      for (const r of fresh) {
        const key = publicKeySet(r)
        if (key !== undefined) msgKeys.note(refOfKey(r.k).name, key, r.t, r.i)
      }
    for (const r of fresh) {
      if (r.n !== undefined && !members.has(r.n)) members.set(r.n, verifier.member(r.n))
      const bad = verifyRecord(r, verifier, r.n === undefined ? undefined : members.get(r.n), signatures?.get(r))
      if (bad !== undefined) this.refuse(bad as RefusalReason, `revision ${r.i} of ${r.k}${bad === 'not_member' ? ` (signer ${r.n})` : ''}`)
      const n = r.n!
      let signer = signers.get(n)
      if (!signer) signers.set(n, (signer = { id: n, node: members.get(n)?.node }))
      const was = bound.get(r.y!) ?? this.bindings.get(r.y!)
      if (was !== undefined && was !== n) this.refuse('unbound', `revision ${r.i}: Yjs client ${r.y} belongs to another signer`)
      bound.set(r.y!, n)
      // The content before: the parent's (in this message, or current here when it is the head).
      const sys = this.doc.sysOf(r.k)
      const headHere = sys !== undefined && !sys.deleted && sys.rev === r.p ? this.doc.content(r.k) : undefined
      // A parent in this message whose own content is unknown (it built on a head this replica has
      // moved past) leaves this one unknown too: judged without a base, never against an empty one.
      const base = (r.p !== undefined ? afterById.get(r.p) : undefined) ?? headHere
      const before = base ?? (sys?.deleted ? undefined : this.doc.content(r.k))
      const baseKnown = base !== undefined
      const after = r.c !== undefined && !baseKnown && r.f === undefined ? undefined : contentAfter(r, base)
      // The base is this replica's head while it holds more than the head's content (it merged a
      // concurrent branch since it started): a full copy's difference from it is not what its author
      // changed (a field a concurrent write added reads as removed), and a whole map the record sets
      // replaces one its writer had, not the merged one here — judged like a concurrent record
      // (honest-fuzz: a scheduler's binding "dropped" a phase a concurrent lifecycle wrote).
      const mergedHere = base !== undefined && base === headHere && this.mergedKeys.has(r.k)
      const changes = mergedHere && r.c === undefined ? undefined : changesOf(r, base, baseKnown)
      afterById.set(r.i, after)
      // Built on the object as this replica holds it: its head, while every field holds a value of
      // the head's chain (linearRev), or a record of the message that is. Where it merged concurrent writes,
      // each field may hold another branch's value, which a record built on the head can lose to in
      // Yjs (its content then arrives deleted or collected): such records are not judged so.
      const exactHead = sys !== undefined && sys.rev === r.p && this.linearRev.get(r.k) === r.p
      if (r.p === undefined ? sys === undefined : exactHead || onHead.has(r.p)) onHead.add(r.i)
      const bad2 = checkSchema(r, after)
      if (bad2 !== undefined) this.refuse('schema', `revision ${r.i}: ${bad2}`)
      if (r.o === 'create' || r.d !== undefined) {
        const at = new Date(r.t).toISOString()
        if (r.o === 'create' && !createdBy.has(r.k)) createdBy.set(r.k, { createdBy: r.a, createdAt: at })
        let set = creationsInMessage.get(r.k)
        if (!set) creationsInMessage.set(r.k, (set = new Set()))
        set.add(creationOf(r))
      }
      const creator = sys !== undefined && !sys.deleted ? sys.createdBy : (createdBy.get(r.k)?.createdBy ?? r.a)
      const concurrent = (!baseKnown || mergedHere) && before !== undefined
      let boundTo: Set<unknown> | undefined
      if (tracksBinding(r.k)) {
        boundTo = new Set([...(this.boundTo.get(r.k) ?? []), ...(msgBound.get(r.k) ?? []), ...runsOn(r.k, before)])
        // A binding is the scheduler's (checked below: only to its own node, or unchanged); a pin the user's.
        const made = r.a === SCHEDULER ? (after !== undefined ? runsOn(r.k, after) : [bindingOf(changes)]) : [pinOf(r.k, after)]
        msgBound.set(r.k, new Set([...(msgBound.get(r.k) ?? []), ...runsOn(r.k, before), ...made]))
      }
      const why = this.authorize(r, { before, after, changes, createdBy: creator, concurrent, signer, boundTo, objects })
      // Judged without the parent it builds on (gossip delivered it first): this replica lags;
      // the repair brings the parent, then the record is judged on the content it changed.
      if (why !== undefined && r.p !== undefined && !this.log.has(r.p) && !afterById.has(r.p)) {
        this.refuse('unresolved', `revision ${r.i} of ${r.k} builds on revision ${r.p}, not received yet`)
      }
      if (why !== undefined) {
        const role = why.startsWith(ROLE_DENIED)
        const lag = why.startsWith(BINDING_UNKNOWN)
        const text = role ? why.slice(ROLE_DENIED.length) : lag ? why.slice(BINDING_UNKNOWN.length) : why
        this.refuse(role ? 'role' : lag ? 'unresolved' : 'unauthorized', `revision ${r.i} by ${r.a} (signed by ${signer.node ?? n}): ${text}`)
      }
      const kind = refOfKey(r.k).kind
      if (evidence !== undefined) {
        if (kind === 'Cluster') policy = undefined
        if (r.u !== undefined) {
          const bad = this.evidenceRefused(r, r.u, after, evidence, objects, msgKeys, msgUses)
          if (bad !== undefined) this.refuse(bad[0], `revision ${r.i} of ${r.k} by ${r.a} (signed by ${signer.node ?? n}): ${bad[1]}`)
          msgUses.set(replayKey(r.u, r.k), r.i)
        } else if (r.a.startsWith('user:')) {
          policy ??= { v: this.signaturePolicy(objects) }
          const id = parseRevisionId(r.i)
          const latest = id === undefined ? undefined : (msgTimes.get(id.replica) ?? this.replicaTimes.get(id.replica))
          const parentT = r.p === undefined ? undefined : (timeById.get(r.p) ?? (sys?.rev === r.p ? Date.parse(sys.updatedAt) : undefined))
          const no = unsignedRefused(r, signer.node, policy.v) ?? backdatedUnsigned(r, id?.seq ?? 0, latest, parentT, policy.v)
          if (no !== undefined) this.refuse('user_unsigned', `revision ${r.i} of ${r.k}: ${no}`)
        }
      }
      this.noteReplicaTime(r, msgTimes)
      timeById.set(r.i, r.t)
      let mine = written.get(kind)
      if (mine === undefined) written.set(kind, (mine = new Map()))
      mine.set(r.k, r.o === 'delete' ? null : (after ?? null))
      let l = msgCovers.get(r.y!)
      if (!l) msgCovers.set(r.y!, (l = []))
      l.push({ yc: r.yc!, k: r.k, r })
    }
    if (yUpdate.byteLength === 0) return msgBound
    let seen: ReturnType<ObjectDocument['inspectUpdate']>
    try {
      seen = this.doc.inspectUpdate(yUpdate)
    } catch (err) {
      this.refuse('malformed', `Yjs update: ${(err as Error).message}`)
    }
    for (const l of msgCovers.values()) l.sort((a, b) => a.yc - b.yc)
    const creatorOf = (k: string): { createdBy: string; createdAt: string; uid?: string } | undefined => {
      const sys = this.doc.sysOf(k)
      return sys !== undefined && !sys.deleted ? sys : createdBy.get(k)
    }
    const previousMissing = (r: RevisionRecord): boolean => {
      const p = parseRevisionId(r.i)
      if (p === undefined || p.seq <= 1) return false
      const prev = `${p.replica}.${p.seq - 1}`
      return !this.log.has(prev) && !afterById.has(prev)
    }
    // The records a deletion (or content already gone) may come from: this message's and those
    // received without their content yet, by key; the deletions they signed (`e`), by client.
    let byKey: Map<string, RevisionRecord[]> | undefined
    const signedDeletions = new Map<number, Array<[number, number]>>()
    const sources = (): Map<string, RevisionRecord[]> => {
      if (byKey !== undefined) return byKey
      const keys = new Map<string, RevisionRecord[]>()
      const add = (r: RevisionRecord) => {
        let l = keys.get(r.k)
        if (!l) keys.set(r.k, (l = []))
        l.push(r)
        for (const [client, clock, len] of r.e ?? []) {
          let d = signedDeletions.get(client)
          if (!d) signedDeletions.set(client, (d = []))
          d.push([clock, clock + len])
        }
      }
      for (const l of this.covers.values()) for (const c of l) add(c.r)
      for (const r of fresh) add(r)
      for (const [client, d] of signedDeletions) signedDeletions.set(client, mergeRanges(d))
      byKey = keys
      return keys
    }
    const recordsOf = (k: string): readonly RevisionRecord[] => sources().get(k) ?? []
    /** The revisions `r` builds on (its parent chain among the records known here), once per record. */
    const ancestors = new Map<RevisionRecord, Set<string>>()
    const ancestorOf = (a: RevisionRecord, r: RevisionRecord): boolean => {
      let set = ancestors.get(r)
      if (set === undefined) {
        const byId = new Map(recordsOf(r.k).map((x) => [x.i, x]))
        set = new Set()
        for (let p = r.p; p !== undefined && !set.has(p) && set.size < 100_000; p = byId.get(p)?.p) set.add(p)
        ancestors.set(r, set)
      }
      return set.has(a.i)
    }
    /** Whether a record of the message (or one received without its content) signed the deletion of this struct. */
    const signedDeletion = (client: number, clock: number, to = clock + 1): boolean => {
      sources()
      const l = signedDeletions.get(client)
      return l !== undefined && rangesCover(l, clock, to)
    }
    const decoded = new Map<RevisionRecord, Change[] | undefined>()
    const changesOfRecord = (r: RevisionRecord): Change[] | undefined => {
      if (r.c === undefined) return undefined
      let c = decoded.get(r)
      if (c === undefined) decoded.set(r, (c = decodeChanges(r.c)))
      return c
    }
    /**
     * Whether the struct at `path` of `key` may be deleted by a record signed before records signed
     * their deletions (no `e`): one that changes that field (trust.ts deletesField).
     */
    const legacyDeletes = (key: string, path: readonly string[], map: boolean | undefined, value: (() => unknown) | undefined, except?: RevisionRecord) =>
      recordsOf(key).some((r) => r !== except && r.e === undefined && deletesField(r, changesOfRecord(r), path, map, value))
    // Records whose Yjs content this message brings: their signed deletions must come with it.
    const arriving = new Set<RevisionRecord>()
    // Where the message's structs land, by key, and whose they are (Yjs itself deletes what one
    // replaces there: the loser of concurrent writes of one field, which no record signed — also
    // when the winner arrives deleted by a later write); and its structs of records built on this
    // replica's head that arrive deleted.
    const landing = new Map<string, Array<{ path: string[]; r: RevisionRecord }>>()
    const goneOnArrival: Array<{ client: number; clock: number; key: string; path: string[]; r: RevisionRecord; origin: string | null }> = []
    // Each map entry of the message by its last id, to its left origin: a chain of values of one
    // field followed back to where it joins this replica's document.
    const originOf = new Map<string, string | null>()
    for (const st of seen.structs) if (st.origin !== undefined) originOf.set(`${st.client}:${st.to - 1}`, st.origin)
    /** Whether a struct with this left origin would be the newest value of the field here: nothing this replica holds can win over it. */
    const landsLast = (origin: string | null, key: string, path: readonly string[]): boolean => {
      let o = origin
      for (let n = 0; o !== null && originOf.has(o) && n < 100_000; n++) o = originOf.get(o)!
      return (o ?? undefined) === this.doc.lastEntryAt(key, path)
    }
    /** A struct of the message lands at `path` (or a map holding it), from a write other than `of` and those it builds on. */
    const replacedHere = (key: string, path: readonly string[], of?: RevisionRecord) =>
      landing
        .get(key)
        ?.some(
          (l) => l.path.length <= path.length && l.path.every((seg, i) => seg === path[i]) && (of === undefined || (l.r !== of && !ancestorOf(l.r, of))),
        ) === true
    type Cover = { yc: number; k: string; r: RevisionRecord }
    // Both lists are sorted by yc: the first cover ending above `clock` in each, by binary search
    // (a scan from the start made a join's 10k-record sync quadratic).
    const firstAbove = (l: readonly Cover[] | undefined, clock: number): Cover | undefined => {
      if (l === undefined) return undefined
      let lo = 0
      let hi = l.length
      while (lo < hi) {
        const mid = (lo + hi) >>> 1
        if (l[mid]!.yc > clock) hi = mid
        else lo = mid + 1
      }
      return l[lo]
    }
    const coverOf = (client: number, clock: number): Cover | undefined => {
      const a = firstAbove(this.covers.get(client), clock)
      const b = firstAbove(msgCovers.get(client), clock)
      return a === undefined ? b : b === undefined || a.yc <= b.yc ? a : b
    }
    for (const st of seen.structs) {
      if (st.loc === null) this.refuse('unresolved', `Yjs content of client ${st.client} builds on content not received yet (${st.waitsFor ?? 'unknown'})`)
      if (st.loc === 'outside') this.refuse('unbound', `Yjs content of client ${st.client} outside the objects map`)
      // Every struct of a write lies below the clock its record ends at: check each record's range.
      let clock = st.from
      while (clock < st.to) {
        const c = coverOf(st.client, clock)
        if (c === undefined) this.refuse('unbound', `Yjs content of client ${st.client} at clock ${clock} is covered by no signed revision`)
        arriving.add(c.r)
        // Content Yjs will discard (it builds on garbage-collected content) still needs its record;
        // it is honest only where a concurrent write this replica holds removed the map it went to. A
        // record built on this replica's head had every struct it builds on here, live: such content
        // of it is a forged place (a relaying member would make the write vanish here).
        if (st.intoDeleted && st.content !== 'none')
          this.refuse('unbound', `Yjs content of revision ${c.r.i} of ${c.k} lands in a map the same message deletes`)
        if (st.loc === 'collected' && onHead.has(c.r.i))
          this.refuse('unbound', `Yjs content of revision ${c.r.i} of ${c.k} builds on content gone here, though the revision builds on this replica's head`)
        // A GC range (content gone, no place) in the range of such a record: its content was deleted
        // by a record that signed it, or (pruned history, a concurrent loser) goes with another
        // write of the object in the message that is not one the record builds on: a later one, or a
        // concurrent branch whose create, delete or replaced map Yjs lets win, whatever its number
        // (test/unit/store/honest-fuzz.test.ts). Alone, it is the record's content withheld.
        if (st.loc === undefined && onHead.has(c.r.i)) {
          const to = Math.min(st.to, c.yc)
          const own = c.r
          if (!signedDeletion(st.client, clock, to) && !recordsOf(c.k).some((r) => r !== own && !ancestorOf(r, own)))
            this.refuse('unbound', `Yjs content of revision ${c.r.i} of ${c.k} arrives garbage-collected, and no other revision of it deletes it`)
        }
        if (st.loc !== undefined && st.loc !== 'collected') {
          // The writer's previous record not here yet: its range (which starts where that one ended) is
          // not known, and the content may be the missing record's — this replica lags.
          const unbound = (why: string) => this.refuse(previousMissing(c.r) ? 'unresolved' : 'unbound', why)
          if (c.k !== st.loc.key) unbound(`Yjs content of client ${st.client} touches ${st.loc.key}; its revision is about ${c.k}`)
          if (st.content !== 'none' && st.to > c.yc) unbound(`Yjs content of client ${st.client} spans two revisions`)
          // A struct whose content is gone (a sync's overwritten entry) stands for a deletion. Of a
          // record built on this replica's head, only another record of the message (or one received
          // without its content) replacing that field deletes it: a relaying member could otherwise
          // send a record's content as deleted. (A record concurrent with what is here may have lost
          // to a write this replica holds: not judged.)
          if (st.content === 'none' && onHead.has(c.r.i) && st.origin !== undefined)
            goneOnArrival.push({ client: st.client, clock, key: c.k, path: st.loc.path, r: c.r, origin: st.origin })
          let l = landing.get(c.k)
          if (!l) landing.set(c.k, (l = []))
          l.push({ path: st.loc.path, r: c.r })
          const bad = structMatches(c.r, st.loc.path, st.content, st.values, creatorOf(c.k), (by, at, uid) =>
            this.isKnownCreation(c.k, by, at, uid, creationsInMessage),
          )
          if (bad === UNKNOWN_CREATION) this.refuse('unresolved', `Yjs content of ${c.k}: revision ${c.r.i} ${bad}`)
          if (bad !== undefined) unbound(`Yjs content of ${c.k} at ${st.loc.path.join('.') || '(root)'} does not match revision ${c.r.i}: ${bad}`)
        }
        clock = c.yc
      }
    }
    // Deletions are bound to the records that made them: each one signed (`e`) by a record of the
    // message (or one received without its content yet), or Yjs's own replacement of a value by the
    // message's content; records from before `e`, per field (trust.ts deletesField). Never of content
    // the message itself brings, nor of content not here yet (Yjs would apply it when that comes).
    if (seen.deletesOwn !== undefined) this.refuse('unbound', `Yjs deletion of content the message itself brings (${seen.deletesOwn})`)
    if (seen.deletesUnknown !== undefined) this.refuse('unresolved', `Yjs deletion of content not received yet (${seen.deletesUnknown})`)
    // A map this replica holds that the message deletes (itself judged below) takes what is in it.
    const deletedMaps = seen.deleted.filter((d) => d.map && d.loc !== null && d.loc !== 'outside')
    const inDeletedMap = (key: string, path: readonly string[]) =>
      deletedMaps.some((d) => {
        const at = d.loc as { key: string; path: string[] }
        return at.key === key && at.path.length < path.length && at.path.every((seg, i) => seg === path[i])
      })
    // Judged only where it lands last here (after the newest value this replica holds for the
    // field): otherwise a value this replica holds, of a concurrent write, may have won over it.
    for (const g of goneOnArrival)
      if (
        landsLast(g.origin, g.key, g.path) &&
        !inDeletedMap(g.key, g.path) &&
        !signedDeletion(g.client, g.clock) &&
        !replacedHere(g.key, g.path, g.r) &&
        !legacyDeletes(g.key, g.path, undefined, undefined, g.r)
      )
        this.refuse(
          'unbound',
          `Yjs content of ${g.key} at ${g.path.join('.') || '(root)'} of revision ${g.r.i} arrives deleted, and no other revision deletes it`,
        )
    for (const d of seen.deleted) {
      if (d.loc === null || d.loc === 'outside') this.refuse('unbound', 'Yjs deletion of content outside the objects')
      if (signedDeletion(d.client, d.clock)) continue
      const { key, path } = d.loc
      if (!replacedHere(key, path) && !inDeletedMap(key, path) && !legacyDeletes(key, path, d.map, d.value))
        this.refuse('unbound', `Yjs deletion of ${key} at ${path.join('.') || '(root)'} is not one a revision of the message signed`)
    }
    // And none of them left out (a relaying member could otherwise deliver a write without what it deletes).
    for (const r of arriving)
      for (const [client, clock, len] of r.e ?? [])
        if (!seen.deletes(client, clock, len)) this.refuse('unbound', `revision ${r.i} of ${r.k} comes without the Yjs deletions it signed`)
    return msgBound
  }

  /**
   * Why a record's user evidence is refused (reason, detail), or undefined: the user's signature, the
   * key being the user's at the request's time, the request asking for this record, no other
   * record backed by the same request for the same object (src/store/evidence.ts).
   */
  private evidenceRefused(
    r: RevisionRecord,
    u: SignedRequest,
    after: Record<string, unknown> | undefined,
    evidence: NonNullable<StoreOptions['userEvidence']>,
    objects: ObjectsView,
    msgKeys: UserKeyHistory,
    msgUses: ReadonlyMap<string, string>,
  ): [RefusalReason, string] | undefined {
    if (!r.a.startsWith('user:')) return ['user_signature', `a user's signed request on a record by ${r.a}`]
    // Only the node the user called may write what the user asked it (others see the request in its records).
    if (u.peer !== r.n) return ['user_signature', `the user signed the request for node ${u.peer}, not for the record's signer`]
    const user = r.a.slice(5)
    if (!evidence.verify(u)) return ['user_signature', `the signature of ${r.a} on its request does not verify`]
    let valid = this.userKeys.validAt(user, u.key, u.at, evidence.bootstrapKeys?.(user, objects) ?? [], msgKeys)
    // Another user's key is no lag.
    if (valid === 'unknown' && (this.userKeys.known(u.key) || msgKeys.known(u.key) || (evidence.bootstrapKeys?.(ADMIN_USER, objects) ?? []).includes(u.key)))
      valid = 'invalid'
    // A key this replica has not seen given to the user: a User revision may not have arrived yet.
    if (valid === 'unknown') return ['unresolved', `the request is signed with a key this replica does not know as ${r.a}'s`]
    if (valid === 'invalid') return ['user_signature', `the request is signed with a key that was not ${r.a}'s at ${new Date(u.at).toISOString()}`]
    // A compacted record's content is gone: the request and object are still compared.
    const why = evidenceMismatch(r, u, r.x === 1 ? (r.f ?? undefined) : after, this.ownership)
    if (why !== undefined && !(r.x === 1 && why === 'the record’s content is not known here'))
      return ['user_signature', `the signed request does not ask for it: ${why}`]
    const rk = replayKey(u, r.k)
    const used = msgUses.get(rk) ?? this.evidenceUses.get(rk)
    if (used !== undefined && used !== r.i) return ['user_signature', `the signed request backs revision ${used} of it already (a replay)`]
    return undefined
  }

  onLocalUpdate(fn: (update: Uint8Array) => void): () => void {
    this.updateListeners.add(fn)
    return () => this.updateListeners.delete(fn)
  }

  onChange(fn: (keys: string[]) => void): () => void {
    this.changeListeners.add(fn)
    return () => this.changeListeners.delete(fn)
  }

  /**
   * Objects a remote update changed, as soon as it is merged in memory: readable here from then on
   * (`get`, `list`), before this node's own synced write completes (`onChange` follows that).
   */
  onRemoteMerged(fn: (keys: string[]) => void): () => void {
    this.mergeListeners.add(fn)
    return () => this.mergeListeners.delete(fn)
  }

  /** Every revision of every object, in a total order all converged replicas share. For tests and `orc events`. */
  async allRevisions(): Promise<Revision[]> {
    return (await this.log.all()).map((r) => toRevision(r, r.s))
  }

  /**
   * A canonical JSON of the whole current state, for convergence checks: keys sorted at every
   * level (Y.Map iteration order depends on the order a replica integrated updates).
   */
  stateDigest(): string {
    return this.doc.stateDigest()
  }
}

export { checkRecord }
