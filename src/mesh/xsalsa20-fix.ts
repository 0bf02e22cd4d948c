/**
 * A fix for the `xsalsa20` package that `@libp2p/pnet` encrypts every connection with (the cluster
 * PSK). Its WebAssembly streams keep a view of the module's one shared memory; when one stream grows
 * the memory, every other stream's view is detached (length 0), and that stream's next update grows
 * the memory again by its whole input although it had room. With large reads on several connections
 * (a replica sync's pieces, an export) the memory reaches its maximum within a minute and the agent
 * dies: `RangeError: WebAssembly.Memory.grow(): Maximum memory size exceeded` (found by
 * test/bench/volume-replication.bench.ts). The fix: `realloc` takes a current view of the memory and
 * grows it only when that is too small. The memory object is caught once, at install, from the
 * package's own `grow` call (a growth by 0 pages); nothing else of the package changes.
 */
import xsalsa20 from 'xsalsa20'

type Xor = { _memory: Uint8Array; realloc(size: number): void }
type Stream = { _xor: Xor; finalize(): void }
type Factory = (nonce: Uint8Array, key: Uint8Array) => Stream

const PAGE = 65536
type WasmMemory = { buffer: ArrayBuffer; grow(delta: number): number }
const MemoryProto = (globalThis as unknown as { WebAssembly: { Memory: { prototype: WasmMemory } } }).WebAssembly.Memory.prototype

/** Install the fix once (a no-op when xsalsa20 runs its pure-JS fallback or was already fixed). */
export function fixXsalsa20(make: Factory = xsalsa20 as unknown as Factory): boolean {
  const probe = make(new Uint8Array(24), new Uint8Array(32))
  const proto = Object.getPrototypeOf(probe._xor) as Xor & { orcFixed?: boolean }
  if (typeof proto.realloc !== 'function' || proto.orcFixed) {
    probe.finalize()
    return false
  }
  let memory: WasmMemory | undefined
  const grow = MemoryProto.grow
  MemoryProto.grow = function (this: WasmMemory, delta: number) {
    memory = this
    return grow.call(this, delta)
  }
  try {
    probe._xor.realloc(probe._xor._memory.length)
  } finally {
    MemoryProto.grow = grow
    probe.finalize()
  }
  const mem = memory
  if (mem === undefined) return false
  proto.realloc = function (this: Xor, size: number) {
    let view = new Uint8Array(mem.buffer)
    if (size >= view.length) {
      mem.grow(Math.ceil((size + 1 - view.length) / PAGE))
      view = new Uint8Array(mem.buffer)
    }
    this._memory = view
  }
  proto.orcFixed = true
  return true
}
