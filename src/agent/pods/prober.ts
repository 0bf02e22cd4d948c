/**
 * The timing of one container probe (Kubernetes semantics), on an injected clock: the first check
 * `initialDelaySeconds` after start, then one every `periodSeconds` (never two at once), each
 * bounded by `timeoutSeconds`; the result flips to passing after `successThreshold` consecutive
 * successes and to failing after `failureThreshold` consecutive failures. What a check does (TCP
 * connect, HTTP GET) is given, so unit tests need no sockets.
 */
import type { Clock, TimerHandle } from '../../effects/index.ts'
import type { ProbeTiming } from '../../model/index.ts'

export interface ProbeOutcome {
  ok: boolean
  /** One line: `HTTP 200`, `connect ECONNREFUSED [::1]:8080`, `timed out after 1s`. */
  output: string
}

export type ProbeCheck = (signal: AbortSignal) => Promise<ProbeOutcome>

export type ProbeVerdict = 'unknown' | 'passing' | 'failing'

export interface ProbeLoopEvents {
  /** The verdict changed (not called for repeats of the same verdict). */
  changed(verdict: 'passing' | 'failing', last: ProbeOutcome, consecutive: number): void
  /** Every check's outcome, after the verdict was updated with it. */
  checked?(outcome: ProbeOutcome, verdict: ProbeVerdict): void
}

export class ProbeLoop {
  private timer: TimerHandle | undefined
  private stopped = false
  private successes = 0
  private failures = 0
  private abort: AbortController | undefined
  verdict: ProbeVerdict = 'unknown'
  last: ProbeOutcome | undefined
  /** Checks run so far (tests). */
  checks = 0

  constructor(
    private readonly clock: Clock,
    private readonly timing: ProbeTiming,
    private readonly check: ProbeCheck,
    private readonly events: ProbeLoopEvents,
  ) {}

  start(): this {
    this.schedule(this.timing.initialDelayMs)
    return this
  }

  stop(): void {
    this.stopped = true
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer)
    this.timer = undefined
    this.abort?.abort()
  }

  private schedule(ms: number): void {
    if (this.stopped) return
    this.timer = this.clock.setTimeout(() => this.tick(), ms)
  }

  /** One check, then the next one a period after this one started (at once if it took longer). */
  private async tick(): Promise<void> {
    this.timer = undefined
    if (this.stopped) return
    const started = this.clock.now()
    const outcome = await this.runOnce()
    if (this.stopped) return
    this.checks++
    this.record(outcome)
    if (this.stopped) return
    this.events.checked?.(outcome, this.verdict)
    if (this.stopped) return
    this.schedule(Math.max(0, this.timing.periodMs - (this.clock.now() - started)))
  }

  private runOnce(): Promise<ProbeOutcome> {
    const abort = new AbortController()
    this.abort = abort
    const seconds = this.timing.timeoutMs / 1000
    return new Promise<ProbeOutcome>((resolve) => {
      let settled = false
      const finish = (o: ProbeOutcome) => {
        if (settled) return
        settled = true
        this.clock.clearTimeout(timer)
        resolve(o)
      }
      const timer = this.clock.setTimeout(() => {
        abort.abort()
        finish({ ok: false, output: `timed out after ${seconds}s` })
      }, this.timing.timeoutMs)
      this.check(abort.signal).then(finish, (err: unknown) => finish({ ok: false, output: err instanceof Error ? err.message : String(err) }))
    })
  }

  private record(o: ProbeOutcome): void {
    this.last = o
    if (o.ok) {
      this.successes++
      this.failures = 0
      if (this.verdict !== 'passing' && this.successes >= this.timing.successThreshold) {
        this.verdict = 'passing'
        this.events.changed('passing', o, this.successes)
      }
    } else {
      this.failures++
      this.successes = 0
      if (this.verdict !== 'failing' && this.failures >= this.timing.failureThreshold) {
        this.verdict = 'failing'
        this.events.changed('failing', o, this.failures)
      }
    }
  }
}
