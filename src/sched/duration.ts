import { formatDuration } from '../model/index.ts'

/** Durations in the scheduler's reasons, exact enough to act on: `45s`, `3m`, `2h30m`, `7d4h`. */
export function reasonDuration(ms: number): string {
  return formatDuration(ms, { compound: true })
}
