/**
 * The shape of a user's evidence (`u` of a revision record, src/store/evidence.ts) and the hash the
 * node's signature covers: apart from evidence.ts so that the record codec and the signing code use
 * them without importing the checks (which import both).
 */
import { createHash } from 'node:crypto'
import { isPlainObject, type SignedRequest } from '../model/index.ts'

/** Requests whose body is larger than this carry no evidence (each record of the batch would copy it). */
export const MAX_EVIDENCE_BODY_BYTES = 64 * 1024

const SHAPE: Record<keyof SignedRequest, string> = {
  method: 'string',
  path: 'string',
  query: 'object',
  body: 'any',
  nonce: 'string',
  peer: 'string',
  at: 'number',
  key: 'string',
  sig: 'string',
}

/** A record's `u` from an untrusted source: an error text, or undefined. */
export function checkEvidenceShape(u: unknown): string | undefined {
  if (!isPlainObject(u)) return 'user evidence malformed'
  for (const k of Object.keys(u)) if (!(k in SHAPE)) return `user evidence: unknown field ${k}`
  for (const [k, t] of Object.entries(SHAPE)) {
    const v = u[k]
    if (t === 'any') continue
    if (t === 'object' ? !isPlainObject(v) || !Object.values(v).every((q) => typeof q === 'string') : typeof v !== t) return `user evidence: ${k} malformed`
  }
  if ((u.method as string).length > 16 || (u.path as string).length > 4096 || (u.nonce as string).length > 64 || (u.peer as string).length > 128) {
    return 'user evidence malformed'
  }
  if ((u.key as string).length > 512 || (u.sig as string).length > 200 || !Number.isSafeInteger(u.at)) return 'user evidence malformed'
  // Writers attach no larger request (MAX_EVIDENCE_BODY_BYTES): a larger one is no honest writer's.
  if (JSON.stringify(u.body ?? null).length > MAX_EVIDENCE_BODY_BYTES) return 'user evidence: body too large'
  return undefined
}

/** What the node's signature covers of a record's evidence (signedBytes): a hash of its canonical JSON. */
export function evidenceHash(u: SignedRequest): string {
  const canonical = JSON.stringify([u.method, u.path, u.query, u.body ?? null, u.nonce, u.peer, u.at, u.key, u.sig])
  return createHash('sha256').update(canonical).digest('base64url')
}
