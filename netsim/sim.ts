/**
 * The simulator: many orc nodes in one process on virtual time. Each node runs the real store
 * (src/store over memory-level), the real liveness state machine (src/mesh MembershipTable) and,
 * when enabled, the agent's binder (src/agent/pods/binder.ts over src/sched); only the transport, the clock and randomness are
 * the simulator's. Events run one at a time in (time, order) sequence and each is awaited to
 * completion, so one seed reproduces a whole run exactly.
 */
import { MemoryLevel } from 'memory-level'
import {
  AntiEntropyPlanner,
  antiEntropyTunables,
  type MemberState,
  MembershipTable,
  meshDefaults,
  SwimDetector,
  type SwimMessage,
  swimDefaults,
} from '../src/mesh/index.ts'
import { openStore, type Store } from '../src/store/index.ts'
import { EventHeap } from './heap.ts'
import { DEFAULT_NETWORK, type LinkModel, type NetworkModel, Partitions, sampleLatency } from './network.ts'
import { Rng } from './rng.ts'

/** Virtual time 0 is this wall-clock instant (so store timestamps look like real ones). */
export const EPOCH = Date.UTC(2025, 0, 1)

export interface SimOptions {
  seed: number
  nodes: number
  /** Nodes are spread round-robin over this many sites (links within a site are `local`). */
  sites: number
  network: NetworkModel
  /**
   * `full`: every node keeps a real MembershipTable fed by heartbeats (O(N²) memory and work).
   * `oracle`: liveness is read from ground truth (for very large propagation runs).
   */
  membership: 'full' | 'oracle'
  /**
   * With `full` membership: `heartbeat` models the heartbeat detector abstractly (each round, every
   * node hears every member it can reach; no messages counted); `swim` runs the real SWIM detector
   * (src/mesh/swim.ts) per node over the simulated network, every probe, ack and probe request a
   * counted message (stats.swimMessages).
   */
  detector: 'heartbeat' | 'swim'
  /** swim: protocol period and direct-ack timeout (the mesh's probeIntervalMs / probeTimeoutMs). */
  probeIntervalMs: number
  probeTimeoutMs: number
  /** Period of the heartbeat round (each live node hears every member it can reach). */
  heartbeatMs: number
  suspectAfterMs: number
  deadAfterMs: number
  /** Anti-entropy period: each node syncs with one random live member this often. */
  syncIntervalMs: number
  /** Gossip mesh degree (gossipsub's D) and its low/high water marks. */
  meshDegree: number
  meshLow: number
  meshHigh: number
  /** How long a gossip message id is remembered (duplicates within it are dropped). */
  seenTtlMs: number
  /** Each node's clock is off by a uniform amount in ±clockSkewMs. */
  clockSkewMs: number
  /** On average every this long each node grafts one random live member into its mesh (and syncs with it). */
  meshRefreshMs: number
  /**
   * The real code's out-of-turn anti-entropy (src/mesh/antientropy.ts): `relay` (on, as in the
   * agent) publishes on gossip what a sync session brought in that was new; `recovery` (off, as in
   * the agent) syncs with up to 3 members per period seen alive again after suspect/dead.
   */
  antiEntropyRelay: boolean
  antiEntropyRecovery: boolean
  /**
   * The store folds its Yjs log into a snapshot every this many updates (store default 5,000, which
   * simulated nodes never reach). Small values make crashes land around snapshots.
   */
  storeSnapshotEvery?: number
}

export const DEFAULT_SIM: Omit<SimOptions, 'seed' | 'nodes'> = {
  sites: 1,
  network: DEFAULT_NETWORK,
  membership: 'full',
  detector: 'heartbeat',
  probeIntervalMs: 1000,
  probeTimeoutMs: 500,
  heartbeatMs: 1000,
  suspectAfterMs: 5000,
  deadAfterMs: 30000,
  syncIntervalMs: 30000,
  meshDegree: 6,
  meshLow: 4,
  meshHigh: 12,
  seenTtlMs: 120_000,
  clockSkewMs: 0,
  meshRefreshMs: 60_000,
  antiEntropyRelay: true,
  antiEntropyRecovery: false,
}

