/**
 * Durations as people read them in messages and tables: `45s`, `90m`, `36h`, `4d` — seconds below
 * two minutes, minutes below two hours, hours below two days, then days (kubectl's ages).
 */

/**
 * How whole units are reached. Callers differ, and their output is kept as it was:
 * - `down` (default): every unit rounded down, never more than it was — ages, scheduler reasons;
 * - `seconds`: to the nearest second, then each larger unit down — the CLI's "… ago";
 * - `nearest`: every unit to the nearest — the network table's handshake ages.
 */
export type DurationRounding = 'down' | 'seconds' | 'nearest'

export interface DurationFormat {
  rounding?: DurationRounding
  /** Add the next smaller unit when it is not zero: `2h30m`, `7d4h` (explanations). */
  compound?: boolean
  /** The largest unit: days (default) or hours (`50h`). */
  largest?: 'd' | 'h'
}

export function formatDuration(ms: number, f: DurationFormat = {}): string {
  const rounding = f.rounding ?? 'down'
  const s = Math.max(0, rounding === 'down' ? Math.floor(ms / 1000) : Math.round(ms / 1000))
  const unit = rounding === 'nearest' ? Math.round : Math.floor
  if (s < 120) return `${s}s`
  if (s < 7200) return `${unit(s / 60)}m`
  if (s < 172_800 || f.largest === 'h') {
    const h = unit(s / 3600)
    const m = Math.floor(s / 60) % 60
    return f.compound && m !== 0 ? `${h}h${m}m` : `${h}h`
  }
  const d = unit(s / 86_400)
  const h = Math.floor(s / 3600) % 24
  return f.compound && h !== 0 ? `${d}d${h}h` : `${d}d`
}
