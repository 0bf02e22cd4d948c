/** What the benchmarks read about a process from /proc, and their percentile. */
import { readFileSync } from 'node:fs'

/** CPU seconds (user + system) a process has used so far. */
export function cpuSeconds(pid: number | undefined): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')
  return (Number(f[11]) + Number(f[12])) / 100 // utime, stime in clock ticks (USER_HZ 100)
}

export function rssMb(pid: number | undefined): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
  return Number(m?.[1] ?? 0) / 1024
}

/** The p-th percentile (nearest rank). */
export function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!
}
