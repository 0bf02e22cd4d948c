import * as decoding from 'lib0/decoding'
import * as encoding from 'lib0/encoding'
import * as Y from 'yjs'
import { type Change, isPlainObject, OrcError, type SignedRequest } from '../model/index.ts'
import { checkEvidenceShape } from './evidence-shape.ts'
import type { RevisionOp } from './types.ts'

/**
 * Revision records as stored on disk and sent to peers: compact JSON. A change is
 * `["s", path, value]` (set) or `["u", path]` (unset).
 */
export interface RevisionRecord {
  i: string // id `<replica>.<seq>`
  k: string // object key
  s: number // per-object sequence (display number)
  o: RevisionOp
  a: string // author
  r: string // reason
  t: number // time, ms
  p?: string // parent revision id (the head its writer saw)
  c?: EncodedChange[] // changes relative to parent content
  f?: Record<string, unknown> // full content after this revision (periodic, or when parent is unknown/merged)
  rt?: string // rollback: restored revision id
  rf?: string // rollback: head it rolled back from
  x?: 1 // content folded away by compaction
  // Signed records (a store with a signer; src/store/trust.ts):
  n?: string // signer: the writing node's peer id
  y?: number // Yjs clientID of the writing document
  yc?: number // that client's Yjs clock after the write: the record covers its structs below it
  h?: string // hash of the content as written (c, else f): compaction keeps it verifiable
  g?: string // Ed25519 signature (base64) over the header and h
  u?: SignedRequest // the user's signed request that asked for this write (src/store/evidence.ts)
  d?: string // signed records that make a new object (create, a deleted one's rollback): its uid
  e?: Array<[number, number, number]> // signed records: the Yjs structs the write deleted, [client, clock, length] ranges
}

export type EncodedChange = ['s', string[], unknown] | ['u', string[]]

export function encodeChanges(changes: readonly Change[]): EncodedChange[] {
  return changes.map((c) => (c.op === 'set' ? ['s', c.path, c.value] : ['u', c.path]))
}

export function decodeChanges(enc: readonly EncodedChange[]): Change[] {
  return enc.map((c) => (c[0] === 's' ? { op: 'set', path: c[1], value: c[2] } : { op: 'unset', path: c[1], old: undefined }))
}

const REPLICA = /^[0-9a-f]{16}$/
const REV_ID = /^([0-9a-f]{16})\.([1-9][0-9]{0,14})$/
const AUTHOR = /^(user|controller):[A-Za-z0-9][-A-Za-z0-9_.@]{0,127}$/
const OPS: readonly RevisionOp[] = ['create', 'update', 'delete', 'rollback']

export function parseRevisionId(id: string): { replica: string; seq: number } | undefined {
  const m = REV_ID.exec(id)
  return m ? { replica: m[1]!, seq: Number(m[2]) } : undefined
}

export function isValidAuthor(a: string): boolean {
  return AUTHOR.test(a)
}

export function isValidReplica(r: string): boolean {
  return REPLICA.test(r)
}

/** Validate a revision record from an untrusted source. Returns an error text, or undefined. */
export function checkRecord(r: unknown): string | undefined {
  if (!isPlainObject(r)) return 'revision is not an object'
  if (typeof r.i !== 'string' || !REV_ID.test(r.i)) return 'revision id malformed'
  if (typeof r.k !== 'string' || r.k.length > 600 || !/^[A-Z][A-Za-z]*\/[a-z0-9-]*\/[a-z0-9][-a-z0-9]*$/.test(r.k)) return 'object key malformed'
  if (typeof r.s !== 'number' || !Number.isSafeInteger(r.s) || r.s < 1) return 'sequence malformed'
  if (!OPS.includes(r.o as RevisionOp)) return 'op malformed'
  if (typeof r.a !== 'string' || !AUTHOR.test(r.a)) return 'author malformed'
  if (typeof r.r !== 'string' || r.r.length > 1024) return 'reason malformed'
  if (typeof r.t !== 'number' || !Number.isFinite(r.t)) return 'time malformed'
  for (const f of ['p', 'rt', 'rf'] as const) {
    if (r[f] !== undefined && (typeof r[f] !== 'string' || !REV_ID.test(r[f] as string))) return `${f} malformed`
  }
  if (r.c !== undefined) {
    if (!Array.isArray(r.c) || r.c.length > 10000) return 'changes malformed'
    for (const c of r.c) {
      if (!Array.isArray(c) || (c[0] !== 's' && c[0] !== 'u') || !Array.isArray(c[1]) || c[1].some((s: unknown) => typeof s !== 'string')) {
        return 'change malformed'
      }
      if ((c[0] === 's' && c.length !== 3) || (c[0] === 'u' && c.length !== 2)) return 'change malformed'
    }
  }
  if (r.f !== undefined && !isPlainObject(r.f)) return 'full content malformed'
  if (r.x !== undefined && r.x !== 1) return 'compaction flag malformed'
  if (r.n !== undefined && (typeof r.n !== 'string' || r.n.length > 128)) return 'signer malformed'
  for (const f of ['y', 'yc'] as const) {
    if (r[f] !== undefined && (typeof r[f] !== 'number' || !Number.isSafeInteger(r[f]) || (r[f] as number) < 0)) return `${f} malformed`
  }
  if (r.h !== undefined && (typeof r.h !== 'string' || r.h.length > 64)) return 'content hash malformed'
  if (r.g !== undefined && (typeof r.g !== 'string' || r.g.length > 200)) return 'signature malformed'
  if (r.d !== undefined && (typeof r.d !== 'string' || !/^[0-9a-f]{32}$/.test(r.d))) return 'uid malformed'
  if (r.e !== undefined) {
    const n = (v: unknown, min: number) => typeof v === 'number' && Number.isSafeInteger(v) && v >= min
    if (!Array.isArray(r.e) || r.e.length > 100000) return 'deletions malformed'
    for (const d of r.e) if (!Array.isArray(d) || d.length !== 3 || !n(d[0], 0) || !n(d[1], 0) || !n(d[2], 1)) return 'deletion malformed'
  }
  if (r.u !== undefined) {
    const bad = checkEvidenceShape(r.u)
    if (bad !== undefined) return bad
  }
  const allowed = new Set(['i', 'k', 's', 'o', 'a', 'r', 't', 'p', 'c', 'f', 'rt', 'rf', 'x', 'n', 'y', 'yc', 'h', 'g', 'u', 'd', 'e'])
  for (const key of Object.keys(r)) if (!allowed.has(key)) return `unknown field ${key}`
  return undefined
}

