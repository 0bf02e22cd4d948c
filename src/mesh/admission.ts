/**
 * Who gets in: join tokens, the join protocol (issuer side, on the join host), the trial limits on
 * not-yet-members, and peers scored down for sending garbage. The gaters ask it (startProbation,
 * isBanned); the other parts report offenders to it (misbehaved). Who is a member is the
 * directory's answer; the mesh records an admission (Mesh.admit), since every part takes note of it.
 */
import type { Connection, Stream } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import type { Logger } from 'pino'
import type { Clock } from '../effects/index.ts'
import type { ClusterState } from './cluster.ts'
import { shortError } from './deadline.ts'
import type { MeshEventBus } from './events.ts'
import { type JoinLibp2p, type MeshLibp2p, streamChannel } from './host.ts'
import { JOIN_PROTOCOL, serveJoin } from './join.ts'
import type { MemberDirectory } from './members.ts'
import type { MemberInfo } from './membership.ts'
import type { MeshTunables } from './options.ts'
import type { PeerScores } from './score.ts'
import { Timers } from './timers.ts'
import type { IssueTokenOptions, TokenAuthority, TokenRecord } from './token.ts'

export interface AdmissionComponents {
  libp2p: Pick<MeshLibp2p, 'handle' | 'hangUp' | 'addEventListener' | 'getConnections'>
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
  /** Removed from the cluster (removed.ts): refused by the join protocol whatever token it presents. */
  isRemoved: (peerId: string) => boolean
  scopeNames: () => string[]
  /** Record a joiner its token let in (and announce it to the other members). */
  admitJoiner: (info: MemberInfo) => Promise<void>
  /** Check a joiner before its token is consumed; throw an OrcError to refuse (MeshOptions.vetJoiner). */
  vetJoiner?: (info: MemberInfo) => void | Promise<void>
  /** The join host (join.ts): serves the join protocol, every connection to it on a trial clock. */
  joinHost?: JoinLibp2p
}

type Host = Pick<MeshLibp2p, 'handle' | 'addEventListener' | 'getConnections'>

/** The remote peer of an inbound stream when it is a member; a stranger's stream is refused. */
export function memberOf(stream: Stream, conn: Connection, isMember: (peerId: string) => boolean): string | undefined {
  const remote = conn.remotePeer.toString()
  if (isMember(remote)) return remote
  stream.abort(new Error('not a member'))
  return undefined
}

/** A stranger on probation: when it ends, and the address it came from. */
interface Trial {
  until: number
  source: string
}

export class Admission {
  /** Strangers let in on probation. */
  private readonly probation = new Map<string, Trial>()
  /** When each source address last started trials (the last minute's), for the per-minute limit. */
  private readonly trialStarts = new Map<string, number[]>()
  private readonly timers: Timers

  constructor(private readonly c: AdmissionComponents) {
    this.timers = new Timers(c.clock, c.log)
  }

  /** Serve the join protocol on the join host (every connection there on a trial clock, the PSK in the response). */
  async install(): Promise<void> {
    if (this.c.joinHost !== undefined) await this.serveJoinOn(this.c.joinHost)
  }

  private async serveJoinOn(host: Host): Promise<void> {
    host.addEventListener('connection:open', (evt) => this.onConnectionOpen(evt.detail))
    host.addEventListener('connection:close', (evt) => this.onConnectionClose(evt.detail, host))
    await host.handle(
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
              isRemoved: this.c.isRemoved,
              vet: this.c.vetJoiner,
              admit: this.c.admitJoiner,
            },
            remote,
          )
          this.c.log.info({ peer: remote, via: 'join host' }, 'peer joined')
          this.closeSoon(conn) // its business here is done: it dials the mesh port now
        } catch (err) {
          this.c.log.info({ peer: remote, err: shortError(err) }, 'join refused')
          this.closeSoon(conn)
        }
      },
      { maxInboundStreams: 4 },
    )
  }

  /** Ends the probation and close timers. */
  stop(): void {
    this.timers.stop()
  }

  /** Issue a join token naming this node at `addrs` (its join host's). */
  async createToken(opts: IssueTokenOptions, addrs: string[]): Promise<{ token: string; id: string; expiresAt: number; uses: number }> {
    const cluster = this.c.cluster()
    const { token, record } = await this.c.authority.issue(opts, {
      clusterId: cluster.clusterId,
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

  /**
   * Gater: may this stranger from `source` (an IP address) connect on probation? At most
   * maxProbationPeers at a time, maxProbationPerSource of them from one address, and
   * probationStartsPerSourcePerMinute new ones a minute from one address.
   */
  startProbation(peerId: string, source: string): boolean {
    const t = this.c.tunables
    const now = this.c.clock.now()
    for (const [p, trial] of this.probation) if (trial.until <= now) this.probation.delete(p)
    if (this.probation.has(peerId)) return true
    const refuse = (why: string): boolean => {
      this.c.log.debug({ peer: peerId, source, why }, 'trial connection refused')
      return false
    }
    if (this.probation.size >= t.maxProbationPeers) return refuse('all trial slots taken')
    let fromSource = 0
    for (const trial of this.probation.values()) if (trial.source === source) fromSource++
    if (fromSource >= t.maxProbationPerSource) return refuse('trial slots of this address taken')
    const starts = (this.trialStarts.get(source) ?? []).filter((at) => at > now - 60_000)
    if (starts.length >= t.probationStartsPerSourcePerMinute) {
      this.trialStarts.set(source, starts)
      return refuse('too many trials from this address this minute')
    }
    starts.push(now)
    this.trialStarts.set(source, starts)
    if (this.trialStarts.size > 4096) {
      for (const [s, at] of this.trialStarts) if (!at.some((x) => x > now - 60_000)) this.trialStarts.delete(s)
    }
    this.probation.set(peerId, { until: now + t.probationMs, source })
    return true
  }

  isBanned(peerId: string, now: number): boolean {
    return this.c.scores.isBanned(peerId, now)
  }

  /** A peer sent garbage: score it down (banned below the threshold) and hang up on it. */
  async misbehaved(peerId: string, reason: string): Promise<void> {
    const now = this.c.clock.now()
    const banned = this.c.scores.penalise(peerId, this.c.tunables.garbagePenalty, now)
    const score = this.c.scores.score(peerId, now)
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

  /** On the join host every connection is on the clock. */
  private onConnectionOpen(conn: Connection): void {
    const remote = conn.remotePeer.toString()
    const until = this.probation.get(remote)?.until ?? this.c.clock.now() + this.c.tunables.probationMs
    this.timers.later(
      () => {
        this.probation.delete(remote)
        this.c.log.debug({ peer: remote }, 'probation over; closing')
        conn.abort(new Error('probation over'))
      },
      Math.max(0, until - this.c.clock.now()),
    )
  }

  /** A stranger hung up: its trial slot is free again (the per-minute limit still counts it). */
  private onConnectionClose(conn: Connection, host: Host): void {
    const remote = conn.remotePeer.toString()
    if (!this.probation.has(remote)) return
    // (Our listener may run before libp2p's own: the closing connection can still be listed.)
    if (!host.getConnections(conn.remotePeer).some((c) => c !== conn && c.status === 'open')) this.probation.delete(remote)
  }
}