type Msg =
  | { t: 'gossip'; id: string; data: Uint8Array; hop: number; key?: string }
  | { t: 'graft' }
  | { t: 'prune' }
  | { t: 'sync1'; state: Uint8Array; members: number[] }
  | { t: 'sync2'; state: Uint8Array; data: Uint8Array; members: number[] }
  | { t: 'sync3'; data: Uint8Array }
  | { t: 'swim'; m: SwimMessage }

export interface Violation {
  at: number
  what: string
}

export interface AckedWrite {
  revisionId: string
  key: string
  node: number
  at: number
}

export class SimNode {
  readonly id: string
  readonly name: string
  /** The node's disk: survives crashes; everything else is memory and is lost. */
  readonly db: MemoryLevel<string, Uint8Array>
  /** Members this node knows (its persisted member directory). */
  known: number[] = []
  knownSet = new Set<number>()
  up = false
  /** Incremented on every crash so messages and timers addressed to the old process are dropped. */
  gen = 0
  store: Store | null = null
  table: MembershipTable | null = null
  /** detector swim: the node's SWIM detector (lost on a crash like the table). */
  swim: SwimDetector | null = null
  /** Out-of-turn anti-entropy (the real planner from src/mesh); lost on a crash like the table. */
  planner: AntiEntropyPlanner | null = null
  /**
   * Members this process heard → its local time it last did: exactly what the heartbeat rounds fed
   * into `table.heard` (MembershipTable.view() gives the same, but sorts by name: 3× the site-dark run).
   */
  lastHeard = new Map<number, number>()
  /** Members this node considers suspect or dead → its local time when they stopped being alive. */
  notAlive = new Map<number, number>()
  /** Bumped whenever `known` or `notAlive` changes (the binder's membership tick compares it). */
  memberVersion = 0
  mesh = new Set<number>()
  seen = new Set<string>()
  seenOld = new Set<string>()
  skew = 0
  uplinkFree = 0
  downSince = 0
  /** Left for good (churn): not expected back. */
  gone = false
  acked: string[] = []
  readonly rng: Rng
  readonly storeRng: Rng
  /** The anti-entropy planner's own stream, so that turning its rules off leaves every other choice unchanged. */
  readonly plannerRng: Rng
  private msgSeq = 0

  constructor(
    readonly idx: number,
    readonly site: number,
    seed: number,
  ) {
    this.id = `p${idx}`
    this.name = `node-${idx}`
    this.db = new MemoryLevel<string, Uint8Array>({ keyEncoding: 'utf8', valueEncoding: 'view' })
    this.rng = new Rng(seed, 1_000_000 + idx * 2)
    this.storeRng = new Rng(seed, 1_000_001 + idx * 2)
    this.plannerRng = new Rng(seed, 3_000_000 + idx)
  }

  nextMsgId(): string {
    return `${this.idx}.${this.gen}.${this.msgSeq++}`
  }

  learn(idx: number): boolean {
    if (this.knownSet.has(idx)) return false
    this.knownSet.add(idx)
    this.known.push(idx)
    this.memberVersion++
    return true
  }
}

export interface SimStats {
  sent: number
  bytes: number
  lost: number
  blocked: number
  duplicated: number
  gossipDuplicates: number
  applies: number
  syncSessions: number
  /** Sync results relayed on gossip, and out-of-turn syncs with recovered members. */
  relays: number
  recoverySyncs: number
  /** detector swim: probes, acks and probe requests sent (and their bytes, JSON as on the wire). */
  swimMessages: number
  swimBytes: number
  events: number
}

export interface Tracked {
  key: string
  writer: number
  t0: number
  /** Virtual time each node first held the write (-1: not yet). */
  at: Float64Array
  hop: Int16Array
  missing: number
}

/**
 * The node's disk as one process sees it: once that process has crashed, disk writes it starts
 * (a fire-and-forget snapshot still folding the log, a group commit still queued) never happen and
 * never complete — as when the process is killed — instead of landing on the disk its successor
 * opens. Writes started before the crash complete (they were handed to the OS).
 */
