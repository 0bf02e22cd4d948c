/**
 * SWIM failure detection with Lifeguard's suspicion (as memberlist's state.go and suspicion.go do
 * it), as a pure state machine over an injected `now` and random source: the caller delivers
 * messages (`receive`), calls `advance` often enough (every probeTimeoutMs/2 or finer) and sends
 * what they return. The agent's Liveness runs it over a libp2p stream protocol; the simulator runs
 * the same code over its virtual network.
 *
 * - Each protocol period (probeIntervalMs) this node probes ONE member, in a shuffled round-robin
 *   order: a direct ping; without an ack within probeTimeoutMs, `indirectChecks` other members are
 *   asked to ping it (ping-req) and forward its ack. No ack by the end of the period: the member is
 *   suspect at the incarnation we knew.
 * - A suspicion lasts between min = suspicionMult·log10(N)·period and max = suspicionMaxMult·min;
 *   each independent confirmation (another member suspecting it too) brings it closer to min
 *   (Lifeguard: max − (max − min)·log(c+1)/log(k+1)). Then the member is dead.
 * - A member refutes a suspicion (or death) of itself by raising its incarnation. Its alive claim
 *   at that incarnation is signed by its own key, so no other member can declare it alive at an
 *   incarnation it did not publish: a crashed member cannot be kept alive by a liar.
 * - Changes (alive/suspect/dead at an incarnation) ride on probe messages (at most maxPiggyback
 *   each), each sent retransmitMult·ceil(log10(N+1)) times, not on a timer to everyone.
 * - Evidence: the local time of the newest proof that a member was alive and could reach us — an
 *   ack to our probe dates it at the probe's send time; a message from it at its arrival; and each
 *   probe message carries the sender's evidence ages (`ev`), so evidence spreads epidemically with
 *   a constant number of messages. The fence (src/sched/fencing.ts) counts a quorum from it.
 */

export type SwimState = 'alive' | 'suspect' | 'dead'

/** The detector's settings that are mesh tunables (MeshTunables, failureDetector 'swim'). */
export interface SwimTunables {
  /** One member is probed per period. */
  probeIntervalMs: number
  /** Without a direct ack this long, `indirectChecks` other members are asked to probe. */
  probeTimeoutMs: number
  indirectChecks: number
  /** A suspicion lasts from suspicionMult·log10(N)·probeIntervalMs up to suspicionMaxMult times that. */
  suspicionMult: number
  suspicionMaxMult: number
  /** Each change is piggybacked retransmitMult·ceil(log10(N+1)) times. */
  retransmitMult: number
}

export interface SwimOptions extends SwimTunables {
  /** Changes piggybacked on one message at most. */
  maxPiggyback: number
  /** Evidence older than this is not passed on. */
  evidenceHorizonMs: number
  /** Every this many protocol periods, ping one dead member too (a healed partition, a node back). */
  deadProbeEvery: number
}

export const swimTunableDefaults: Readonly<SwimTunables> = Object.freeze({
  probeIntervalMs: 1_000,
  probeTimeoutMs: 500,
  indirectChecks: 3,
  suspicionMult: 4,
  suspicionMaxMult: 6,
  retransmitMult: 4,
})

export const swimDefaults: Readonly<SwimOptions> = Object.freeze({
  ...swimTunableDefaults,
  maxPiggyback: 8,
  evidenceHorizonMs: 120_000,
  deadProbeEvery: 3,
})

/** The detector's options with the SwimTunables of `t` (the mesh's tunables). */
export function swimOptionsOf(t: SwimTunables): SwimOptions {
  const { probeIntervalMs, probeTimeoutMs, indirectChecks, suspicionMult, suspicionMaxMult, retransmitMult } = t
  return { ...swimDefaults, probeIntervalMs, probeTimeoutMs, indirectChecks, suspicionMult, suspicionMaxMult, retransmitMult }
}

/** A membership change: `sig` (alive only) is the member's own signature over its incarnation. */
export interface SwimUpdate {
  id: string
  s: SwimState
  inc: number
  /** suspect/dead: who suspected it (a confirmation counts once per member). */
  by?: string
  sig?: string
}

/** Evidence ages (ms) by peer-id suffix (evidenceKey). */
export type SwimEvidence = Record<string, number>

export type SwimMessage =
  | { t: 'ping'; seq: number; inc: number; sig: string; up: SwimUpdate[]; ev?: SwimEvidence; full?: boolean }
  | {
      t: 'ack'
      seq: number
      /** The answering member's incarnation and signature (for a forwarded ack: the probed member's). */
      inc: number
      sig: string
      up: SwimUpdate[]
      ev?: SwimEvidence
      full?: boolean
      /** A forwarded ack (indirect probe): the member that answered the helper. */
      of?: string
    }
  | { t: 'ping-req'; seq: number; target: string; up: SwimUpdate[] }

