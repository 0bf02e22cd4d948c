/**
 * How long to sleep before checking again after a check that took `checkMs`: 50 ms after a cheap
 * check, twice the check's own time after a dear one, at most 1 s. Many checks run an `orc` CLI
 * process (~0.5 s of CPU each); polled back to back every 50 ms, one waiting test kept a core busy
 * and starved the agents it waited on (a quiet full run took 31 min, 2026-12-05).
 */
export function pollDelay(checkMs: number, floorMs = 50): number {
  return Math.min(1000, Math.max(floorMs, 2 * checkMs))
}

/**
 * Poll a condition until it holds (anything but undefined/false) or the deadline passes; errors
 * thrown by the condition count as "not yet" and the last one is named in the timeout message.
 * `pollMs` fixes the pause between checks, for a state that lasts less than pollDelay's back-off.
 */
export async function waitFor<T>(
  what: string,
  fn: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 20_000,
  opts: { pollMs?: number } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs
  let last: unknown
  for (;;) {
    const t0 = Date.now()
    try {
      const v = await fn()
      if (v !== undefined && v !== false) return v
    } catch (err) {
      last = err
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs}ms waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`)
    await new Promise((r) => setTimeout(r, opts.pollMs ?? pollDelay(Date.now() - t0)))
  }
}
