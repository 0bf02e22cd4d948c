/**
 * This node's side of self-fencing (src/sched/fencing.ts): how long since it last heard a quorum of
 * its cluster, kept in a lease file that every `ha` container's watchdog reads (the runtime's
 * ContainerRunSpec.fence), and whether an `ha` pod may run here now.
 *
 * The lease only moves forward, and a new agent starts from the previous agent's lease: an agent
 * restart that takes less than the fence window keeps the adopted `ha` pods.
 */
import { readFileSync, renameSync, writeFileSync } from 'node:fs'
import type { Logger } from 'pino'
import type { Cluster, Node } from '../../model/index.ts'
import type { ContainerFence } from '../../runtime/index.ts'
import {
  decideFence,
  type FenceDecision,
  type FencingOptions,
  fenceTermMs,
  fenceWindowMs,
  MIN_FENCE_TERM_MS,
  type QuorumState,
  quorumState,
  resolveFencing,
} from '../../sched/index.ts'
import type { Stored } from '../../store/index.ts'
import { clusterSchedulingOf, isForgotten, type NodeMember } from '../sched/index.ts'

export interface FenceComponents {
  nodeName: string
  /** Membership with last-heard times (the mesh's members()). */
  members(): readonly NodeMember[]
  /** The cluster's Node objects. */
  nodes(): Stored<Node>[]
  /** The cluster's Cluster objects (fencing options in spec.scheduling). */
  clusters(): Stored<Cluster>[]
  now(): number
  /** `<dataDir>/runtime/lease`. */
  leaseFile: string
  log: Logger
  /**
   * How recently a live member is normally heard (the mesh's heardWindowMs): HEARD_MS under
   * heartbeats; under swim it grows with log N, as evidence spreads by gossip (docs/decisions.md).
   */
  heardWindowMs?(): number
}

/** `Cluster.spec.scheduling.fenceQuorum` / `fenceMarginSeconds`. */
export function fencingOptionsOf(clusters: readonly Stored<Cluster>[]): FencingOptions {
  const s = clusterSchedulingOf(clusters)
  const out: Partial<FencingOptions> = {}
  if (s.fenceQuorum !== undefined) out.fenceQuorum = s.fenceQuorum
  if (s.fenceMarginSeconds !== undefined) out.fenceMarginSeconds = s.fenceMarginSeconds
  return resolveFencing(out)
}

/** How long a quorum must be heard after start before this node writes pod status. */
const CATCH_UP_MS = 2_000
/** A quorum heard this recently counts as heard now (two heartbeat intervals). */
const HEARD_MS = 4_000

export class Fence {
  private lastQuorumAt: number
  private leaseWritten = Number.NEGATIVE_INFINITY
  private lastState: QuorumState | undefined
  private hadQuorum: boolean | undefined
  private heardSince: number | undefined
  private caughtUpAt: number | undefined
  /** The Cluster's fencing options as of the last refresh (once a second; decide() runs per pod). */
  private opts: FencingOptions | undefined

  constructor(private readonly c: FenceComponents) {
    this.lastQuorumAt = readLease(c.leaseFile)
  }

  options(): FencingOptions {
    return (this.opts ??= fencingOptionsOf(this.c.clusters()))
  }

