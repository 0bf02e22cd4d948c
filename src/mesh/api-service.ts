/**
 * The two request protocols on the host: the remote API (the admin credential's, rpc.ts) and the
 * node-to-node member API (member-api.ts). Serves both, and calls them on another node. The
 * protocol codecs live in those files; this one dials, bounds each call in time and decides who
 * may open a stream.
 */
import type { Connection, PrivateKey, Stream } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import type { Logger } from 'pino'
import type { Random } from '../effects/index.ts'
import { OrcError } from '../model/index.ts'
import { type ClusterState, decodeAdminCredential } from './cluster.ts'
import { shortError, withDeadline } from './deadline.ts'
import { type MeshLibp2p, streamChannel } from './host.ts'
import { callMemberApi, MEMBER_API_PROTOCOL, MEMBER_API_SERVE_MS, type MemberApiHandler, serveMemberApi } from './member-api.ts'
import type { MeshTunables } from './options.ts'
import { API_PROTOCOL, type ApiHandler, type ApiRequest, type ApiResponse, callApi, serveApi } from './rpc.ts'
import { isPeerFault } from './wire.ts'

export interface ApiServiceComponents {
  libp2p: Pick<MeshLibp2p, 'handle' | 'dialProtocol'>
  peerId: string
  /** Read at each call: the admin keys arrive with admission on a joining node. */
  cluster: () => ClusterState
  /**
   * The user a remote API key belongs to (MeshOptions.apiKeyOwner). Without one, the cluster's
   * admin keys are the user `admin` and no other key is known.
   */
  apiKeyOwner?: (key: string) => string | undefined
  random: Random
  tunables: MeshTunables
  log: Logger
  isMember: (peerId: string) => boolean
  misbehaved: (peerId: string, reason: string) => Promise<void>
  /** Close a stranger's connection after a failed call. */
  closeSoon: (conn: Connection) => void
  /** The agent's local API handler (MeshOptions.apiHandler); without one the API answers 503. */
  apiHandler?: ApiHandler
  /** Node-to-node requests (MeshOptions.memberApiHandler); without one the protocol is refused. */
  memberApiHandler?: MemberApiHandler
  /** The remote CLI, known by the peer id of its credential key (credential-peers.ts). */
  isCredentialPeer: (peerId: string) => boolean
}

export class ApiService {
  constructor(private readonly c: ApiServiceComponents) {}

  async install(): Promise<void> {
    const t = this.c.tunables
    await this.c.libp2p.handle(
      API_PROTOCOL,
      async (stream, conn) => {
        const remote = conn.remotePeer.toString()
        if (!this.c.isMember(remote) && !this.c.isCredentialPeer(remote)) {
          stream.abort(new Error('not a member'))
          return
        }
        const ch = streamChannel(stream, t.maxApiBytes)
        const handler: ApiHandler =
          this.c.apiHandler ?? (async () => ({ status: 503, body: { error: { code: 'unavailable', message: 'this node serves no API' } } }))
        try {
          await withDeadline(
            serveApi(ch, { selfPeerId: this.c.peerId, keyOwner: (k) => this.keyOwner(k), random: this.c.random, handler }, remote),
            AbortSignal.timeout(t.apiTimeoutMs),
            () => ch.abort(new Error('api call timed out')),
          )
        } catch (err) {
          this.c.log.info({ peer: remote, err: shortError(err) }, 'api request failed')
          if (!this.c.isMember(remote) && !this.c.isCredentialPeer(remote)) this.c.closeSoon(conn)
        }
      },
      { maxInboundStreams: 32 },
    )

    await this.c.libp2p.handle(
      MEMBER_API_PROTOCOL,
      async (stream, conn) => {
        const remote = conn.remotePeer.toString()
        const handler = this.c.memberApiHandler
        // Members only: strangers on probation (join, remote CLI) never reach it, removed peers
        // are not members.
        if (!this.c.isMember(remote) || handler === undefined) {
          stream.abort(new Error(handler === undefined ? 'no member api here' : 'not a member'))
          return
        }
        const ch = streamChannel(stream, t.maxApiBytes)
        try {
          await withDeadline(serveMemberApi(ch, handler, remote, t.maxApiBytes), AbortSignal.timeout(MEMBER_API_SERVE_MS), () =>
            ch.abort(new Error('member request timed out')),
          )
        } catch (err) {
          if (isPeerFault(err)) await this.c.misbehaved(remote, (err as Error).message)
          else this.c.log.debug({ peer: remote, err: shortError(err) }, 'member request failed')
        }
      },
      { maxInboundStreams: 32 },
    )
  }

  private keyOwner(key: string): string | undefined {
    if (this.c.apiKeyOwner !== undefined) return this.c.apiKeyOwner(key)
    return this.c.cluster().adminKeys.includes(key) ? 'admin' : undefined
  }

  /** Call the remote API of `peerId` (a connected or known member). */
  async request(peerId: string, req: ApiRequest, credential?: string | PrivateKey): Promise<ApiResponse> {
    const t = this.c.tunables
    const key = typeof credential === 'string' ? decodeAdminCredential(credential) : credential
    const signal = AbortSignal.timeout(t.apiTimeoutMs)
    let stream: Stream
    try {
      stream = await this.c.libp2p.dialProtocol(peerIdFromString(peerId), API_PROTOCOL, {
        signal: AbortSignal.any([signal, AbortSignal.timeout(t.dialTimeoutMs)]),
      })
    } catch (err) {
      throw new OrcError('unavailable', `dial ${peerId} for the api: ${shortError(err)}`, { peer: peerId }, err)
    }
    const ch = streamChannel(stream, t.maxApiBytes)
    return withDeadline(callApi(ch, req, key, peerId), signal, () => ch.abort(new Error('api call timed out')))
  }

  /**
   * A node-to-node request to member `peerId` (`/orc/member-api/1.0.0`): no credential, the
   * member's own handler decides what a member may ask. `timeoutMs` bounds the whole call (a log
   * long-poll needs more than the default api timeout).
   */
  async memberRequest(peerId: string, req: ApiRequest, opts: { timeoutMs?: number } = {}): Promise<ApiResponse> {
    const t = this.c.tunables
    const signal = AbortSignal.timeout(opts.timeoutMs ?? t.apiTimeoutMs)
    let stream: Stream
    try {
      stream = await this.c.libp2p.dialProtocol(peerIdFromString(peerId), MEMBER_API_PROTOCOL, {
        signal: AbortSignal.any([signal, AbortSignal.timeout(t.dialTimeoutMs)]),
      })
    } catch (err) {
      throw new OrcError('unavailable', `dial ${peerId}: ${shortError(err)}`, { peer: peerId }, err)
    }
    const ch = streamChannel(stream, t.maxApiBytes)
    try {
      return await withDeadline(callMemberApi(ch, req), signal, () => ch.abort(new Error('member request timed out')))
    } catch (err) {
      if (err instanceof OrcError) throw err
      throw new OrcError('unavailable', `request to ${peerId}: ${shortError(err)}`, { peer: peerId }, err)
    }
  }
}
