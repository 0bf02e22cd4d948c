/**
 * Who is up: the membership view (MembershipTable), heartbeats (straight to each connected member
 * when connected to every live one, else on the members topic), pings, admission announcements on
 * the members topic, and the upkeep tick that keeps connections to members (MemberConnections).
 * Timers: a heartbeat every heartbeatIntervalMs and an upkeep every maintainIntervalMs.
 */

import { type Message, TopicValidatorResult } from '@libp2p/gossipsub'
import type { PeerId } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import type { Logger } from 'pino'
import type { Clock } from '../effects/index.ts'
import { memberOf } from './admission.ts'
import type { MemberConnections } from './connections.ts'
import { shortError } from './deadline.ts'
import type { MeshEventBus } from './events.ts'
import type { FrameChannel } from './framing.ts'
import { decodeMemberMessage, encodeMemberMessage, HEARTBEAT_PROTOCOL, MAX_MEMBER_MESSAGE_BYTES, type MemberMessage, membersTopic } from './gossip.ts'
import { gossipMeshState, type MeshLibp2p, streamChannel } from './host.ts'
import type { MemberDirectory } from './members.ts'
import { type MemberInfo, MembershipTable, type MemberTransition, type MemberView } from './membership.ts'
import type { MeshTunables } from './options.ts'
import { Timers } from './timers.ts'
import { isPeerFault } from './wire.ts'

export interface LivenessComponents {
  libp2p: Pick<MeshLibp2p, 'handle' | 'dialProtocol' | 'hangUp' | 'services'>
  peerId: string
  /** This node's name, as its heartbeats carry it. */
  name: string
  clusterId: () => string
  /** The addresses our heartbeats advertise. */
  advertised: () => string[]
  clock: Clock
  tunables: MeshTunables
  log: Logger
  events: MeshEventBus
  directory: Pick<MemberDirectory, 'list' | 'get' | 'add'>
  connections: MemberConnections
  isMember: (peerId: string) => boolean
  isBanned: (peerId: string, now: number) => boolean
  misbehaved: (peerId: string, reason: string) => Promise<void>
  /** A member announced by member `via`: the mesh vets and admits it. */
  learnt: (info: MemberInfo, via: string) => Promise<void>
  /** Told of each transition before it is reported (anti-entropy plans around members that come back). */
  memberChanged: (tr: MemberTransition) => void
  /** Called on each upkeep tick with the connected members (anti-entropy syncs the recovered ones). */
  upkept: (connected: Set<string>, now: number) => void
}

export class Liveness {
  private readonly table: MembershipTable
  private readonly timers: Timers
  private hbSeq = 0
  /** When each member's last direct heartbeat arrived: it was then connected to every live member. */
  private readonly directHeartbeatAt = new Map<string, number>()
  /** Outbound heartbeat stream per connected member (see sendHeartbeat). */
  private readonly hbStreams = new Map<string, { ch: FrameChannel | undefined; busy: boolean }>()
  /** Connected members that do not speak HEARTBEAT_PROTOCOL (an older orc): heartbeats by gossip. */
  private readonly noDirectHeartbeat = new Set<string>()
  private readonly lastPing = new Map<string, number>()
  /** Consecutive failed pings per connected member. */
  private readonly pingFailures = new Map<string, number>()
  private lastGossipState = ''

  constructor(private readonly c: LivenessComponents) {
    this.table = new MembershipTable(c.peerId, c.tunables)
    this.timers = new Timers(c.clock, c.log)
  }

  /** Serve the heartbeat protocol (members only). */
  async install(): Promise<void> {
    await this.c.libp2p.handle(
      HEARTBEAT_PROTOCOL,
      async (stream, conn) => {
        const remote = memberOf(stream, conn, this.c.isMember)
        if (remote === undefined) return
        const ch = streamChannel(stream, MAX_MEMBER_MESSAGE_BYTES)
        try {
          for (;;) {
            const frame = await ch.read()
            if (frame === null) return
            const m = decodeMemberMessage(frame)
            if (m === undefined || m.t !== 'hb') {
              ch.abort(new Error('not a heartbeat'))
              await this.c.misbehaved(remote, 'undecodable heartbeat')
              return
            }
            // Removed while the stream was open: its heartbeats no longer count.
            if (!this.c.isMember(remote)) {
              ch.abort(new Error('not a member'))
              return
            }
            await this.onHeartbeat(remote, m, 'direct')
          }
        } catch (err) {
          if (isPeerFault(err)) await this.c.misbehaved(remote, (err as Error).message)
          else this.c.log.debug({ peer: remote, err: shortError(err) }, 'heartbeat stream ended')
        }
      },
      { maxInboundStreams: 4 },
    )
  }

