import assert from 'node:assert/strict'
import { test } from 'node:test'
import { compactHeap, heapKeeperTick } from '../../../src/agent/heap.ts'

const MB = 1e6

test('the heap keeper collects when the held heap is idle or the used heap grew by the slack since its last collection', () => {
  // A scripted heap (MB): each step's figures, and the live size a collection leaves.
  let heap = { total_heap_size: 40 * MB, used_heap_size: 30 * MB }
  let live = 0
  const collected: number[] = []
  let step = 0
  const tick = heapKeeperTick({
    stats: () => heap,
    compact: () => {
      collected.push(step)
      heap = { total_heap_size: heap.total_heap_size, used_heap_size: live * MB }
      return { ms: 1, heapBeforeMB: 0, heapAfterMB: 0 }
    },
  })
  const script: [total: number, used: number, live: number][] = [
    [40, 35, 0], // 1: grew 5 MB since the start (30), 5 idle: nothing
    [60, 44, 33], // 2: grew 14: collect (garbage of a burst), live 33
    [50, 40, 0], // 3: grew 7 since 33: nothing
    [70, 50, 48], // 4: grew 17: collect; the live growth (48) is the new baseline
    [70, 58, 0], // 5: grew 10 since 48, 12 idle in the held heap: collect
  ]
  for (const [total, used, l] of script.slice(0, 5)) {
    step++
    live = l
    heap = { total_heap_size: total * MB, used_heap_size: used * MB }
    tick()
  }
  assert.deepEqual(collected, [2, 4, 5])
})

test('compactHeap runs a real compacting collection here', () => {
  const r = compactHeap()
  assert.ok(r !== undefined, 'gc reachable without --expose-gc')
  assert.ok(r.heapAfterMB > 0)
})
