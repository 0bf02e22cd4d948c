/** Shared by the parts of the mesh that dial and call: errors as one short line, a deadline on a call. */
import { OrcError } from '../model/index.ts'

/** A dial or stream error as one line (a timeout says so; an aggregate lists its causes). */
export function shortError(err: unknown): string {
  if (err instanceof Error) {
    if (err.name === 'TimeoutError' || err.name === 'AbortError') return 'timed out'
    const agg = (err as any).errors
    if (Array.isArray(agg) && agg.length > 0) return agg.map(shortError).join('; ')
    return err.message
  }
  return String(err)
}

/** `p`, or an `unavailable` error once `signal` fires (`onAbort` then tears the call down). */
export function withDeadline<T>(p: Promise<T>, signal: AbortSignal, onAbort: () => void): Promise<T> {
  if (signal.aborted) {
    onAbort()
    return Promise.reject(new OrcError('unavailable', 'timed out'))
  }
  return new Promise<T>((resolve, reject) => {
    const abort = () => {
      onAbort()
      reject(new OrcError('unavailable', 'timed out'))
    }
    signal.addEventListener('abort', abort, { once: true })
    p.then(
      (v) => {
        signal.removeEventListener('abort', abort)
        resolve(v)
      },
      (e) => {
        signal.removeEventListener('abort', abort)
        reject(e)
      },
    )
  })
}
