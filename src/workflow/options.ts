import type { Clock } from '../effects/index.ts'
import type { RetryPolicy } from './types.ts'

/** The only logging the engine does; a pino logger fits (`logger.child({ module: 'workflow' })`). */
export interface WorkflowLogger {
  debug(obj: object, msg: string): void
  info(obj: object, msg: string): void
  warn(obj: object, msg: string): void
}

export interface WorkflowRunOptions {
  clock: Clock
  /** Caller-chosen run id, carried into the snapshot (e.g. `pod/web@7`). */
  id?: string
  /** Per-attempt timeout for units that set none. Default 90 s (systemd's default start timeout). */
  defaultTimeoutMs?: number
  /** Retry policy for units that set none. Default: one attempt. */
  defaultRetry?: RetryPolicy
  log?: WorkflowLogger
}

export const DEFAULT_TIMEOUT_MS = 90_000
export const DEFAULT_RETRY: RetryPolicy = { attempts: 1, backoffMs: 0 }

/** Backoff before attempt `attempt + 1`, after attempt `attempt` (1-based) failed. */
export function backoffDelay(policy: RetryPolicy, attempt: number): number {
  const raw = policy.backoffMs * 2 ** Math.max(0, attempt - 1)
  return Math.min(raw, policy.maxBackoffMs ?? Number.POSITIVE_INFINITY)
}
