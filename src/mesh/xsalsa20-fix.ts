/**
 * A fix for the `xsalsa20` package that `@libp2p/pnet` encrypts every connection with (the cluster
 * PSK). Its WebAssembly streams keep a view of the module's one shared memory; when one stream grows
 * the memory, every other stream's view is detached (length 0), and that stream's next update grows
 * the memory again by its whole input although it had room. With large reads or writes on several
 * connections (a replica sync's pieces, an export) the memory reaches its maximum within a minute
 * and the agent dies: `RangeError: WebAssembly.Memory.grow(): Maximum memory size exceeded`
 * (found by test/bench/volume-replication.bench.ts). The fix: before growing, take a current view
 * (a new stream's), and grow only if that is still too small.
 */
import xsalsa20 from 'xsalsa20'

type Xor = { _memory: Uint8Array; realloc(size: number): void }
type Stream = { _xor: Xor; finalize(): void }
type Factory = (nonce: Uint8Array, key: Uint8Array) => Stream

const NONCE = new Uint8Array(24)
const KEY = new Uint8Array(32)

/** Install the fix once (a no-op when xsalsa20 runs its pure-JS fallback or was already fixed). */
export function fixXsalsa20(make: Factory = xsalsa20 as unknown as Factory): boolean {
  const probe = make(NONCE, KEY)
  const proto = Object.getPrototypeOf(probe._xor) as Xor & { orcFixed?: boolean }
  probe.finalize()
  if (typeof proto.realloc !== 'function' || proto.orcFixed) return false
  const grow = proto.realloc
  proto.realloc = function (this: Xor, size: number) {
    const fresh = make(NONCE, KEY)
    const view = fresh._xor._memory
    fresh.finalize()
    this._memory = view
    if (size < view.length) return
    grow.call(this, size)
  }
  proto.orcFixed = true
  return true
}