export interface SwimOut {
  to: string
  msg: SwimMessage
}

export interface SwimTransition {
  id: string
  from: SwimState
  to: SwimState
}

export interface SwimDeps {
  /** Uniform integer in [0, n). */
  random: (n: number) => number
  /** This node's signature over "alive at incarnation `inc`". */
  sign: (inc: number) => string
  /** Whether `sig` is member `id`'s own signature over "alive at `inc`". */
  verify: (id: string, inc: number, sig: string) => boolean
  /** Members that may be probed and asked to probe (default: all). The agent leaves out members running heartbeats. */
  eligible?: (id: string) => boolean
  /** Whether this node now holds a connection to every member it does not believe dead (sent as `full`). */
  full?: () => boolean
}

export interface SwimMemberView {
  id: string
  state: SwimState
  inc: number
  /** Local time of the newest evidence it was alive, null when none. */
  evidence: number | null
  /** When this node's view of it left alive (kept through suspect → dead); null while alive. */
  downSince: number | null
  rttMs: number | null
}

interface Suspicion {
  start: number
  k: number
  minMs: number
  maxMs: number
  by: Set<string>
  deadline: number
}

interface Member {
  id: string
  key: string
  inc: number
  sig: string | undefined
  state: SwimState
  evidence: number | null
  downSince: number | null
  rttMs: number | null
  suspicion: Suspicion | undefined
  /** Last direct message that said its sender is connected to every live member. */
  fullAt: number | null
}

interface Probe {
  target: string
  seq: number
  sentAt: number
  /** When the ping-reqs went out (undefined: not yet). */
  indirectAt: number | undefined
  acked: boolean
  /** The target itself answered (not only through a helper). */
  direct: boolean
}

/** The key a member's evidence travels under: the tail of its peer id (the head is the key type's constant prefix). */
export function evidenceKey(id: string): string {
  return id.slice(-10)
}

/** memberlist's suspicionTimeout: suspicionMult · max(1, log10(N)) · period. */
export function suspicionMinMs(o: Pick<SwimOptions, 'suspicionMult' | 'probeIntervalMs'>, n: number): number {
  return Math.round(o.suspicionMult * Math.max(1, Math.log10(Math.max(1, n))) * o.probeIntervalMs)
}

/** Lifeguard: from max down to min as independent confirmations `c` of `k` expected arrive. */
export function suspicionTimeoutMs(c: number, k: number, minMs: number, maxMs: number): number {
  if (k < 1) return minMs
  const frac = Math.log(c + 1) / Math.log(k + 1)
  return Math.max(minMs, Math.floor(maxMs - frac * (maxMs - minMs)))
}

/** memberlist's retransmitLimit: mult · ceil(log10(N + 1)). */
export function retransmitLimit(mult: number, n: number): number {
  return mult * Math.ceil(Math.log10(n + 1))
}

export class SwimDetector {
  private readonly members = new Map<string, Member>()
  private readonly byKey = new Map<string, string | null>()
  private inc: number
  private sig: string
  private order: string[] = []
  private orderAt = 0
  private seq = 0
  private probe: Probe | undefined
  private nextProbeAt = Number.NEGATIVE_INFINITY
  private periods = 0
  /** Pings we sent for another member's ping-req: our seq → whom to forward the ack to. */
  private readonly relays = new Map<number, { requester: string; seq: number; target: string; expires: number }>()
  /** Pending changes to piggyback: one per member (a newer change replaces an older one). */
  private readonly queue = new Map<string, { u: SwimUpdate; sent: number }>()
  private transitions: SwimTransition[] = []
  private misses: string[] = []

  constructor(
    readonly selfId: string,
    private readonly o: SwimOptions,
    private readonly d: SwimDeps,
    /** Starting incarnation: the agent passes its start time, so a restarted node is newer at once. */
    incarnation: number,
  ) {
    this.inc = incarnation
    this.sig = d.sign(incarnation)
  }

  get incarnation(): number {
    return this.inc
  }

  /** A member became known (admitted, loaded from disk): alive at incarnation 0 until it says more. */
  add(id: string, _now: number): void {
    if (id === this.selfId || this.members.has(id)) return
    const key = evidenceKey(id)
    this.byKey.set(key, this.byKey.has(key) ? null : id)
    this.members.set(id, {
      id,
      key,
      inc: 0,
      sig: undefined,
      state: 'alive',
      evidence: null,
      downSince: null,
      rttMs: null,
      suspicion: undefined,
      fullAt: null,
    })
  }

