import { parseQuantity, type Quantity } from '../model/index.ts'

/**
 * Resource quantities (model's parseQuantity) as the scheduler works with them: integers — cpu in
 * millicores, memory in bytes — so sums and comparisons are exact and every node computes the same
 * answer.
 */
export { parseQuantity, type Quantity }

/** CPU in millicores, rounded up (a request of `0.0001` still needs a millicore). */
export function parseCpu(q: Quantity | undefined): number {
  if (q === undefined) return 0
  // Round the product to 1e-6 first so `0.3` * 1000 = 300.00000000000006 does not become 301.
  return Math.ceil(Math.round(parseQuantity(q) * 1e9) / 1e6)
}

/** Memory in bytes, rounded up. */
export function parseMemory(q: Quantity | undefined): number {
  if (q === undefined) return 0
  return Math.ceil(Math.round(parseQuantity(q) * 1e3) / 1e3)
}

/** `500m`, `2`, `1500m` — how a user would write it back. */
export function formatCpu(millis: number): string {
  if (millis % 1000 === 0) return String(millis / 1000)
  return `${millis}m`
}

const BINARY: [string, number][] = [
  ['Ti', 2 ** 40],
  ['Gi', 2 ** 30],
  ['Mi', 2 ** 20],
  ['Ki', 2 ** 10],
]

/** `2Gi`, `512Mi`, `1.5Gi`, `1000` — exact, in the largest binary unit that reads well, else bytes. */
export function formatMemory(bytes: number): string {
  if (bytes <= 0) return '0'
  for (const [suffix, unit] of BINARY) {
    if (bytes < unit) continue
    const v = bytes / unit
    if (Number.isInteger(v)) return `${v}${suffix}`
    if (Number.isInteger((bytes * 10) / unit)) return `${v.toFixed(1)}${suffix}`
  }
  return String(bytes)
}
