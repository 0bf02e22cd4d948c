import type { Clock, TimerHandle } from '../effects/index.ts'
import { OrcError } from '../model/index.ts'
import { formatDuration } from './format.ts'
import { dependencyMaps, type UnitDef, type WorkflowGraph } from './graph.ts'
import { backoffDelay, DEFAULT_RETRY, DEFAULT_TIMEOUT_MS, type WorkflowLogger, type WorkflowRunOptions } from './options.ts'
import type { ReachResult, RetryPolicy, UnitChangeEvent, UnitSnapshot, UnitState, WorkflowSnapshot } from './types.ts'

interface Rec {
  def: UnitDef
  state: UnitState
  startedAt?: number
  endedAt?: number
  attempts: number
  maxAttempts: number
  timeoutMs: number
  retry: RetryPolicy
  attemptStartedAt?: number
  retryAt?: number
  lastError?: string
  progress?: string
  reason?: string
  cause?: string
}

interface Attempt {
  token: number
  abort: AbortController
  timer?: TimerHandle
}

interface Waiter {
  target: string
  resolve: (r: ReachResult) => void
}

const SETTLED: ReadonlySet<UnitState> = new Set(['done', 'failed', 'skipped'])

/**
 * One execution of a workflow graph. `reach(target)` pulls in the target and everything it
 * requires, starts every unit whose dependencies are met (all of them at once), and resolves when
 * the target is reached or can no longer be. A run is single-use per unit: a unit that is done stays
 * done; to run again (say, for an updated pod spec), cancel this run and start a new one on the
 * graph. The definitions are copied at construction, so later registrations do not affect a run.
 */
export class WorkflowRun {
  private readonly defs: ReadonlyMap<string, UnitDef>
  /** Per unit, precomputed once (the definitions are frozen): what it waits for, what it requires. */
  private readonly order: ReadonlyMap<string, string[]>
  private readonly hard: ReadonlyMap<string, string[]>
  private readonly clock: Clock
  private readonly log?: WorkflowLogger
  private readonly id?: string
  private readonly defaultTimeoutMs: number
  private readonly defaultRetry: RetryPolicy
  private readonly startedAt: number
  private readonly recs = new Map<string, Rec>()
  private readonly attempts = new Map<string, Attempt>()
  private readonly retryTimers = new Map<string, TimerHandle>()
  private readonly listeners = new Set<(e: UnitChangeEvent) => void>()
  private readonly targets: string[] = []
  private waiters: Waiter[] = []
  private nextToken = 0
  private pumping = false
  private pumpAgain = false
  private cancelled?: string

  constructor(graph: WorkflowGraph, options: WorkflowRunOptions) {
    this.defs = new Map(graph.list().map((d) => [d.name, d]))
    ;({ order: this.order, hard: this.hard } = dependencyMaps(this.defs))
    this.clock = options.clock
    this.log = options.log
    this.id = options.id
    this.defaultTimeoutMs = options.defaultTimeoutMs ?? DEFAULT_TIMEOUT_MS
    this.defaultRetry = options.defaultRetry ?? DEFAULT_RETRY
    this.startedAt = this.clock.now()
  }

  /** Run what `target` needs; resolves (never rejects, except for an unknown target) with the outcome. */
  reach(target: string): Promise<ReachResult> {
    if (!this.defs.has(target)) {
      return Promise.reject(new OrcError('not_found', `no unit or target named ${target}`, { unit: target }))
    }
    if (!this.targets.includes(target)) this.targets.push(target)
    let resolve!: (r: ReachResult) => void
    const promise = new Promise<ReachResult>((r) => (resolve = r))
    if (this.cancelled === undefined) this.activate(target)
    this.waiters.push({ target, resolve })
    this.pump()
    return promise
  }