function fencedDb(db: MemoryLevel<string, Uint8Array>, node: SimNode, gen: number): MemoryLevel<string, Uint8Array> {
  const writes = new Set<PropertyKey>(['batch', 'put', 'del', 'clear'])
  return new Proxy(db, {
    get(target, key) {
      const v = Reflect.get(target, key, target)
      if (typeof v !== 'function') return v
      if (writes.has(key)) {
        return (...args: unknown[]) => (node.gen !== gen ? new Promise(() => {}) : (v as (...a: unknown[]) => unknown).apply(target, args))
      }
      return v.bind(target)
    },
  })
}

export class Simulator {
  readonly opts: SimOptions
  readonly nodes: SimNode[] = []
  readonly net = new Partitions()
  readonly rng: Rng
  private readonly netRng: Rng
  private readonly heap = new EventHeap()
  now = 0
  readonly violations: Violation[] = []
  readonly acked: AckedWrite[] = []
  readonly stats: SimStats = {
    sent: 0,
    bytes: 0,
    lost: 0,
    blocked: 0,
    duplicated: 0,
    gossipDuplicates: 0,
    applies: 0,
    syncSessions: 0,
    relays: 0,
    recoverySyncs: 0,
    swimMessages: 0,
    swimBytes: 0,
    events: 0,
  }
  readonly tracked = new Map<string, Tracked>()
  private writeSeq = 0
  /**
   * Current heartbeat-round and anti-entropy periods. Scenarios may lengthen them through a long
   * quiet stretch (a week of nothing happening): a heartbeat round makes every reachable member
   * heard and is immediately followed by the timeout check, so a longer round changes only the
   * time resolution, not which members are suspected.
   */
  heartbeatMs: number
  syncIntervalMs: number
  /**
   * Heartbeats reach a member through relays (true, as gossip carries them in the agent: the
   * transitive closure over partitions) or only over a direct link that is not cut (false: the
   * worst case for a pairwise drop, where A and B suspect each other while both hear C).
   */
  heartbeatRelay = true
  /** Extra work per node after each heartbeat round (the scheduler loop hooks in here). */
  onRound: ((n: SimNode) => void | Promise<void>) | null = null
  /** Called when a node's process starts (first boot, restart, join). */
  onBoot: ((n: SimNode) => void) | null = null
  /** Called after every heartbeat round (continuous checks hook in here). */
  afterRound: (() => void | Promise<void>) | null = null
  private readonly idxOf = new Map<string, number>()

  constructor(opts: Partial<SimOptions> & { seed: number; nodes: number }) {
    this.opts = { ...DEFAULT_SIM, ...opts, network: { ...DEFAULT_NETWORK, ...opts.network } }
    this.rng = new Rng(opts.seed, 1)
    this.netRng = new Rng(opts.seed, 2)
    this.heartbeatMs = this.opts.heartbeatMs
    this.syncIntervalMs = this.opts.syncIntervalMs
  }

  // ------------------------------------------------------------------ setup

  /** Create and start the initial nodes: all know each other, meshes are random. */
  async start(): Promise<void> {
    const n = this.opts.nodes
    for (let i = 0; i < n; i++) this.addNode()
    for (const node of this.nodes) for (let i = 0; i < n; i++) node.learn(i)
    for (const node of this.nodes) await this.boot(node)
    // Initial gossip mesh: each node grafts half its degree at random (edges are symmetric).
    for (const node of this.nodes) {
      for (const p of node.rng.sample(n, Math.ceil(this.opts.meshDegree / 2) + 1)) {
        if (p === node.idx) continue
        node.mesh.add(p)
        this.nodes[p]!.mesh.add(node.idx)
      }
    }
    this.every(
      () => this.heartbeatMs,
      0,
      () => this.heartbeatRound(),
    )
    this.every(this.opts.seenTtlMs, 0, () => {
      for (const nd of this.nodes) {
        nd.seenOld = nd.seen
        nd.seen = new Set()
      }
    })
  }

