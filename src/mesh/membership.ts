/**
 * Liveness as seen by this node: pure bookkeeping over heartbeats and an injected `now`. Heartbeats
 * are ephemeral gossip; nothing here is stored history.
 */
import { byCodeUnits } from '../model/index.ts'
export type MemberState = 'alive' | 'suspect' | 'dead'

export interface MemberInfo {
  peerId: string
  name: string
  /** Dialable multiaddrs without the /p2p suffix. */
  addresses: string[]
}

export interface MemberView extends MemberInfo {
  state: MemberState
  /** Last time this node heard from the member (ms since epoch), null if never. */
  lastSeen: number | null
  rttMs: number | null
  self: boolean
  /**
   * Whether this node holds a connection to it (Mesh.members()). Beyond `fullMeshMax` members most
   * are not connected: they are heard through gossip, relayed by others.
   */
  connected?: boolean
  /**
   * failureDetector swim: since when this node's view of it has not been alive (it learnt of the
   * suspicion then; kept through suspect → dead). The scheduler counts haAfter from the later of
   * this and lastSeen (fence.ts, docs/decisions.md).
   */
  downSince?: number
}

export interface MemberTransition {
  peerId: string
  name: string
  from: MemberState
  to: MemberState
}

interface Entry {
  info: MemberInfo
  since: number
  lastHeard: number | null
  rttMs: number | null
  state: MemberState
}

export class MembershipTable {
  private entries = new Map<string, Entry>()
  constructor(
    readonly selfId: string,
    private readonly timeouts: { suspectAfterMs: number; deadAfterMs: number },
  ) {}

  /** A member became known (admitted, loaded from disk, learned from a peer). Keeps liveness. */
  upsert(info: MemberInfo, now: number): void {
    const e = this.entries.get(info.peerId)
    if (e === undefined) {
      this.entries.set(info.peerId, { info: { ...info }, since: now, lastHeard: null, rttMs: null, state: 'alive' })
      return
    }
    if (info.name !== '') e.info.name = info.name
    if (info.addresses.length > 0) e.info.addresses = [...info.addresses]
  }

  remove(peerId: string): boolean {
    return this.entries.delete(peerId)
  }

  has(peerId: string): boolean {
    return this.entries.has(peerId)
  }

  get(peerId: string): MemberInfo | undefined {
    return this.entries.get(peerId)?.info
  }

  /** A heartbeat (or any authenticated traffic) from a member arrived. */
  heard(peerId: string, now: number, info?: { name?: string; addresses?: string[] }): MemberTransition | undefined {
    const e = this.entries.get(peerId)
    if (e === undefined) return undefined
    e.lastHeard = Math.max(e.lastHeard ?? 0, now)
    if (info?.name !== undefined && info.name !== '') e.info.name = info.name
    if (info?.addresses !== undefined && info.addresses.length > 0) e.info.addresses = [...info.addresses]
    if (e.state !== 'alive') {
      const t = { peerId, name: e.info.name, from: e.state, to: 'alive' as const }
      e.state = 'alive'
      return t
    }
    return undefined
  }

  setRtt(peerId: string, ms: number): void {
    const e = this.entries.get(peerId)
    if (e !== undefined) e.rttMs = ms
  }

  /** The member's last measured round trip, or null when none is known. */
  rttOf(peerId: string): number | null {
    return this.entries.get(peerId)?.rttMs ?? null
  }

  stateAt(e: Entry, now: number): MemberState {
    const ref = Math.max(e.lastHeard ?? 0, e.since)
    const quiet = now - ref
    if (quiet >= this.timeouts.deadAfterMs) return 'dead'
    if (quiet >= this.timeouts.suspectAfterMs) return 'suspect'
    return 'alive'
  }

  /** Recompute states; returns what changed since the last tick (for events). */
  tick(now: number): MemberTransition[] {
    const out: MemberTransition[] = []
    for (const [peerId, e] of this.entries) {
      if (peerId === this.selfId) continue
      const s = this.stateAt(e, now)
      if (s !== e.state) {
        out.push({ peerId, name: e.info.name, from: e.state, to: s })
        e.state = s
      }
    }
    return out
  }

  view(now: number): MemberView[] {
    const out: MemberView[] = []
    for (const [peerId, e] of this.entries) {
      const self = peerId === this.selfId
      out.push({
        ...e.info,
        addresses: [...e.info.addresses],
        state: self ? 'alive' : this.stateAt(e, now),
        lastSeen: self ? now : e.lastHeard,
        rttMs: self ? 0 : e.rttMs,
        self,
      })
    }
    return out.sort((a, b) => byCodeUnits(a.name, b.name) || byCodeUnits(a.peerId, b.peerId))
  }

  list(): MemberInfo[] {
    return [...this.entries.values()].map((e) => ({ ...e.info, addresses: [...e.info.addresses] }))
  }
}

/**
 * Which members to keep connected. Up to `fullMeshMax` members: all of them. Beyond: keep the
 * already-connected ones up to `degree`, and fill up with a random sample (gossip carries the rest).
 */
export function chooseConnections(opts: {
  candidates: string[]
  connected: Set<string>
  fullMeshMax: number
  degree: number
  random: (n: number) => Uint8Array
}): string[] {
  const { candidates, connected } = opts
  if (candidates.length <= opts.fullMeshMax) return [...candidates]
  const keep = candidates.filter((p) => connected.has(p)).slice(0, opts.degree)
  const rest = candidates.filter((p) => !connected.has(p))
  // Fisher–Yates with the injected random source.
  const bytes = opts.random(rest.length * 4)
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  for (let i = rest.length - 1; i > 0; i--) {
    const j = view.getUint32(i * 4) % (i + 1)
    ;[rest[i], rest[j]] = [rest[j], rest[i]]
  }
  return [...keep, ...rest.slice(0, Math.max(0, opts.degree - keep.length))]
}
