/**
 * The API edge of Secrets (docs/secrets.md, "API and CLI"): an applied Secret's clear values are
 * sealed with the cluster data key before the manifest is validated and written, so the store, its
 * history and every replica hold only sealed values; `revealSecret` opens them again for a principal
 * whose role grants `Secret/reveal` (`orc get secret NAME --show-secrets`). Nothing here logs or
 * puts a value in an error: errors name the key, logs name the keys.
 */
import { isUtf8 } from 'node:buffer'
import type { Logger } from 'pino'
import type { Random } from '../effects/index.ts'
import { authorOf, dataIssues, isPlainObject, type ObjectRef, OrcError, type SealedValue, type Secret } from '../model/index.ts'
import { hashValue, type Keyring, keyIdOfSealed, openSecret, openValue, sealSecret } from '../secrets/index.ts'
import type { StoredObject } from '../store/index.ts'
import type { RouteHandlers } from './router.ts'
import type { ClusterKeyring } from './secrets.ts'

export interface SecretApiComponents {
  /** This node's copy of the cluster keyring (agent.ts `keyring`). */
  keyring: Pick<ClusterKeyring, 'get' | 'require'>
  random: Random
  /** The stored object at `ref`, as the API sees it (federation-routed). */
  get(ref: ObjectRef): StoredObject | undefined
  logger: Logger
}

function sameSealed(a: unknown, b: SealedValue | undefined): boolean {
  if (b === undefined || !isPlainObject(a)) return false
  return a.value === b.value && a.hash === b.hash && a.size === b.size && Boolean(a.binary) === Boolean(b.binary)
}

/** Clear values must be text: a number or an object has no bytes to seal. The message names the key, never the value. */
function clearValueIssues(name: string, spec: Record<string, unknown>): void {
  for (const field of ['data', 'binaryData'] as const) {
    const m = spec[field]
    if (m === undefined) continue
    if (!isPlainObject(m)) throw new OrcError('invalid', `secret/${name}: spec.${field}: must be a map of key to ${field === 'data' ? 'text' : 'base64'}`)
    for (const [k, v] of Object.entries(m)) {
      if (typeof v !== 'string') throw new OrcError('invalid', `secret/${name}: spec.${field}.${k}: must be a string`, { path: `spec.${field}.${k}` })
    }
  }
  const issues = dataIssues(spec as Parameters<typeof dataIssues>[0])
  if (issues.length > 0) throw new OrcError('invalid', `secret/${name}: ${issues.map((i) => `${i.path}: ${i.rule}`).join('; ')}`, { issues })
}

/**
 * A Secret about to be written (a rollback restores an old revision as it was sealed): every value
 * must be sealed with a key this cluster still holds, or no pod could open it. Refused in one line.
 */
export function admitSealedKeys(secret: Secret, ring: Keyring | undefined): void {
  if (ring === undefined) return
  for (const [key, v] of Object.entries(secret.spec?.sealed ?? {})) {
    const id = keyIdOfSealed(v)
    if (ring.get(id) === undefined) {
      throw new OrcError(
        'invalid',
        `secret/${secret.metadata.name}: key ${key} is sealed with data key ${id}, which this cluster retired after a rotation; apply the value again instead of restoring it`,
        { key, keyId: id },
      )
    }
  }
}

/**
 * The edge of `apply` for Secrets: a manifest as a user sent it → the form the store may hold
 * (clear `data`/`binaryData` sealed; values unchanged from the stored Secret keep their sealed form,
 * so re-applying writes no revision). Sealed values a manifest carries (`orc get -o yaml` edited and
 * applied back) must be the stored ones or open at this place with their stated hash and size.
 * Anything but a Secret passes unchanged; a malformed manifest passes to the schema's checks.
 */
export function sealAppliedSecret(c: SecretApiComponents, raw: unknown, defaultNamespace: string | undefined): unknown {
  if (!isPlainObject(raw) || raw.kind !== 'Secret' || !isPlainObject(raw.metadata) || !isPlainObject(raw.spec)) return raw
  const meta = raw.metadata
  const name = meta.name
  if (typeof name !== 'string') return raw
  const namespace = typeof meta.namespace === 'string' && meta.namespace !== '' ? meta.namespace : (defaultNamespace ?? 'default')
  const spec = raw.spec
  clearValueIssues(name, spec)
  const existing = c.get({ kind: 'Secret', namespace, name }) as Secret | undefined
  const stored = existing?.spec?.sealed ?? {}
  const given = isPlainObject(spec.sealed) ? spec.sealed : {}
  const clear = Object.keys(spec.data ?? {}).length + Object.keys(spec.binaryData ?? {}).length
  const foreign = Object.entries(given).filter(([k, v]) => !sameSealed(v, stored[k]))
  if (clear === 0 && foreign.length === 0) return raw
  const ring = c.keyring.require()
  for (const [key, v] of foreign) {
    if (!isPlainObject(v) || typeof v.value !== 'string') continue // the schema says what is wrong
    const where = `secret/${name}: spec.sealed.${key}`
    let plain: Buffer
    try {
      plain = openValue(ring, { namespace, name, key }, v as SealedValue)
    } catch (err) {
      if (err instanceof OrcError && err.code === 'unavailable') throw err
      throw new OrcError('invalid', `${where}: not a value sealed for this secret and key (give it in clear under spec.data)`, { path: `spec.sealed.${key}` })
    }
    if (v.hash !== hashValue(ring, plain) || v.size !== plain.byteLength || (!v.binary && !isUtf8(plain))) {
      throw new OrcError('invalid', `${where}: hash, size or binary do not match the sealed value`, { path: `spec.sealed.${key}` })
    }
  }
  const manifest = { ...raw, metadata: { ...meta, namespace } } as unknown as Secret
  return sealSecret(ring, c.random, manifest, existing)
}

/** A stored Secret with its values opened: `data` (text) and `binaryData` (base64) instead of `sealed`; applying it back changes nothing. */
export function revealedSecret(ring: ReturnType<ClusterKeyring['require']>, secret: Secret): Secret {
  const opened = openSecret(ring, secret)
  const data: Record<string, string> = {}
  const binaryData: Record<string, string> = {}
  for (const [key, v] of Object.entries(secret.spec?.sealed ?? {})) {
    const plain = opened.get(key)!
    if (v.binary) binaryData[key] = plain.toString('base64')
    else data[key] = plain.toString('utf8')
  }
  const { sealed: _s, ...rest } = secret.spec ?? {}
  return {
    ...secret,
    spec: { ...rest, ...(Object.keys(data).length > 0 ? { data } : {}), ...(Object.keys(binaryData).length > 0 ? { binaryData } : {}) },
  }
}

/** `revealSecret`: the route's permission (`get Secret/reveal`) is checked before this runs (authz.ts). */
export function secretRoutes(c: SecretApiComponents) {
  const log = c.logger.child({ module: 'secrets' })
  return {
    revealSecret: ({ params, principal }) => {
      const ref = { kind: 'Secret', namespace: params.ns, name: params.name }
      const obj = c.get(ref) as (Secret & StoredObject) | undefined
      if (obj === undefined) throw new OrcError('not_found', `secret/${params.name} in namespace ${params.ns} not found`, { ...ref })
      const out = revealedSecret(c.keyring.require(), obj)
      // Who opened which keys: an audit line, never a value.
      log.info(
        { ns: params.ns, name: params.name, keys: Object.keys(obj.spec?.sealed ?? {}), by: principal ? authorOf(principal) : undefined },
        'secret revealed',
      )
      return { object: out as StoredObject }
    },
  } satisfies RouteHandlers
}