  /** Stop the run: abort running attempts (failed), skip waiting units, resolve pending `reach` calls. */
  cancel(reason = 'cancelled'): void {
    if (this.cancelled !== undefined) return
    this.cancelled = reason
    const msg = `cancelled: ${reason}`
    for (const [name, att] of this.attempts) {
      if (att.timer !== undefined) this.clock.clearTimeout(att.timer)
      att.abort.abort(new OrcError('unavailable', msg, { unit: name }))
    }
    this.attempts.clear()
    for (const t of this.retryTimers.values()) this.clock.clearTimeout(t)
    this.retryTimers.clear()
    for (const rec of this.recs.values()) {
      if (rec.state === 'running') {
        rec.lastError = msg
        delete rec.retryAt
        this.transition(rec, 'failed')
      } else if (rec.state === 'waiting') {
        rec.reason = msg
        this.transition(rec, 'skipped')
      }
    }
    this.log?.info({ run: this.id, reason }, 'workflow run cancelled')
    this.settleWaiters()
  }

  /** Subscribe to unit changes (state, attempt, error, retry scheduled). Returns the unsubscribe. */
  onChange(listener: (e: UnitChangeEvent) => void): () => void {
    this.listeners.add(listener)
    return () => this.listeners.delete(listener)
  }

  /** State of a unit in this run, or undefined if the run has not pulled it in. */
  stateOf(name: string): UnitState | undefined {
    return this.recs.get(name)?.state
  }

  /** True when nothing is running or waiting. */
  idle(): boolean {
    for (const r of this.recs.values()) if (!SETTLED.has(r.state)) return false
    return true
  }

  /** The run's full state as plain JSON (safe to store in an object's status and render anywhere). */
  snapshot(): WorkflowSnapshot {
    const units: UnitSnapshot[] = []
    for (const rec of this.recs.values()) units.push(this.unitSnapshot(rec))
    const snap: WorkflowSnapshot = {
      version: 1,
      startedAt: this.startedAt,
      at: this.clock.now(),
      targets: [...this.targets],
      units,
    }
    if (this.id !== undefined) snap.id = this.id
    if (this.cancelled !== undefined) snap.cancelled = this.cancelled
    return snap
  }

  private unitSnapshot(rec: Rec): UnitSnapshot {
    const name = rec.def.name
    const hard = this.hardDepsOf(name)
    const hardSet = new Set(hard)
    const after = this.orderingDepsOf(name).filter((d) => this.recs.has(d) || (hardSet.has(d) && !this.defs.has(d)))
    const s: UnitSnapshot = {
      name,
      kind: rec.def.kind,
      state: rec.state,
      after,
      requires: hard,
      attempts: rec.attempts,
      maxAttempts: rec.def.kind === 'target' ? 0 : rec.maxAttempts,
      timeoutMs: rec.def.kind === 'target' || !Number.isFinite(rec.timeoutMs) ? null : rec.timeoutMs,
    }
    if (rec.def.description !== undefined) s.description = rec.def.description
    if (rec.startedAt !== undefined) s.startedAt = rec.startedAt
    if (rec.endedAt !== undefined) s.endedAt = rec.endedAt
    if (rec.attemptStartedAt !== undefined) s.attemptStartedAt = rec.attemptStartedAt
    if (rec.retryAt !== undefined) s.retryAt = rec.retryAt
    if (rec.lastError !== undefined) s.lastError = rec.lastError
    if (rec.progress !== undefined && rec.state === 'running') s.progress = rec.progress
    if (rec.reason !== undefined) s.reason = rec.reason
    if (rec.cause !== undefined) s.cause = rec.cause
    return s
  }

  private orderingDepsOf(name: string): string[] {
    return this.order.get(name) ?? []
  }

  private hardDepsOf(name: string): string[] {
    return this.hard.get(name) ?? []
  }