  remove(id: string): boolean {
    const m = this.members.get(id)
    if (m === undefined) return false
    this.members.delete(id)
    if (this.byKey.get(m.key) === id) this.byKey.delete(m.key)
    this.queue.delete(id)
    if (this.probe?.target === id) this.probe = undefined
    return true
  }

  has(id: string): boolean {
    return this.members.has(id)
  }

  /** Authenticated traffic from a member (a sync session, a store update): evidence, no state change. */
  heard(id: string, now: number): void {
    const m = this.members.get(id)
    if (m !== undefined) m.evidence = Math.max(m.evidence ?? now, now)
  }

  view(id: string): SwimMemberView | undefined {
    const m = this.members.get(id)
    if (m === undefined) return undefined
    return { id, state: m.state, inc: m.inc, evidence: m.evidence, downSince: m.downSince, rttMs: m.rttMs }
  }

  views(): SwimMemberView[] {
    return [...this.members.keys()].map((id) => this.view(id)!)
  }

  /** Whether `id`'s last direct message within `withinMs` said it is connected to every live member. */
  fullWithin(id: string, now: number, withinMs: number): boolean {
    const at = this.members.get(id)?.fullAt
    return at !== null && at !== undefined && now - at <= withinMs
  }

  takeTransitions(): SwimTransition[] {
    const t = this.transitions
    this.transitions = []
    return t
  }

  /**
   * Members whose direct probe went unanswered since the last call (an indirect ack may have saved
   * them): the agent hangs up a connection that fails twice running, as TCP may not know it is dead.
   */
  takeDirectMisses(): string[] {
    const m = this.misses
    this.misses = []
    return m
  }

  /** Members counted in N (this node included). */
  size(): number {
    return this.members.size + 1
  }

  /** The protocol clock: ends and starts probes, escalates to indirect probes, expires suspicions. */
  advance(now: number): SwimOut[] {
    const out: SwimOut[] = []
    const p = this.probe
    if (p !== undefined && !p.acked && p.indirectAt === undefined && now >= p.sentAt + this.o.probeTimeoutMs) {
      p.indirectAt = now
      for (const h of this.pickHelpers(p.target, this.o.indirectChecks)) {
        out.push({ to: h, msg: { t: 'ping-req', seq: p.seq, target: p.target, up: this.piggyback(h) } })
      }
    }
    // A probe ends at the end of its period, but never before its indirect probes had probeTimeoutMs.
    const waiting = p !== undefined && !p.acked && (p.indirectAt === undefined || now < p.indirectAt + this.o.probeTimeoutMs)
    if (now >= this.nextProbeAt && !waiting) {
      if (p !== undefined) this.endProbe(p, now)
      this.probe = undefined
      this.nextProbeAt = now + this.o.probeIntervalMs
      this.periods++
      const target = this.nextTarget()
      if (target !== undefined) out.push(this.startProbe(target, now))
      if (this.o.deadProbeEvery > 0 && this.periods % this.o.deadProbeEvery === 0) {
        const dead = [...this.members.values()].filter((m) => m.state === 'dead' && this.eligible(m.id))
        if (dead.length > 0) {
          const m = dead[this.d.random(dead.length)]!
          this.seq++
          out.push({ to: m.id, msg: this.ping(m.id, this.seq, now) })
        }
      }
    }
    for (const m of this.members.values()) {
      if (m.state === 'suspect' && m.suspicion !== undefined && now >= m.suspicion.deadline) {
        this.apply({ id: m.id, s: 'dead', inc: m.inc, by: this.selfId }, now)
      }
    }
    for (const [s, r] of this.relays) if (now >= r.expires) this.relays.delete(s)
    return out
  }

