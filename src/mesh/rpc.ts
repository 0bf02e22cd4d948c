/**
 * Remote API `/orc/api/1.0.0`: carries the agent's local API calls `{method, path, query, body}` →
 * `{status, body}` to another node. Authenticated by a user's key: the server sends a fresh random
 * nonce; the client signs sha256(context ‖ nonce ‖ server peer id ‖ request) with the user's
 * private key; the server checks the key belongs to a user (`keyOwner`) and the signature verifies.
 * What that user may do is the agent's to decide (agent/authz.ts). The nonce makes a captured request useless on another stream;
 * binding the server's peer id makes it useless against another node.
 */
import { createHash } from 'node:crypto'
import { publicKeyToProtobuf } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { type ApiResponse, type FlatQuery, OrcError, type ApiRequest as Request, type SignedRequest } from '../model/index.ts'
import { b64url, decodeAdminKey, fromB64url } from './cluster.ts'
import type { FrameChannel } from './framing.ts'
import { verifyEd25519 } from './signing.ts'
import { isRecord, peerFault, readJson, Tag, writeError, writeJson } from './wire.ts'

export const API_PROTOCOL = '/orc/api/1.0.0'

/** The API's request (model/api.ts) as the mesh carries it: one value per query key. */
export type ApiRequest = Request<FlatQuery>
export type { ApiResponse }

export interface ApiCallContext {
  /** Peer id of the node that forwarded the request. */
  peerId: string
  /** Key (base64url protobuf) that signed it. */
  adminKey: string
  /** The user that key belongs to. */
  user: string
  /**
   * The request as the user signed it, when the client stated its time (`at`): what a write's
   * revision records carry as the user's evidence (docs/security.md, "Users' signatures on their writes").
   */
  signed?: SignedRequest
}

export type ApiHandler = (req: ApiRequest, ctx: ApiCallContext) => Promise<ApiResponse>

const CONTEXT = 'orc-api-v1'
const CONTEXT_TIMED = 'orc-api-v2'

/**
 * What the user's key signs. With `at` (the client's clock, ms; v2) the time is signed too: a
 * replica bounds how long a signed request may back a write by it (store/evidence.ts).
 */
export function apiSigningDigest(nonce: Uint8Array, serverPeer: string, req: ApiRequest, at?: number): Uint8Array {
  const h = createHash('sha256')
  h.update((at === undefined ? CONTEXT : CONTEXT_TIMED) + '\n')
  h.update(nonce)
  h.update('\n' + serverPeer + '\n')
  h.update(
    JSON.stringify(
      at === undefined ? [req.method, req.path, req.query ?? {}, req.body ?? null] : [req.method, req.path, req.query ?? {}, req.body ?? null, at],
    ),
  )
  return new Uint8Array(h.digest())
}

/** Does a signed request's signature verify with the key it names (synchronous: node:crypto)? */
export function verifySignedRequest(s: SignedRequest): boolean {
  try {
    const digest = apiSigningDigest(fromB64url(s.nonce), s.peer, { method: s.method, path: s.path, query: s.query, body: s.body }, s.at)
    return verifyEd25519(decodeAdminKey(s.key).raw, digest, fromB64url(s.sig))
  } catch {
    return false
  }
}

function parseRequest(v: unknown): { req: ApiRequest; key?: string; sig?: string; at?: number } {
  if (!isRecord(v) || !isRecord(v.req)) throw peerFault('api request is malformed')
  const { method, path, query, body } = v.req
  if (typeof method !== 'string' || method.length > 16 || typeof path !== 'string' || path.length > 4096) {
    throw peerFault('api request is malformed (method/path)')
  }
  if (query !== undefined && (!isRecord(query) || !Object.values(query).every((q) => typeof q === 'string'))) {
    throw peerFault('api request is malformed (query)')
  }
  const key = typeof v.key === 'string' ? v.key : undefined
  const sig = typeof v.sig === 'string' ? v.sig : undefined
  if (v.at !== undefined && (typeof v.at !== 'number' || !Number.isSafeInteger(v.at) || v.at < 0)) throw peerFault('api request is malformed (at)')
  const at = v.at as number | undefined
  return { req: { method, path, query: query as Record<string, string> | undefined, body }, key, sig, ...(at !== undefined ? { at } : {}) }
}