  /** Recompute from membership now; renews the lease when the last quorum moved on. */
  refresh(): QuorumState {
    const now = this.c.now()
    const opts = (this.opts = fencingOptionsOf(this.c.clusters()))
    const byName = new Map(this.c.members().map((m) => [m.name, m]))
    const others = this.c
      .nodes()
      .filter((n) => n.metadata.name !== this.c.nodeName)
      .map((n) => {
        const m = byName.get(n.metadata.name)
        const seen = typeof m?.lastSeen === 'number' ? m.lastSeen : undefined
        return { name: n.metadata.name, forgotten: isForgotten(n), ...(seen !== undefined ? { lastSeen: seen } : {}) }
      })
    const q = quorumState(others, now, opts)
    // Heard now (not through the predecessor's lease): since when, without a gap.
    if (now - q.lastQuorumAt < this.heardMs()) this.heardSince ??= now
    else this.heardSince = undefined
    // The lease only moves forward: a fresh agent that has heard no one yet keeps its predecessor's.
    this.lastQuorumAt = Math.max(this.lastQuorumAt, q.lastQuorumAt)
    if (this.caughtUpAt === undefined && (q.needed <= 1 || (this.heardSince !== undefined && now - this.heardSince >= CATCH_UP_MS))) this.caughtUpAt = now
    const state: QuorumState = { ...q, lastQuorumAt: this.lastQuorumAt, ...(this.heardSince !== undefined ? { heardSince: this.heardSince } : {}) }
    this.lastState = state
    const seconds = Math.floor(this.lastQuorumAt / 1000)
    if (Number.isFinite(seconds) && seconds > this.leaseWritten) {
      try {
        writeFileSync(`${this.c.leaseFile}.tmp`, `${seconds}\n`, { mode: 0o644 })
        renameSync(`${this.c.leaseFile}.tmp`, this.c.leaseFile)
        this.leaseWritten = seconds
      } catch (err) {
        this.c.log.warn({ err: String(err), file: this.c.leaseFile }, 'write fence lease')
      }
    }
    const has = now - this.lastQuorumAt < MIN_FENCE_TERM_MS
    if (has !== this.hadQuorum) {
      if (this.hadQuorum !== undefined || !has) {
        const fields = {
          heard: state.heard,
          size: state.size,
          needed: state.needed,
          lastQuorumAt: Number.isFinite(this.lastQuorumAt) ? new Date(this.lastQuorumAt).toISOString() : null,
        }
        if (has) this.c.log.info(fields, 'quorum heard again')
        else this.c.log.warn(fields, 'quorum not heard: ha pods will be fenced')
      }
      this.hadQuorum = has
    }
    return state
  }

  private heardMs(): number {
    return Math.max(HEARD_MS, this.c.heardWindowMs?.() ?? HEARD_MS)
  }

  private state(): QuorumState {
    return this.lastState ?? this.refresh()
  }

  /** May an `ha` pod run here now? `starting`: it does not run here yet. */
  decide(haAfterMs: number, graceMs: number, starting = false): FenceDecision {
    return decideFence(this.state(), this.c.now(), haAfterMs, graceMs, this.options(), starting)
  }

  /** The watchdog settings of an `ha` container (seconds after the lease's time). */
  containerFence(haAfterMs: number, graceMs: number): ContainerFence {
    const window = fenceWindowMs(haAfterMs, this.options())
    return { leaseFile: this.c.leaseFile, termAfterSeconds: Math.floor(fenceTermMs(window, graceMs) / 1000), killAfterSeconds: Math.floor(window / 1000) }
  }

  /**
   * Why this node moves no `ha` pod now (it has not heard a quorum for a heartbeat or two), for the
   * scheduler's view; undefined when it hears one.
   */
  noQuorum(): string | undefined {
    const s = this.state()
    if (this.c.now() - s.lastQuorumAt < Math.max(MIN_FENCE_TERM_MS, this.heardMs())) return undefined
    return `it hears ${s.heard} of ${s.size} nodes, fewer than the quorum of ${s.needed}`
  }

  /**
   * Whether this agent has caught up with its cluster since it started: it has heard a quorum for
   * CATCH_UP_MS (connections made, anti-entropy run), or it is a quorum alone. Until then it writes
   * no pod status: its replica may be days old, and what it would say about a pod that moved away
   * meanwhile would be a concurrent write over the status of the node running it.
   */
  caughtUp(): boolean {
    return this.caughtUpAt !== undefined
  }
}

function readLease(file: string): number {
  try {
    const s = Number(readFileSync(file, 'utf8').trim())
    return Number.isFinite(s) && s > 0 ? s * 1000 : Number.NEGATIVE_INFINITY
  } catch {
    return Number.NEGATIVE_INFINITY
  }
}