  /** Listen on the members topic and start the heartbeat and upkeep timers (the first upkeep is the mesh's to run). */
  start(): void {
    const pubsub = this.c.libp2p.services.pubsub
    const mt = membersTopic(this.c.clusterId())
    pubsub.topicValidators.set(mt, (peer, msg) => this.validateMemberMessage(peer, msg))
    pubsub.subscribe(mt)
    this.timers.every(this.c.tunables.heartbeatIntervalMs, () => this.heartbeat())
    this.timers.every(this.c.tunables.maintainIntervalMs, () => this.upkeep())
  }

  stop(): void {
    this.timers.stop()
  }

  /** A member became known (admitted, loaded from disk); keeps what liveness knows of it. */
  upsert(info: MemberInfo): void {
    this.table.upsert(info, this.c.clock.now())
  }

  /** A member was removed: true when it was in the view. */
  forget(peerId: string): boolean {
    this.directHeartbeatAt.delete(peerId)
    return this.table.remove(peerId)
  }

  /** Every member with its liveness state; `connected` for the others. */
  view(): MemberView[] {
    const connected = new Set(this.c.connections.connected())
    return this.table.view(this.c.clock.now()).map((m) => (m.self ? m : { ...m, connected: connected.has(m.peerId) }))
  }

  /**
   * Authenticated traffic from a member (a sync session, a merged store update): it is alive.
   * `quiet` leaves a transition unreported: a merged store update has never reported one, and the
   * split of mesh.ts kept that as it was (whether it should is a change of its own).
   */
  heard(peerId: string, opts: { quiet?: boolean } = {}): void {
    const tr = this.table.heard(peerId, this.c.clock.now())
    if (tr !== undefined && opts.quiet !== true) this.transition(tr)
  }

  /** Tell the other members of a member we admitted. */
  announce(info: MemberInfo): Promise<void> {
    return this.publishMembers({ t: 'admit', member: info })
  }

  /**
   * Whether gossipsub should forward a store update we merged. Not when it came straight from its
   * author and the author's heartbeats reach us directly: the author then holds a connection to
   * every member it does not believe dead and its publish went to each of them (a member that was
   * connected but not yet subscribed gets the update by sync, see Replication.publishUpdate).
   * Forwarding then only makes duplicates: at 20 members, 57 extra frames per write on top of the 19
   * the author sends, each encrypted, sent, received and dropped. Otherwise (a partial mesh, an
   * author we hear by gossip, a relayed copy) it is forwarded as usual.
   */
  forwards(from: string, source: string): boolean {
    if (from !== source) return true
    const at = this.directHeartbeatAt.get(from)
    return at === undefined || this.c.clock.now() - at > this.c.tunables.suspectAfterMs
  }

  /** One upkeep tick: dial wanted members, ping, drop state of disconnected ones. */
  async upkeep(): Promise<void> {
    const now = this.c.clock.now()
    if (this.c.log.isLevelEnabled('debug')) {
      const g = JSON.stringify(gossipMeshState(this.c.libp2p.services.pubsub))
      if (g !== this.lastGossipState) {
        this.lastGossipState = g
        this.c.log.debug(
          { gossip: JSON.parse(g), connected: this.c.connections.connected().length, members: this.c.directory.list().length },
          'gossip mesh changed',
        )
      }
    }
    const connected = new Set(this.c.connections.connected())
    const dials = this.c.connections.keep(connected, now)
    this.ping(connected, now)
    for (const p of this.lastPing.keys()) if (!connected.has(p)) this.lastPing.delete(p)
    for (const p of this.pingFailures.keys()) if (!connected.has(p)) this.pingFailures.delete(p)
    for (const p of this.noDirectHeartbeat) if (!connected.has(p)) this.noDirectHeartbeat.delete(p)
    for (const [p, h] of this.hbStreams) {
      if (connected.has(p) || h.busy) continue
      h.ch?.abort(new Error('member disconnected'))
      this.hbStreams.delete(p)
    }
    this.c.upkept(connected, now)
    await dials
  }

