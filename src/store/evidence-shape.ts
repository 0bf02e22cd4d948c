/**
 * The shape of a user's evidence (`u` of a revision record, src/store/evidence.ts) and the hash the
 * node's signature covers: apart from evidence.ts so that the record codec and the signing code use
 * them without importing the checks (which import both).
 */
import { createHash } from 'node:crypto'
import { type SignedRequest, signedRequestProblem } from '../model/index.ts'

/** Requests whose body is larger than this carry no evidence (each record of the batch would copy it). */
export const MAX_EVIDENCE_BODY_BYTES = 64 * 1024

/** A record's `u` from an untrusted source: an error text, or undefined. */
export function checkEvidenceShape(u: unknown): string | undefined {
  const problem = signedRequestProblem(u)
  if (problem !== undefined) return problem === 'malformed' ? 'user evidence malformed' : `user evidence: ${problem}`
  // Writers attach no larger request (MAX_EVIDENCE_BODY_BYTES): a larger one is no honest writer's.
  if (JSON.stringify((u as SignedRequest).body ?? null).length > MAX_EVIDENCE_BODY_BYTES) return 'user evidence: body too large'
  return undefined
}

/** What the node's signature covers of a record's evidence (signedBytes): a hash of its canonical JSON. */
export function evidenceHash(u: SignedRequest): string {
  const canonical = JSON.stringify([u.method, u.path, u.query, u.body ?? null, u.nonce, u.peer, u.at, u.key, u.sig])
  return createHash('sha256').update(canonical).digest('base64url')
}
