/**
 * Sealed values: AES-256-GCM under a cluster data key, with the value's place (namespace, Secret
 * name, data key) as associated data, so a sealed value copied into another Secret or key does not
 * open. The envelope is text (`orc:enc:v1:<key id>:<base64url nonce|ciphertext|tag>`) so it lives
 * in the replicated document like any field; the plaintext exists only at the API that sealed it,
 * at `--show-secrets`, and in the tmpfs or environment of the pods that use it.
 */
import { createCipheriv, createDecipheriv, createHmac } from 'node:crypto'
import type { Random } from '../effects/index.ts'
import { dataIssues, OrcError, type SealedValue, type Secret } from '../model/index.ts'
import type { Keyring } from './keyring.ts'

const PREFIX = 'orc:enc:v1:'
const NONCE = 12
const TAG = 16

export interface Place {
  namespace: string
  name: string
  key: string
}

const aad = (p: Place) => Buffer.from(`${p.namespace}/${p.name}/${p.key}`, 'utf8')

/** HMAC-SHA256 of a plaintext under the cluster's hash key, 16 hex: equal values have equal hashes. */
export function hashValue(keyring: Keyring, plaintext: Uint8Array): string {
  return createHmac('sha256', keyring.hashKey).update(plaintext).digest('hex').slice(0, 16)
}

export function sealValue(keyring: Keyring, random: Random, place: Place, plaintext: Uint8Array, binary = false): SealedValue {
  const k = keyring.current()
  const nonce = random(NONCE)
  const c = createCipheriv('aes-256-gcm', k.key, nonce)
  c.setAAD(aad(place))
  const ct = Buffer.concat([c.update(plaintext), c.final()])
  const blob = Buffer.concat([nonce, ct, c.getAuthTag()]).toString('base64url')
  const out: SealedValue = { value: `${PREFIX}${k.id}:${blob}`, hash: hashValue(keyring, plaintext), size: plaintext.byteLength }
  if (binary) out.binary = true
  return out
}

/** The key id a sealed value names. */
export function keyIdOfSealed(v: SealedValue): string {
  return v.value.slice(PREFIX.length, PREFIX.length + 16)
}

/**
 * Open a sealed value. Throws `unavailable` when this node lacks the key that sealed it (it was
 * offline during a rotation: it fetches the keyring from a member), `invalid` when it does not
 * open (tampered, or moved to another place).
 */
export function openValue(keyring: Keyring, place: Place, v: SealedValue): Buffer {
  if (!v.value.startsWith(PREFIX)) throw new OrcError('invalid', `secret ${place.namespace}/${place.name} key ${place.key}: not a sealed value`)
  const id = keyIdOfSealed(v)
  const k = keyring.get(id)
  if (k === undefined) {
    throw new OrcError(
      'unavailable',
      `secret ${place.namespace}/${place.name} key ${place.key}: sealed with data key ${id}, which this node does not hold yet`,
      {
        keyId: id,
      },
    )
  }
  const blob = Buffer.from(v.value.slice(PREFIX.length + 17), 'base64url')
  if (blob.byteLength < NONCE + TAG) throw new OrcError('invalid', `secret ${place.namespace}/${place.name} key ${place.key}: sealed value truncated`)
  try {
    const d = createDecipheriv('aes-256-gcm', k.key, blob.subarray(0, NONCE))
    d.setAAD(aad(place))
    d.setAuthTag(blob.subarray(blob.byteLength - TAG))
    return Buffer.concat([d.update(blob.subarray(NONCE, blob.byteLength - TAG)), d.final()])
  } catch {
    throw new OrcError(
      'invalid',
      `secret ${place.namespace}/${place.name} key ${place.key}: sealed value does not open (tampered, or copied from another secret or key)`,
    )
  }
}

/**
 * A Secret as a user applies it (clear `data` / `binaryData`, and any `sealed` values kept) →
 * the form the store holds (`sealed` only). A value whose hash is unchanged from `existing`
 * keeps its sealed form, so re-applying the same Secret writes no revision. Throws `invalid`
 * (one line naming the key) for bad input; the manifest is not changed.
 */
export function sealSecret(keyring: Keyring, random: Random, manifest: Secret, existing?: Secret): Secret {
  const spec = manifest.spec ?? {}
  const issues = dataIssues(spec)
  if (issues.length > 0) throw new OrcError('invalid', `secret ${manifest.metadata.name}: ${issues[0]!.path}: ${issues[0]!.rule}`, { issues })
  const namespace = manifest.metadata.namespace ?? 'default'
  const name = manifest.metadata.name
  const old = existing?.spec?.sealed ?? {}
  const sealed: Record<string, SealedValue> = { ...(spec.sealed ?? {}) }
  const add = (key: string, plain: Uint8Array, binary: boolean) => {
    const prev = old[key]
    const current = keyring.current().id
    sealed[key] =
      prev !== undefined && prev.hash === hashValue(keyring, plain) && Boolean(prev.binary) === binary && keyIdOfSealed(prev) === current
        ? prev
        : sealValue(keyring, random, { namespace, name, key }, plain, binary)
  }
  for (const [key, v] of Object.entries(spec.data ?? {})) add(key, Buffer.from(v, 'utf8'), false)
  for (const [key, v] of Object.entries(spec.binaryData ?? {})) add(key, Buffer.from(v, 'base64'), true)
  const { data: _d, binaryData: _b, ...rest } = spec
  return { ...manifest, spec: { ...rest, sealed } }
}

/** Every value of a stored Secret, opened. */
export function openSecret(keyring: Keyring, secret: Secret): Map<string, Buffer> {
  const namespace = secret.metadata.namespace ?? 'default'
  const out = new Map<string, Buffer>()
  for (const [key, v] of Object.entries(secret.spec?.sealed ?? {})) out.set(key, openValue(keyring, { namespace, name: secret.metadata.name, key }, v))
  return out
}

/** A stored Secret with every value sealed again under the current key (rotation). Values already under it are kept. */
export function resealSecret(keyring: Keyring, random: Random, secret: Secret): Secret {
  const namespace = secret.metadata.namespace ?? 'default'
  const current = keyring.current().id
  const sealed: Record<string, SealedValue> = {}
  for (const [key, v] of Object.entries(secret.spec?.sealed ?? {})) {
    const place = { namespace, name: secret.metadata.name, key }
    sealed[key] = keyIdOfSealed(v) === current ? v : sealValue(keyring, random, place, openValue(keyring, place, v), Boolean(v.binary))
  }
  return { ...secret, spec: { ...secret.spec, sealed } }
}

/** The data key ids a Secret's values are sealed with. */
export function keyIdsOf(secret: Secret): Set<string> {
  return new Set(Object.values(secret.spec?.sealed ?? {}).map(keyIdOfSealed))
}
