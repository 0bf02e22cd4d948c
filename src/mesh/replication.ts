/**
 * Replication of the scopes (one Replicable store each): local updates published on gossip, peers'
 * updates checked and merged, anti-entropy sessions (periodic, on connect, out of turn), relaying
 * what a session brought in, and repair of updates that wait for missing ones.
 * Timers: one anti-entropy round every syncIntervalMs, plus short delays for debounced syncs and repairs.
 */

import { type Message, TopicValidatorResult } from '@libp2p/gossipsub'
import type { PeerId, Stream } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import type { Logger } from 'pino'
import type { Clock, Random } from '../effects/index.ts'
import { OrcError } from '../model/index.ts'
import type { Replicable } from '../store/index.ts'
import { memberOf } from './admission.ts'
import { AntiEntropyPlanner, antiEntropyTunables } from './antientropy.ts'
import type { MemberConnections } from './connections.ts'
import { shortError, withDeadline } from './deadline.ts'
import type { MeshEventBus } from './events.ts'
import { storeTopic } from './gossip.ts'
import { type MeshLibp2p, streamChannel } from './host.ts'
import type { Liveness } from './liveness.ts'
import type { MemberDirectory } from './members.ts'
import type { MemberInfo, MemberTransition } from './membership.ts'
import type { MeshTunables } from './options.ts'
import { applyFromPeer, initiateSync, isLaggingRefusal, respondSync, SYNC_PROTOCOL, type SyncResult } from './sync.ts'
import { Timers } from './timers.ts'
import { isPeerFault } from './wire.ts'

/** Anti-entropy sessions tried in a row for updates that wait for missing ones (repairSoon). */
const REPAIR_ATTEMPTS = 5

export interface ReplicationComponents {
  libp2p: Pick<MeshLibp2p, 'handle' | 'dialProtocol' | 'services'>
  peerId: string
  clusterId: () => string
  clock: Clock
  random: Random
  tunables: MeshTunables
  log: Logger
  events: MeshEventBus
  directory: Pick<MemberDirectory, 'list' | 'has'>
  connections: Pick<MemberConnections, 'connected'>
  liveness: Pick<Liveness, 'heard' | 'forwards'>
  isMember: (peerId: string) => boolean
  /** Removed from the cluster: its gossip is dropped (its author is never a member again). */
  isRemoved?: (peerId: string) => boolean
  misbehaved: (peerId: string, reason: string) => Promise<void>
  /** A member that member `via` listed in a sync session: the mesh vets and admits it. */
  learnt: (info: MemberInfo, via: string) => Promise<void>
  /** Fault injection (MeshOptions.dropStoreGossip): true drops an incoming store gossip message. */
  dropStoreGossip?: (fromPeer: string, scope: string) => boolean
}

/**
 * One scope's repair: attempts so far, when the next may start after a failed one, and the peers of
 * a later refusal that came in while it ran (it may have asked before that update was published,
 * so it runs again once it ends).
 */
interface RepairState {
  attempts: number
  until?: number
  again?: readonly string[]
}

export class Replication {
  private readonly scopes = new Map<string, { store: Replicable; unsubscribe: () => void }>()
  /** Out-of-turn anti-entropy: recovered members first, and relaying what a session brought in. */
  private readonly planner: AntiEntropyPlanner
  private readonly timers: Timers
  /** Sessions we initiated that are running, by peer and scope. */
  private readonly syncing = new Set<string>()
  /** Peers with a debounced sync pending (syncSoon). */
  private readonly syncPending = new Set<string>()
  /** Scopes being repaired (see repairSoon). */
  private readonly repairs = new Map<string, RepairState>()
  /** Senders whose gossip we ignored because they were not (yet) members. */
  private readonly ignoredSenders = new Set<string>()

  constructor(private readonly c: ReplicationComponents) {
    this.timers = new Timers(c.clock, c.log)
    this.planner = new AntiEntropyPlanner(antiEntropyTunables(c.tunables), (n) => this.randomInt(n), c.clock.now())
  }

  /** Answer anti-entropy sessions (members only). */
  async install(): Promise<void> {
    const t = this.c.tunables
    await this.c.libp2p.handle(
      SYNC_PROTOCOL,
      async (stream, conn) => {
        const remote = memberOf(stream, conn, this.c.isMember)
        if (remote === undefined) return
        const ch = streamChannel(stream, t.maxFrameBytes)
        const signal = AbortSignal.timeout(t.syncTimeoutMs)
        try {
          const r = await withDeadline(
            respondSync(ch, (s) => this.scopes.get(s)?.store, this.c.directory.list(), t),
            signal,
            () => ch.abort(new Error('sync timed out')),
          )
          await this.afterSync(remote, r, true)
        } catch (err) {
          if (isPeerFault(err)) await this.c.misbehaved(remote, (err as Error).message)
          else {
            this.c.log.debug({ peer: remote, err: shortError(err) }, 'sync (responder) failed')
            ch.abort(err instanceof Error ? err : new Error(String(err)))
          }
        }
      },
      { maxInboundStreams: 16 },
    )
  }

