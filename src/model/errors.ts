/**
 * Typed errors. Every error a user can see is an OrcError with a stable `code` and structured
 * `details`; the message is one line. A lower error is wrapped with the action that failed
 * (`open store /var/lib/orc/db: …`) and kept as `cause` so `--debug` can show the chain.
 */
export type OrcErrorCode =
  | 'invalid' // manifest or argument fails validation
  | 'parse' // input could not be parsed (YAML/JSON)
  | 'not_found'
  | 'conflict' // precondition failed (e.g. expected revision)
  | 'forbidden' // field owned by someone else, policy refused
  | 'too_large'
  | 'locked' // data dir in use by another process
  | 'corrupt' // on-disk data unreadable
  | 'unavailable' // store closed, agent not running
  | 'timeout' // an operation ran out of time
  | 'internal'

export class OrcError extends Error {
  readonly code: OrcErrorCode
  readonly details: Record<string, unknown>
  constructor(code: OrcErrorCode, message: string, details: Record<string, unknown> = {}, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause })
    this.name = 'OrcError'
    this.code = code
    this.details = details
  }

  toJSON(): { code: OrcErrorCode; message: string; details: Record<string, unknown> } {
    return { code: this.code, message: this.message, details: this.details }
  }
}

/** Wrap any error with the action that was being attempted, keeping the original as cause. */
export function wrapError(action: string, err: unknown, code?: OrcErrorCode): OrcError {
  if (err instanceof OrcError && code === undefined) {
    return new OrcError(err.code, `${action}: ${err.message}`, err.details, err)
  }
  const msg = err instanceof Error ? err.message : String(err)
  return new OrcError(code ?? 'internal', `${action}: ${msg}`, {}, err)
}

export function isOrcError(err: unknown, code?: OrcErrorCode): err is OrcError {
  return err instanceof OrcError && (code === undefined || err.code === code)
}
