/**
 * WireGuard keys (Curve25519) with node:crypto: no `wg genkey` process, and the same base64 text
 * `wg` uses, so keys round-trip through `wg show dump` and configs.
 */
import { createPrivateKey, createPublicKey } from 'node:crypto'
import { type Random, systemRandom } from '../effects/index.ts'
import { OrcError } from '../model/index.ts'

export interface WireGuardKeyPair {
  privateKey: string
  publicKey: string
}

// DER prefix of a PKCS#8 X25519 private key; the 32 raw key bytes follow.
const PKCS8_X25519 = Buffer.from('302e020100300506032b656e04220420', 'hex')

function decodeKey(b64: string, what: string): Buffer {
  const raw = Buffer.from(b64, 'base64')
  if (raw.length !== 32 || raw.toString('base64') !== b64) {
    throw new OrcError('invalid', `invalid WireGuard ${what}: want 32 bytes of base64`)
  }
  return raw
}

export function isWireGuardKey(b64: string): boolean {
  try {
    decodeKey(b64, 'key')
    return true
  } catch {
    return false
  }
}

/** Public key of a private key, as `wg pubkey` prints it. */
export function publicKeyOf(privateKey: string): string {
  const raw = decodeKey(privateKey, 'private key')
  const key = createPrivateKey({ key: Buffer.concat([PKCS8_X25519, raw]), format: 'der', type: 'pkcs8' })
  const x = createPublicKey(key).export({ format: 'jwk' }).x
  if (typeof x !== 'string') throw new OrcError('internal', 'derive WireGuard public key: no x in JWK')
  return Buffer.from(x, 'base64url').toString('base64')
}

/** A new key pair, clamped like `wg genkey` (X25519 clamps anyway; this keeps the text equal). */
export function generateKeyPair(random: Random = systemRandom): WireGuardKeyPair {
  const raw = Buffer.from(random(32).subarray(0, 32))
  if (raw.length !== 32) throw new OrcError('internal', 'random source returned too few bytes')
  raw[0] &= 248
  raw[31] &= 127
  raw[31] |= 64
  const privateKey = raw.toString('base64')
  return { privateKey, publicKey: publicKeyOf(privateKey) }
}
