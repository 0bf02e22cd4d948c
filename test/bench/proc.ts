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

/**
 * Send calls a second of each process over `seconds` (write, writev, sendto, sendmsg, sendmmsg, as
 * `strace -c` counts them; the process keeps running): one per message on the wire for both orc
 * (a Noise frame on a TCP stream, one writev) and Serf (a UDP datagram, or a TCP write), so the two
 * compare without a packet capture. The agents' other writes at idle (orc's fence lease file, once
 * a second) are a rounding error. Undefined when strace is missing (ORC_SETUP_BENCH=1 scripts/setup.sh).
 */
export async function sendCallsPerSecond(pids: readonly number[], seconds: number): Promise<number[] | undefined> {
  const { spawn, spawnSync } = await import('node:child_process')
  if (spawnSync('strace', ['-V']).status !== 0) return undefined
  const runs = pids.map(
    (pid) =>
      new Promise<number>((resolve) => {
        const p = spawn('strace', ['-f', '-c', '-e', 'trace=write,writev,sendto,sendmsg,sendmmsg', '-p', String(pid)], { stdio: ['ignore', 'ignore', 'pipe'] })
        let err = ''
        p.stderr.on('data', (d: Buffer) => {
          err += d.toString()
        })
        p.on('close', () => {
          // The summary's "total" row: "100.00 SECONDS USECS/CALL CALLS [ERRORS] total".
          const total = /^\s*[\d.]+\s+[\d.]+\s+\d*\s+(\d+)(?:\s+\d+)?\s+total$/m.exec(err)
          resolve(Number(total?.[1] ?? 0) / seconds)
        })
        setTimeout(() => p.kill('SIGINT'), seconds * 1000)
      }),
  )
  return Promise.all(runs)
}

/**
 * Environment that CPU-profiles an agent when BENCH_PROF_DIR is set (none otherwise; see
 * cpu-profile.mjs): BENCH_PROF_PRELOAD replaces the profiler (gc-stats.mjs), BENCH_PROF_DELAY_MS
 * (default `delayMs`) and BENCH_PROF_DURATION_MS bound the window.
 */
export function profileEnv(delayMs = 0): Record<string, string> {
  const dir = process.env.BENCH_PROF_DIR
  if (!dir) return {}
  const preload = process.env.BENCH_PROF_PRELOAD ?? new URL('./cpu-profile.mjs', import.meta.url).pathname
  return {
    NODE_OPTIONS: `--import=${preload}`,
    CPU_PROFILE_DIR: dir,
    CPU_PROFILE_DELAY_MS: process.env.BENCH_PROF_DELAY_MS ?? String(delayMs),
    CPU_PROFILE_DURATION_MS: process.env.BENCH_PROF_DURATION_MS ?? '0',
  }
}
