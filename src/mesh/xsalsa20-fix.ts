/**
 * A fix for the `xsalsa20` package that `@libp2p/pnet` encrypts every connection with (the cluster
 * PSK). Its WebAssembly streams keep a view of the module's one shared memory; when one stream grows
 * the memory, every other stream's view is detached (length 0), and that stream's next update grows
 * the memory again by its whole input although it had room. With large reads or writes on several
 * connections (a replica sync's pieces, an export) the memory reaches its maximum within a minute
 * and the agent dies: `RangeError: WebAssembly.Memory.grow(): Maximum memory size exceeded`
 * (found by test/bench/volume-replication.bench.ts).
 *
 * The fix: every growth goes through `realloc`, so the newest view of the memory is kept here;
 * before growing, a stream takes that view and grows only if it is still too small. (Making a new
 * stream to read the memory is not an option: with no free slot it moves the module's shared
 * scratch area in the middle of the calling stream's update, whose output then comes out wrong.)
 */
import xsalsa20 from 'xsalsa20'

type Xor = { _memory: Uint8Array; realloc(size: number): void }
type Stream = { _xor: Xor | null; finalize(): void }
type Factory = (nonce: Uint8Array, key: Uint8Array) => Stream

/** Install the fix once (a no-op when xsalsa20 runs its pure-JS fallback or was already fixed). */
export function fixXsalsa20(make: Factory = xsalsa20 as unknown as Factory): boolean {
  const probe = make(new Uint8Array(24), new Uint8Array(32))
  const xor = probe._xor as Xor
  const proto = Object.getPrototypeOf(xor) as Xor & { orcFixed?: boolean }
  // A view taken now is current: growth before this point was by streams that are unpatched, but
  // the probe was just made, after them.
  let latest = xor._memory
  probe.finalize()
  if (typeof proto.realloc !== 'function' || proto.orcFixed) return false
  const grow = proto.realloc
  proto.realloc = function (this: Xor, size: number) {
    // A detached view has length 0; the newest view is current (only realloc grows the memory).
    if (latest.length > this._memory.length) this._memory = latest
    if (size < this._memory.length) return
    grow.call(this, size)
    latest = this._memory
  }
  proto.orcFixed = true
  return true
}