  private transition(tr: MemberTransition): void {
    this.c.memberChanged(tr)
    this.c.log.info({ peer: tr.peerId, name: tr.name, from: tr.from, to: tr.to }, 'member state changed')
    this.c.events.emit('member:state', tr)
  }

  /**
   * A ping opens a stream (several frames each way): to every member every 2 s it cost more than
   * the heartbeats. Ping each member at most every pingIntervalMs; a reply also proves it alive.
   * A member whose heartbeats arrive straight from it is alive and its connection works: it is
   * pinged only for its round-trip time (directPingIntervalMs). At 20 members the routine pings
   * were a third of the idle cluster's CPU (docs/benchmarks.md).
   */
  private ping(connected: Set<string>, now: number): void {
    const t = this.c.tunables
    for (const p of connected) {
      const direct = this.directHeartbeatAt.get(p)
      // (A failed ping is retried on the short schedule below, whatever the heartbeats say; so is
      // a member with no round trip yet — after two failed pings hung up its connection, the new
      // one would otherwise wait a whole directPingIntervalMs for its first ping.)
      const heardDirectly = direct !== undefined && now - direct <= t.suspectAfterMs && !this.pingFailures.has(p) && this.table.rttOf(p) !== null
      const every = heardDirectly ? t.directPingIntervalMs : t.pingIntervalMs
      if ((this.lastPing.get(p) ?? 0) + every > now) continue
      this.lastPing.set(p, now)
      void this.c.libp2p.services.ping
        .ping(peerIdFromString(p), { signal: AbortSignal.timeout(t.dialTimeoutMs) })
        .then((ms) => {
          this.pingFailures.delete(p)
          this.table.setRtt(p, ms)
          const tr = this.table.heard(p, this.c.clock.now())
          if (tr !== undefined) this.transition(tr)
        })
        .catch(() => {
          // A failed ping (a stream refused while the connection settles, a timeout on a loaded
          // host) is retried within a few maintenance ticks, not a whole ping interval later:
          // otherwise a member's RTT stays unknown for pingIntervalMs after one lost reply.
          const retryIn = Math.min(t.pingIntervalMs, 4 * t.maintainIntervalMs)
          if (this.lastPing.get(p) === now) this.lastPing.set(p, now - t.pingIntervalMs + retryIn)
          // Twice in a row: the connection is likely dead without TCP knowing (a cut network); hang
          // up so the next maintenance tick dials afresh.
          const failures = (this.pingFailures.get(p) ?? 0) + 1
          this.pingFailures.set(p, failures)
          if (failures >= 2 && !this.timers.stopped) {
            this.pingFailures.delete(p)
            this.c.log.debug({ peer: p }, 'pings failed twice; closing the connection')
            void this.c.libp2p.hangUp(peerIdFromString(p)).catch(() => undefined)
          }
        })
    }
  }

  private async publishMembers(m: MemberMessage): Promise<void> {
    try {
      await this.c.libp2p.services.pubsub.publish(membersTopic(this.c.clusterId()), encodeMemberMessage(m))
    } catch (err) {
      this.c.log.debug({ err: shortError(err) }, 'member publish failed')
    }
  }

  private async validateMemberMessage(peer: PeerId, msg: Message): Promise<TopicValidatorResult> {
    if (msg.type !== 'signed') return TopicValidatorResult.Reject
    const from = msg.from.toString()
    const m = decodeMemberMessage(msg.data)
    if (m === undefined) {
      await this.c.misbehaved(peer.toString(), 'undecodable member message')
      return TopicValidatorResult.Reject
    }
    // Membership views can briefly differ between members: ignore (don't punish) strangers.
    if (!this.c.isMember(from)) return TopicValidatorResult.Ignore
    if (m.t === 'hb') {
      await this.onHeartbeat(from, m, 'gossip')
    } else if (m.t === 'admit') {
      await this.c.learnt(m.member, from)
    }
    return TopicValidatorResult.Accept
  }

