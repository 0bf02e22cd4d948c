// A request a member forwards (exec, port-forward, logs of a pod on another node) names its user by
// the user's own signature, checked by the node that runs it (docs/security.md, "Users' signatures
// on their writes"): the member can no longer say who the user is.
import assert from 'node:assert/strict'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import { generateKeyPair, publicKeyToProtobuf } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import type { ApiRequest } from '../../../src/agent/api.ts'
import { forwardedUsers } from '../../../src/agent/cluster.ts'
import { createMemberApiHandler } from '../../../src/agent/member-api.ts'
import { b64url } from '../../../src/mesh/cluster.ts'
import { apiSigningDigest } from '../../../src/mesh/rpc.ts'
import type { SignedRequest } from '../../../src/model/index.ts'
import { openStore } from '../../../src/store/store.ts'

const keyText = (k: PrivateKey) => b64url(publicKeyToProtobuf(k.publicKey))

async function signed(key: PrivateKey, server: string, req: { method: string; path: string; body?: unknown }, at: number, nonce = 1): Promise<SignedRequest> {
  const n = new Uint8Array(32).fill(nonce)
  const body = req.body ?? null
  const sig = await key.sign(apiSigningDigest(n, server, { method: req.method, path: req.path, query: {}, body }, at))
  return { method: req.method, path: req.path, query: {}, body, nonce: b64url(n), peer: server, at, key: keyText(key), sig: b64url(sig) }
}