/** Largest replication message the store accepts from a peer. */
export const MAX_REMOTE_UPDATE_BYTES = 64 * 1024 * 1024

const WIRE_VERSION = 1
const T_UPDATE = 1
const T_SYNC_STATE = 2

/** Replication message: a Yjs update plus the revision records it carries. */
export function encodeUpdateMessage(yUpdate: Uint8Array, records: readonly RevisionRecord[] | string): Uint8Array {
  const e = encoding.createEncoder()
  encoding.writeVarUint(e, WIRE_VERSION)
  encoding.writeVarUint(e, T_UPDATE)
  encoding.writeVarUint8Array(e, yUpdate)
  encoding.writeVarString(e, typeof records === 'string' ? records : JSON.stringify(records))
  return encoding.toUint8Array(e)
}

export function decodeUpdateMessage(msg: Uint8Array): { yUpdate: Uint8Array; records: RevisionRecord[] } {
  if (!(msg instanceof Uint8Array)) throw new OrcError('invalid', 'replication message: not bytes')
  if (msg.byteLength > MAX_REMOTE_UPDATE_BYTES) {
    throw new OrcError('too_large', `replication message: ${msg.byteLength} bytes exceeds ${MAX_REMOTE_UPDATE_BYTES}`)
  }
  let yUpdate: Uint8Array
  let recordsJson: string
  try {
    const d = decoding.createDecoder(msg)
    const v = decoding.readVarUint(d)
    if (v !== WIRE_VERSION) throw new Error(`unsupported version ${v}`)
    const t = decoding.readVarUint(d)
    if (t !== T_UPDATE) throw new Error(`unexpected message type ${t}`)
    yUpdate = decoding.readVarUint8Array(d)
    recordsJson = decoding.readVarString(d)
    if (decoding.hasContent(d)) throw new Error('trailing bytes')
  } catch (err) {
    throw new OrcError('invalid', `replication message: ${(err as Error).message}`)
  }
  let records: unknown
  try {
    records = JSON.parse(recordsJson)
  } catch {
    throw new OrcError('invalid', 'replication message: revision list is not JSON')
  }
  if (!Array.isArray(records)) throw new OrcError('invalid', 'replication message: revision list is not a list')
  for (const r of records) {
    const bad = checkRecord(r)
    if (bad) throw new OrcError('invalid', `replication message: ${bad}`)
  }
  if (yUpdate.byteLength > 0) {
    try {
      // Decoding fully checks the structure before anything touches the live document.
      Y.decodeUpdate(yUpdate)
    } catch (err) {
      throw new OrcError('invalid', `replication message: Yjs update does not decode: ${(err as Error).message}`)
    }
  }
  return { yUpdate, records: records as RevisionRecord[] }
}

/** What a store has: Yjs state vector + per-replica revision log positions. */
export interface LogVector {
  [replica: string]: { upTo: number; extra?: number[] }
}

export function encodeSyncState(yStateVector: Uint8Array, log: LogVector): Uint8Array {
  const e = encoding.createEncoder()
  encoding.writeVarUint(e, WIRE_VERSION)
  encoding.writeVarUint(e, T_SYNC_STATE)
  encoding.writeVarUint8Array(e, yStateVector)
  encoding.writeVarString(e, JSON.stringify(log))
  return encoding.toUint8Array(e)
}

export function decodeSyncState(msg: Uint8Array): { sv: Uint8Array; log: LogVector } {
  try {
    if (msg.byteLength > 16 * 1024 * 1024) throw new Error('too large')
    const d = decoding.createDecoder(msg)
    if (decoding.readVarUint(d) !== WIRE_VERSION) throw new Error('unsupported version')
    if (decoding.readVarUint(d) !== T_SYNC_STATE) throw new Error('unexpected message type')
    const sv = decoding.readVarUint8Array(d)
    const log = JSON.parse(decoding.readVarString(d)) as unknown
    if (!isPlainObject(log)) throw new Error('log vector is not an object')
    for (const [k, v] of Object.entries(log)) {
      if (!REPLICA.test(k) || !isPlainObject(v) || !Number.isSafeInteger(v.upTo) || (v.upTo as number) < 0) {
        throw new Error('log vector malformed')
      }
      if (v.extra !== undefined && (!Array.isArray(v.extra) || v.extra.some((n) => !Number.isSafeInteger(n)))) {
        throw new Error('log vector malformed')
      }
    }
    Y.decodeStateVector(sv)
    return { sv, log: log as LogVector }
  } catch (err) {
    throw new OrcError('invalid', `sync state: ${(err as Error).message}`)
  }
}