export interface ApiServerDeps {
  selfPeerId: string
  /** The user a signing key belongs to, or undefined (unknown, removed or rotated-away key); throws an OrcError to refuse a known key with its reason (expired). */
  keyOwner(key: string): string | undefined
  random(n: number): Uint8Array
  handler: ApiHandler
}

/** Server side of one api stream. Auth failures are sent as an error frame and thrown. */
export async function serveApi(ch: FrameChannel, deps: ApiServerDeps, remotePeer: string): Promise<void> {
  const nonce = deps.random(32)
  await writeJson(ch, Tag.hello, { v: 1, nonce: b64url(nonce), peer: deps.selfPeerId })
  const { req, key, sig, at } = parseRequest(await readJson(ch, Tag.json, 'api request'))
  const refuse = async (why: string) => {
    const err = new OrcError('forbidden', `remote API request refused: ${why}`, { peer: remotePeer })
    await writeError(ch, err)
    await ch.close()
    throw err
  }
  if (key === undefined || sig === undefined) return refuse('no credential presented')
  let user: string | undefined
  try {
    user = deps.keyOwner(key)
  } catch (err) {
    if (err instanceof OrcError) return refuse(err.message)
    throw err
  }
  if (user === undefined) return refuse('credential belongs to no user of this cluster (removed, rotated, or another cluster)')
  let ok = false
  try {
    ok = await decodeAdminKey(key).verify(apiSigningDigest(nonce, deps.selfPeerId, req, at), fromB64url(sig))
  } catch {
    ok = false
  }
  if (!ok) return refuse('signature does not verify')
  let res: ApiResponse
  try {
    const signed: SignedRequest | undefined =
      at === undefined
        ? undefined
        : { method: req.method, path: req.path, query: req.query ?? {}, body: req.body ?? null, nonce: b64url(nonce), peer: deps.selfPeerId, at, key, sig }
    res = await deps.handler(req, { peerId: remotePeer, adminKey: key, user, ...(signed !== undefined ? { signed } : {}) })
  } catch (err) {
    const e = err instanceof OrcError ? err : new OrcError('internal', `api handler: ${(err as Error).message}`)
    res = { status: e.code === 'not_found' ? 404 : e.code === 'forbidden' ? 403 : e.code === 'invalid' ? 400 : 500, body: { error: e.toJSON() } }
  }
  await writeJson(ch, Tag.json, { status: res.status, body: res.body ?? null })
  await ch.close()
}

/**
 * Client side: sign with `credential` (or send unsigned, to be refused, when absent). `serverPeer` is
 * the Noise-authenticated peer id we dialed, not what the server claims.
 */
export async function callApi(
  ch: FrameChannel,
  req: ApiRequest,
  credential: PrivateKey | undefined,
  serverPeer: string,
  now: () => number = Date.now,
): Promise<ApiResponse> {
  const hello = await readJson(ch, Tag.hello, 'api challenge')
  if (!isRecord(hello) || typeof hello.nonce !== 'string' || typeof hello.peer !== 'string') throw peerFault('api challenge is malformed')
  const msg: { req: ApiRequest; key?: string; sig?: string; at?: number } = { req }
  if (credential !== undefined) {
    // The request is signed with this client's time: the write it makes can carry the signature as
    // the user's evidence, and replicas accept it only near that time.
    const at = now()
    msg.key = b64url(publicKeyToProtobuf(credential.publicKey))
    msg.at = at
    msg.sig = b64url(await credential.sign(apiSigningDigest(fromB64url(hello.nonce), serverPeer, req, at)))
  }
  await writeJson(ch, Tag.json, msg)
  const res = await readJson(ch, Tag.json, 'api response')
  if (!isRecord(res) || typeof res.status !== 'number') throw peerFault('api response is malformed')
  await ch.close().catch(() => undefined)
  return { status: res.status, body: res.body ?? undefined }
}
