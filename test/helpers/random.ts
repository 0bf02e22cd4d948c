/** Deterministic random bytes from a seed (xorshift32), so ids and addresses in a failing run can be
 * replayed from its seed. The one seeded source every test helper uses. */
export function seededBytes(seed: number): (n: number) => Uint8Array {
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