test('a forwarded exec runs as the user whose signature it carries, whatever the member says; forgeries and replays are refused', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'orc-fwd-'))
  const store = await openStore({ dir, sync: false })
  t.after(async () => {
    await store.close()
    await rm(dir, { recursive: true, force: true })
  })
  const admin = await generateKeyPair('Ed25519')
  const eddie = await generateKeyPair('Ed25519')
  await store.apply({ apiVersion: 'orc/v1', kind: 'User', metadata: { name: 'eddie' }, spec: { publicKey: keyText(eddie) } }, { author: 'user:admin', now: 1 })
  let now = 1_000_000
  const reached: ApiRequest[] = []
  const h = createMemberApiHandler(
    async (req) => {
      reached.push(req)
      return { status: 200, body: {} }
    },
    undefined,
    forwardedUsers({ store, now: () => now, adminKeys: () => [keyText(admin)], nodeOf: (p) => ({ peerB: 'b', peerC: 'c' })[p] }),
  )
  const exec = { method: 'POST', path: '/v1/pods/default/x/exec', body: { command: ['id'] } }

  // eddie signed for b; b claims the request is admin's: refused (today's code ran it as admin).
  const s1 = await signed(eddie, 'peerB', exec, now)
  const lie = await h({ ...exec }, { peerId: 'peerB', onBehalfOf: 'admin', signed: s1 })
  assert.equal(lie.status, 403)
  assert.match(JSON.stringify(lie.body), /the member names user admin, but the request is signed by eddie/)
  assert.equal(reached.length, 0)

  // The user comes from the signature; what runs is what eddie signed, not b's copy (another command).
  const s2 = await signed(eddie, 'peerB', exec, now, 2)
  const ok = await h({ ...exec, body: { command: ['rm', '-rf', '/'] } }, { peerId: 'peerB', onBehalfOf: 'eddie', signed: s2 })
  assert.equal(ok.status, 200, JSON.stringify(ok.body))
  assert.deepEqual(reached[0]!.body, { command: ['id'] })
  assert.deepEqual(reached[0]!.principal, { kind: 'user', name: 'eddie', via: 'forwarded', peer: 'peerB', signed: s2 })
  // Another write than the one eddie signed (exec in another pod): refused.
  const elsewhere = await h({ ...exec, path: '/v1/pods/default/other/exec' }, { peerId: 'peerB', signed: await signed(eddie, 'peerB', exec, now, 9) })
  assert.match(JSON.stringify(elsewhere.body), /is not the request the user signed/)
  // A read b derived from eddie's request (the logs of another pod): runs as eddie, as often as b asks.
  for (let i = 0; i < 2; i++) {
    const logs = await h(
      { method: 'GET', path: '/v1/pods/default/job-x-1/logs' },
      { peerId: 'peerB', signed: await signed(eddie, 'peerB', { method: 'GET', path: '/v1/objects/job/default/x' }, now, 10) },
    )
    assert.equal(logs.status, 200, JSON.stringify(logs.body))
    assert.equal(reached.at(-1)!.path, '/v1/pods/default/job-x-1/logs')
    assert.equal((reached.at(-1)!.principal as { name: string }).name, 'eddie')
  }
  reached.splice(1)

  // The same signed request again: a replay.
  const again = await h({ ...exec }, { peerId: 'peerB', signed: s2 })
  assert.match(JSON.stringify(again.body), /forwarded before \(a replay\)/)
  // Relayed by c, though eddie signed it for b.
  const s3 = await signed(eddie, 'peerB', exec, now, 3)
  assert.match(JSON.stringify((await h({ ...exec }, { peerId: 'peerC', signed: s3 })).body), /signed it for another node/)
  // Tampered (another command) after eddie signed it.
  const s4 = { ...(await signed(eddie, 'peerB', exec, now, 4)), body: { command: ['rm', '-rf', '/'] } }
  assert.match(JSON.stringify((await h({ ...exec }, { peerId: 'peerB', signed: s4 })).body), /signature does not verify/)
  // Old: more than 10 minutes before this node's clock.
  const s5 = await signed(eddie, 'peerB', exec, now - 11 * 60_000, 5)
  assert.match(JSON.stringify((await h({ ...exec }, { peerId: 'peerB', signed: s5 })).body), /more than 10 minutes/)
  // A key that is no user's.
  const stranger = await generateKeyPair('Ed25519')
  const s6 = await signed(stranger, 'peerB', exec, now, 6)
  assert.match(JSON.stringify((await h({ ...exec }, { peerId: 'peerB', signed: s6 })).body), /belongs to no user/)
  // The first admin key (cluster.json) is admin's.
  const s7 = await signed(admin, 'peerB', exec, now, 7)
  assert.equal((await h({ ...exec }, { peerId: 'peerB', signed: s7 })).status, 200)
  assert.equal((reached.at(-1)!.principal as { name: string }).name, 'admin')
  assert.equal(reached.length, 2)

  // Unsigned claims: trusted while the cluster does not require signatures; then only the member's own socket users.
  assert.equal((await h({ ...exec }, { peerId: 'peerB', onBehalfOf: 'eddie' })).status, 200)
  await store.apply(
    {
      apiVersion: 'orc/v1',
      kind: 'Cluster',
      metadata: { name: 'c1' },
      spec: { userSignatures: { required: true, since: '1970-01-01T00:00:00Z', adminSocketNodes: ['c'] } },
    },
    { author: 'user:admin', now: 2 },
  )
  now += 1000
  const claimed = await h({ ...exec }, { peerId: 'peerB', onBehalfOf: 'eddie' })
  assert.equal(claimed.status, 403)
  assert.match(JSON.stringify(claimed.body), /without the user's signature, and the cluster requires users' signatures/)
  assert.equal((await h({ ...exec }, { peerId: 'peerB', onBehalfOf: 'admin' })).status, 403)
  assert.equal((await h({ ...exec }, { peerId: 'peerB', onBehalfOf: 'root.b' })).status, 200)
  assert.equal((await h({ ...exec }, { peerId: 'peerC', onBehalfOf: 'admin' })).status, 200)
  const s8 = await signed(eddie, 'peerB', exec, now, 8)
  assert.equal((await h({ ...exec }, { peerId: 'peerB', signed: s8 })).status, 200)
})
