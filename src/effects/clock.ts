/**
 * Time, as every component is given it. `systemClock` is the only place in src that reads the wall
 * clock or arms a real timer; tests use `ManualClock` and the simulator its own event heap, so the
 * same component runs on virtual time.
 */

export type TimerHandle = unknown

export interface Clock {
  /** Milliseconds; epoch-based for the system clock, arbitrary origin for a manual one. */
  now(): number
  /**
   * Run `fn` once after `ms`. A virtual clock may await what `fn` returns before it moves time on,
   * so a callback that starts async work should return its promise.
   */
  setTimeout(fn: () => void | Promise<void>, ms: number): TimerHandle
  clearTimeout(handle: TimerHandle): void
}

export const systemClock: Clock = {
  now: () => Date.now(),
  // Not unref'd: a run waiting out a timeout or backoff is work in progress, and the process must
  // stay up for it (cancel it to let go). Background loops that must not hold the process use
  // `unrefTimers`.
  setTimeout: (fn, ms) => setTimeout(fn, Math.max(0, ms)),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
}

/** The same clock, its timers not keeping the process alive (background loops of a long-lived host). */
export function unrefTimers(clock: Clock): Clock {
  return {
    now: () => clock.now(),
    setTimeout: (fn, ms) => {
      const handle = clock.setTimeout(fn, ms)
      ;(handle as { unref?: () => void } | null)?.unref?.()
      return handle
    },
    clearTimeout: (handle) => clock.clearTimeout(handle),
  }
}

/** Resolves after `ms` on `clock`; early (without rejecting) when `signal` aborts. */
export function sleep(clock: Clock, ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve()
    const done = () => {
      signal?.removeEventListener('abort', abort)
      resolve()
    }
    const handle = clock.setTimeout(done, ms)
    const abort = () => {
      clock.clearTimeout(handle)
      done()
    }
    signal?.addEventListener('abort', abort, { once: true })
  })
}

/** Run `fn` every `ms` on `clock` until the returned function is called. */
export function every(clock: Clock, ms: number, fn: () => void): () => void {
  let stopped = false
  let handle: TimerHandle
  const tick = () => {
    if (stopped) return
    handle = clock.setTimeout(tick, ms)
    fn()
  }
  handle = clock.setTimeout(tick, ms)
  return () => {
    stopped = true
    clock.clearTimeout(handle)
  }
}

interface ManualTimer {
  id: number
  at: number
  seq: number
  fn: () => void | Promise<void>
}

/** Lets every pending promise callback run (one macrotask turn); does not move virtual time. */
function settleMicrotasks(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve))
}

/**
 * A virtual clock. Timers fire only from `advance`/`runAll`, in time order (ties in the order they
 * were set); between timers, pending promise callbacks are let run, so async code driven by the
 * clock behaves as it would in real time, only instantly and deterministically.
 */
export class ManualClock implements Clock {
  private t: number
  private seq = 0
  private readonly timers = new Map<number, ManualTimer>()

  constructor(start = 0) {
    this.t = start
  }

  now(): number {
    return this.t
  }

  setTimeout(fn: () => void | Promise<void>, ms: number): TimerHandle {
    const id = ++this.seq
    this.timers.set(id, { id, at: this.t + Math.max(0, ms), seq: id, fn })
    return id
  }

  clearTimeout(handle: TimerHandle): void {
    this.timers.delete(handle as number)
  }

  /** Number of timers not yet fired. */
  pending(): number {
    return this.timers.size
  }

  /** Time of the earliest pending timer, or undefined when none is set. */
  nextTimerAt(): number | undefined {
    let best: number | undefined
    for (const timer of this.timers.values()) if (best === undefined || timer.at < best) best = timer.at
    return best
  }

  /** Move time forward by `ms`, firing every timer that falls due on the way. */
  async advance(ms: number): Promise<void> {
    const end = this.t + Math.max(0, ms)
    await settleMicrotasks()
    for (;;) {
      const next = this.earliest()
      if (next === undefined || next.at > end) break
      this.timers.delete(next.id)
      this.t = next.at
      void next.fn()
      await settleMicrotasks()
    }
    this.t = end
  }

  /** Fire timers until none is left (or `maxTimers` fired, against runaway loops). Returns the count fired. */
  async runAll(maxTimers = 100_000): Promise<number> {
    let fired = 0
    await settleMicrotasks()
    for (;;) {
      const next = this.earliest()
      if (next === undefined) return fired
      // A plain Error: this module imports nothing of the project (and this only guards tests).
      if (++fired > maxTimers) throw new Error(`manual clock: more than ${maxTimers} timers fired (a retry or timer loop?)`)
      this.timers.delete(next.id)
      this.t = Math.max(this.t, next.at)
      void next.fn()
      await settleMicrotasks()
    }
  }

  private earliest(): ManualTimer | undefined {
    let best: ManualTimer | undefined
    for (const timer of this.timers.values()) {
      if (best === undefined || timer.at < best.at || (timer.at === best.at && timer.seq < best.seq)) best = timer
    }
    return best
  }
}