  /** A member's heartbeat, from gossip (signed by it) or its own connection (HEARTBEAT_PROTOCOL). */
  private async onHeartbeat(from: string, m: Extract<MemberMessage, { t: 'hb' }>, path: 'direct' | 'gossip'): Promise<void> {
    this.c.events.emit('heartbeat', { peerId: from, direction: 'in', path })
    if (path === 'direct') this.directHeartbeatAt.set(from, this.c.clock.now())
    const tr = this.table.heard(from, this.c.clock.now(), { name: m.name, addresses: m.addresses })
    const cur = this.c.directory.get(from)
    if (cur !== undefined && m.addresses.length > 0 && (cur.addresses.join() !== m.addresses.join() || cur.name !== m.name)) {
      await this.c.directory.add({ peerId: from, name: m.name, addresses: m.addresses })
    }
    if (tr !== undefined) this.transition(tr)
  }

  private async heartbeat(): Promise<void> {
    this.hbSeq += 1
    const hb: MemberMessage = { t: 'hb', name: this.c.name, addresses: this.c.advertised(), seq: this.hbSeq }
    const connected = this.c.connections.connected()
    const direct = this.connectedToAllLive(connected)
    if (direct) {
      const frame = encodeMemberMessage(hb)
      for (const p of connected) if (!this.noDirectHeartbeat.has(p)) void this.sendHeartbeat(p, frame)
    }
    // Gossip when some member may not be connected to us, or one runs an older orc (no heartbeat protocol).
    if (!direct || connected.some((p) => this.noDirectHeartbeat.has(p))) {
      await this.publishMembers(hb)
      this.c.events.emit('heartbeat', { peerId: this.c.peerId, direction: 'out', path: 'gossip' })
    }
    for (const tr of this.table.tick(this.c.clock.now())) this.transition(tr)
  }

  /**
   * Whether every member not dead to us (nor banned) is connected to us: then each of them hears
   * our heartbeat straight from us. A member we are not connected to may be connected to none of
   * our neighbours' mesh either, so it needs the gossip copy.
   */
  private connectedToAllLive(connected: string[]): boolean {
    const now = this.c.clock.now()
    const set = new Set(connected)
    for (const m of this.table.view(now)) {
      if (m.self || m.state === 'dead' || this.c.isBanned(m.peerId, now)) continue
      if (!set.has(m.peerId)) return false
    }
    return true
  }

  /** One heartbeat frame on the member's heartbeat stream (opened on first use, reopened after an error). */
  private async sendHeartbeat(peerId: string, frame: Uint8Array): Promise<void> {
    const cur = this.hbStreams.get(peerId)
    if (cur?.busy) return // the previous one is still on its way: skip this beat
    const s = cur ?? { ch: undefined as FrameChannel | undefined, busy: true }
    s.busy = true
    this.hbStreams.set(peerId, s)
    try {
      if (s.ch === undefined) {
        const stream = await this.c.libp2p.dialProtocol(peerIdFromString(peerId), HEARTBEAT_PROTOCOL, {
          signal: AbortSignal.timeout(this.c.tunables.dialTimeoutMs),
        })
        s.ch = streamChannel(stream, MAX_MEMBER_MESSAGE_BYTES)
      }
      await s.ch.write(frame)
      s.busy = false
      this.c.events.emit('heartbeat', { peerId, direction: 'out', path: 'direct' })
    } catch (err) {
      if ((err as Error).name === 'UnsupportedProtocolError') this.noDirectHeartbeat.add(peerId)
      this.c.log.debug({ peer: peerId, err: shortError(err) }, 'heartbeat stream failed; reopening at the next beat')
      s.ch?.abort(err instanceof Error ? err : new Error(String(err)))
      if (this.hbStreams.get(peerId) === s) this.hbStreams.delete(peerId)
    }
  }
}