  /** Replicate `scopes` not yet added and start the periodic anti-entropy round. */
  start(scopes: Record<string, Replicable>): void {
    for (const [scope, store] of Object.entries(scopes)) if (!this.scopes.has(scope)) this.addScope(scope, store)
    this.timers.every(this.c.tunables.syncIntervalMs, () => this.syncRound())
  }

  /** Ends the timers and stops publishing local updates. */
  stop(): void {
    this.timers.stop()
    for (const s of this.scopes.values()) s.unsubscribe()
  }

  scopeNames(): string[] {
    return [...this.scopes.keys()]
  }

  addScope(scope: string, store: Replicable): void {
    if (this.scopes.has(scope)) throw new OrcError('conflict', `scope ${scope} is already replicated`)
    const topic = storeTopic(this.c.clusterId(), scope)
    const pubsub = this.c.libp2p.services.pubsub
    const unsubscribe = store.onLocalUpdate((update) => void this.publishUpdate(scope, topic, update))
    this.scopes.set(scope, { store, unsubscribe })
    pubsub.topicValidators.set(topic, (peer, msg) => this.validateStoreMessage(scope, store, peer, msg))
    pubsub.subscribe(topic)
  }

  /** Run anti-entropy now with every connected member (or one peer), all scopes. */
  async syncNow(peerId?: string): Promise<SyncResult[]> {
    const peers = peerId !== undefined ? [peerId] : this.c.connections.connected()
    const out: SyncResult[] = []
    for (const p of peers) {
      for (const scope of this.scopeNames()) {
        const r = await this.syncWith(p, scope).catch((err) => {
          this.c.log.debug({ peer: p, scope, err: shortError(err) }, 'sync failed')
          return undefined
        })
        if (r !== undefined) out.push(r)
      }
    }
    return out
  }

  /**
   * One anti-entropy session with `peerId` for `scope`, initiated by us. `relay: false` keeps what
   * it brings in from being passed on (a joiner's first session).
   */
  async syncWith(peerId: string, scope: string, opts: { relay?: boolean } = {}): Promise<SyncResult> {
    const entry = this.scopes.get(scope)
    if (entry === undefined) throw new OrcError('not_found', `scope ${scope} is not replicated here`)
    const key = `${peerId}\u0000${scope}`
    if (this.syncing.has(key)) throw new OrcError('conflict', `sync with ${peerId} for ${scope} already running`)
    this.syncing.add(key)
    const t = this.c.tunables
    const signal = AbortSignal.timeout(t.syncTimeoutMs)
    const t0 = this.c.clock.now()
    let stream: Stream | undefined
    try {
      stream = await this.c.libp2p.dialProtocol(peerIdFromString(peerId), SYNC_PROTOCOL, {
        signal: AbortSignal.any([signal, AbortSignal.timeout(t.dialTimeoutMs)]),
      })
      const ch = streamChannel(stream, t.maxFrameBytes)
      const r = await withDeadline(initiateSync(ch, scope, entry.store, this.c.directory.list(), t), signal, () => ch.abort(new Error('sync timed out')))
      await this.afterSync(peerId, r, opts.relay ?? true)
      this.c.log.debug({ peer: peerId, scope, ms: this.c.clock.now() - t0, sent: r.sentBytes, received: r.receivedBytes }, 'sync done')
      return r
    } catch (err) {
      if (isPeerFault(err)) await this.c.misbehaved(peerId, (err as Error).message)
      else stream?.abort(err instanceof Error ? err : new Error(String(err)))
      throw err
    } finally {
      this.syncing.delete(key)
    }
  }

  /** Anti-entropy with one peer shortly (debounced), e.g. after ignoring its gossip. */
  syncSoon(peerId: string): void {
    if (this.syncPending.has(peerId) || this.timers.stopped) return
    this.syncPending.add(peerId)
    this.timers.later(() => {
      this.syncPending.delete(peerId)
      void this.syncNow(peerId)
    }, 100)
  }