  /** Pull `name` and its hard dependencies into the run, dependencies first. */
  private activate(name: string): void {
    const visit = (n: string) => {
      const def = this.defs.get(n)
      if (!def || this.recs.has(n)) return
      // Mark before recursing; registration refused cycles, so this only guards re-entry.
      const retry = def.retry ?? this.defaultRetry
      const rec: Rec = {
        def,
        state: 'waiting',
        attempts: 0,
        maxAttempts: retry.attempts,
        timeoutMs: def.timeoutMs ?? this.defaultTimeoutMs,
        retry,
      }
      for (const d of this.hardDepsOf(n)) visit(d)
      this.recs.set(n, rec)
    }
    visit(name)
  }

  private pump(): void {
    if (this.pumping) {
      this.pumpAgain = true
      return
    }
    this.pumping = true
    try {
      do {
        this.pumpAgain = false
        for (const rec of this.recs.values()) {
          if (rec.state === 'waiting' && this.cancelled === undefined && this.advance(rec)) this.pumpAgain = true
        }
      } while (this.pumpAgain)
    } finally {
      this.pumping = false
    }
    this.settleWaiters()
  }

  /** Move a waiting unit on if it can: skip it, start it, or (targets) mark it reached. */
  private advance(rec: Rec): boolean {
    const name = rec.def.name
    for (const h of this.hardDepsOf(name)) {
      const dep = this.recs.get(h)
      if (!dep) {
        rec.reason = `requires ${h}, which is not defined`
        this.transition(rec, 'skipped')
        return true
      }
      if (dep.state === 'failed') {
        rec.reason = `requires ${h}, which failed`
        rec.cause = h
        this.transition(rec, 'skipped')
        return true
      }
      if (dep.state === 'skipped') {
        const root = dep.cause
        rec.reason = root !== undefined ? `requires ${h}, which was skipped because ${root} failed` : `requires ${h}, which was skipped`
        if (root !== undefined) rec.cause = root
        this.transition(rec, 'skipped')
        return true
      }
    }
    for (const d of this.orderingDepsOf(name)) {
      const dep = this.recs.get(d)
      if (dep && !SETTLED.has(dep.state)) return false
    }
    if (rec.def.kind === 'target') {
      const now = this.clock.now()
      rec.startedAt = now
      rec.endedAt = now
      this.transition(rec, 'done')
      this.log?.debug({ run: this.id, target: name }, 'target reached')
      return true
    }
    this.startAttempt(rec)
    return true
  }

  private startAttempt(rec: Rec): void {
    const name = rec.def.name
    const now = this.clock.now()
    rec.attempts++
    rec.startedAt ??= now
    rec.attemptStartedAt = now
    delete rec.retryAt
    const token = ++this.nextToken
    const abort = new AbortController()
    const att: Attempt = { token, abort }
    this.attempts.set(name, att)
    if (Number.isFinite(rec.timeoutMs)) {
      att.timer = this.clock.setTimeout(() => {
        const err = new OrcError('unavailable', `timed out after ${formatDuration(rec.timeoutMs)}`, {
          unit: name,
          timeoutMs: rec.timeoutMs,
        })
        abort.abort(err)
        this.endAttempt(rec, token, err)
      }, rec.timeoutMs)
    }
    const previous = rec.state
    rec.state = 'running'
    this.emit(rec, previous)
    this.log?.debug({ run: this.id, unit: name, attempt: rec.attempts }, 'unit started')
    let p: Promise<void>
    try {
      const progress = (text: string) => {
        // Only the current attempt speaks (a late one after a timeout is ignored).
        if (this.attempts.get(name)?.token !== token || rec.progress === text) return
        rec.progress = text.slice(0, 200)
        this.emit(rec, rec.state)
      }
      delete rec.progress
      p = Promise.resolve(rec.def.run!({ signal: abort.signal, attempt: rec.attempts, unit: name, progress }))
    } catch (err) {
      p = Promise.reject(err)
    }
    p.then(
      () => this.endAttempt(rec, token, undefined),
      (err: unknown) => this.endAttempt(rec, token, err ?? new Error('failed')),
    )
  }

