/**
 * Self-fencing of `ha` pods (principle 7, "at most one running copy"). Other nodes move an `ha` pod
 * once its node has been unreachable for `haAfter`, counted from the last time they heard it. A node
 * cut off from the cluster cannot learn that; it can only count the time since it last heard a
 * quorum of its cluster. So every node stops its own `ha` pods once it has not heard a quorum for
 * `fenceWindow(haAfter) = haAfter − margin` (never less than `minWindowMs`), and does not start one
 * while it lacks a quorum. The same deadline is written into a lease file that each `ha`
 * container's watchdog checks, so the copies of a dead agent stop too.
 *
 * Pure: the agent passes in what its membership saw and when.
 */
export interface FencingOptions {
  /**
   * How many nodes (this one included) a node must hear to run `ha` pods. 0 = a majority of the
   * nodes not forgotten. 1 turns fencing off (a two-machine lab that prefers two copies to none).
   */
  fenceQuorum: number
  /**
   * Taken off `haAfter`: the heartbeat interval (2 s: the others may have heard this node up to 2 s
   * before it last heard them) + the lease check's granularity (1 s) + what is left for clock rate
   * drift and the kill itself. The copy is dead `margin − 3 s` before another node may start one.
   */
  fenceMarginSeconds: number
}

export const DEFAULT_FENCING: Readonly<FencingOptions> = Object.freeze({ fenceQuorum: 0, fenceMarginSeconds: 5 })

/**
 * Shortest fence window: a node that heard a quorum this recently is never fenced, whatever the
 * pod's haAfter. Three heartbeat intervals: a loaded machine that misses two heartbeats keeps its
 * pods. An `ha` pod with `haAfter < margin + this` may briefly run twice after a partition
 * (docs/scheduling.md says so).
 */
export const MIN_FENCE_WINDOW_MS = 6_000
/** The SIGTERM of a fence is never sent sooner than this after the last quorum was heard. */
export const MIN_FENCE_TERM_MS = 5_000
/**
 * An `ha` pod that is not running here (fenced, or new to this node) starts only once this node
 * has heard a quorum continuously for this long: after a partition heals, the bindings written on
 * the other side arrive first, so a node does not restart a copy that has moved away meanwhile.
 */
export const FENCE_SETTLE_MS = 5_000

/** One other node as this node's membership sees it. */
export interface QuorumMember {
  name: string
  /** Last time this node heard it (ms), undefined if never since this agent started. */
  lastSeen?: number
  forgotten?: boolean
}

export interface QuorumState {
  /** Nodes counted (not forgotten), this one included. */
  size: number
  /** How many must be heard (this one included). */
  needed: number
  /** Nodes heard within `freshMs`, this one included. */
  heard: number
  /**
   * The last moment this node heard a quorum: the `needed − 1`-th most recent lastSeen of the others;
   * `now` when this node alone is a quorum; -Infinity when it never heard one.
   */
  lastQuorumAt: number
  /** Since when this node has heard a quorum without a gap (undefined: it does not hear one now). */
  heardSince?: number
}

export function quorumNeeded(size: number, opts: Pick<FencingOptions, 'fenceQuorum'>): number {
  if (opts.fenceQuorum > 0) return Math.min(opts.fenceQuorum, Math.max(size, 1))
  return Math.floor(size / 2) + 1
}

/** What this node knows of its quorum now. `others` excludes this node. */
export function quorumState(
  others: readonly QuorumMember[],
  now: number,
  opts: Pick<FencingOptions, 'fenceQuorum'>,
  freshMs = MIN_FENCE_WINDOW_MS / 2,
): QuorumState {
  const counted = others.filter((m) => !m.forgotten)
  const size = counted.length + 1
  const needed = quorumNeeded(size, opts)
  const seen = counted.map((m) => (m.lastSeen === undefined ? Number.NEGATIVE_INFINITY : Math.min(m.lastSeen, now))).sort((a, b) => b - a)
  const lastQuorumAt = needed <= 1 ? now : (seen[needed - 2] ?? Number.NEGATIVE_INFINITY)
  const heard = 1 + seen.filter((t) => now - t <= freshMs).length
  return { size, needed, heard, lastQuorumAt }
}

/** How long after the last quorum an `ha` pod's copy must be dead (SIGKILL). */
export function fenceWindowMs(haAfterMs: number, opts: Pick<FencingOptions, 'fenceMarginSeconds'>): number {
  return Math.max(haAfterMs - opts.fenceMarginSeconds * 1000, MIN_FENCE_WINDOW_MS)
}

/** When, after the last quorum, a fenced copy gets SIGTERM: its grace, bounded to fit the window. */
export function fenceTermMs(windowMs: number, graceMs: number): number {
  return Math.min(windowMs, Math.max(windowMs - graceMs, MIN_FENCE_TERM_MS))
}

export interface FenceDecision {
  /** Whether the pod may run here now. */
  run: boolean
  /** When the decision changes by itself (the fence deadline), if it will. */
  at?: number
  reason: string
}

/**
 * May an `ha` pod (its `haAfter` in ms, stop grace in ms) run on this node now? `starting`: the
 * pod does not run here yet (FENCE_SETTLE_MS applies). Best-effort pods always may run: moving only
 * when told is their contract, and so is running through a partition.
 */
export function decideFence(
  q: QuorumState,
  now: number,
  haAfter: number,
  graceMs: number,
  opts: Pick<FencingOptions, 'fenceMarginSeconds'>,
  starting = false,
): FenceDecision {
  const window = fenceWindowMs(haAfter, opts)
  const term = q.lastQuorumAt + fenceTermMs(window, graceMs)
  if (starting && q.needed > 1 && now < term) {
    if (q.heardSince === undefined || now - q.heardSince < FENCE_SETTLE_MS) {
      return {
        run: false,
        reason: `fenced: this node waits to hear a quorum (${q.needed} of ${q.size} nodes) for ${FENCE_SETTLE_MS / 1000}s before it starts an ha pod`,
      }
    }
  }
  if (now < term) return { run: true, at: term, reason: `hears ${q.heard} of ${q.size} nodes (quorum ${q.needed})` }
  const last = Number.isFinite(q.lastQuorumAt)
    ? `not heard a quorum (${q.needed} of ${q.size} nodes) for ${Math.round((now - q.lastQuorumAt) / 1000)}s`
    : `not heard a quorum (${q.needed} of ${q.size} nodes) since the agent started`
  return { run: false, reason: `fenced: this node has ${last}; ha pods stop after ${Math.round(window / 1000)}s without one` }
}

/** The cluster's fencing options from `Cluster.spec.scheduling` (see schedOptionsOf). */
export function resolveFencing(input: Partial<FencingOptions> = {}): FencingOptions {
  return { ...DEFAULT_FENCING, ...input }
}