  /** Whether we ignored gossip from `peerId` while it was not a member (and forget that we did). */
  forgetIgnored(peerId: string): boolean {
    return this.ignoredSenders.delete(peerId)
  }

  /** A member changed liveness state: one back from suspect/dead may get an out-of-turn sync. */
  memberChanged(tr: MemberTransition): void {
    this.planner.memberChanged(tr.peerId, tr.from, tr.to, this.c.clock.now())
  }

  /** Members back from suspect/dead: their gossip and ours was lost meanwhile; sync out of turn. */
  syncRecovered(connected: Set<string>, now: number): void {
    for (const p of this.planner.takeDue(now)) {
      if (connected.has(p)) void this.syncNow(p)
    }
  }

  /** A uniform integer in [0, n) from the injected random source. */
  private randomInt(n: number): number {
    const b = this.c.random(4)
    return (((b[0]! << 24) | (b[1]! << 16) | (b[2]! << 8) | b[3]!) >>> 0) % Math.max(1, n)
  }

  /**
   * The periodic anti-entropy round: one session with one connected member picked at random, a
   * push-pull epidemic as in Serf and as the simulator models it (netsim/sim.ts; heal within 3
   * periods there, with what a session brings in relayed on gossip). Syncing with every connected
   * member each period cost each node O(N) sessions per period, in a burst (docs/benchmarks.md).
   * New connections still sync at once, and `syncNow()` still syncs with everyone.
   */
  private async syncRound(): Promise<void> {
    const peers = this.c.connections.connected()
    if (peers.length === 0) return
    await this.syncNow(peers[this.randomInt(peers.length)]!)
  }

  private async afterSync(peerId: string, r: SyncResult, relay: boolean): Promise<void> {
    this.c.liveness.heard(peerId)
    for (const m of r.remoteMembers) {
      if (!this.c.directory.has(m.peerId)) await this.c.learnt(m, peerId)
    }
    // Revisions new here may be stranded on a few nodes (a partition, lost gossip): pass them on.
    if (this.planner.sessionDone(peerId, r, this.c.clock.now()) && relay && !this.timers.stopped) {
      const entry = this.scopes.get(r.scope)
      if (entry !== undefined) {
        this.c.log.debug({ peer: peerId, scope: r.scope, revisions: r.revisions, bytes: r.receivedBytes }, 'relaying what sync brought in')
        void this.publishUpdate(r.scope, storeTopic(this.c.clusterId(), r.scope), r.received)
      }
    }
    if (r.incomplete) this.repairSoon(r.scope, [])
    this.c.events.emit('sync:done', { peerId, ...r })
  }

  private async publishUpdate(scope: string, topic: string, update: Uint8Array): Promise<void> {
    if (this.timers.stopped) return
    if (update.length > this.c.tunables.maxGossipBytes) {
      // Too big for one gossip message: let anti-entropy carry it now.
      void this.syncNow()
      return
    }
    // Nobody to send it to (a single node, or all peers gone): building and signing a gossip
    // message would be wasted (~5 % of a lone agent's CPU per API write); anti-entropy brings the
    // update to every peer when it connects.
    if (this.c.connections.connected().length === 0 && this.c.libp2p.services.pubsub.getPeers().length === 0) return
    try {
      const { recipients } = await this.c.libp2p.services.pubsub.publish(topic, update)
      // A connected member the publish did not go to (it has not told us its subscriptions yet:
      // right after a join or a reconnect) gets the update by anti-entropy. Otherwise it may get it
      // from nobody (members do not forward what its author sent them directly, see
      // Liveness.forwards), and every later update of ours would wait there for this one.
      const reached = new Set(recipients.map((p) => p.toString()))
      for (const p of this.c.connections.connected()) if (!reached.has(p)) this.syncSoon(p)
    } catch (err) {
      this.c.log.debug({ scope, err: shortError(err) }, 'publish failed; anti-entropy will carry it')
    }
  }

