export * from '../../../src/net/index.ts'
import { isOrcError, type OrcErrorCode } from '../../../src/model/index.ts'

/** assert.throws validator: an OrcError with this code. */
export function isOrcErrorLike(code: OrcErrorCode): (err: unknown) => boolean {
  return (err) => isOrcError(err, code)
}

/** Seeded random bytes (xorshift32); a failing property prints its seed via fast-check. */
export function seededRandom(seed: number): (n: number) => Uint8Array {
  let x = seed >>> 0 || 1
  return (n) => {
    const out = new Uint8Array(n)
    for (let i = 0; i < n; i++) {
      x ^= x << 13
      x >>>= 0
      x ^= x >>> 17
      x ^= x << 5
      x >>>= 0
      out[i] = x & 0xff
    }
    return out
  }
}
