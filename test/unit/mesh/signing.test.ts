import assert from 'node:assert/strict'
import { test } from 'node:test'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { Uint8ArrayList } from 'uint8arraylist'
import { withCachedSigning } from '../../../src/mesh/signing.ts'

// The node key handed to libp2p signs through a cached node:crypto key (gossipsub signs every
// message): its signatures must be libp2p's own, byte for byte, and verify under the peer's key.
test('the cached signer signs exactly as the libp2p key does, for arrays and lists', async () => {
  const key = await generateKeyPair('Ed25519')
  const fast = withCachedSigning(key)
  assert.equal(fast.type, 'Ed25519')
  assert.ok(fast.publicKey.equals(key.publicKey))
  for (const size of [0, 1, 64, 5000]) {
    const msg = new Uint8Array(size).map((_, i) => (i * 31 + size) & 0xff)
    const want = await key.sign(msg)
    assert.deepEqual(await fast.sign(msg), want, `${size} bytes`)
    const list = new Uint8ArrayList(msg.subarray(0, size >> 1), msg.subarray(size >> 1))
    assert.deepEqual(await fast.sign(list as unknown as Parameters<typeof fast.sign>[0]), want, `${size} bytes as a list`)
    assert.equal(await key.publicKey.verify(msg, await fast.sign(msg)), true)
  }
  const other = await generateKeyPair('Ed25519')
  assert.notDeepEqual(await withCachedSigning(other).sign(new Uint8Array([1])), await fast.sign(new Uint8Array([1])))
  const aborted = AbortSignal.abort()
  assert.throws(() => fast.sign(new Uint8Array([1]), { signal: aborted }))
})

// verifyMany gives a worker thread half of a large batch: its answers must be verify's, one by one.
test('verifyMany answers as verify does, for good, tampered, misattributed and malformed signatures', async () => {
  const { peerKeyVerifier } = await import('../../../src/mesh/signing.ts')
  const { peerIdFromPrivateKey } = await import('@libp2p/peer-id')
  const keys = [await generateKeyPair('Ed25519'), await generateKeyPair('Ed25519')]
  const ids = keys.map((k) => peerIdFromPrivateKey(k).toString())
  const v = peerKeyVerifier(() => ({}))
  const checks: { id: string; data: Uint8Array; signature: Uint8Array }[] = []
  for (let i = 0; i < 600; i++) {
    const k = i % 2
    const data = new TextEncoder().encode(`record ${i}`)
    let signature = await withCachedSigning(keys[k]!).sign(data)
    let id = ids[k]!
    if (i % 7 === 0) signature = Uint8Array.from(signature, (x, j) => (j === 5 ? x ^ 1 : x))
    if (i % 11 === 0) id = ids[1 - k]!
    if (i % 13 === 0) signature = signature.subarray(0, 63)
    if (i % 17 === 0) id = 'not-a-peer-id'
    checks.push({ id, data, signature })
  }
  const one = checks.map((c) => v.verify(c.id, c.data, c.signature))
  assert.ok(one.filter(Boolean).length > 300 && one.filter((x) => !x).length > 100, 'a mix of good and bad')
  assert.deepEqual(await v.verifyMany!(checks), one)
  assert.deepEqual(await v.verifyMany!(checks.slice(0, 1)), one.slice(0, 1))
  assert.deepEqual(await v.verifyMany!([]), [])
})
