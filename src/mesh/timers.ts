/**
 * The timers one part of the mesh owns. Each part (admission, liveness, replication) has its own,
 * so its stop() ends exactly what it started; all go through the injected clock, so tests and the
 * simulator drive them.
 */
import type { Logger } from 'pino'
import type { Clock } from '../effects/index.ts'
import { shortError } from './deadline.ts'

export class Timers {
  private readonly handles = new Set<unknown>()
  private halted = false

  constructor(
    private readonly clock: Clock,
    private readonly log: Logger,
  ) {}

  /** True once stop() ran: work that would start something new checks it. */
  get stopped(): boolean {
    return this.halted
  }

  /**
   * Run `fn` every `ms`, counted from the end of the previous run, so a slow run never overlaps
   * the next one. A failure is logged and the next run goes ahead.
   */
  every(ms: number, fn: () => Promise<void> | void): void {
    const run = () => {
      this.handles.delete(handle)
      if (this.halted) return
      Promise.resolve()
        .then(fn)
        .catch((err) => this.log.warn({ err: shortError(err) }, 'periodic task failed'))
        .finally(() => {
          if (!this.halted) {
            handle = this.clock.setTimeout(run, ms)
            this.handles.add(handle)
          }
        })
    }
    let handle = this.clock.setTimeout(run, ms)
    this.handles.add(handle)
  }

  /** Run `fn` after `ms` unless stop() comes first. */
  later(fn: () => Promise<void> | void, ms: number): void {
    const h = this.clock.setTimeout(() => {
      this.handles.delete(h)
      if (!this.halted) void fn()
    }, ms)
    this.handles.add(h)
  }

  stop(): void {
    this.halted = true
    for (const h of this.handles) this.clock.clearTimeout(h)
    this.handles.clear()
  }
}