  private addNode(): SimNode {
    const idx = this.nodes.length
    const node = new SimNode(idx, idx % this.opts.sites, this.opts.seed)
    node.skew = this.opts.clockSkewMs > 0 ? Math.round((node.rng.next() * 2 - 1) * this.opts.clockSkewMs) : 0
    this.nodes.push(node)
    this.idxOf.set(node.id, idx)
    this.net.ensure(this.nodes.length)
    return node
  }

  /** Start a node's process from whatever is on its disk. */
  private async boot(node: SimNode): Promise<void> {
    const db = fencedDb(node.db, node, node.gen)
    node.store = await openStore({ dir: node.name, db: db as never, randomBytes: (k) => node.storeRng.bytes(k), snapshotEvery: this.opts.storeSnapshotEvery })
    node.up = true
    node.gone = false
    const now = this.localNow(node)
    if (this.opts.membership === 'full') {
      const table = new MembershipTable(node.id, { suspectAfterMs: this.opts.suspectAfterMs, deadAfterMs: this.opts.deadAfterMs })
      for (const k of node.known) table.upsert({ peerId: `p${k}`, name: `node-${k}`, addresses: [] }, now)
      node.table = table
      if (this.opts.detector === 'swim') this.bootSwim(node, now)
    }
    node.planner = new AntiEntropyPlanner(
      antiEntropyTunables({ ...meshDefaults, syncIntervalMs: this.opts.syncIntervalMs, recoverySyncsPerPeriod: this.opts.antiEntropyRecovery ? 3 : 0 }),
      (k) => node.plannerRng.int(k),
      now,
    )
    const gen = node.gen
    this.onBoot?.(node)
    node.store.onLocalUpdate((update) => {
      if (node.gen !== gen) return
      const id = node.nextMsgId()
      node.seen.add(id)
      const key = this.pendingKey
      for (const p of node.mesh) this.send(node, p, { t: 'gossip', id, data: update, hop: 1, key }, update.length + 64)
    })
    // Anti-entropy loop, at a random phase per process start.
    const first = node.rng.int(this.opts.syncIntervalMs)
    this.every(
      () => this.syncIntervalMs,
      first,
      () => {
        if (!node.up || node.gen !== gen) return false
        const peer = this.randomAlivePeer(node)
        if (peer !== undefined) this.startSync(node, peer)
      },
    )
  }

  localNow(node: SimNode): number {
    return EPOCH + this.now + node.skew
  }

  // ------------------------------------------------------------------ event loop

  at(t: number, fn: () => void | Promise<void>): void {
    this.heap.push(Math.max(t, this.now), fn)
  }

  /** Run `fn` every `period` ms starting at now+offset, until it returns false. */
  every(period: number | (() => number), offset: number, fn: () => unknown): void {
    const tick = async () => {
      let r = fn()
      if (r instanceof Promise) r = await r
      if (r !== false) this.at(this.now + (typeof period === 'number' ? period : period()), tick)
    }
    this.at(this.now + offset, tick)
  }

  async runUntil(t: number): Promise<void> {
    for (;;) {
      const next = this.heap.peekTime()
      if (next === undefined || next > t) break
      const e = this.heap.pop()!
      this.now = e.t
      this.stats.events++
      const r = e.fn()
      if (r !== undefined) await r
    }
    this.now = Math.max(this.now, t)
  }

  async runFor(ms: number): Promise<void> {
    await this.runUntil(this.now + ms)
  }

  /** Step until `pred` holds (checked every `stepMs`) or `maxMs` passed; returns the time it held, or undefined. */
  async runUntilTrue(pred: () => boolean | Promise<boolean>, maxMs: number, stepMs: number): Promise<number | undefined> {
    const end = this.now + maxMs
    for (;;) {
      if (await pred()) return this.now
      if (this.now >= end) return undefined
      await this.runUntil(Math.min(end, this.now + stepMs))
    }
  }

  violation(what: string): void {
    this.violations.push({ at: this.now, what })
  }

  // ------------------------------------------------------------------ transport

  private link(a: SimNode, b: SimNode): LinkModel {
    return a.site === b.site ? this.opts.network.local : this.opts.network.wide
  }

