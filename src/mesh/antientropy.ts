/**
 * Anti-entropy beyond its period: which members to sync with out of turn, and whether to pass on
 * what a session brought in. Pure bookkeeping over an injected `now` and random source; the Mesh
 * and the simulator (netsim/) both drive it.
 *
 * Why: the periodic round picks peers blind to what they hold, and what a session brings in went
 * no further. After a partition — above all a one-way cut, where the cut-off side's gossip is lost
 * while it still hears the rest — a write made on the cut-off side can sit on one or two nodes, and
 * anti-entropy alone spreads it like a push-pull epidemic: ~log3 N periods (4 at 100 nodes, 6 at
 * 1,000), over the 3-period target (netsim `partition --nodes 100 --seed 512` took 3.5). Two rules:
 *
 *  1. relay — a session that brought in revisions this node did not have publishes what it got on
 *     gossip, so the first pull that finds a stranded write floods it to everyone. Only new
 *     revisions are relayed, so relaying stops by itself once every node has them; updates larger
 *     than `maxRelayBytes` are left to anti-entropy (as big local updates are).
 *  2. recovery (off by default) — a member seen alive again after being suspect or dead is synced
 *     with out of turn, spread over `recoveryJitterMs` and at most `recoveryPerPeriod` sessions per
 *     period. Measured in the simulator (docs/netsim.md): relaying alone brought the worst one-way
 *     heal over 40 seeds at 100 nodes from 3.5 to 0.9 periods, recovery alone only to 2.2, and both
 *     together no better than relaying — while recovery doubled the sync sessions of a churn run
 *     (a member that comes back is synced by every peer within seconds). Kept as a tunable.
 */
import type { MemberState } from './membership.ts'
import type { MeshTunables } from './options.ts'

export interface AntiEntropyTunables {
  /** The periodic anti-entropy interval. */
  periodMs: number
  /** A recovered member is due a sync at a random moment within this long. */
  recoveryJitterMs: number
  /** At most this many out-of-turn sessions with recovered members per period (a token bucket). */
  recoveryPerPeriod: number
  /** Relay what a session brought in only when it is at most this big. */
  maxRelayBytes: number
  /** …and only this long after the process started (before, it is catching up, not finding news). */
  relayAfterStartMs: number
}

/** The planner's tunables from the mesh's (the agent and the simulator both use these). */
export function antiEntropyTunables(
  t: Pick<MeshTunables, 'syncIntervalMs' | 'recoverySyncJitterMs' | 'recoverySyncsPerPeriod' | 'syncRelayMaxBytes' | 'syncRelayAfterStartMs'>,
): AntiEntropyTunables {
  return {
    relayAfterStartMs: t.syncRelayAfterStartMs,
    periodMs: t.syncIntervalMs,
    recoveryJitterMs: t.recoverySyncJitterMs,
    recoveryPerPeriod: t.recoverySyncsPerPeriod,
    maxRelayBytes: t.syncRelayMaxBytes,
  }
}

export class AntiEntropyPlanner {
  /** Recovered members → when they are due a sync. */
  private readonly due = new Map<string, number>()
  private tokens: number
  private refilledAt: number
  private readonly startedAt: number

  constructor(
    private readonly o: AntiEntropyTunables,
    /** Uniform integer in [0, n). */
    private readonly randomInt: (n: number) => number,
    now: number,
  ) {
    this.tokens = o.recoveryPerPeriod
    this.refilledAt = now
    this.startedAt = now
  }

  /** A member changed liveness state. Back to alive from suspect or dead: due a sync soon. */
  memberChanged(peerId: string, from: MemberState, to: MemberState, now: number): void {
    if (this.o.recoveryPerPeriod <= 0) return
    if (to === 'alive' && from !== 'alive') this.due.set(peerId, now + this.randomInt(this.o.recoveryJitterMs + 1))
    else if (to !== 'alive') this.due.delete(peerId)
  }

  /** Members due an out-of-turn sync now, within the budget; each is returned once. */
  takeDue(now: number): string[] {
    if (this.due.size === 0) return []
    this.refill(now)
    const ready = [...this.due].filter(([, t]) => t <= now).sort((a, b) => a[1] - b[1])
    const out: string[] = []
    for (const [p, t] of ready) {
      if (this.tokens >= 1 - 1e-9) {
        this.tokens -= 1
        out.push(p)
        this.due.delete(p)
      } else if (now - t > this.o.periodMs) {
        // Waited a whole period for budget: the periodic round has had its chance at it.
        this.due.delete(p)
      }
    }
    return out
  }

  /** Earliest time a member is due (for a timer), or undefined when none is. */
  nextDue(): number | undefined {
    let min: number | undefined
    for (const t of this.due.values()) if (min === undefined || t < min) min = t
    return min
  }

  /** How many members wait for an out-of-turn sync. */
  get pending(): number {
    return this.due.size
  }

  /**
   * A session with `peerId` finished (either side started it). Returns whether to relay what it
   * brought in on gossip. Not in the first `relayAfterStartMs` (a period) after this process
   * started: a node that just joined or restarted is catching up on what the others already have
   * (netsim churn: relaying that raised messages by two thirds).
   */
  sessionDone(peerId: string, r: { revisions: number; receivedBytes: number }, now: number): boolean {
    this.due.delete(peerId)
    if (now - this.startedAt < this.o.relayAfterStartMs) return false
    return r.revisions > 0 && r.receivedBytes > 0 && r.receivedBytes <= this.o.maxRelayBytes
  }

  private refill(now: number): void {
    const gained = (Math.max(0, now - this.refilledAt) / this.o.periodMs) * this.o.recoveryPerPeriod
    this.tokens = Math.min(this.o.recoveryPerPeriod, this.tokens + gained)
    this.refilledAt = now
  }
}
