import { formatDuration } from '../duration.ts'
import { DNS_LABEL, s } from '../schema.ts'

export const labelKey = /^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/
export const labelValue = /^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$/

export const labelsSchema = s.map(s.string({ pattern: labelValue, patternName: 'a label value (≤63 chars: letters, digits, -_.)' }), {
  keyPattern: labelKey,
  keyPatternName: 'a label key (prefix/name, letters, digits, -_.)',
  maxEntries: 64,
})

export const dnsName = s.string({ pattern: DNS_LABEL, patternName: 'a DNS label (lowercase letters, digits and -, at most 63)' })

/** `age` column text from an ISO time, like kubectl: 5s, 3m, 2h, 4d. */
export function age(iso: unknown, now: number): string {
  if (typeof iso !== 'string') return '<unknown>'
  const t = Date.parse(iso)
  if (Number.isNaN(t)) return '<unknown>'
  return formatDuration(now - t)
}

/** When the store created the object (stored objects only). */
export function createdAt(o: { metadata: object }): unknown {
  return (o.metadata as { createdAt?: unknown }).createdAt
}

export function text(v: unknown, dflt = '<none>'): string {
  if (v === undefined || v === null || v === '') return dflt
  if (typeof v === 'object') return JSON.stringify(v)
  return String(v)
}

export function labelsText(v: unknown): string {
  if (!v || typeof v !== 'object') return '<none>'
  const entries = Object.entries(v as Record<string, string>)
  return entries.length === 0 ? '<none>' : entries.map(([k, val]) => `${k}=${val}`).join(',')
}