  /** A message from member `from` (the caller checked it is one and that the message is well formed). */
  receive(from: string, msg: SwimMessage, now: number): SwimOut[] {
    const sender = this.members.get(from)
    if (sender === undefined) return []
    const out: SwimOut[] = []
    if (msg.t === 'ping' || (msg.t === 'ack' && msg.of === undefined)) {
      sender.evidence = Math.max(sender.evidence ?? now, now)
      if (msg.full === true) sender.fullAt = now
      this.claim(from, msg.inc, msg.sig, from, now)
    } else {
      sender.evidence = Math.max(sender.evidence ?? now, now)
    }
    for (const u of msg.up) this.apply(u, now)
    switch (msg.t) {
      case 'ping': {
        this.takeEvidence(msg.ev, now)
        out.push({
          to: from,
          msg: { t: 'ack', seq: msg.seq, inc: this.inc, sig: this.sig, up: this.piggyback(from), ev: this.evidence(now), full: this.d.full?.() },
        })
        break
      }
      case 'ping-req': {
        if (!this.members.has(msg.target) || msg.target === from) break
        this.seq++
        this.relays.set(this.seq, { requester: from, seq: msg.seq, target: msg.target, expires: now + this.o.probeIntervalMs })
        out.push({ to: msg.target, msg: this.ping(msg.target, this.seq, now) })
        break
      }
      case 'ack': {
        const p = this.probe
        const subject = msg.of ?? from
        if (p !== undefined && p.seq === msg.seq && p.target === subject) {
          // Alive after we sent the probe: date the evidence (and what it vouches for) at the send time.
          const m = this.members.get(subject)
          if (m !== undefined) {
            m.evidence = Math.max(m.evidence ?? p.sentAt, p.sentAt)
            if (msg.of === undefined) m.rttMs = now - p.sentAt
          }
          if (msg.of === undefined) p.direct = true
          if (msg.of !== undefined) this.claim(subject, msg.inc, msg.sig, from, now)
          p.acked = true
          this.takeEvidence(msg.ev, p.sentAt)
          break
        }
        const r = msg.of === undefined ? this.relays.get(msg.seq) : undefined
        if (r !== undefined && r.target === from) {
          this.relays.delete(msg.seq)
          out.push({ to: r.requester, msg: { t: 'ack', seq: r.seq, inc: msg.inc, sig: msg.sig, up: this.piggyback(r.requester), ev: msg.ev, of: from } })
          break
        }
        // A late ack (after its probe ended) or one for a dead member's ping: evidence as of arrival.
        if (msg.of === undefined) this.takeEvidence(msg.ev, now)
        break
      }
    }
    return out
  }

  // ---- internals ----------------------------------------------------------------------------------

  private eligible(id: string): boolean {
    return this.d.eligible?.(id) ?? true
  }

  private ping(to: string, seq: number, now: number): SwimMessage {
    return { t: 'ping', seq, inc: this.inc, sig: this.sig, up: this.piggyback(to), ev: this.evidence(now), full: this.d.full?.() }
  }

  private startProbe(target: string, now: number): SwimOut {
    this.seq++
    this.probe = { target, seq: this.seq, sentAt: now, indirectAt: undefined, acked: false, direct: false }
    return { to: target, msg: this.ping(target, this.seq, now) }
  }

  private endProbe(p: Probe, now: number): void {
    if (!p.direct) this.misses.push(p.target)
    if (p.acked) return
    const m = this.members.get(p.target)
    if (m === undefined || m.state !== 'alive') return
    this.apply({ id: m.id, s: 'suspect', inc: m.inc, by: this.selfId }, now)
  }

  /** Round-robin over a shuffled list of the members not dead; reshuffled after each pass. */
  private nextTarget(): string | undefined {
    for (let tries = 0; tries < 2; tries++) {
      while (this.orderAt < this.order.length) {
        const id = this.order[this.orderAt++]!
        const m = this.members.get(id)
        if (m !== undefined && m.state !== 'dead' && this.eligible(id)) return id
      }
      this.order = this.shuffle([...this.members.keys()])
      this.orderAt = 0
    }
    return undefined
  }

  private pickHelpers(target: string, k: number): string[] {
    const c = [...this.members.values()].filter((m) => m.id !== target && m.state === 'alive' && this.eligible(m.id)).map((m) => m.id)
    return this.shuffle(c).slice(0, k)
  }

  private shuffle<T>(a: T[]): T[] {
    for (let i = a.length - 1; i > 0; i--) {
      const j = this.d.random(i + 1)
      ;[a[i], a[j]] = [a[j]!, a[i]!]
    }
    return a
  }

  /** An alive claim by (or on behalf of) member `id` at `inc`: a higher incarnation needs its own signature. */
  private claim(id: string, inc: number, sig: string, via: string, now: number): void {
    if (id === this.selfId) return
    const m = this.members.get(id)
    if (m === undefined || inc <= m.inc) return
    if (via !== id && !this.d.verify(id, inc, sig)) return
    this.apply({ id, s: 'alive', inc, sig }, now)
  }

