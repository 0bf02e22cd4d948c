/** Durations as people read them: `250ms`, `12.3s`, `30s`, `2m05s`, `1h02m`. */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms)) return 'never'
  const v = Math.max(0, ms)
  if (v < 1000) return `${Math.round(v)}ms`
  if (v < 60_000) {
    const tenths = Math.floor(v / 100)
    return tenths % 10 === 0 ? `${tenths / 10}s` : `${(tenths / 10).toFixed(1)}s`
  }
  const s = Math.floor(v / 1000)
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`
}

/** Fixed millisecond precision, as `systemd-analyze critical-chain` prints: `1.204s`. */
export function formatSeconds(ms: number): string {
  return `${(Math.max(0, ms) / 1000).toFixed(3)}s`
}
