/**
 * Seeded randomness. One run seed fans out into independent named streams (network, scenario, one
 * per node for protocol choices, one per node for the store's ids), so adding a draw in one place
 * does not shift every other draw of the run.
 */
export class Rng {
  private a: number
  private b: number
  private c: number
  private d: number

  constructor(seed: number, stream = 0) {
    // splitmix32 to spread (seed, stream) into the sfc32 state.
    let s = (seed ^ Math.imul(stream + 1, 0x9e3779b9)) >>> 0
    const next = () => {
      s = (s + 0x9e3779b9) >>> 0
      let z = s
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b)
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35)
      return (z ^ (z >>> 16)) >>> 0
    }
    this.a = next()
    this.b = next()
    this.c = next()
    this.d = next()
    for (let i = 0; i < 12; i++) this.u32()
  }

  u32(): number {
    const t = (((this.a + this.b) >>> 0) + this.d) >>> 0
    this.d = (this.d + 1) >>> 0
    this.a = this.b ^ (this.b >>> 9)
    this.b = (this.c + (this.c << 3)) >>> 0
    this.c = (this.c << 21) | (this.c >>> 11)
    this.c = (this.c + t) >>> 0
    return t
  }

  /** Uniform in [0, 1). */
  next(): number {
    return this.u32() / 4294967296
  }

  /** Uniform integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n)
  }

  chance(p: number): boolean {
    return p > 0 && this.next() < p
  }

  pick<T>(xs: readonly T[]): T {
    return xs[this.int(xs.length)]!
  }

  /** Standard normal (Box–Muller). */
  normal(): number {
    const u = 1 - this.next()
    const v = this.next()
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v)
  }

  bytes(n: number): Uint8Array {
    const out = new Uint8Array(n)
    for (let i = 0; i < n; i += 4) {
      const x = this.u32()
      out[i] = x & 0xff
      if (i + 1 < n) out[i + 1] = (x >>> 8) & 0xff
      if (i + 2 < n) out[i + 2] = (x >>> 16) & 0xff
      if (i + 3 < n) out[i + 3] = x >>> 24
    }
    return out
  }

  /** k distinct indexes from [0, n) (k ≤ n). */
  sample(n: number, k: number): number[] {
    const out = new Set<number>()
    if (k >= n) return [...Array(n).keys()]
    while (out.size < k) out.add(this.int(n))
    return [...out]
  }
}

/** A fresh random seed for a run (printed, so the run can be replayed). */
export function randomSeed(): number {
  return (Math.random() * 2 ** 31) >>> 0
}