  private send(from: SimNode, to: number, msg: Msg, size: number): void {
    if (!from.up) return
    const dst = this.nodes[to]!
    this.stats.sent++
    this.stats.bytes += size
    if (this.net.blocked(from.idx, to)) {
      this.stats.blocked++
      return
    }
    const link = this.link(from, dst)
    if (this.netRng.chance(link.loss)) {
      this.stats.lost++
      return
    }
    const depart = Math.max(this.now, from.uplinkFree) + (size * 1000) / this.opts.network.uplinkBytesPerSec
    from.uplinkFree = depart
    const copies = this.netRng.chance(link.duplicate) ? 2 : 1
    if (copies === 2) this.stats.duplicated++
    for (let c = 0; c < copies; c++) {
      let lat = sampleLatency(link.latency, this.netRng)
      if (this.netRng.chance(link.reorder)) lat += this.netRng.next() * link.reorderMs
      const gen = dst.gen
      this.at(depart + lat, () => {
        if (!dst.up || dst.gen !== gen) return
        if (this.net.blocked(from.idx, to)) {
          this.stats.blocked++
          return
        }
        return this.receive(dst, from.idx, msg)
      })
    }
  }

  private async receive(node: SimNode, from: number, msg: Msg): Promise<void> {
    switch (msg.t) {
      case 'gossip': {
        if (node.seen.has(msg.id) || node.seenOld.has(msg.id)) {
          this.stats.gossipDuplicates++
          return
        }
        node.seen.add(msg.id)
        const revs = await this.apply(node, from, msg.data, 'gossip')
        if (revs === undefined) return
        if (msg.key !== undefined) this.arrived(node, msg.key, msg.hop)
        else if (revs > 0 && this.tracked.size > 0) this.checkTracked(node)
        for (const p of node.mesh) if (p !== from) this.send(node, p, { ...msg, hop: msg.hop + 1 }, msg.data.length + 64)
        return
      }
      case 'graft':
        if (node.mesh.size < this.opts.meshHigh) node.mesh.add(from)
        else this.send(node, from, { t: 'prune' }, 32)
        return
      case 'prune':
        node.mesh.delete(from)
        return
      case 'sync1': {
        this.learnMembers(node, msg.members)
        const data = await node.store!.encodeMissing(msg.state)
        const state = node.store!.encodeSyncState()
        this.send(node, from, { t: 'sync2', state, data, members: node.known }, state.length + data.length + node.known.length * 48)
        return
      }
      case 'sync2': {
        this.learnMembers(node, msg.members)
        const revs = await this.apply(node, from, msg.data, 'sync')
        if (!node.up) return
        const data = await node.store!.encodeMissing(msg.state)
        this.send(node, from, { t: 'sync3', data }, data.length + 16)
        this.sessionDone(node, from, msg.data, revs)
        return
      }
      case 'sync3': {
        const revs = await this.apply(node, from, msg.data, 'sync')
        this.sessionDone(node, from, msg.data, revs)
        return
      }
      case 'swim': {
        // As the agent: a message from a non-member is ignored.
        if (node.swim === null || !node.knownSet.has(from)) return
        this.sendSwim(node, node.swim.receive(`p${from}`, msg.m, this.localNow(node)))
        this.swimTransitions(node)
        return
      }
    }
  }

  /** Revisions the store recorded, or undefined when it refused the update (a violation). */
  private async apply(node: SimNode, from: number, data: Uint8Array, how: string): Promise<number | undefined> {
    try {
      const r = await node.store!.applyRemote(data)
      this.stats.applies++
      if (how === 'sync' && r.revisions > 0 && this.tracked.size > 0) this.checkTracked(node)
      return r.revisions
    } catch (err) {
      this.violation(`${node.name} refused a ${how} update from node-${from}: ${(err as Error).message}`)
      return undefined
    }
  }

  /** One side of a sync session is done: relay what it brought in when the planner says so. */
  private sessionDone(node: SimNode, from: number, data: Uint8Array, revisions: number | undefined): void {
    if (!node.up || node.planner === null || revisions === undefined) return
    const relay = node.planner.sessionDone(`p${from}`, { revisions, receivedBytes: data.length }, this.localNow(node))
    if (!relay || !this.opts.antiEntropyRelay) return
    this.stats.relays++
    const id = node.nextMsgId()
    node.seen.add(id)
    for (const p of node.mesh) this.send(node, p, { t: 'gossip', id, data, hop: 1 }, data.length + 64)
  }

