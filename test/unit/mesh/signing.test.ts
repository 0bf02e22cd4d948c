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
