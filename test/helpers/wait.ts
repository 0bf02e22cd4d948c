/**
 * Poll a condition until it holds (anything but undefined/false) or the deadline passes; errors
 * thrown by the condition count as "not yet" and the last one is named in the timeout message.
 */
export async function waitFor<T>(what: string, fn: () => Promise<T | undefined | false> | T | undefined | false, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs
  let last: unknown
  for (;;) {
    try {
      const v = await fn()
      if (v !== undefined && v !== false) return v
    } catch (err) {
      last = err
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs}ms waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}
