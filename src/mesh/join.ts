/**
 * Join protocol `/orc/join/1.0.0`.
 *
 * How the first connection works (the joiner has no cluster state before it joins):
 *
 * - The token (token.ts, version 2) carries no cluster key: the token id, a secret, the cluster id,
 *   the issuer's peer id and the addresses of the issuer's *join host* — a libp2p host with the
 *   node's own key, TCP + Noise + Yamux and no pnet, on its own port (default mesh port − 2),
 *   serving this protocol and nothing else (mesh.ts, `joinListen`).
 * - The joiner dials it from a temporary host of its own (pnet-less, its node key) by the issuer's
 *   peer id: Noise authenticates the issuer, so a node that impersonates it fails the handshake and
 *   learns nothing, not even the token.
 * - The join host's gater lets a peer in only while some token is live (unexpired, uses left, not
 *   revoked) or stopped being live less than `tokenGraceMs` ago (so a late joiner is told "token
 *   expired 3m ago" rather than seeing a refused connection), within the trial limits per source
 *   address (admission.ts), and closes each connection after `probationMs`.
 * - The joiner presents the token id, secret and cluster id. The issuer checks its own TokenBook
 *   record — expiry, uses left, revocation, secret hash — consumes one use, adds the joiner's peer
 *   id to the member directory (the `admitMember` hook), announces it on the membership topic and
 *   answers with the cluster id, admin public keys, scopes, member list and the cluster PSK. Only
 *   then does the joiner build its mesh host with that PSK and dial the issuer's mesh port, as a
 *   member: the mesh port admits members only. A refused joiner gets one clear error frame and its
 *   connection is closed.
 * - A federation's host (docs/federation.md) is a mesh like a cluster's, with its own join host:
 *   its tokens and invites (`orcfed2.`) are these claims, redeemed the same way.
 */
import { OrcError } from '../model/index.ts'
import type { FrameChannel } from './framing.ts'
import type { MemberInfo } from './membership.ts'
import type { TokenAuthority, TokenClaims } from './token.ts'
import { isRecord, peerFault, readJson, Tag, writeError, writeJson } from './wire.ts'

export const JOIN_PROTOCOL = '/orc/join/1.0.0'

export interface JoinRequest {
  v: 1
  token: { id: string; secret: string; cluster: string }
  name: string
  addresses: string[]
}

export interface JoinResponse {
  v: 1
  clusterId: string
  createdAt: number
  adminKeys: string[]
  scopes: string[]
  members: MemberInfo[]
  /** The cluster PSK (raw, hex): sent by a join host, after the token was redeemed. */
  psk?: string
}

export type JoinProgress =
  | { phase: 'connecting'; peer: string; addresses: string[] }
  | { phase: 'joining'; peer: string }
  | { phase: 'admitted'; clusterId: string; members: number }
  | { phase: 'syncing'; scope: string; peer: string; revisions: number }
  | { phase: 'ready'; clusterId: string; members: number; revisions: number }

export function joinRequestFromToken(claims: Pick<TokenClaims, 'id' | 'secret' | 'cluster'>, name: string, addresses: string[]): JoinRequest {
  return { v: 1, token: { id: claims.id, secret: claims.secret, cluster: claims.cluster }, name, addresses }
}

const MAX_MEMBERS_IN_RESPONSE = 100_000

export function parseMemberInfo(v: unknown): MemberInfo | undefined {
  if (!isRecord(v)) return undefined
  const { peerId, name, addresses } = v
  if (typeof peerId !== 'string' || peerId.length === 0 || peerId.length > 128) return undefined
  if (typeof name !== 'string' || name.length > 253) return undefined
  if (!Array.isArray(addresses) || addresses.length > 32) return undefined
  if (!addresses.every((a) => typeof a === 'string' && a.length < 256)) return undefined
  return { peerId, name, addresses: addresses as string[] }
}

export function parseJoinRequest(v: unknown): JoinRequest {
  if (!isRecord(v) || v.v !== 1 || !isRecord(v.token)) throw peerFault('join request is malformed')
  const { id, secret, cluster } = v.token
  if (typeof id !== 'string' || typeof secret !== 'string' || typeof cluster !== 'string') throw peerFault('join request is malformed')
  const info = parseMemberInfo({ peerId: 'x', name: v.name, addresses: v.addresses })
  if (info === undefined) throw peerFault('join request is malformed (name/addresses)')
  return { v: 1, token: { id, secret, cluster }, name: info.name, addresses: info.addresses }
}

