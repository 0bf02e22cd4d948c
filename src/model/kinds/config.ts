import { defineKind, type ObjectOfKind } from '../kind.ts'
import type { Issue } from '../schema.ts'
import { s } from '../schema.ts'
import { age, createdAt } from './common.ts'

/** A data key of a Config or Secret: a file name in a pod's mount, so no `/`, `.` or `..`. */
export const DATA_KEY = /^[-._a-zA-Z0-9]{1,253}$/
/**
 * The most one Config or Secret holds: its values' bytes together (decoded; before encryption).
 * Sealed (base64 of nonce, ciphertext, tag: a third more) it must still fit the store's object
 * limit (256 KiB), and every member holds every object.
 */
export const MAX_DATA_BYTES = 128 * 1024
/** A single value's length as the schema checks it: loose, so the total's rule (which names the size) speaks first. */
const MAX_VALUE_CHARS = 8 * MAX_DATA_BYTES
const MAX_KEYS = 256
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/

const keyOpts = { keyPattern: DATA_KEY, keyPatternName: 'a data key (letters, digits, - _ ., at most 253)', maxEntries: MAX_KEYS }
/** UTF-8 text values. */
const textData = s.map(s.string({ maxLength: MAX_VALUE_CHARS }), keyOpts)
/** Binary values, base64. */
const binaryData = s.map(s.string({ maxLength: MAX_VALUE_CHARS }), keyOpts)

/** A sealed value's envelope: `orc:enc:v1:<key id>:<base64url of nonce | ciphertext | tag>` (src/secrets). */
export const SEALED_VALUE = /^orc:enc:v1:[0-9a-f]{16}:[A-Za-z0-9_-]+$/
const sealedValue = s.object({
  /** The value encrypted with the cluster data key (AES-256-GCM, bound to namespace/name/key). */
  value: s.required(s.string({ pattern: SEALED_VALUE, patternName: 'a sealed value (orc:enc:v1:…)', maxLength: 1_500_000 })),
  /** HMAC-SHA256 of the plaintext under the cluster's hash key, 16 hex: history shows that a value changed, never the value. */
  hash: s.required(s.string({ pattern: /^[0-9a-f]{16}$/, patternName: '16 hex digits' })),
  /** Plaintext bytes. */
  size: s.required(s.int({ min: 0, max: MAX_DATA_BYTES })),
  /** Not UTF-8 text (given as binaryData): cannot be used as an environment variable. */
  binary: s.bool(),
})

function keyIssues(maps: Array<[string, Record<string, unknown> | undefined]>, sizeOf: (field: string, v: unknown) => number): Issue[] {
  const issues: Issue[] = []
  const seen = new Map<string, string>()
  let total = 0
  for (const [field, m] of maps) {
    for (const [k, v] of Object.entries(m ?? {})) {
      if (k === '.' || k === '..' || !DATA_KEY.test(k))
        issues.push({ path: `${field}.${k}`, rule: 'a data key is letters, digits, - _ . (at most 253), not . or ..' })
      const other = seen.get(k)
      if (other !== undefined) issues.push({ path: `${field}.${k}`, rule: `key ${k} is also in ${other}` })
      seen.set(k, field)
      if (field.endsWith('binaryData') && (typeof v !== 'string' || !BASE64.test(v) || v.length % 4 !== 0)) {
        issues.push({ path: `${field}.${k}`, rule: 'binaryData values are base64' })
        continue
      }
      total += sizeOf(field, v)
    }
  }
  if (total > MAX_DATA_BYTES)
    issues.push({ path: maps[0]![0].replace(/\.[^.]*$/, ''), rule: `${total} bytes of data; at most ${MAX_DATA_BYTES} (128 KiB) per object` })
  return issues
}

const plainSize = (field: string, v: unknown): number =>
  typeof v !== 'string' ? 0 : field.endsWith('binaryData') ? Buffer.from(v, 'base64').byteLength : Buffer.byteLength(v, 'utf8')

/** The rules of clear `data` and `binaryData` (a Config's, or a Secret's before it is sealed): key names, base64, 128 KiB. */
export function dataIssues(spec: { data?: Record<string, unknown>; binaryData?: Record<string, unknown> } | undefined, base = 'spec'): Issue[] {
  return keyIssues(
    [
      [`${base}.data`, spec?.data],
      [`${base}.binaryData`, spec?.binaryData],
    ],
    plainSize,
  )
}