  private endAttempt(rec: Rec, token: number, err: unknown): void {
    const name = rec.def.name
    const att = this.attempts.get(name)
    if (!att || att.token !== token) return // a late result of a timed-out or cancelled attempt
    if (att.timer !== undefined) this.clock.clearTimeout(att.timer)
    this.attempts.delete(name)
    if (err === undefined) {
      rec.endedAt = this.clock.now()
      this.transition(rec, 'done')
      this.log?.debug({ run: this.id, unit: name, attempt: rec.attempts }, 'unit done')
      this.pump()
      return
    }
    rec.lastError = errorLine(err)
    if (rec.attempts < rec.maxAttempts) {
      const delay = backoffDelay(rec.retry, rec.attempts)
      rec.retryAt = this.clock.now() + delay
      this.log?.warn({ run: this.id, unit: name, attempt: rec.attempts, err: rec.lastError, delayMs: delay }, 'unit attempt failed, retrying')
      this.emit(rec, rec.state)
      const timer = this.clock.setTimeout(() => {
        this.retryTimers.delete(name)
        if (this.cancelled === undefined) this.startAttempt(rec)
      }, delay)
      this.retryTimers.set(name, timer)
      return
    }
    rec.endedAt = this.clock.now()
    this.log?.warn({ run: this.id, unit: name, attempts: rec.attempts, err: rec.lastError }, 'unit failed')
    this.transition(rec, 'failed')
    this.pump()
  }

  private transition(rec: Rec, to: UnitState): void {
    const previous = rec.state
    rec.state = to
    if (SETTLED.has(to) && rec.endedAt === undefined) rec.endedAt = this.clock.now()
    this.emit(rec, previous)
  }

  private emit(rec: Rec, previous: UnitState): void {
    if (this.listeners.size === 0) return
    const e: UnitChangeEvent = {
      type: 'unit',
      unit: rec.def.name,
      kind: rec.def.kind,
      state: rec.state,
      previous,
      attempt: rec.attempts,
      at: this.clock.now(),
    }
    if (rec.lastError !== undefined) e.error = rec.lastError
    if (rec.reason !== undefined) e.reason = rec.reason
    if (rec.retryAt !== undefined) e.retryAt = rec.retryAt
    for (const l of this.listeners) {
      try {
        l(e)
      } catch (err) {
        this.log?.warn({ run: this.id, unit: rec.def.name, err: errorLine(err) }, 'workflow listener threw')
      }
    }
  }

  private settleWaiters(): void {
    if (this.waiters.length === 0) return
    const pending: Waiter[] = []
    for (const w of this.waiters) {
      const r = this.result(w.target)
      if (r) w.resolve(r)
      else pending.push(w)
    }
    this.waiters = pending
  }

  private result(target: string): ReachResult | undefined {
    const rec = this.recs.get(target)
    const at = this.clock.now()
    if (!rec) {
      return this.cancelled !== undefined ? { target, reached: false, state: 'skipped', reason: `cancelled: ${this.cancelled}`, at } : undefined
    }
    if (rec.state === 'done') return { target, reached: true, state: 'done', at }
    if (rec.state === 'failed') return { target, reached: false, state: 'failed', reason: `${target} failed: ${rec.lastError ?? 'unknown error'}`, at }
    if (rec.state === 'skipped') {
      const root = rec.cause !== undefined ? this.recs.get(rec.cause) : undefined
      const suffix = root?.lastError !== undefined ? ` (${root.lastError})` : ''
      return { target, reached: false, state: 'skipped', reason: `${rec.reason ?? 'skipped'}${suffix}`, at }
    }
    return undefined
  }
}

/** One line for the record: the message's first line, bounded. */
function errorLine(err: unknown): string {
  const msg = err instanceof Error ? err.message : typeof err === 'string' ? err : (JSON.stringify(err) ?? String(err))
  const line = (msg.split('\n')[0] ?? '').trim() || (err instanceof Error ? err.name : 'error')
  return line.length > 300 ? `${line.slice(0, 297)}...` : line
}
