import type { Change, KindArg, ObjectMeta, ObjectOf, ObjectRef, OrcObject, SignedRequest } from '../model/index.ts'

/** `user:<name>` or `controller:<name>`. */
export type Author = string

/** `rollback`: the revision to restore, and how the caller completes what it restores (a Pod's image digests). */
export type RollbackOptions = WriteOptions & {
  to?: number | string
  /** The restored content before it is checked and written (user fields only: owned fields are already the current ones). */
  rewrite?: (desired: Record<string, unknown>) => Record<string, unknown>
}

export interface WriteOptions {
  author: Author
  reason?: string
  /** Wall-clock time of the write in ms since the epoch (injected; never read inside the store). */
  now: number
  /**
   * The user's signed request that asked for this write (remote API): its records carry it when it
   * asks for exactly this write (src/store/evidence.ts), else they go without.
   */
  evidence?: SignedRequest
}

export interface StoredMeta extends ObjectMeta {
  uid: string
  /** Display number of the revision this content belongs to (per object, 1-based). */
  revision: number
  /** Stable id of that revision (unchanged by merges). */
  revisionId: string
  createdAt: string
  updatedAt: string
  updatedBy: Author
}

/** An object as the store returns it: with the metadata the store keeps. */
export type Stored<O = OrcObject> = Omit<O, 'metadata'> & { metadata: StoredMeta }
export type StoredObject = Stored<OrcObject>
/** A stored object of kind K (`StoredOf<'Pod'>`). */
export type StoredOf<K extends string> = Stored<ObjectOf<K>>

export type RevisionOp = 'create' | 'update' | 'delete' | 'rollback'

export interface Revision {
  /** Stable id: `<replica>.<seq>`; never changes, also after merges. */
  id: string
  key: string
  ref: ObjectRef
  /** Per-object display number (1-based) in the history order. */
  number: number
  op: RevisionOp
  author: Author
  reason: string
  /** ms since epoch, as given by the writer. */
  time: number
  /** For rollbacks: the revision id whose content was restored, and the one it rolled back from. */
  rollbackTo?: string
  rollbackFrom?: string
  /** The changes this revision made to the object as its writer saw it. */
  changes?: Change[]
  /** True when the content of this revision was folded away by compaction (metadata stays). */
  compacted: boolean
  /**
   * The author's own signature backs it: the user's signed request (key, the client's time, the node
   * that took it), checked on receipt by every replica (docs/security.md). Absent: the writing node vouches alone.
   */
  userSigned?: { key: string; at: number; node: string }
}

export interface HistoryQuery {
  /** Keep only revisions whose author matches one of these (exact, or a prefix ending in `:` like `controller:`). */
  authors?: string[]
  /** Drop revisions whose author matches one of these. */
  excludeAuthors?: string[]
  since?: number
  until?: number
}

export interface WriteResult {
  object: StoredObject | undefined
  /** null when the write changed nothing (no revision is recorded for a no-op apply). */
  revision: Revision | null
}

/** What an apply would write (Store.planApply). */
export interface ApplyPlan {
  key: string
  op: 'create' | 'update'
  changes: Change[]
  desired: Record<string, unknown>
}

export interface FieldSet {
  path: string[]
  /** undefined removes the field. */
  value: unknown
}

/** What the mesh uses: opaque, versioned byte strings. */
export interface ApplyRemoteOptions {
  onApplied?: () => void
}

/** What a peer's update did to the store. */
export interface RemoteApplied {
  /** Revision records it added. */
  revisions: number
  /**
   * Part of what this store holds waits for updates it has not received (an author's earlier ones,
   * published before any peer listened, or lost): it becomes visible once they arrive. The mesh
   * then fetches them by anti-entropy instead of waiting for the next period.
   */
  incomplete?: boolean
}

export interface Replicable {
  /** Compact summary of what this store has (Yjs state vector + revision log vector). */
  encodeSyncState(): Uint8Array
  /** Everything this store has that a peer with `remoteState` lacks. */
  encodeMissing(remoteState: Uint8Array): Promise<Uint8Array>
  /**
   * Validate, persist and merge an update from a peer. Throws OrcError('invalid') on garbage.
   * `onApplied` is called once the update has passed every check and is merged in memory, before
   * it is durable: gossip forwards it from then on (the fsync is not paid again at every hop).
   */
  applyRemote(update: Uint8Array, opts?: ApplyRemoteOptions): Promise<RemoteApplied>
  /** Called with each local change's update, after it is durable, for gossip. Returns unsubscribe. */
  onLocalUpdate(fn: (update: Uint8Array) => void): () => void
}

export interface ObjectStore extends Replicable {
  /** User apply: create or replace the user-owned fields; controller-owned fields are kept. */
  apply(manifest: OrcObject, opts: WriteOptions): Promise<WriteResult>
  /** Dry run of apply: validation and ownership checks, no write. null when nothing would change. */
  planApply(manifest: OrcObject, opts: WriteOptions): ApplyPlan | null
  /** Controller write: set or remove fields; every field touched must be owned by the author. */
  patch(ref: ObjectRef, fields: FieldSet[], opts: WriteOptions): Promise<WriteResult>
  delete(ref: ObjectRef, opts: WriteOptions): Promise<Revision>
  /** Typed by the ref's kind: `get({ kind: 'Pod', … })` is a stored Pod. */
  get<K extends string>(ref: ObjectRef<K> & { kind: KindArg<K> }): StoredOf<K> | undefined
  /** Typed by the kind: `list('Pod')` gives stored Pods. */
  list<K extends string>(kind: K & KindArg<K>, namespace?: string): StoredOf<K>[]
  count(): number
  history(ref: ObjectRef, q?: HistoryQuery): Promise<Revision[]>
  /** The object as it was at a revision (display number or id). */
  at(ref: ObjectRef, rev: number | string): Promise<StoredObject>
  diff(ref: ObjectRef, from: number | string, to: number | string): Promise<Change[]>
  rollback(ref: ObjectRef, opts: RollbackOptions): Promise<WriteResult>
  /** Subscribe to every change (local or remote) of current objects. */
  onChange(fn: (keys: string[]) => void): () => void
  /** Objects a remote update changed, once merged in memory (readable from then on), before its synced write. */
  onRemoteMerged(fn: (keys: string[]) => void): () => void
  /** Called for each peer update refused by the checks on receipt (Store options `verifier`); nothing of it was merged. */
  onRefused(fn: (reason: string, detail: string) => void): () => void
  /** Enable tombstone pruning: see Store.setStability and docs/architecture.md. */
  setStability(fn: (() => Uint8Array[] | null) | undefined): void
  /** Prune stable tombstones (see Store.pruneTombstones). */
  pruneTombstones(reports?: readonly Uint8Array[]): { pruned: number; skipped?: string }
  /** This replica's durable sync state, for other replicas' pruning; null while unknown. */
  encodeStabilityReport(): Uint8Array | null
  /** Size of the in-memory document (structs held), for metrics and tests. */
  docStats(): { structs: number }
  close(): Promise<void>
}
