import { OrcError } from '../model/index.ts'

/**
 * Resource quantities as users write them (Kubernetes notation): `500m`, `2`, `2.5`, `128Mi`, `1Gi`,
 * `1G`, `64k`. The scheduler works in integers — cpu in millicores, memory in bytes — so sums and
 * comparisons are exact and every node computes the same answer.
 */
export type Quantity = string | number

const QUANTITY = /^([0-9]+(?:\.[0-9]+)?)(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$/

const SUFFIX: Record<string, number> = {
  '': 1,
  m: 1e-3,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60,
}

/** The value of a quantity in base units (`500m` → 0.5, `1Ki` → 1024). Throws OrcError `invalid`. */
export function parseQuantity(q: Quantity): number {
  if (typeof q === 'number') {
    if (Number.isFinite(q) && q >= 0) return q
    throw new OrcError('invalid', `quantity must be a non-negative number, got ${q}`, { quantity: q })
  }
  const m = typeof q === 'string' ? QUANTITY.exec(q.trim()) : null
  if (!m) {
    throw new OrcError('invalid', `must be a quantity like 500m, 2, 128Mi or 1Gi; got ${JSON.stringify(q)}`, { quantity: q })
  }
  return Number(m[1]) * SUFFIX[m[2] ?? '']!
}

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