/** Configuration a pod reads as files or environment variables: stored and replicated in clear. */
export const configKind = defineKind({
  kind: 'Config',
  plural: 'configs',
  aliases: ['config', 'cfg', 'configmap', 'configmaps', 'cm'],
  namespaced: true,
  spec: s.object({ data: textData, binaryData, description: s.string({ maxLength: 1024 }) }),
  owned: [],
  check: (o) => dataIssues(o.spec),
  columns: [
    { header: 'NAME', value: (o) => o.metadata.name },
    { header: 'KEYS', value: (o) => String(Object.keys(o.spec?.data ?? {}).length + Object.keys(o.spec?.binaryData ?? {}).length) },
    {
      header: 'SIZE',
      value: (o) =>
        String(
          Object.entries(o.spec?.data ?? {}).reduce((n, [, v]) => n + plainSize('data', v), 0) +
            Object.entries(o.spec?.binaryData ?? {}).reduce((n, [, v]) => n + plainSize('binaryData', v), 0),
        ),
    },
    {
      header: 'DATA',
      value: (o) =>
        [
          ...Object.entries(o.spec?.data ?? {}).map(([k, v]) => `${k}:${plainSize('data', v)}`),
          ...Object.entries(o.spec?.binaryData ?? {}).map(([k, v]) => `${k}:${plainSize('binaryData', v)}`),
        ].join(',') || '<none>',
      wide: true,
    },
    { header: 'AGE', value: (o, now) => age(createdAt(o), now) },
  ],
})

/**
 * A value a pod needs that nobody else should read: given in clear (`data`, `binaryData`) to the
 * API, which seals each value with the cluster data key before it is written (`sealed`); the
 * store, its history and every replica hold only the sealed form (a stored Secret with clear
 * values is refused, on every replica). See docs/secrets.md.
 */
export const secretKind = defineKind({
  kind: 'Secret',
  plural: 'secrets',
  aliases: ['secret', 'sec'],
  namespaced: true,
  spec: s.object({
    /** Input only: UTF-8 values, sealed by the API on apply. */
    data: textData,
    /** Input only: base64 values, sealed by the API on apply. */
    binaryData,
    sealed: s.map(sealedValue, keyOpts),
    /** May replicate into a federation whose shared namespaces include this one (default: never). */
    shareable: s.bool(),
    /** What it holds, for people (`registry-auth`, `tls`, …): no effect. */
    type: s.string({ maxLength: 253 }),
    description: s.string({ maxLength: 1024 }),
  }),
  owned: [],
  check: (o) => {
    const issues: Issue[] = []
    for (const f of ['data', 'binaryData'] as const) {
      if (o.spec?.[f] !== undefined)
        issues.push({ path: `spec.${f}`, rule: 'clear values are sealed by the API before they are stored: apply the Secret through orc' })
    }
    issues.push(
      ...keyIssues([['spec.sealed', o.spec?.sealed]], (_f, v) => (typeof (v as { size?: unknown })?.size === 'number' ? (v as { size: number }).size : 0)),
    )
    return issues
  },
  columns: [
    { header: 'NAME', value: (o) => o.metadata.name },
    { header: 'KEYS', value: (o) => String(Object.keys(o.spec?.sealed ?? {}).length) },
    { header: 'SIZE', value: (o) => String(Object.values(o.spec?.sealed ?? {}).reduce((n, v) => n + v.size, 0)) },
    { header: 'SHAREABLE', value: (o) => (o.spec?.shareable ? 'yes' : 'no'), wide: true },
    // Key names and plaintext sizes (never values): what `orc get secrets -o wide` lists.
    {
      header: 'DATA',
      value: (o) =>
        Object.entries(o.spec?.sealed ?? {})
          .map(([k, v]) => `${k}:${v.size}`)
          .join(',') || '<none>',
      wide: true,
    },
    { header: 'AGE', value: (o, now) => age(createdAt(o), now) },
  ],
})

export type Config = ObjectOfKind<typeof configKind>
export type Secret = ObjectOfKind<typeof secretKind>
export type SealedValue = NonNullable<NonNullable<Secret['spec']>['sealed']>[string]
