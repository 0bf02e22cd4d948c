/**
 * Who is up: the membership view, admission announcements on the members topic, and the upkeep
 * tick that keeps connections to members (MemberConnections). Two failure detectors
 * (`failureDetector`): `heartbeat` — heartbeats straight to each connected member when connected to
 * every live one, else on the members topic, plus pings, judged by MembershipTable; `swim` — SWIM
 * probing with Lifeguard's suspicion (swim.ts) over SWIM_PROTOCOL, one probe a period whatever N.
 * A node answers both (it serves both protocols), so a cluster can switch a node at a time: a swim
 * node heartbeats the members it hears heartbeats from (and those without SWIM_PROTOCOL) and judges
 * them by their heartbeats.
 * Timers: a heartbeat every heartbeatIntervalMs (swim: only to such members), the SWIM clock every
 * probeTimeoutMs/2 (swim), an upkeep every maintainIntervalMs.
 */

import { type Message, TopicValidatorResult } from '@libp2p/gossipsub'
import type { PeerId } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import type { Logger } from 'pino'
import type { Clock, Random } from '../effects/index.ts'
import { memberOf } from './admission.ts'
import type { MemberConnections } from './connections.ts'
import { shortError } from './deadline.ts'
import type { MeshEventBus } from './events.ts'
import type { FrameChannel } from './framing.ts'
import {
  decodeMemberMessage,
  decodeSwimMessage,
  encodeMemberMessage,
  encodeSwimMessage,
  HEARTBEAT_PROTOCOL,
  MAX_MEMBER_MESSAGE_BYTES,
  MAX_SWIM_MESSAGE_BYTES,
  type MemberMessage,
  membersTopic,
  SWIM_PROTOCOL,
} from './gossip.ts'
import { gossipMeshState, type MeshLibp2p, streamChannel } from './host.ts'
import type { MemberDirectory } from './members.ts'
import { type MemberInfo, MembershipTable, type MemberTransition, type MemberView } from './membership.ts'
import type { MeshTunables } from './options.ts'
import { verifyEd25519 } from './signing.ts'
import { SwimDetector, type SwimMessage, type SwimOut, swimOptionsOf } from './swim.ts'
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
  random: Random
  /** Sign with this node's key (its alive claims at each incarnation, swim.ts). */
  sign: (data: Uint8Array) => Uint8Array
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
  /** SWIM: always present (a heartbeat node answers probes); it probes only with failureDetector 'swim'. */
  private readonly swim: SwimDetector
  private readonly swimOn: boolean
  /** Outbound SWIM stream per member. */
  private readonly swimStreams = new Map<string, { ch: FrameChannel | undefined; queue: SwimMessage[]; busy: boolean }>()
  /**
   * swim: members heard heartbeating us (an older orc, or one set to heartbeats) → when; judged by
   * heartbeats until they probe us themselves (a heartbeat node only answers probes), so one that
   * stops is found dead by its heartbeats' silence.
   */
  private readonly legacyAt = new Map<string, number>()
  /** swim: members without SWIM_PROTOCOL. */
  private readonly noSwim = new Set<string>()
  /** swim: consecutive direct probes a connected member did not answer. */
  private readonly swimMisses = new Map<string, number>()
  /** swim: members connected at the last SWIM tick, and when each was last seen connected. */
  private swimConnected = new Set<string>()
  private readonly connectedAt = new Map<string, number>()

  constructor(private readonly c: LivenessComponents) {
    this.table = new MembershipTable(c.peerId, c.tunables)
    this.timers = new Timers(c.clock, c.log)
    const t = c.tunables
    this.swimOn = t.failureDetector === 'swim'
    this.swim = new SwimDetector(
      c.peerId,
      swimOptionsOf(t),
      {
        random: (n) => {
          const b = c.random(4)
          return new DataView(b.buffer, b.byteOffset, 4).getUint32(0) % n
        },
        sign: (inc) => Buffer.from(c.sign(this.aliveClaim(c.peerId, inc))).toString('base64url'),
        verify: (id, inc, sig) => {
          try {
            const key = peerIdFromString(id).publicKey
            return key?.type === 'Ed25519' && verifyEd25519(key.raw, this.aliveClaim(id, inc), Buffer.from(sig, 'base64url'))
          } catch {
            return false
          }
        },
        eligible: (id) => !this.isLegacy(id) && this.probeable(id),
        full: () => this.connectedToAllLive(this.c.connections.connected()),
      },
      // The start time: a restarted node's incarnation is above anything its predecessor published.
      c.clock.now(),
    )
  }

  /** What a member signs to say it is alive at incarnation `inc` (in this cluster). */
  private aliveClaim(id: string, inc: number): Uint8Array {
    return new TextEncoder().encode(`orc/swim/alive\n${this.c.clusterId()}\n${id}\n${inc}`)
  }

  /**
   * swim: whom this node probes (and asks to probe): the members it holds a connection to, and
   * those it held one to lately — a member that crashed or was cut off lost its connections, and
   * its last neighbours' failed probes are what suspect it. Probing a member we are not connected to
   * would dial it: under load the dial alone outlasts the probe timeout (false suspicions), and
   * beyond fullMeshMax every node would end up connected to every member. Each member is probed by
   * the members connected to it (all of them up to fullMeshMax); what they find spreads by gossip.
   * A member long disconnected comes back through the upkeep's dials.
   */
  private probeable(id: string): boolean {
    if (this.swimConnected.has(id)) return true
    const at = this.connectedAt.get(id)
    const t = this.c.tunables
    return at !== undefined && this.c.clock.now() - at <= Math.max(t.deadAfterMs, 2 * this.swim.size() * t.probeIntervalMs)
  }

  /** swim: a member judged by heartbeats (it heartbeats us, or has no SWIM_PROTOCOL). */
  private isLegacy(id: string): boolean {
    return this.noSwim.has(id) || this.legacyAt.has(id)
  }

  /** Serve the heartbeat and SWIM protocols (members only). */
  async install(): Promise<void> {
    await this.serve(
      HEARTBEAT_PROTOCOL,
      MAX_MEMBER_MESSAGE_BYTES,
      'heartbeat',
      (frame) => {
        const m = decodeMemberMessage(frame)
        return m?.t === 'hb' ? m : undefined
      },
      (remote, m) => this.onHeartbeat(remote, m, 'direct'),
    )
    await this.serve(SWIM_PROTOCOL, MAX_SWIM_MESSAGE_BYTES, 'swim message', decodeSwimMessage, (remote, m) => this.onSwim(remote, m))
  }

  /**
   * Serve a stream protocol of frames from members: each decoded and handed to `on`; one that does
   * not decode is a peer fault; a member removed while its stream is open is cut off.
   */
  private async serve<M>(
    protocol: string,
    maxBytes: number,
    what: string,
    decode: (frame: Uint8Array) => M | undefined,
    on: (remote: string, m: M) => void | Promise<void>,
  ): Promise<void> {
    await this.c.libp2p.handle(
      protocol,
      async (stream, conn) => {
        const remote = memberOf(stream, conn, this.c.isMember)
        if (remote === undefined) return
        const ch = streamChannel(stream, maxBytes)
        try {
          for (;;) {
            const frame = await ch.read()
            if (frame === null) return
            const m = decode(frame)
            if (m === undefined) {
              ch.abort(new Error(`not a ${what}`))
              await this.c.misbehaved(remote, `undecodable ${what}`)
              return
            }
            // Removed while the stream was open: what it sends no longer counts.
            if (!this.c.isMember(remote)) {
              ch.abort(new Error('not a member'))
              return
            }
            await on(remote, m)
          }
        } catch (err) {
          if (isPeerFault(err)) await this.c.misbehaved(remote, (err as Error).message)
          else this.c.log.debug({ peer: remote, err: shortError(err) }, `${what} stream ended`)
        }
      },
      { maxInboundStreams: 4 },
    )
  }

  /** A SWIM message from member `from`: the detector answers it; what it sends goes out. */
  private onSwim(from: string, m: SwimMessage): void {
    const now = this.c.clock.now()
    // It probes: it runs the SWIM detector now (switched, or restarted as swim).
    if (m.t !== 'ack') this.legacyAt.delete(from)
    const tr = this.table.heard(from, now)
    if (tr !== undefined && (!this.swimOn || this.isLegacy(from))) this.transition(tr)
    this.sendSwim(this.swim.receive(from, m, now))
    this.swimTransitions()
  }

  /** The SWIM clock (swim only): probes, indirect probes, suspicion timeouts. */
  private swimTick(): void {
    const now = this.c.clock.now()
    const connected = new Set(this.c.connections.connected())
    this.swimConnected = connected
    for (const p of connected) this.connectedAt.set(p, now)
    this.sendSwim(this.swim.advance(now))
    this.swimTransitions()
    for (const p of this.swim.takeDirectMisses()) {
      if (!connected.has(p)) continue
      const n = (this.swimMisses.get(p) ?? 0) + 1
      this.swimMisses.set(p, n)
      // Twice in a row over a connection we hold: it is likely dead without TCP knowing; dial afresh.
      if (n >= 2 && !this.timers.stopped) {
        this.swimMisses.delete(p)
        this.c.log.debug({ peer: p }, 'direct probes failed twice; closing the connection')
        void this.c.libp2p.hangUp(peerIdFromString(p)).catch(() => undefined)
      }
    }
  }

  private swimTransitions(): void {
    for (const t of this.swim.takeTransitions()) {
      if (this.isLegacy(t.id)) continue
      this.transition({ peerId: t.id, name: this.table.get(t.id)?.name ?? '', from: t.from, to: t.to })
    }
  }

  private sendSwim(outs: SwimOut[]): void {
    for (const o of outs) {
      if (o.msg.t === 'ack' && o.msg.of === undefined) this.swimMisses.delete(o.to)
      void this.sendSwimTo(o.to, o.msg)
    }
  }

  /** Queue one message on the member's SWIM stream (opened on first use, reopened after an error). */
  private async sendSwimTo(peerId: string, msg: SwimMessage): Promise<void> {
    if (this.noSwim.has(peerId) || this.timers.stopped) return
    let s = this.swimStreams.get(peerId)
    if (s === undefined) this.swimStreams.set(peerId, (s = { ch: undefined, queue: [], busy: false }))
    // A member that does not drain its stream: keep the newest few (probes are retried anyway).
    if (s.queue.length >= 16) s.queue.shift()
    s.queue.push(msg)
    if (s.busy) return
    s.busy = true
    try {
      while (s.queue.length > 0) {
        if (s.ch === undefined) {
          const stream = await this.c.libp2p.dialProtocol(peerIdFromString(peerId), SWIM_PROTOCOL, {
            signal: AbortSignal.timeout(Math.min(this.c.tunables.dialTimeoutMs, this.c.tunables.probeIntervalMs * 2)),
          })
          s.ch = streamChannel(stream, MAX_SWIM_MESSAGE_BYTES)
        }
        await s.ch.write(encodeSwimMessage(s.queue.shift()!))
      }
    } catch (err) {
      if ((err as Error).name === 'UnsupportedProtocolError') this.noSwim.add(peerId)
      this.c.log.debug({ peer: peerId, err: shortError(err) }, 'swim stream failed; reopening at the next message')
      s.ch?.abort(err instanceof Error ? err : new Error(String(err)))
      s.ch = undefined
      s.queue.length = 0
    } finally {
      s.busy = false
    }
  }

  /** Listen on the members topic and start the heartbeat and upkeep timers (the first upkeep is the mesh's to run). */
  start(): void {
    const pubsub = this.c.libp2p.services.pubsub
    const mt = membersTopic(this.c.clusterId())
    pubsub.topicValidators.set(mt, (peer, msg) => this.validateMemberMessage(peer, msg))
    pubsub.subscribe(mt)
    this.timers.every(this.c.tunables.heartbeatIntervalMs, () => this.heartbeat())
    if (this.swimOn) this.timers.every(Math.max(10, Math.floor(this.c.tunables.probeTimeoutMs / 2)), () => this.swimTick())
    this.timers.every(this.c.tunables.maintainIntervalMs, () => this.upkeep())
  }

  stop(): void {
    this.timers.stop()
  }

  /** A member became known (admitted, loaded from disk); keeps what liveness knows of it. */
  upsert(info: MemberInfo): void {
    this.table.upsert(info, this.c.clock.now())
    this.swim.add(info.peerId, this.c.clock.now())
  }

  /** A member was removed: true when it was in the view. */
  forget(peerId: string): boolean {
    this.directHeartbeatAt.delete(peerId)
    this.swim.remove(peerId)
    this.connectedAt.delete(peerId)
    this.legacyAt.delete(peerId)
    this.noSwim.delete(peerId)
    const s = this.swimStreams.get(peerId)
    s?.ch?.abort(new Error('member removed'))
    this.swimStreams.delete(peerId)
    return this.table.remove(peerId)
  }

  /** Every member with its liveness state; `connected` for the others. */
  view(): MemberView[] {
    const connected = new Set(this.c.connections.connected())
    const view = this.table.view(this.c.clock.now())
    if (!this.swimOn) return view.map((m) => (m.self ? m : { ...m, connected: connected.has(m.peerId) }))
    return view.map((m) => {
      if (m.self) return m
      const v = this.swim.view(m.peerId)
      if (v === undefined || this.isLegacy(m.peerId)) return { ...m, connected: connected.has(m.peerId) }
      // lastSeen: the newest evidence it was alive (direct, through a helper, or vouched for by a member).
      const lastSeen = v.evidence === null ? m.lastSeen : Math.max(v.evidence, m.lastSeen ?? Number.NEGATIVE_INFINITY)
      return {
        ...m,
        state: v.state,
        lastSeen,
        rttMs: v.rttMs ?? m.rttMs,
        connected: connected.has(m.peerId),
        ...(v.downSince !== null ? { downSince: v.downSince } : {}),
      }
    })
  }

  /**
   * How fresh the evidence of a live member normally is (the fence's "heard now", fence.ts):
   * heartbeats, two intervals; swim, evidence spreads epidemically, one exchange a period each way,
   * so within ~log2(N) periods, plus two periods of slack.
   */
  heardWindowMs(): number {
    const t = this.c.tunables
    if (!this.swimOn) return 2 * t.heartbeatIntervalMs
    return Math.max(2 * t.heartbeatIntervalMs, (Math.ceil(Math.log2(Math.max(2, this.swim.size()))) + 2) * t.probeIntervalMs)
  }

  /**
   * Authenticated traffic from a member (a sync session, a merged store update): it is alive.
   * `quiet` leaves a transition unreported: a merged store update has never reported one, and the
   * split of mesh.ts kept that as it was (whether it should is a change of its own).
   */
  heard(peerId: string, opts: { quiet?: boolean } = {}): void {
    const now = this.c.clock.now()
    const tr = this.table.heard(peerId, now)
    this.swim.heard(peerId, now)
    if (this.swimOn && !this.isLegacy(peerId)) return
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
    if (this.swimOn && !this.isLegacy(from)) {
      // Its probes and acks say whether it holds a connection to every live member; they reach us
      // every ~N/2 periods (we probe it, it probes us), so the claim is trusted for about four of those.
      const t = this.c.tunables
      return !this.swim.fullWithin(from, this.c.clock.now(), Math.max(t.suspectAfterMs, 2 * this.swim.size() * t.probeIntervalMs))
    }
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
    // swim: probes prove life and measure round trips; members on heartbeats are pinged as before.
    this.ping(this.swimOn ? new Set([...connected].filter((p) => this.isLegacy(p))) : connected, now)
    for (const p of this.lastPing.keys()) if (!connected.has(p)) this.lastPing.delete(p)
    for (const p of this.pingFailures.keys()) if (!connected.has(p)) this.pingFailures.delete(p)
    for (const p of this.noDirectHeartbeat) if (!connected.has(p)) this.noDirectHeartbeat.delete(p)
    for (const p of this.noSwim) if (!connected.has(p)) this.noSwim.delete(p)
    for (const p of this.swimMisses.keys()) if (!connected.has(p)) this.swimMisses.delete(p)
    for (const [p, h] of this.swimStreams) {
      if (connected.has(p) || h.busy) continue
      h.ch?.abort(new Error('member disconnected'))
      this.swimStreams.delete(p)
    }
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
    if (this.swimOn) {
      this.legacyAt.set(from, this.c.clock.now())
      this.swim.heard(from, this.c.clock.now())
    }
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
    if (this.swimOn) {
      // Heartbeats only for members that judge by them; their transitions come from the table.
      const legacy = connected.filter((p) => this.isLegacy(p))
      const frame = encodeMemberMessage(hb)
      for (const p of legacy) if (!this.noDirectHeartbeat.has(p)) void this.sendHeartbeat(p, frame)
      if (legacy.some((p) => this.noDirectHeartbeat.has(p))) await this.publishMembers(hb)
      for (const tr of this.table.tick(this.c.clock.now())) if (this.isLegacy(tr.peerId)) this.transition(tr)
      return
    }
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
    for (const m of this.swimOn ? this.view() : this.table.view(now)) {
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