export function parseJoinResponse(v: unknown): JoinResponse {
  if (!isRecord(v) || v.v !== 1) throw peerFault('join response is malformed')
  const { clusterId, createdAt, adminKeys, scopes, members, psk } = v
  if (typeof clusterId !== 'string' || typeof createdAt !== 'number') throw peerFault('join response is malformed')
  if (!Array.isArray(adminKeys) || !adminKeys.every((k) => typeof k === 'string')) throw peerFault('join response is malformed')
  if (!Array.isArray(scopes) || !scopes.every((k) => typeof k === 'string')) throw peerFault('join response is malformed')
  if (!Array.isArray(members) || members.length > MAX_MEMBERS_IN_RESPONSE) throw peerFault('join response is malformed')
  const parsed = members.map(parseMemberInfo)
  if (parsed.some((m) => m === undefined)) throw peerFault('join response has a malformed member')
  if (psk !== undefined && (typeof psk !== 'string' || !/^[0-9a-f]{64}$/.test(psk))) throw peerFault('join response has a malformed cluster key')
  return { v: 1, clusterId, createdAt, adminKeys, scopes, members: parsed as MemberInfo[], ...(psk !== undefined ? { psk } : {}) }
}

export interface JoinServerDeps {
  authority: TokenAuthority
  cluster: { clusterId: string; createdAt: number; adminKeys: string[]; psk: Uint8Array }
  scopes(): string[]
  members(): MemberInfo[]
  /** Removed from the cluster: refused before its token is even looked at. */
  isRemoved?: (peerId: string) => boolean
  /** Refuse a joiner before its token is consumed (name taken, …). */
  vet?: (info: MemberInfo) => void | Promise<void>
  /** Admit the joiner: member directory, the agent's hook, the announcement. */
  admit(info: MemberInfo): Promise<void>
}

/** Issuer side: decide on a join request from `remotePeer`. Throws OrcError('forbidden') on refusal. */
export async function handleJoinRequest(deps: JoinServerDeps, req: JoinRequest, remotePeer: string): Promise<JoinResponse> {
  const info: MemberInfo = { peerId: remotePeer, name: req.name, addresses: req.addresses }
  // Before the token: a removed node is refused whatever it presents, even a fresh valid token.
  if (deps.isRemoved?.(remotePeer) === true) {
    throw new OrcError('forbidden', 'this node was removed from the cluster; it cannot join again (join from a new data dir, as a new node)', {
      reason: 'removed',
    })
  }
  // Vet only holders of a token this node issued: strangers learn nothing about the cluster.
  await deps.authority.check(req.token, deps.cluster.clusterId, remotePeer)
  await deps.vet?.(info)
  await deps.authority.redeem(req.token, deps.cluster.clusterId, remotePeer)
  await deps.admit(info)
  return {
    v: 1,
    clusterId: deps.cluster.clusterId,
    createdAt: deps.cluster.createdAt,
    adminKeys: deps.cluster.adminKeys,
    scopes: deps.scopes(),
    members: deps.members(),
    psk: Buffer.from(deps.cluster.psk).toString('hex'),
  }
}

/** Issuer side over a channel: one request, one response or error frame. */
export async function serveJoin(ch: FrameChannel, deps: JoinServerDeps, remotePeer: string): Promise<JoinResponse> {
  try {
    const req = parseJoinRequest(await readJson(ch, Tag.hello, 'join request'))
    const res = await handleJoinRequest(deps, req, remotePeer)
    await writeJson(ch, Tag.json, res)
    await ch.close()
    return res
  } catch (err) {
    const e = err instanceof OrcError ? err : new OrcError('internal', 'join failed on the issuer')
    await writeError(ch, e).catch(() => undefined)
    await ch.close().catch(() => undefined)
    throw err
  }
}

/** Joiner side over a channel. Throws the issuer's refusal as an OrcError with its message. */
export async function requestJoin(ch: FrameChannel, req: JoinRequest): Promise<JoinResponse> {
  await writeJson(ch, Tag.hello, req)
  const res = parseJoinResponse(await readJson(ch, Tag.json, 'join response'))
  await ch.close().catch(() => undefined)
  return res
}
