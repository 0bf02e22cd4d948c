// Preload for benchmarks: `NODE_OPTIONS=--import=…/heap-stats.mjs` makes a process write V8's heap
// figures (the whole heap and each space, in MB) to $HEAP_STATS_DIR/<pid>.json on SIGUSR2, and with
// HEAP_SNAPSHOT=1 a heap snapshot beside it.
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import v8 from 'node:v8'

const mb = (n) => Math.round(n / 1e4) / 100
process.on('SIGUSR2', () => {
  const h = v8.getHeapStatistics()
  const m = process.memoryUsage()
  const out = {
    total_heap_size: mb(h.total_heap_size),
    used_heap_size: mb(h.used_heap_size),
    malloced_memory: mb(h.malloced_memory),
    external_memory: mb(h.external_memory ?? m.external),
    array_buffers: mb(m.arrayBuffers),
    code_and_metadata: 0,
    spaces: {},
  }
  for (const s of v8.getHeapSpaceStatistics()) out.spaces[s.space_name] = { size: mb(s.space_size), used: mb(s.space_used_size), physical: mb(s.physical_space_size) }
  const c = v8.getHeapCodeStatistics()
  out.code_and_metadata = mb(c.code_and_metadata_size + c.bytecode_and_metadata_size)
  const dir = process.env.HEAP_STATS_DIR ?? '/tmp'
  // HEAP_SNAPSHOT=1: a heap snapshot too, first (its figures come after the GC it forces).
  if (process.env.HEAP_SNAPSHOT) v8.writeHeapSnapshot(join(dir, `${process.pid}.heapsnapshot`))
  writeFileSync(join(dir, `${process.pid}.json`), JSON.stringify(out, null, 1))
})