  startSync(a: SimNode, b: number): void {
    if (!a.up || a.store === null) return
    this.stats.syncSessions++
    const state = a.store.encodeSyncState()
    this.send(a, b, { t: 'sync1', state, members: a.known }, state.length + a.known.length * 48)
  }

  private learnMembers(node: SimNode, members: number[]): void {
    if (members.length === node.known.length) return
    const now = this.localNow(node)
    for (const m of members) {
      if (node.learn(m)) {
        node.table?.upsert({ peerId: `p${m}`, name: `node-${m}`, addresses: [] }, now)
        node.swim?.add(`p${m}`, now)
      }
    }
  }

  // ------------------------------------------------------------------ membership and mesh

  /** Does `node` consider `peer` alive? */
  isAlive(node: SimNode, peer: number): boolean {
    if (peer === node.idx) return node.up
    if (this.opts.membership === 'oracle') {
      const p = this.nodes[peer]!
      return p.up && this.net.reaches(peer, node.idx)
    }
    return node.knownSet.has(peer) && !node.notAlive.has(peer)
  }

  randomAlivePeer(node: SimNode): number | undefined {
    for (let i = 0; i < 16; i++) {
      const p = node.rng.pick(node.known)
      if (p !== node.idx && this.isAlive(node, p)) return p
    }
    return undefined
  }

  private async heartbeatRound(): Promise<void> {
    const full = this.opts.membership === 'full'
    const upNodes = this.nodes.filter((n) => n.up)
    for (const node of upNodes) {
      if (full && node.swim !== null) this.swimEvidence(node)
      else if (full) this.hearAll(node, upNodes)
      this.maintainMesh(node)
    }
    if (this.opts.antiEntropyRecovery) {
      for (const node of upNodes) {
        if (!node.up || node.planner === null) continue
        for (const p of node.planner.takeDue(this.localNow(node))) {
          const idx = this.idxOf.get(p)
          if (idx === undefined || !this.isAlive(node, idx)) continue
          this.stats.recoverySyncs++
          this.startSync(node, idx)
        }
      }
    }
    if (this.onRound) for (const node of upNodes) if (node.up) await this.onRound(node)
    if (this.afterRound) await this.afterRound()
  }

  /** The real SWIM detector on `node`: its clock every half probe timeout, fake signatures (`p<i>:<inc>`). */
  private bootSwim(node: SimNode, now: number): void {
    const o = this.opts
    const swim = new SwimDetector(
      node.id,
      { ...swimDefaults, probeIntervalMs: o.probeIntervalMs, probeTimeoutMs: o.probeTimeoutMs },
      { random: (n) => node.rng.int(n), sign: (inc) => `${node.id}:${inc}`, verify: (id, inc, sig) => sig === `${id}:${inc}` },
      now,
    )
    for (const k of node.known) swim.add(`p${k}`, now)
    node.swim = swim
    const gen = node.gen
    this.every(Math.max(10, o.probeTimeoutMs / 2), node.rng.int(o.probeIntervalMs), () => {
      if (!node.up || node.gen !== gen || node.swim === null) return false
      this.sendSwim(node, node.swim.advance(this.localNow(node)))
      this.swimTransitions(node)
    })
  }

  private sendSwim(node: SimNode, outs: { to: string; msg: SwimMessage }[]): void {
    for (const o of outs) {
      const to = this.idxOf.get(o.to)
      if (to === undefined) continue
      const size = JSON.stringify(o.msg).length
      this.stats.swimMessages++
      this.stats.swimBytes += size
      this.send(node, to, { t: 'swim', m: o.msg }, size)
    }
  }

  private swimTransitions(node: SimNode): void {
    if (node.swim === null) return
    const now = this.localNow(node)
    for (const t of node.swim.takeTransitions()) this.noteTransition(node, t.id, t.from, t.to, now)
  }

