import { OrcError } from './errors.ts'

/**
 * Resource quantities as users write them (Kubernetes notation): `500m`, `2`, `2.5`, `128Mi`, `1Gi`,
 * `1G`, `64k`. The scheduler turns them into integers (sched's parseCpu, parseMemory), the runtimes
 * into limits; both read them here, so a quantity means one thing everywhere.
 */
export type Quantity = string | number

const QUANTITY_TEXT = /^([0-9]+(?:\.[0-9]+)?)(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$/

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
  const m = typeof q === 'string' ? QUANTITY_TEXT.exec(q.trim()) : null
  if (!m) {
    throw new OrcError('invalid', `must be a quantity like 500m, 2, 128Mi or 1Gi; got ${JSON.stringify(q)}`, { quantity: q })
  }
  return Number(m[1]) * SUFFIX[m[2] ?? '']!
}
