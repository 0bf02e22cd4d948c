/**
 * Node-to-node requests `/orc/member-api/1.0.0`: one member asks another for something only that
 * node has (the logs of a pod it runs, an exec or port-forward session into one, its `top` figures).
 * The request is `{method, path, query, body?}` like the local API's, the answer `{status, body}`.
 *
 * Authorisation is by membership, not by the admin credential: the connection is already Noise +
 * PSK + gater, and the mesh serves this protocol only to current members (removed peers are not
 * members). What a member may ask is decided by the handler the agent installs, which allows only
 * read-only internal routes — a member never gets writes or admin-only routes this way.
 *
 * The answer travels as JSON split into frames (`chunk`… then `end`), so a large log fits no matter
 * the frame limit; the total is bounded by `maxBytes` on both sides.
 */
import { type ApiResponse, OrcError, type SignedRequest, signedRequestProblem } from '../model/index.ts'
import type { FrameChannel } from './framing.ts'
import type { ApiRequest } from './rpc.ts'
import { isRecord, peerFault, readJson, remoteError, Tag, writeBytes, writeJson } from './wire.ts'

export const MEMBER_API_PROTOCOL = '/orc/member-api/1.0.0'

/** Largest answer accepted (a follow poll is small; a full log is at most the pod API's cap). */
export const MEMBER_API_MAX_BYTES = 64 * 1024 * 1024
/** Server-side bound of one request: a log long-poll waits up to 30 s. */
export const MEMBER_API_SERVE_MS = 60_000

export interface MemberApiContext {
  /** Noise-authenticated peer id of the member that sent the request. */
  peerId: string
  /**
   * The user the member forwards the request for, as that member says: a claim, not a proof, so the
   * receiving node re-checks that user's rights and still allows only the member routes.
   */
  onBehalfOf?: string
  /**
   * The user's own signed request (remote API), forwarded unchanged: the receiving node checks the
   * signature itself and runs what the user signed, so the member need not be trusted to name the user.
   */
  signed?: SignedRequest
}

export type MemberApiHandler = (req: ApiRequest, ctx: MemberApiContext) => Promise<ApiResponse>

/** A forwarded signed request's shape (its signature is the receiving agent's to check). */
function parseSigned(v: unknown): SignedRequest {
  if (signedRequestProblem(v) !== undefined) throw peerFault('member request is malformed (signed)')
  return v as SignedRequest
}

function parseMemberRequest(v: unknown): { req: ApiRequest; onBehalfOf?: string; signed?: SignedRequest } {
  if (!isRecord(v)) throw peerFault('member request is malformed')
  const { method, path, query, user, body } = v
  if (typeof method !== 'string' || method.length > 16 || typeof path !== 'string' || path.length > 4096) {
    throw peerFault('member request is malformed (method/path)')
  }
  if (query !== undefined && (!isRecord(query) || !Object.values(query).every((q) => typeof q === 'string'))) {
    throw peerFault('member request is malformed (query)')
  }
  if (user !== undefined && (typeof user !== 'string' || user.length > 128)) throw peerFault('member request is malformed (user)')
  // A body is JSON the receiving route validates (the allow-listed writes: exec and port-forward sessions).
  return {
    req: { method, path, ...(query !== undefined ? { query: query as Record<string, string> } : {}), ...(body !== undefined ? { body } : {}) },
    ...(user !== undefined ? { onBehalfOf: user } : {}),
    ...(v.signed !== undefined ? { signed: parseSigned(v.signed) } : {}),
  }
}

async function writeChunked(ch: FrameChannel, value: unknown, frameBytes: number): Promise<void> {
  const bytes = new TextEncoder().encode(JSON.stringify(value))
  const step = Math.max(1024, frameBytes - 1)
  for (let off = 0; off < bytes.length; off += step) await writeBytes(ch, Tag.chunk, bytes.subarray(off, off + step))
  await writeJson(ch, Tag.end, { bytes: bytes.length })
}

async function readChunked(ch: FrameChannel, maxBytes: number, what: string): Promise<unknown> {
  const parts: Uint8Array[] = []
  let total = 0
  for (;;) {
    const f = await ch.read()
    if (f === null) throw new OrcError('unavailable', `peer closed the stream before ${what}`)
    if (f.length === 0) throw peerFault(`peer sent an empty frame instead of ${what}`)
    if (f[0] === Tag.end) break
    if (f[0] === Tag.error) throw remoteError(f.subarray(1), what)
    if (f[0] !== Tag.chunk) throw peerFault(`peer sent frame type ${f[0]} instead of ${what}`)
    total += f.length - 1
    if (total > maxBytes) throw peerFault(`${what} is larger than ${maxBytes} bytes`)
    parts.push(f.subarray(1))
  }
  const all = new Uint8Array(total)
  let off = 0
  for (const p of parts) {
    all.set(p, off)
    off += p.length
  }
  try {
    return JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(all))
  } catch (err) {
    throw peerFault(`peer sent undecodable ${what}`, err)
  }
}

/** Server side of one member-api stream; the caller has checked the remote is a member. */
export async function serveMemberApi(ch: FrameChannel, handler: MemberApiHandler, remotePeer: string, frameBytes: number): Promise<void> {
  const { req, onBehalfOf, signed } = parseMemberRequest(await readJson(ch, Tag.json, 'member request'))
  let res: ApiResponse
  try {
    res = await handler(req, { peerId: remotePeer, ...(onBehalfOf !== undefined ? { onBehalfOf } : {}), ...(signed !== undefined ? { signed } : {}) })
  } catch (err) {
    const e = err instanceof OrcError ? err : new OrcError('internal', `member api handler: ${(err as Error).message}`)
    res = { status: e.code === 'forbidden' ? 403 : e.code === 'not_found' ? 404 : e.code === 'invalid' ? 400 : 500, body: { error: e.toJSON() } }
  }
  await writeJson(ch, Tag.json, { status: res.status })
  await writeChunked(ch, res.body ?? null, frameBytes)
  await ch.close()
}

/** Client side: send `req` (for the user its principal names, if any), return the member's `{status, body}`. */
export async function callMemberApi(ch: FrameChannel, req: ApiRequest, maxBytes = MEMBER_API_MAX_BYTES): Promise<ApiResponse> {
  const user = req.principal?.kind === 'user' ? req.principal.name : undefined
  const signed = req.principal?.kind === 'user' ? req.principal.signed : undefined
  await writeJson(ch, Tag.json, {
    method: req.method,
    path: req.path,
    ...(req.query !== undefined ? { query: req.query } : {}),
    ...(user !== undefined ? { user } : {}),
    ...(signed !== undefined ? { signed } : {}),
    ...(req.body !== undefined ? { body: req.body } : {}),
  })
  const head = await readJson(ch, Tag.json, 'member response')
  if (!isRecord(head) || typeof head.status !== 'number') throw peerFault('member response is malformed')
  const body = await readChunked(ch, maxBytes, 'member response body')
  await ch.close().catch(() => undefined)
  return { status: head.status, body: body ?? undefined }
}
