// Preload for benchmarks: `NODE_OPTIONS=--import=…/gc-stats.mjs` counts a process's garbage
// collections by kind (minor = scavenges of the young generation, major, incremental marking, weak
// callbacks) and the time each kind took, and writes them as JSON to $GC_STATS_DIR/gc-<pid>.json
// $GC_STATS_AFTER_MS after the start (default 10 s). mesh.bench.ts takes it in place of the CPU
// profiler (its variables are read too): BENCH_PROF_PRELOAD=test/bench/gc-stats.mjs with
// BENCH_PROF_DIR and BENCH_PROF_DURATION_MS.
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { constants, PerformanceObserver } from 'node:perf_hooks'

const kinds = {
  [constants.NODE_PERFORMANCE_GC_MINOR]: 'minor',
  [constants.NODE_PERFORMANCE_GC_MAJOR]: 'major',
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
  [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weakcb',
}
const sums = {}
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    const kind = kinds[e.detail?.kind] ?? String(e.detail?.kind)
    sums[kind] ??= { count: 0, ms: 0 }
    sums[kind].count++
    sums[kind].ms = Math.round((sums[kind].ms + e.duration) * 10) / 10
  }
}).observe({ entryTypes: ['gc'] })
const dir = process.env.GC_STATS_DIR ?? process.env.CPU_PROFILE_DIR ?? '.'
const after = Number(process.env.GC_STATS_AFTER_MS ?? process.env.CPU_PROFILE_DURATION_MS ?? 10_000)
setTimeout(() => writeFileSync(join(dir, `gc-${process.pid}.json`), JSON.stringify(sums)), after).unref()