  /** Apply a change (ours or piggybacked); a change that moves our view is passed on. */
  private apply(u: SwimUpdate, now: number): void {
    if (u.id === this.selfId) {
      // Suspected or declared dead at our incarnation or later: refute with a higher one.
      if (u.s !== 'alive' && u.inc >= this.inc) {
        this.inc = u.inc + 1
        this.sig = this.d.sign(this.inc)
        this.enqueue({ id: this.selfId, s: 'alive', inc: this.inc, sig: this.sig })
      }
      return
    }
    const m = this.members.get(u.id)
    if (m === undefined) return
    if (u.s === 'alive') {
      if (u.inc <= m.inc || u.sig === undefined) return
      if (u.sig !== m.sig && !this.d.verify(u.id, u.inc, u.sig)) return
      m.inc = u.inc
      m.sig = u.sig
      m.suspicion = undefined
      this.setState(m, 'alive', now)
      this.enqueue(u)
      return
    }
    if (u.inc < m.inc || m.state === 'dead') return
    const by = u.by !== undefined && (u.by === this.selfId || this.members.has(u.by)) ? u.by : undefined
    if (u.s === 'suspect') {
      if (m.state === 'suspect' && m.suspicion !== undefined) {
        m.inc = u.inc
        if (by !== undefined && !m.suspicion.by.has(by) && m.suspicion.by.size <= m.suspicion.k) {
          m.suspicion.by.add(by)
          const s = m.suspicion
          s.deadline = s.start + suspicionTimeoutMs(s.by.size - 1, s.k, s.minMs, s.maxMs)
          this.enqueue(u)
        }
        return
      }
      m.inc = u.inc
      const n = this.size()
      const minMs = suspicionMinMs(this.o, n)
      const maxMs = this.o.suspicionMaxMult * minMs
      // Lifeguard expects k independent confirmations; with few members there are none to expect.
      const k = n - 2 < this.o.indirectChecks ? 0 : this.o.indirectChecks
      m.suspicion = { start: now, k, minMs, maxMs, by: new Set(by === undefined ? [] : [by]), deadline: now + (k === 0 ? minMs : maxMs) }
      this.setState(m, 'suspect', now)
      this.enqueue(u)
      return
    }
    m.inc = u.inc
    m.suspicion = undefined
    this.setState(m, 'dead', now)
    this.enqueue(u)
  }

  private setState(m: Member, to: SwimState, now: number): void {
    if (m.state === to) return
    const from = m.state
    m.state = to
    if (to === 'alive') m.downSince = null
    else if (m.downSince === null) m.downSince = now
    this.transitions.push({ id: m.id, from, to })
  }

  private enqueue(u: SwimUpdate): void {
    this.queue.set(u.id, { u, sent: 0 })
  }

  /** Up to maxPiggyback changes, least sent first; what the recipient should hear about itself leads. */
  private piggyback(to: string): SwimUpdate[] {
    const out: SwimUpdate[] = []
    const r = this.members.get(to)
    // The recipient is suspect or dead to us: tell it, so it refutes at once (its alive claim was older).
    if (r !== undefined && r.state !== 'alive') out.push({ id: to, s: r.state, inc: r.inc, by: this.selfId })
    if (this.queue.size === 0) return out
    const limit = retransmitLimit(this.o.retransmitMult, this.size())
    const items = [...this.queue.values()].sort((a, b) => a.sent - b.sent)
    for (const it of items) {
      if (out.length >= this.o.maxPiggyback) break
      if (it.u.id === to && it.u.s !== 'alive') continue
      out.push(it.u)
      it.sent++
      if (it.sent >= limit) this.queue.delete(it.u.id)
    }
    return out
  }

  /** Our evidence ages (ms, rounded up) for members with evidence within the horizon; 0 for ourselves. */
  private evidence(now: number): SwimEvidence {
    const ev: SwimEvidence = { [evidenceKey(this.selfId)]: 0 }
    for (const m of this.members.values()) {
      if (m.evidence === null || this.byKey.get(m.key) !== m.id) continue
      const age = Math.max(0, Math.ceil(now - m.evidence))
      if (age <= this.o.evidenceHorizonMs) ev[m.key] = age
    }
    return ev
  }

  /** Another member's evidence ages, as of `base` (our probe's send time for an ack: never later than the truth). */
  private takeEvidence(ev: SwimEvidence | undefined, base: number): void {
    if (ev === undefined) return
    for (const [key, age] of Object.entries(ev)) {
      const id = this.byKey.get(key)
      if (id === undefined || id === null) continue
      const m = this.members.get(id)!
      const t = base - age
      if (m.evidence === null || t > m.evidence) m.evidence = t
    }
  }
}
