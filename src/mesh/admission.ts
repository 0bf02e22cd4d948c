/**
 * Who gets in: join tokens, the join protocol (issuer side), strangers on probation, and peers
 * scored down for sending garbage. The connection gater asks it (startProbation, isBanned); the
 * other parts report offenders to it (misbehaved). Who is a member is the directory's answer; the
 * mesh records an admission (Mesh.admit), since every part takes note of it.
 */
import type { Connection, Stream } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import type { Logger } from 'pino'
import type { Clock } from '../effects/index.ts'
import type { ClusterState } from './cluster.ts'
import { shortError } from './deadline.ts'
import type { MeshEventBus } from './events.ts'
import { type MeshLibp2p, streamChannel } from './host.ts'
import { JOIN_PROTOCOL, serveJoin } from './join.ts'
import type { MemberDirectory } from './members.ts'
import type { MemberInfo } from './membership.ts'
import type { MeshTunables } from './options.ts'
import type { PeerScores } from './score.ts'
import { Timers } from './timers.ts'
import type { IssueTokenOptions, TokenAuthority, TokenRecord } from './token.ts'

export interface AdmissionComponents {
  libp2p: Pick<MeshLibp2p, 'handle' | 'hangUp' | 'addEventListener'>
  peerId: string
  /** Read at each use: a joining node learns its cluster's admin keys only once admitted. */
  cluster: () => ClusterState
  clock: Clock
  tunables: MeshTunables
  log: Logger
  events: MeshEventBus
  directory: Pick<MemberDirectory, 'list' | 'remove'>
  authority: TokenAuthority
  scores: PeerScores
  isMember: (peerId: string) => boolean
  scopeNames: () => string[]
  /** Record a joiner its token let in (and announce it to the other members). */
  admitJoiner: (info: MemberInfo) => Promise<void>
  /** Check a joiner before its token is consumed; throw an OrcError to refuse (MeshOptions.vetJoiner). */
  vetJoiner?: (info: MemberInfo) => void | Promise<void>
  /** On a joining node: the issuer it dials before it is a member of anything (no probation for it). */
  joiningIssuer?: string
}

/** The remote peer of an inbound stream when it is a member; a stranger's stream is refused. */
export function memberOf(stream: Stream, conn: Connection, isMember: (peerId: string) => boolean): string | undefined {
  const remote = conn.remotePeer.toString()
  if (isMember(remote)) return remote
  stream.abort(new Error('not a member'))
  return undefined
}

export class Admission {
  /** Strangers let in on probation, with when it ends. */
  private readonly probation = new Map<string, number>()
  private readonly timers: Timers

  constructor(private readonly c: AdmissionComponents) {
    this.timers = new Timers(c.clock, c.log)
  }

  /** Serve the join protocol and put every stranger's connection on a probation clock. */
  async install(): Promise<void> {
    this.c.libp2p.addEventListener('connection:open', (evt) => this.onConnectionOpen(evt.detail))
    await this.c.libp2p.handle(
      JOIN_PROTOCOL,
      async (stream, conn) => {
        const remote = conn.remotePeer.toString()
        const ch = streamChannel(stream, 64 * 1024)
        try {
          await serveJoin(
            ch,
            {
              authority: this.c.authority,
              cluster: this.c.cluster(),
              scopes: this.c.scopeNames,
              members: () => this.c.directory.list(),
              vet: this.c.vetJoiner,
              admit: this.c.admitJoiner,
            },
            remote,
          )
          this.c.log.info({ peer: remote, name: conn.remotePeer.toString() }, 'peer joined')
        } catch (err) {
          this.c.log.info({ peer: remote, err: shortError(err) }, 'join refused')
          if (!this.c.isMember(remote)) this.closeSoon(conn)
        }
      },
      { maxInboundStreams: 4 },
    )
  }

  /** Ends the probation and close timers. */
  stop(): void {
    this.timers.stop()
  }

  /** Issue a join token naming this node at `addrs`. */
  async createToken(opts: IssueTokenOptions, addrs: string[]): Promise<{ token: string; id: string; expiresAt: number; uses: number }> {
    const cluster = this.c.cluster()
    const { token, record } = await this.c.authority.issue(opts, {
      clusterId: cluster.clusterId,
      psk: cluster.psk,
      issuer: this.c.peerId,
      addrs,
    })
    this.c.log.info({ id: record.id, expiresAt: record.expiresAt, uses: record.uses }, 'join token created')
    return { token, id: record.id, expiresAt: record.expiresAt, uses: record.uses }
  }

  revokeToken(id: string): Promise<TokenRecord> {
    return this.c.authority.revoke(id)
  }

  listTokens(): Promise<TokenRecord[]> {
    return this.c.authority.list()
  }

  /** A peer became a member: its probation is over. */
  admitted(peerId: string): void {
    this.probation.delete(peerId)
  }

  /** Forget a member, and its join tokens: a removed node replaying the token it joined with is refused. */
  async remove(peerId: string): Promise<void> {
    await this.c.directory.remove(peerId)
    const revoked = await this.c.authority.revokeUsedBy(peerId)
    if (revoked.length > 0) this.c.log.info({ peer: peerId, tokens: revoked }, 'revoked the join tokens of a removed member')
  }

  /** Gater: may this stranger connect on probation? Bounded by maxProbationPeers at a time. */
  startProbation(peerId: string): boolean {
    const now = this.c.clock.now()
    for (const [p, until] of this.probation) if (until <= now) this.probation.delete(p)
    if (this.probation.has(peerId)) return true
    if (this.probation.size >= this.c.tunables.maxProbationPeers) return false
    this.probation.set(peerId, now + this.c.tunables.probationMs)
    return true
  }

  isBanned(peerId: string, now: number): boolean {
    return this.c.scores.isBanned(peerId, now)
  }

  /** A peer sent garbage: score it down (banned below the threshold) and hang up on it. */
  async misbehaved(peerId: string, reason: string): Promise<void> {
    const now = this.c.clock.now()
    const banned = this.c.scores.penalise(peerId, this.c.tunables.garbagePenalty, now)
    const score = this.c.scores.score(peerId)
    this.c.log.warn({ peer: peerId, reason: reason.slice(0, 200), score, banned }, 'peer sent garbage; disconnecting')
    this.c.events.emit('peer:misbehaved', { peerId, reason, score, banned })
    await this.c.libp2p.hangUp(peerIdFromString(peerId)).catch(() => undefined)
  }

  /** Close a stranger's connection after a refusal. */
  closeSoon(conn: Connection): void {
    // Give the error frame a moment to leave before the connection goes.
    this.timers.later(() => {
      void conn.close().catch(() => conn.abort(new Error('closed')))
    }, 200)
  }

  private onConnectionOpen(conn: Connection): void {
    const remote = conn.remotePeer.toString()
    if (this.c.isMember(remote) || remote === this.c.joiningIssuer) return
    const until = this.probation.get(remote) ?? this.c.clock.now() + this.c.tunables.probationMs
    this.timers.later(
      () => {
        if (!this.c.isMember(remote)) {
          this.probation.delete(remote)
          this.c.log.debug({ peer: remote }, 'probation over; closing')
          conn.abort(new Error('probation over'))
        }
      },
      Math.max(0, until - this.c.clock.now()),
    )
  }
}
