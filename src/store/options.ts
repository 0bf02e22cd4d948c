import type { AbstractLevel } from 'abstract-level'
import type { OwnershipTable } from '../model/index.ts'
import type { UserEvidenceOptions } from './evidence.ts'
import type { Authorize, RecordSigner, RecordVerifier, UserMay } from './trust.ts'

export interface CompactionPolicy {
  /** Keep the full contents of at least this many most recent revisions per object. */
  keepRevisions: number
  /** Also keep contents of revisions newer than this (ms). */
  keepNewerThanMs: number
}

export interface StoreOptions {
  /** Directory of the LevelDB database (created if absent). */
  dir: string
  /**
   * A database to use instead of opening LevelDB at `dir` (an abstract-level database such as
   * memory-level: the simulator runs thousands of stores in one process). `dir` then only names it.
   */
  db?: AbstractLevel<any, string, Uint8Array>
  /** Field-ownership table; defaults to the model's table. */
  ownership?: OwnershipTable
  /**
   * This replica's id (16 hex digits) when the store is created, instead of a random one; an
   * existing store keeps the id it has. A federation document derives it from the node's peer id.
   */
  replicaId?: string
  /** Random source (injected so tests and the simulator are deterministic): returns `n` random bytes. */
  randomBytes?: (n: number) => Uint8Array
  /** Fold the Yjs update log into one snapshot after this many updates. */
  snapshotEvery?: number
  /** Store a full copy of an object's content every N revisions so reconstruction stays short. */
  fullEvery?: number
  compaction?: Partial<CompactionPolicy>
  /**
   * Enables tombstone pruning: returns the latest sync state of every other replica of this
   * document ([] when alone), or null when unknown. See Store.setStability.
   */
  stability?: () => Uint8Array[] | null
  /** Write with fsync before acknowledging (default true; benchmarks of the sync cost may turn it off). */
  sync?: boolean
  /** Signs this replica's revision records (the node key). Without it records are unsigned, as in single-node tools and unit tests. */
  signer?: RecordSigner
  /**
   * Checks every update received from a peer before anything is merged: signatures, membership,
   * schema, authorisation, and that the Yjs content is covered by the records (src/store/trust.ts).
   * Without it, updates are merged unchecked.
   */
  verifier?: RecordVerifier
  /** Authorisation of a verified record; defaults to the node rules (trust.ts defaultAuthorize). */
  authorize?: Authorize
  /** RBAC for user-authored records (default: allow). */
  userMay?: UserMay
  /**
   * Users' signatures on their writes (src/store/evidence.ts): with it (and a verifier), a record's
   * user evidence is checked on receipt, and the Cluster's `spec.userSignatures` is enforced.
   */
  userEvidence?: UserEvidenceOptions
  logger?: { info: (...a: unknown[]) => void; warn: (...a: unknown[]) => void; error: (...a: unknown[]) => void; debug: (...a: unknown[]) => void }
}

export const DEFAULT_COMPACTION: CompactionPolicy = {
  keepRevisions: 50,
  keepNewerThanMs: 30 * 24 * 3600 * 1000,
}

export const DEFAULTS = {
  snapshotEvery: 5000,
  fullEvery: 16,
}

export { MAX_REMOTE_UPDATE_BYTES } from './codec.ts'
