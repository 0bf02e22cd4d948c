/**
 * One compacting garbage collection, run by the agent right after its store has loaded.
 *
 * Loading a large document (a cold start with 10k objects, a joining node's first sync) leaves the
 * decoder's garbage interleaved with the document's live objects, and V8's ordinary full GCs
 * compact only a few fragmented pages: 10k pods left ~100 MB of old space committed for ~60 MB
 * live. One full GC with compaction forced returns the rest (~40 MB RSS) for a pause of ~250 ms,
 * once. The node command line does not need `--expose-gc`: the flag is turned on for the moment it
 * takes to fetch `gc` from a fresh context (a documented use of v8.setFlagsFromString), and every
 * flag set here is set back.
 */
import v8 from 'node:v8'
import vm from 'node:vm'

let gcFn: (() => void) | null | undefined

function fetchGc(): (() => void) | null {
  if (gcFn !== undefined) return gcFn
  const exposed = (globalThis as { gc?: () => void }).gc
  if (typeof exposed === 'function') return (gcFn = exposed)
  try {
    v8.setFlagsFromString('--expose-gc')
    const fn = vm.runInNewContext('gc') as unknown
    gcFn = typeof fn === 'function' ? (fn as () => void) : null
  } catch {
    gcFn = null
  } finally {
    v8.setFlagsFromString('--no-expose-gc')
  }
  return gcFn
}

export interface CompactResult {
  ms: number
  heapBeforeMB: number
  heapAfterMB: number
}

/** Runs a full, compacting GC; undefined where this Node cannot (the caller just goes on). */
export function compactHeap(): CompactResult | undefined {
  const gc = fetchGc()
  if (gc === null) return undefined
  const before = v8.getHeapStatistics().total_heap_size
  const t0 = performance.now()
  try {
    v8.setFlagsFromString('--compact-on-every-full-gc')
    gc()
  } finally {
    v8.setFlagsFromString('--no-compact-on-every-full-gc')
  }
  const mb = (n: number) => Math.round(n / 1e5) / 10
  return { ms: Math.round(performance.now() - t0), heapBeforeMB: mb(before), heapAfterMB: mb(v8.getHeapStatistics().total_heap_size) }
}

/**
 * Keeps the committed heap close to what is live: every `everyMs` it compares the heap V8 holds
 * with the part in use and, when more than `slackMB` is idle (after a burst of writes, a sync, a
 * rollout), runs one compacting GC. V8's own memory reducer does the same only when it judges the
 * process idle, which a heartbeating agent often never is: idle agents were measured at 104–132 MB
 * RSS from one start to the next, ~95 MB once compacted (docs/benchmarks.md).
 *
 * The part "in use" counts garbage V8 has not collected yet: after a burst that allocated a lot
 * (1,000 pods applied) the old generation sat at 55–86 MB "used" for 32 MB live until V8's next
 * major GC, which an idle agent reaches only slowly. So the keeper also collects when the used
 * heap has grown by `slackMB` since its last collection: live growth (more objects) is kept and
 * becomes the new baseline; garbage is returned.
 */
export function keepHeapCompact(opts: HeapKeeperOptions & { everyMs?: number } = {}): () => void {
  const tick = heapKeeperTick(opts)
  const timer = setInterval(tick, opts.everyMs ?? 15_000)
  timer.unref()
  return () => clearInterval(timer)
}

export interface HeapKeeperOptions {
  slackMB?: number
  onCompact?: (r: CompactResult) => void
  /** V8's figures and the collection; the real ones unless a test scripts them. */
  stats?: () => { total_heap_size: number; used_heap_size: number }
  compact?: () => CompactResult | undefined
}

/** One check of the keeper (above); the baseline is the used heap when this is made. */
export function heapKeeperTick(opts: HeapKeeperOptions = {}): () => void {
  const slack = (opts.slackMB ?? 12) * 1e6
  const stats = opts.stats ?? (() => v8.getHeapStatistics())
  const compact = opts.compact ?? compactHeap
  // Made when the agent starts the keeper: just after its store has loaded and been compacted.
  let baseline = stats().used_heap_size
  return () => {
    const h = stats()
    if (h.total_heap_size - h.used_heap_size < slack && h.used_heap_size - baseline < slack) return
    const r = compact()
    baseline = stats().used_heap_size
    if (r !== undefined) opts.onCompact?.(r)
  }
}
