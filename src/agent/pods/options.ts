import { OrcError } from '../../model/index.ts'
import type { RetryPolicy } from '../../workflow/index.ts'

/** Timers of the pod lifecycle. Defaults suit production; tests shorten them (`ORC_POD_TUNABLES`). */
export interface PodTunables {
  /** resolve-image: per-attempt timeout and retries (a layout import can be slow). */
  resolveImageTimeoutMs: number
  resolveImageRetry: RetryPolicy
  /** pull-image: per-attempt timeout (a large image over a slow link) and retries with backoff. */
  pullImageTimeoutMs: number
  pullImageRetry: RetryPolicy
  /** mount-volumes: per-attempt timeout (mkfs of a large image, a slow driver) and retries. */
  mountVolumesTimeoutMs: number
  mountVolumesRetry: RetryPolicy
  /** sandbox-network: per-attempt timeout. */
  networkTimeoutMs: number
  /** start-containers: per-attempt timeout. */
  startTimeoutMs: number
  /** Container restart backoff (restartPolicy Always/OnFailure): first delay, doubling up to max. */
  restartBackoffMs: number
  maxRestartBackoffMs: number
  /** A container that ran this long before exiting restarts with the first delay again. */
  restartBackoffResetMs: number
  /** After a failed lifecycle run (say, no image), try the whole run again after this, doubling. */
  runRetryMs: number
  maxRunRetryMs: number
  /**
   * Lifecycle progress (a run starting, a unit done) is written this long after it happens unless a
   * settling write (running, failed) carries it first: a quick start costs one status revision.
   */
  progressWriteMs: number
  /** Unpacked images of this many most recent revisions per pod are kept (rollback needs no import). */
  keepImageRevisions: number
}

export const DEFAULT_POD_TUNABLES: PodTunables = {
  resolveImageTimeoutMs: 120_000,
  resolveImageRetry: { attempts: 3, backoffMs: 5_000, maxBackoffMs: 60_000 },
  pullImageTimeoutMs: 30 * 60_000,
  pullImageRetry: { attempts: 3, backoffMs: 2_000, maxBackoffMs: 30_000 },
  mountVolumesTimeoutMs: 120_000,
  mountVolumesRetry: { attempts: 3, backoffMs: 2_000, maxBackoffMs: 30_000 },
  networkTimeoutMs: 30_000,
  startTimeoutMs: 60_000,
  restartBackoffMs: 1_000,
  maxRestartBackoffMs: 300_000,
  restartBackoffResetMs: 60_000,
  runRetryMs: 10_000,
  maxRunRetryMs: 300_000,
  keepImageRevisions: 3,
  progressWriteMs: 1_000,
}

/** `ORC_POD_TUNABLES` (JSON, any subset of PodTunables): for tests and benchmarks. */
export function podTunablesFromEnv(env: NodeJS.ProcessEnv): Partial<PodTunables> {
  const raw = env.ORC_POD_TUNABLES
  if (!raw) return {}
  try {
    return JSON.parse(raw) as Partial<PodTunables>
  } catch (err) {
    throw new OrcError('invalid', `ORC_POD_TUNABLES is not JSON: ${(err as Error).message}`)
  }
}
