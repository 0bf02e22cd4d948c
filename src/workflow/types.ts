/**
 * Shapes of the workflow engine: what controllers register (units, targets) and what a run records
 * (the JSON snapshot the agent writes into an object's status and `orc why` renders from).
 */

export interface RetryPolicy {
  /** Total attempts, the first included (1 = no retry). */
  attempts: number
  /** Wait before the second attempt; doubles after each further failure. */
  backoffMs: number
  /** Ceiling for the doubling backoff. */
  maxBackoffMs?: number
}

export interface UnitContext {
  /** Aborted when the attempt times out or the run is cancelled; the reason is an OrcError. */
  signal: AbortSignal
  /** 1-based attempt number. */
  attempt: number
  /** The unit's name (handy for shared run functions). */
  unit: string
  /**
   * Say how far the attempt is (`12.0 MiB / 48.3 MiB`): shown by `orc why` while the unit runs.
   * Listeners hear it as a change; callers throttle (a pull reports every second or so, not per chunk).
   */
  progress(text: string): void
}

interface Ordering {
  /** Start only after these have finished (done, failed or skipped): ordering only. */
  after?: string[]
  /** These start only after this one has finished: reverse ordering. */
  before?: string[]
  /**
   * Hard dependencies: reaching this unit pulls them in, it starts after they are done, and it is
   * skipped (naming the failed unit) if one of them fails or is skipped.
   */
  requires?: string[]
  /**
   * Targets this unit belongs to: reaching the target pulls the unit in, and the target is reached
   * only once the unit is done (the target requires it).
   */
  wantedBy?: string[]
}

export interface UnitSpec extends Ordering {
  name: string
  description?: string
  /** Per-attempt timeout; `Infinity` for none. Defaults to the run's `defaultTimeoutMs`. */
  timeoutMs?: number
  retry?: RetryPolicy
  run: (ctx: UnitContext) => Promise<void>
}

/** A target is a synchronisation point: a unit without `run`, reached when its dependencies are. */
export interface TargetSpec extends Ordering {
  name: string
  description?: string
}

export type UnitKind = 'unit' | 'target'

export type UnitState = 'waiting' | 'running' | 'done' | 'failed' | 'skipped'

export const UNIT_STATES: readonly UnitState[] = ['waiting', 'running', 'done', 'failed', 'skipped']

/** One unit in a run, as plain JSON. Times are clock milliseconds. */
export interface UnitSnapshot {
  name: string
  kind: UnitKind
  description?: string
  state: UnitState
  /** Everything this unit waited (or waits) for before starting, within the run. */
  after: string[]
  /** The subset of `after` it hard-requires (a failure there skips this unit). */
  requires: string[]
  /** First attempt started (targets: when reached). */
  startedAt?: number
  /** Reached done/failed/skipped. */
  endedAt?: number
  attempts: number
  maxAttempts: number
  /** Per-attempt timeout; null for none (and for targets). */
  timeoutMs: number | null
  /** Start of the current (or last) attempt. */
  attemptStartedAt?: number
  /** Set while waiting out the backoff before the next attempt. */
  retryAt?: number
  lastError?: string
  /** How far the running attempt is, as the unit last said (UnitContext.progress). */
  progress?: string
  /** Why a unit was skipped. */
  reason?: string
  /** For a skipped unit: the unit whose failure caused it, when there is one. */
  cause?: string
}

export interface WorkflowSnapshot {
  version: 1
  /** Caller-chosen id of the run (e.g. the pod revision it serves). */
  id?: string
  startedAt: number
  /** Clock time the snapshot was taken; running durations are measured up to it. */
  at: number
  /** Targets asked for with `reach`, in order. */
  targets: string[]
  /** Set when the run was cancelled, with the reason. */
  cancelled?: string
  units: UnitSnapshot[]
}

export interface UnitChangeEvent {
  type: 'unit'
  unit: string
  kind: UnitKind
  state: UnitState
  previous: UnitState
  attempt: number
  at: number
  error?: string
  reason?: string
  retryAt?: number
}

export interface ReachResult {
  target: string
  reached: boolean
  state: UnitState
  /** When not reached: why, in one line (the failed unit and its error, or the skip reason). */
  reason?: string
  at: number
}