  /** A transition of `node`'s view of member `peerId` (either detector). */
  private noteTransition(node: SimNode, peerId: string, from: MemberState, to: MemberState, now: number): void {
    const idx = this.idxOf.get(peerId)!
    node.planner?.memberChanged(peerId, from, to, now)
    node.memberVersion++
    if (to === 'alive') node.notAlive.delete(idx)
    else if (!node.notAlive.has(idx)) node.notAlive.set(idx, now)
  }

  /** swim: what the detector has evidence of is what the node "heard" (the fence counts its quorum from it). */
  private swimEvidence(node: SimNode): void {
    for (const v of node.swim!.views()) {
      if (v.evidence === null) continue
      const idx = this.idxOf.get(v.id)
      if (idx !== undefined) node.lastHeard.set(idx, v.evidence)
    }
  }

  /** detector swim: `node`'s SWIM state of `peer` (undefined: not known, or another detector). */
  swimState(node: SimNode, peer: number): 'alive' | 'suspect' | 'dead' | undefined {
    return node.swim?.view(`p${peer}`)?.state
  }

  private hearAll(node: SimNode, upNodes: SimNode[]): void {
    const table = node.table!
    const now = this.localNow(node)
    const partitioned = this.net.active
    for (const src of upNodes) {
      if (src === node) continue
      if (partitioned && (this.heartbeatRelay ? !this.net.reaches(src.idx, node.idx) : this.net.blocked(src.idx, node.idx))) continue
      const link = this.link(src, node)
      if (link.loss > 0 && this.netRng.chance(link.loss)) continue
      const t = table.heard(src.id, now)
      if (table.has(src.id)) node.lastHeard.set(src.idx, Math.max(node.lastHeard.get(src.idx) ?? now, now))
      if (t !== undefined) {
        node.memberVersion++
        node.notAlive.delete(src.idx)
        node.planner?.memberChanged(t.peerId, t.from, t.to, now)
      }
    }
    for (const t of table.tick(now)) this.noteTransition(node, t.peerId, t.from, t.to, now)
  }

  private maintainMesh(node: SimNode): void {
    const o = this.opts
    for (const p of node.mesh) if (!this.isAlive(node, p)) node.mesh.delete(p)
    if (node.mesh.size < o.meshLow) {
      for (let tries = 0; tries < 4 * o.meshDegree && node.mesh.size < o.meshDegree; tries++) {
        const p = node.rng.pick(node.known)
        if (p === node.idx || node.mesh.has(p) || !this.isAlive(node, p)) continue
        node.mesh.add(p)
        this.send(node, p, { t: 'graft' }, 32)
        // Anti-entropy on every new connection.
        this.startSync(node, p)
      }
    }
    // Opportunistic graft (like gossipsub's): keeps the mesh a random graph, so after a partition
    // heals the two sides' meshes knit together again.
    if (node.rng.chance(Math.min(1, this.heartbeatMs / o.meshRefreshMs))) {
      const p = this.randomAlivePeer(node)
      if (p !== undefined && !node.mesh.has(p)) {
        if (node.mesh.size >= o.meshDegree) {
          const list = [...node.mesh]
          const q = list[node.rng.int(list.length)]!
          node.mesh.delete(q)
          this.send(node, q, { t: 'prune' }, 32)
        }
        node.mesh.add(p)
        this.send(node, p, { t: 'graft' }, 32)
        this.startSync(node, p)
      }
    }
    if (node.mesh.size > o.meshHigh) {
      const list = [...node.mesh]
      while (node.mesh.size > o.meshDegree) {
        const p = list.splice(node.rng.int(list.length), 1)[0]!
        node.mesh.delete(p)
        this.send(node, p, { t: 'prune' }, 32)
      }
    }
  }

  // ------------------------------------------------------------------ writes

  private pendingKey: string | undefined

