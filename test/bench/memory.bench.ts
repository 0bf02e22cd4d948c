/**
 * Where an idle agent's memory goes (issue #23): one agent holding 1k objects, idle 20 s (so the
 * heap keeper has run), then its RSS split from /proc/PID/smaps into the V8 heap and other
 * anonymous memory, the node binary's mapped code, shared libraries and the rest, beside V8's own
 * heap figures (read in the agent on SIGUSR2 by the heap-stats.mjs preload; HEAP_SNAPSHOT=1 also
 * writes a heap snapshot and prints its path; heap-summary.mjs sums it). BENCH_AGENT_ENV (JSON) adds to
 * the agent's environment.
 *
 *   node --import tsx --import ./test/setup.ts test/bench/memory.bench.ts [objects=1000] [idleSeconds=20]
 *
 * Prints `name value` lines; RSS growth per 1k objects is the difference of two runs.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { newNode, Workspace } from '../cluster/helpers.ts'
import { rssMb } from './proc.ts'

const OBJECTS = Number(process.argv[2] ?? 1000)
const IDLE_S = Number(process.argv[3] ?? 20)

/** RSS in MB per kind of mapping. */
export function smapsBreakdown(pid: number): Record<string, number> {
  const out: Record<string, number> = {}
  let kind = 'other'
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const head = /^[0-9a-f]+-[0-9a-f]+ (\S+) \S+ \S+ \S+\s*(.*)$/.exec(line)
    if (head) {
      const path = head[2] ?? ''
      kind =
        path === ''
          ? 'anonymous'
          : path === '[heap]'
            ? 'malloc_heap'
            : path === '[stack]'
              ? 'stack'
              : /\/node$|\/nodejs$/.test(path)
                ? `node_binary_${head[1]}`
                : /\.so(\.|$)/.test(path)
                  ? 'shared_libs'
                  : path.startsWith('[')
                    ? 'kernel_maps'
                    : 'files'
      continue
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line)
    if (rss) out[kind] = (out[kind] ?? 0) + Number(rss[1]) / 1024
  }
  return out
}

const ws = new Workspace()
try {
  const n = await newNode(ws, 'm0')
  const statsDir = mkdtempSync(join(tmpdir(), 'orc-heap-'))
  n.env = {
    NODE_OPTIONS: `--import=${new URL('./heap-stats.mjs', import.meta.url).pathname}`,
    HEAP_STATS_DIR: statsDir,
    ...(process.env.HEAP_SNAPSHOT ? { HEAP_SNAPSHOT: '1' } : {}),
    ...JSON.parse(process.env.BENCH_AGENT_ENV ?? '{}'),
  }
  await n.up().ready()
  for (let i = 0; i < OBJECTS; i += 500) {
    const objects = Array.from({ length: Math.min(500, OBJECTS - i) }, (_, j) => ({
      apiVersion: 'orc/v1',
      kind: 'Pod',
      metadata: { name: `idle-${i + j}`, labels: { app: 'bench', shard: String((i + j) % 16) } },
      spec: { nodeSelector: { 'orc-test': 'nowhere' }, containers: [{ name: 'main', image: 'busybox', command: ['sh', '-c', 'sleep 3600'] }] },
    }))
    await n.client.call('POST', '/v1/apply', { body: { objects } })
  }
  await new Promise((r) => setTimeout(r, IDLE_S * 1000))
  const pid = n.proc!.pid!
  console.log(`objects ${OBJECTS}`)
  console.log(`rss_mb ${rssMb(pid).toFixed(1)}`)
  for (const [k, v] of Object.entries(smapsBreakdown(pid)).sort((a, b) => b[1] - a[1])) console.log(`rss_mb_${k} ${v.toFixed(1)}`)
  process.kill(pid, 'SIGUSR2')
  const file = join(statsDir, `${pid}.json`)
  for (let i = 0; i < 3000 && !existsSync(file); i++) await new Promise((r) => setTimeout(r, 100))
  const h = JSON.parse(readFileSync(file, 'utf8'))
  for (const k of ['total_heap_size', 'used_heap_size', 'code_and_metadata', 'malloced_memory', 'external_memory', 'array_buffers'])
    console.log(`v8_${k}_mb ${h[k]}`)
  for (const [k, v] of Object.entries(h.spaces as Record<string, { size: number; used: number; physical: number }>))
    console.log(`v8_${k}_mb size ${v.size} used ${v.used} physical ${v.physical}`)
  if (process.env.HEAP_SNAPSHOT) console.log(`heap_snapshot ${join(statsDir, `${pid}.heapsnapshot`)}`)
  else rmSync(statsDir, { recursive: true, force: true })
} finally {
  await ws.close()
}
process.exit(0)
