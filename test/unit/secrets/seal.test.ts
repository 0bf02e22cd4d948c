import assert from 'node:assert/strict'
import { test } from 'node:test'
import { normalizeManifest, type Secret } from '../../../src/model/index.ts'
import { Keyring, keyIdsOf, openSecret, openValue, resealSecret, sealSecret } from '../../../src/secrets/index.ts'
import { seededBytes } from '../../helpers/random.ts'

const random = seededBytes(7)
const MARK = 'hunter2-PLAINTEXT-MARKER'

function secret(spec: Record<string, unknown>, name = 'db'): Secret {
  return { apiVersion: 'orc/v1', kind: 'Secret', metadata: { name, namespace: 'default' }, spec } as Secret
}

test('a sealed Secret holds no plaintext, opens to its values, and passes the stored-form schema', () => {
  const ring = Keyring.generate(random, 1000)
  const s = sealSecret(ring, random, secret({ data: { password: MARK }, binaryData: { key: Buffer.from([0, 1, 2, 255]).toString('base64') } }))
  assert.equal(JSON.stringify(s).includes(MARK), false)
  assert.equal(s.spec?.data, undefined)
  assert.equal(s.spec?.sealed?.password?.size, MARK.length)
  assert.equal(s.spec?.sealed?.key?.binary, true)
  normalizeManifest(structuredClone(s))
  const open = openSecret(ring, s)
  assert.equal(open.get('password')?.toString(), MARK)
  assert.deepEqual([...open.get('key')!], [0, 1, 2, 255])
})

test('a stored Secret with clear values fails its schema (every replica refuses it)', () => {
  assert.throws(() => normalizeManifest(secret({ data: { password: MARK } })), /sealed by the API/)
})

test('re-applying the same values keeps their sealed form (no new revision); a changed value gets a new hash', () => {
  const ring = Keyring.generate(random, 1000)
  const a = sealSecret(ring, random, secret({ data: { password: MARK, user: 'app' } }))
  const b = sealSecret(ring, random, secret({ data: { password: MARK, user: 'app2' } }), a)
  assert.deepEqual(b.spec?.sealed?.password, a.spec?.sealed?.password)
  assert.notEqual(b.spec?.sealed?.user?.hash, a.spec?.sealed?.user?.hash)
})

test('a sealed value moved to another Secret or key, or tampered, does not open', () => {
  const ring = Keyring.generate(random, 1000)
  const s = sealSecret(ring, random, secret({ data: { a: MARK, b: 'x' } }))
  const v = s.spec!.sealed!.a!
  assert.throws(() => openValue(ring, { namespace: 'default', name: 'db', key: 'b' }, v), /does not open/)
  assert.throws(() => openValue(ring, { namespace: 'other', name: 'db', key: 'a' }, v), /does not open/)
  const t = { ...v, value: v.value.slice(0, -3) + (v.value.endsWith('A') ? 'BBB' : 'AAA') }
  assert.throws(() => openValue(ring, { namespace: 'default', name: 'db', key: 'a' }, t), /does not open|truncated/)
})

test('bad input is refused in one line naming the key: bad key name, bad base64, over 128 KiB', () => {
  const ring = Keyring.generate(random, 1000)
  assert.throws(() => sealSecret(ring, random, secret({ data: { 'a/b': 'x' } })), /a\/b|data key/)
  assert.throws(() => sealSecret(ring, random, secret({ binaryData: { k: 'not base64!' } })), /spec\.binaryData\.k: binaryData values are base64/)
  assert.throws(() => sealSecret(ring, random, secret({ data: { big: 'x'.repeat(128 * 1024 + 1) } })), /128 KiB/)
  assert.throws(() => sealSecret(ring, random, secret({ data: { k: 'x' }, binaryData: { k: 'eA==' } })), /also in/)
})

test('rotation: reseal under the new key; a node without it is told which key it lacks; merge brings it; old keys retire', () => {
  const ring = Keyring.generate(random, 1000)
  const offline = Keyring.fromJSON(JSON.parse(JSON.stringify(ring.toJSON())))
  const s = sealSecret(ring, random, secret({ data: { password: MARK } }))
  const oldId = ring.current().id
  const newId = ring.rotate(random, 2000)
  const r = resealSecret(ring, random, s)
  assert.deepEqual([...keyIdsOf(r)], [newId])
  assert.equal(openSecret(ring, r).get('password')?.toString(), MARK)
  assert.throws(
    () => openSecret(offline, r),
    (e: any) => e.code === 'unavailable' && e.message.includes(newId),
  )
  assert.equal(offline.merge(Keyring.fromJSON(ring.toJSON())), true)
  assert.equal(offline.current().id, newId)
  assert.equal(openSecret(offline, r).get('password')?.toString(), MARK)
  assert.deepEqual(ring.retire(keyIdsOf(r)), [oldId])
  assert.throws(() => Keyring.fromJSON({ ...ring.toJSON(), keys: [{ ...ring.toJSON().keys[0]!, id: '0000000000000000' }] }), /does not match its id/)
  assert.throws(() => offline.merge(Keyring.generate(random, 3000)), /another cluster/)
})