  /**
   * A user write on `node` (apply of a small Pod in namespace `w`). Acknowledged once the store
   * returns (the store persists before it acknowledges). `name` lets writes collide on one object.
   */
  async write(node: SimNode, opts: { name?: string; track?: boolean } = {}): Promise<AckedWrite | undefined> {
    if (!node.up || node.store === null) return undefined
    const seq = this.writeSeq++
    // Untracked writes update objects of a small pool (small states: thousands of stores fit).
    const name = opts.name ?? (opts.track ? `t${seq}` : `w${seq % 64}`)
    const key = `w/${name}`
    if (opts.track) {
      const n = this.nodes.length
      const tr: Tracked = { key, writer: node.idx, t0: this.now, at: new Float64Array(n).fill(-1), hop: new Int16Array(n).fill(-1), missing: n }
      this.tracked.set(key, tr)
    }
    this.pendingKey = opts.track ? key : undefined
    const manifest = {
      apiVersion: 'orc/v1',
      kind: 'Pod',
      metadata: { name, namespace: 'w', labels: { seq: String(seq), by: node.name } },
      spec: { containers: [{ name: 'main', image: '/images/app' }] },
    }
    const r = await node.store.apply(manifest as never, { author: 'user:netsim', now: this.localNow(node) })
    this.pendingKey = undefined
    if (opts.track) this.arrived(node, key, 0)
    if (r.revision === null) return undefined
    const w = { revisionId: r.revision.id, key, node: node.idx, at: this.now }
    this.acked.push(w)
    node.acked.push(r.revision.id)
    return w
  }

  private arrived(node: SimNode, key: string, hop: number): void {
    const tr = this.tracked.get(key)
    if (!tr || tr.at[node.idx]! >= 0) return
    tr.at[node.idx] = this.now
    tr.hop[node.idx] = hop
    tr.missing--
  }

  private checkTracked(node: SimNode): void {
    for (const tr of this.tracked.values()) {
      if (tr.at[node.idx]! >= 0) continue
      const [ns, name] = tr.key.split('/') as [string, string]
      if (node.store!.get({ kind: 'Pod', namespace: ns, name })) this.arrived(node, tr.key, -2)
    }
  }

  // ------------------------------------------------------------------ faults

  /** Kill the process: memory is lost, the disk (memory-level database) is kept. */
  crash(node: SimNode, opts: { gone?: boolean } = {}): void {
    if (!node.up) return
    node.up = false
    node.gen++
    node.store = null // no close(): a crash does not flush anything beyond what was acknowledged
    node.table = null
    node.swim = null
    node.planner = null
    node.notAlive.clear()
    node.memberVersion++
    node.lastHeard.clear()
    node.mesh.clear()
    node.seen = new Set()
    node.seenOld = new Set()
    node.downSince = this.now
    node.gone = opts.gone ?? false
  }

  /** Start the process again from its disk; checks that every write it acknowledged survived. */
  async restart(node: SimNode): Promise<void> {
    if (node.up) return
    await this.boot(node)
    const have = new Set((await node.store!.allRevisions()).map((r) => r.id))
    for (const id of node.acked) if (!have.has(id)) this.violation(`${node.name} lost acknowledged revision ${id} across a restart`)
  }

  /** A new node joins through `via` (a live member): admitted, announced, then syncs. */
  async join(via: SimNode): Promise<SimNode> {
    const node = this.addNode()
    for (const k of via.known) node.learn(k)
    node.learn(node.idx)
    via.learn(node.idx)
    // The admission announcement reaches every live node that `via` can reach.
    for (const other of this.nodes) {
      if (!other.up || other === node || !this.net.reaches(via.idx, other.idx)) continue
      if (other.learn(node.idx)) {
        other.table?.upsert({ peerId: node.id, name: node.name, addresses: [] }, this.localNow(other))
        other.swim?.add(node.id, this.localNow(other))
      }
    }
    via.table?.upsert({ peerId: node.id, name: node.name, addresses: [] }, this.localNow(via))
    via.swim?.add(node.id, this.localNow(via))
    await this.boot(node)
    node.mesh.add(via.idx)
    via.mesh.add(node.idx)
    this.startSync(node, via.idx)
    return node
  }

  setSkew(node: SimNode, ms: number): void {
    node.skew = ms
  }

  get upNodes(): SimNode[] {
    return this.nodes.filter((n) => n.up)
  }
}
