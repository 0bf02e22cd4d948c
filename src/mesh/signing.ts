/**
 * The node key as the store's record signer, and members' keys as its verifier (docs/security.md,
 * "Signed history and checks on receipt"). Ed25519 through node:crypto (synchronous, one
 * verification per record); a signer's public key is its peer id (an Ed25519 peer id embeds it).
 */
import { createPrivateKey, createPublicKey, type KeyObject, sign, verify } from 'node:crypto'
import { availableParallelism } from 'node:os'
import { Worker } from 'node:worker_threads'
import type { PrivateKey } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import { OrcError } from '../model/index.ts'
import { peerIdOf } from './identity.ts'

const PKCS8_ED25519 = Buffer.from('302e020100300506032b657004220420', 'hex')
const SPKI_ED25519 = Buffer.from('302a300506032b6570032100', 'hex')

const rawKeys = new Map<string, KeyObject>()

/** Verify an Ed25519 signature with a raw 32-byte public key (keys cached; false on any malformed input). */
export function verifyEd25519(publicKey: Uint8Array, data: Uint8Array, signature: Uint8Array): boolean {
  try {
    if (publicKey.length !== 32 || signature.length !== 64) return false
    const hex = Buffer.from(publicKey).toString('hex')
    let k = rawKeys.get(hex)
    if (k === undefined) {
      if (rawKeys.size > 4096) rawKeys.clear()
      rawKeys.set(hex, (k = createPublicKey({ key: Buffer.concat([SPKI_ED25519, Buffer.from(publicKey)]), format: 'der', type: 'spki' })))
    }
    return verify(null, data, k, signature)
  } catch {
    return false
  }
}

/** What the store's options take (src/store/trust.ts RecordSigner / RecordVerifier, structurally). */
export interface NodeRecordSigner {
  id: string
  sign(data: Uint8Array): Uint8Array
}

export interface NodeRecordVerifier {
  member(id: string): { node?: string } | undefined
  verify(id: string, data: Uint8Array, signature: Uint8Array): boolean
  verifyMany?(checks: readonly { id: string; data: Uint8Array; signature: Uint8Array }[]): Promise<boolean[]>
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
  const verifyOne = (id: string, data: Uint8Array, signature: Uint8Array): boolean => {
    const k = keyOf(id)
    try {
      return k !== null && signature.length === 64 && verify(null, data, k, signature)
    } catch {
      return false
    }
  }
  const helper = new VerifyHelper()
  return {
    member,
    verify: verifyOne,
    verifyMany: async (checks) => {
      // The helper thread takes the second half while this thread does the first.
      const half = helper.usable() ? Math.floor(checks.length / 2) : checks.length
      const der = new Map<string, Buffer | null>()
      const derOf = (id: string): Buffer | null => {
        let d = der.get(id)
        if (d === undefined) {
          const k = keyOf(id)
          der.set(id, (d = k === null ? null : (k.export({ format: 'der', type: 'spki' }) as Buffer)))
        }
        return d
      }
      const rest = checks.slice(half).map((c) => ({ key: derOf(c.id), data: c.data, signature: c.signature }))
      const theirs = rest.length > 0 ? helper.verify(rest) : Promise.resolve([])
      const mine = checks.slice(0, half).map((c) => verifyOne(c.id, c.data, c.signature))
      let other: boolean[]
      try {
        other = await theirs
      } catch {
        // No helper (it failed to start or died): this thread does its share too.
        other = checks.slice(half).map((c) => verifyOne(c.id, c.data, c.signature))
      }
      return [...mine, ...other]
    },
  }
}

/** Ed25519 verification in a worker thread, for verifyMany (node:crypto only, no bundle needed). */
const VERIFY_WORKER = `
const { parentPort } = require('node:worker_threads')
const { createPublicKey, verify } = require('node:crypto')
const keys = new Map()
parentPort.on('message', ({ id, checks }) => {
  const ok = checks.map((c) => {
    if (c.key === null || c.signature.length !== 64) return false
    const hex = Buffer.from(c.key).toString('hex')
    let k = keys.get(hex)
    try {
      if (k === undefined) {
        if (keys.size > 4096) keys.clear()
        keys.set(hex, (k = createPublicKey({ key: Buffer.from(c.key), format: 'der', type: 'spki' })))
      }
      return verify(null, c.data, k, c.signature)
    } catch {
      return false
    }
  })
  parentPort.postMessage({ id, ok })
})
`

/**
 * One worker thread, started on first use and stopped after 10 s without work (it costs memory an
 * idle agent should not hold). Not used on a machine with one CPU.
 */
class VerifyHelper {
  private worker: Worker | undefined
  private next = 0
  private readonly waiting = new Map<number, { resolve: (ok: boolean[]) => void; reject: (err: Error) => void }>()
  private idle: NodeJS.Timeout | undefined

  usable(): boolean {
    return availableParallelism() > 1
  }

  verify(checks: { key: Buffer | null; data: Uint8Array; signature: Uint8Array }[]): Promise<boolean[]> {
    const w = this.start()
    clearTimeout(this.idle)
    const id = this.next++
    return new Promise<boolean[]>((resolve, reject) => {
      this.waiting.set(id, { resolve, reject })
      w.postMessage({ id, checks })
    })
  }

  private start(): Worker {
    if (this.worker !== undefined) return this.worker
    const w = new Worker(VERIFY_WORKER, { eval: true })
    w.unref()
    w.on('message', (m: { id: number; ok: boolean[] }) => {
      this.waiting.get(m.id)?.resolve(m.ok)
      this.waiting.delete(m.id)
      if (this.waiting.size === 0) this.idle = setTimeout(() => this.stop(), 10_000).unref()
    })
    const fail = (err: Error) => {
      if (this.worker === w) this.worker = undefined
      for (const p of this.waiting.values()) p.reject(err)
      this.waiting.clear()
    }
    w.on('error', fail)
    w.on('exit', (code) => fail(new Error(`signature worker exited (${code})`)))
    this.worker = w
    return w
  }

  private stop(): void {
    if (this.waiting.size > 0 || this.worker === undefined) return
    const w = this.worker
    this.worker = undefined
    void w.terminate()
  }
}
