/**
 * The node key as the store's record signer, and members' keys as its verifier (docs/security.md,
 * "Signed history and checks on receipt"). Ed25519 through node:crypto (synchronous, one
 * verification per record); a signer's public key is its peer id (an Ed25519 peer id embeds it).
 */
import { createPrivateKey, createPublicKey, type KeyObject, sign, verify } from 'node:crypto'
import type { PrivateKey } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import { OrcError } from '../model/index.ts'
import { peerIdOf } from './identity.ts'

const PKCS8_ED25519 = Buffer.from('302e020100300506032b657004220420', 'hex')
const SPKI_ED25519 = Buffer.from('302a300506032b6570032100', 'hex')

/** What the store's options take (src/store/trust.ts RecordSigner / RecordVerifier, structurally). */
export interface NodeRecordSigner {
  id: string
  sign(data: Uint8Array): Uint8Array
}

export interface NodeRecordVerifier {
  member(id: string): { node?: string } | undefined
  verify(id: string, data: Uint8Array, signature: Uint8Array): boolean
}

/** node:crypto's key object for a libp2p Ed25519 private key (its raw form is seed + public key). */
function ed25519KeyObject(key: PrivateKey): KeyObject {
  return createPrivateKey({ key: Buffer.concat([PKCS8_ED25519, Buffer.from(key.raw.subarray(0, 32))]), format: 'der', type: 'pkcs8' })
}

/**
 * The same libp2p key, signing through one cached node:crypto key object. @libp2p/crypto's Ed25519
 * `sign` imports the key from JWK on every call; gossipsub signs every message it publishes, and that
 * import was ~3 % of an agent's CPU under a stream of API writes (issue #23 profile). Signatures are
 * identical (Ed25519 is deterministic). Other key types are returned unchanged.
 */
export function withCachedSigning<K extends PrivateKey>(key: K): K {
  if (key.type !== 'Ed25519') return key
  const k = ed25519KeyObject(key)
  const cached = Object.create(key) as K
  cached.sign = (message: Uint8Array | { subarray(): Uint8Array }, options?: { signal?: AbortSignal }) => {
    options?.signal?.throwIfAborted()
    const data = message instanceof Uint8Array ? message : message.subarray()
    return sign(null, data, k)
  }
  return cached
}

/** Sign records with the node's libp2p key; the signer id is its peer id. */
export function recordSigner(key: PrivateKey): NodeRecordSigner {
  if (key.type !== 'Ed25519') throw new OrcError('invalid', `node key: records are signed with Ed25519 keys; this one is ${key.type}`)
  const k = ed25519KeyObject(key)
  return { id: peerIdOf(key), sign: (data) => sign(null, data, k) }
}

/**
 * Verify with the key a peer id embeds; `member` says whether the signer may sign (a current
 * member, with its node name). A removed peer is not a member: its records written before its
 * removal verify only through `removedAt` (see memberVerifier).
 */
export function peerKeyVerifier(member: (id: string) => { node?: string } | undefined): NodeRecordVerifier {
  const keys = new Map<string, KeyObject | null>()
  const keyOf = (id: string): KeyObject | null => {
    let k = keys.get(id)
    if (k !== undefined) return k
    try {
      const pub = peerIdFromString(id).publicKey
      k = pub?.type === 'Ed25519' ? createPublicKey({ key: Buffer.concat([SPKI_ED25519, Buffer.from(pub.raw)]), format: 'der', type: 'spki' }) : null
    } catch {
      k = null
    }
    if (keys.size > 4096) keys.clear()
    keys.set(id, k)
    return k
  }
  return {
    member,
    verify: (id, data, signature) => {
      const k = keyOf(id)
      return k !== null && signature.length === 64 && verify(null, data, k, signature)
    },
  }
}