  /**
   * Our store holds updates of `scope` that wait for earlier ones we never received (published
   * before anyone listened, or lost): they stay invisible until those arrive. Rather than wait for
   * the next anti-entropy period (and in a partial mesh, for a session with a member that has
   * them), sync now: first with each of `prefer` in turn, connected or not (the update's author has
   * everything it built on; the forwarder had it), then with random connected members, a few
   * times, until nothing is missing. A gap that outlasts that is left to the periodic rounds.
   */
  private repairSoon(scope: string, prefer: readonly string[]): void {
    const now = this.c.clock.now()
    const current = this.repairs.get(scope)
    if (this.timers.stopped) return
    if (current !== undefined && current.until === undefined) {
      // A repair is running. Its session may have sent our state before the update now refused
      // was even published (CI, 2026-12-05: the last two of 40 writes waited 60 s for the periodic
      // round): run again when it ends.
      current.again = prefer
      return
    }
    if (current !== undefined && current.until !== undefined && current.until > now) return
    const state: RepairState = { attempts: 0 }
    this.repairs.set(scope, state)
    const attempt = async (candidates: readonly string[]): Promise<void> => {
      // The preferred peers first, connected or not (syncWith dials a member we are not connected
      // to: in a partial mesh the author is often one of those), then random connected members.
      const [first, ...rest] = candidates.filter((p) => p !== this.c.peerId && this.c.isMember(p))
      const connected = this.c.connections.connected()
      const peer = first ?? connected[this.randomInt(connected.length)]
      const r = peer === undefined || this.timers.stopped ? undefined : await this.syncWith(peer, scope).catch(() => undefined)
      state.attempts++
      if (r !== undefined && !r.incomplete) {
        this.repairs.delete(scope)
        if (state.again !== undefined) this.repairSoon(scope, state.again)
        return
      }
      if (state.attempts >= REPAIR_ATTEMPTS || this.timers.stopped) {
        // Give the periodic rounds a period before trying again.
        state.until = this.c.clock.now() + this.c.tunables.syncIntervalMs
        this.c.log.debug({ scope, attempts: state.attempts }, 'updates still missing; left to periodic anti-entropy')
        return
      }
      this.timers.later(() => attempt(rest), this.c.tunables.maintainIntervalMs)
    }
    this.timers.later(() => attempt(prefer), 50)
  }

  private async validateStoreMessage(scope: string, store: Replicable, peer: PeerId, msg: Message): Promise<TopicValidatorResult> {
    const source = peer.toString()
    if (msg.type !== 'signed') return TopicValidatorResult.Ignore
    // Written by a removed peer: dropped, and not fetched again from whoever forwarded it.
    if (this.c.isRemoved?.(msg.from.toString()) === true) return TopicValidatorResult.Ignore
    if (!this.c.isMember(msg.from.toString())) {
      // Our member list lags the sender's (its admission has not reached us yet). Ignore — do not
      // punish — and pull the data by anti-entropy from whoever forwarded it, once it is a member.
      if (this.ignoredSenders.size < 1024) this.ignoredSenders.add(msg.from.toString())
      if (this.c.isMember(source)) this.syncSoon(source)
      return TopicValidatorResult.Ignore
    }
    if (this.c.dropStoreGossip?.(source, scope) === true) return TopicValidatorResult.Ignore
    if (msg.data.length > this.c.tunables.maxGossipBytes) {
      await this.c.misbehaved(source, `gossip message of ${msg.data.length} bytes`)
      return TopicValidatorResult.Reject
    }
    // Accept (gossipsub forwards) once the update passed the store's checks and is merged in
    // memory; its fsync goes on meanwhile. Waiting for it at every hop put the disk's latency tail
    // on each hop of a two-hop path (docs/benchmarks.md). A failure to persist after that is this
    // node's disk, not the sender's fault: logged, and anti-entropy brings the update again.
    let merged!: () => void
    let accepted = false
    const inMemory = new Promise<void>((r) => (merged = r))
    const durable = applyFromPeer(store, msg.data, 'a gossip update', {
      onApplied: () => {
        accepted = true
        merged()
      },
    })
    durable.then(
      (applied) => {
        // It builds on updates we never got: fetch them from its author (or the forwarder) now.
        if (applied.incomplete === true) this.repairSoon(scope, [msg.from.toString(), source])
      },
      (err) => {
        if (accepted) this.c.log.warn({ err: shortError(err), scope }, 'gossip update merged but not persisted')
      },
    )
    try {
      await Promise.race([inMemory, durable])
      const from = msg.from.toString()
      this.c.liveness.heard(from, { quiet: true })
      // Merged either way; Ignore only tells gossipsub not to forward it (no penalty, see Liveness.forwards).
      return this.c.liveness.forwards(from, source) ? TopicValidatorResult.Accept : TopicValidatorResult.Ignore
    } catch (err) {
      // Refused because this node lags (content it builds on, or its signer's admission, not here
      // yet): fetch what is missing from its author or the forwarder.
      if (isLaggingRefusal(err)) this.repairSoon(scope, [msg.from.toString(), source])
      if (!isPeerFault(err)) return TopicValidatorResult.Ignore
      await this.c.misbehaved(source, (err as Error).message)
      return TopicValidatorResult.Reject
    }
  }
}
