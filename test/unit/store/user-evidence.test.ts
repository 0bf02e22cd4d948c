// Users' signatures on their writes (docs/security.md, "Users' signatures on their writes"): a write
// a user asked for over the remote API carries the user's signed request; every replica checks it.
// A member's store is modified here the way a compromised agent would be: it writes user records
// and signs them with its own (valid) node key.
import assert from 'node:assert/strict'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import { generateKeyPair, publicKeyToProtobuf } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { MemoryLevel } from 'memory-level'
import { userMayOnReceipt } from '../../../src/agent/authz.ts'
import { b64url } from '../../../src/mesh/cluster.ts'
import { apiSigningDigest, verifySignedRequest } from '../../../src/mesh/rpc.ts'
import type { SignedRequest } from '../../../src/model/index.ts'
import { decodeUpdateMessage, encodeUpdateMessage, type RevisionRecord } from '../../../src/store/codec.ts'
import { openStore, type Store } from '../../../src/store/store.ts'
import { signRecord } from '../../../src/store/trust.ts'
import { pod } from '../../helpers/store.ts'
import { nodeObject, outbox, type TestNode, testNode, verifierOf } from './trust-helpers.ts'

const a = testNode('a')
const b = testNode('b')
const c = testNode('c')
const members = [a, b, c]
const podRef = (name: string) => ({ kind: 'Pod', namespace: 'default', name })

function evStore(node: TestNode, adminKeys: string[] = [], dir?: string): Promise<Store> {
  return openStore({
    dir: dir ?? `mem-${node.name}`,
    ...(dir === undefined ? { db: new MemoryLevel({ keyEncoding: 'utf8', valueEncoding: 'view' }) as never } : {}),
    sync: false,
    signer: node.signer,
    verifier: verifierOf(members),
    userMay: userMayOnReceipt,
    userEvidence: { verify: verifySignedRequest, bootstrapKeys: (u) => (u === 'admin' ? adminKeys : []), self: () => node.name },
  })
}

async function sync(from: Store, to: Store): Promise<void> {
  await to.applyRemote(await from.encodeMissing(to.encodeSyncState()))
}

async function refused(p: Promise<unknown>, reason: string, text?: RegExp): Promise<void> {
  await assert.rejects(p, (err: any) => {
    assert.equal(err.details?.refused, reason, err.message)
    if (text) assert.match(err.message, text)
    return true
  })
}

const keyText = (k: PrivateKey) => b64url(publicKeyToProtobuf(k.publicKey))

/** What the remote CLI sends: a request signed with the user's key for node `server` at time `at`. */
async function signed(key: PrivateKey, server: TestNode, req: { method: string; path: string; body: unknown }, at: number, nonce = 1): Promise<SignedRequest> {
  const n = new Uint8Array(32).fill(nonce)
  const sig = await key.sign(apiSigningDigest(n, server.id, { ...req, query: {} }, at))
  return { ...req, query: {}, nonce: b64url(n), peer: server.id, at, key: keyText(key), sig: b64url(sig) }
}

const applyReq = (objects: unknown[], reason?: string) => ({
  method: 'POST',
  path: '/v1/apply',
  body: { objects, author: 'user:alice', ...(reason ? { reason } : {}) },
})

/** Three stores with the users admin (bootstrap key) and alice (a User object, role edit), synced. */
async function cluster() {
  const admin = await generateKeyPair('Ed25519')
  const alice = await generateKeyPair('Ed25519')
  const [A, B, C] = await Promise.all([a, b, c].map((n) => evStore(n, [keyText(admin)])))
  let t = 1000
  for (const [s, n] of [
    [A!, a],
    [B!, b],
    [C!, c],
  ] as const) {
    await s.apply(nodeObject(n.name), { author: 'controller:node', now: t++ })
  }
  await A!.apply({ apiVersion: 'orc/v1', kind: 'User', metadata: { name: 'alice' }, spec: { publicKey: keyText(alice) } }, { author: 'user:admin', now: t++ })
  await A!.apply(
    { apiVersion: 'orc/v1', kind: 'RoleBinding', metadata: { name: 'alice-edit' }, spec: { role: 'edit', users: ['alice'] } },
    { author: 'user:admin', now: t++ },
  )
  for (const x of [A!, B!, C!]) for (const y of [A!, B!, C!]) if (x !== y) await sync(x, y)
  return { A: A!, B: B!, C: C!, admin, alice, close: async () => Promise.all([A!, B!, C!].map((s) => s.close())) }
}

/**
 * A member's store modified as a compromised agent's would be (its memory of used requests wiped,
 * its policy check removed), synced from `from`: `write` runs on it; returns what it sent.
 */
async function modifiedMember(node: TestNode, from: Store, write: (s: Store) => Promise<void>, adminKeys: string[] = []): Promise<Uint8Array[]> {
  const s = await evStore(node, adminKeys)
  try {
    await sync(from, s)
    ;(s as any).evidenceUses.clear()
    ;(s as any).signaturePolicy = () => undefined
    const out = outbox(s)
    await write(s)
    return out
  } finally {
    await s.close()
  }
}

/** A member's forgery: `r` changed by `edit`, then signed again with the member's own node key. */
function forge(msg: Uint8Array, by: TestNode, edit: (r: RevisionRecord) => void): Uint8Array {
  const { yUpdate, records } = decodeUpdateMessage(msg)
  const r = structuredClone(records[0]!)
  edit(r)
  delete r.g
  signRecord(r, by.signer, r.y!, r.yc!)
  return encodeUpdateMessage(yUpdate, [r])
}

test('a signed apply carries the user evidence; other replicas verify it and merge', async () => {
  const { A, C, alice, close } = await cluster()
  try {
    const sent = outbox(A)
    const web = pod('web')
    const ev = await signed(alice, a, applyReq([web], 'first'), 5000)
    await A.apply(web, { author: 'user:alice', reason: 'first', now: 5001, evidence: ev })
    const rec = decodeUpdateMessage(sent[0]!).records[0]!
    assert.equal(rec.u?.sig, ev.sig, 'the record carries the signed request')
    assert.ok(rec.f !== undefined && rec.c === undefined, 'a full copy, so every replica can compare it')
    await C.applyRemote(sent[0]!)
    assert.equal(C.get(podRef('web'))?.metadata.updatedBy, 'user:alice')
    // A delete the user signed carries it too.
    const del = await signed(alice, a, { method: 'DELETE', path: '/v1/objects/pod/default/web', body: { author: 'user:alice' } }, 6000, 2)
    await A.delete(podRef('web'), { author: 'user:alice', now: 6001, evidence: del })
    assert.equal(decodeUpdateMessage(sent[1]!).records[0]!.u?.nonce, del.nonce)
    await C.applyRemote(sent[1]!)
    assert.equal(C.get(podRef('web')), undefined)
  } finally {
    await close()
  }
})

test('evidence that does not match what the writer wrote is not attached (the write goes node-signed)', async () => {
  const { A, alice, close } = await cluster()
  try {
    const sent = outbox(A)
    const ev = await signed(alice, a, applyReq([pod('web', '/images/other')]), 5000)
    await A.apply(pod('web'), { author: 'user:alice', now: 5001, evidence: ev })
    assert.equal(decodeUpdateMessage(sent[0]!).records[0]!.u, undefined)
    // A request holding a Secret (its values in the clear) is never copied into history.
    const secret = { apiVersion: 'orc/v1', kind: 'Secret', metadata: { name: 's' }, spec: { sealed: {} } }
    const ev2 = await signed(alice, a, applyReq([pod('db'), secret]), 5000, 2)
    await A.apply(pod('db'), { author: 'user:alice', now: 5002, evidence: ev2 })
    assert.equal(decodeUpdateMessage(sent[1]!).records[0]!.u, undefined)
  } finally {
    await close()
  }
})

test("a member's forged user evidence is refused on receipt: tampered request, another user's key, other content, another object", async () => {
  const { A, B, C, admin, alice, close } = await cluster()
  try {
    const sent = outbox(B)
    const ev = await signed(alice, b, applyReq([pod('web')]), 5000)
    await B.apply(pod('web'), { author: 'user:alice', now: 5001, evidence: ev })
    const honest = sent[0]!
    // The request changed after alice signed it (another image): her signature fails.
    const tampered = forge(honest, b, (r) => {
      ;(r.u!.body as any).objects[0].spec.containers[0].image = '/images/evil'
      ;(r.f as any).spec.containers[0].image = '/images/evil'
      r.h = undefined
    })
    await refused(C.applyRemote(tampered), 'user_signature', /does not verify/)
    // Signed by admin's key but written as alice.
    const adminEv = await signed(admin, b, applyReq([pod('web')]), 5000, 3)
    await refused(C.applyRemote(forge(honest, b, (r) => (r.u = adminEv))), 'user_signature', /a key that was not user:alice's/)
    // alice's genuine request, on a record with other content (the forger's own pod spec).
    const other = forge(honest, b, (r) => {
      ;(r.f as any).spec.containers[0].image = '/images/evil'
      r.h = undefined
    })
    await refused(C.applyRemote(other), 'user_signature', /differs from what the signed request applies/)
    // alice's genuine request for pod web, on a record of pod api.
    const sentB = outbox(B)
    await B.apply(pod('api'), { author: 'user:alice', now: 5002 })
    const onApi = forge(sentB[0]!, b, (r) => {
      r.u = ev
    })
    await refused(C.applyRemote(onApi), 'user_signature', /does not name Pod\/default\/api/)
    // alice's genuine request to a (B sees it in a's records), on B's record of the same content.
    const toA = await signed(alice, a, applyReq([pod('web')]), 5000, 4)
    await refused(C.applyRemote(forge(honest, b, (r) => (r.u = toA))), 'user_signature', /signed the request for node peer-a, not for the record's signer/)
    // Nothing of it merged; the honest write does.
    assert.equal(C.get(podRef('api')), undefined)
    await C.applyRemote(honest)
    assert.equal((C.get(podRef('web')) as any)?.spec.containers[0].image, '/images/busybox')
    void A
  } finally {
    await close()
  }
})

test('a replayed signed request on a second record is refused (the same request backs one record per object)', async () => {
  const { A, C, alice, close } = await cluster()
  try {
    const sent = outbox(A)
    const v1 = await signed(alice, a, applyReq([pod('web')]), 5000)
    await A.apply(pod('web'), { author: 'user:alice', now: 5001, evidence: v1 })
    await A.apply(pod('web', '/images/v2'), { author: 'user:alice', now: 5002 })
    await C.applyRemote(sent[0]!)
    await C.applyRemote(sent[1]!)
    // The writer itself does not use a request twice.
    await A.apply(pod('web'), { author: 'user:alice', now: 5003, evidence: v1 })
    assert.equal(decodeUpdateMessage(sent[2]!).records[0]!.u, undefined)
    // A modified member store replays v1 to revert web.
    const replay = await modifiedMember(a, C, (A2) => A2.apply(pod('web'), { author: 'user:alice', now: 5004, evidence: structuredClone(v1) }).then(() => {}))
    assert.equal(decodeUpdateMessage(replay[0]!).records[0]!.u?.nonce, v1.nonce, 'the modified store attached it')
    await refused(C.applyRemote(replay[0]!), 'user_signature', /backs revision .* already \(a replay\)/)
    assert.equal((C.get(podRef('web')) as any).spec.containers[0].image, '/images/v2')
  } finally {
    await close()
  }
})

test('with Cluster spec.userSignatures.required, user records without evidence are refused on receipt, except the local sockets', async () => {
  const { A, B, C, alice, close } = await cluster()
  try {
    await A.apply(
      {
        apiVersion: 'orc/v1',
        kind: 'Cluster',
        metadata: { name: 'c1' },
        spec: { userSignatures: { required: true, since: '1970-01-01T00:00:05Z', adminSocketNodes: ['a'] } },
      },
      { author: 'user:admin', now: 4000 },
    )
    await sync(A, B)
    await sync(A, C)
    // The knob on the writer: an unsigned write its replicas would refuse is refused where it is made.
    await assert.rejects(A.apply(pod('x'), { author: 'user:alice', now: 5000 }), /without the user's signature/)
    // Records before `since` are not held to it.
    const early = outbox(B)
    await B.apply(pod('before'), { author: 'user:alice', now: 4500 })
    await C.applyRemote(early[0]!)
    assert.ok(C.get(podRef('before')))
    // A member (a modified store: its policy check removed, as a compromised agent's) writes as
    // user:admin without evidence: refused by every replica.
    const forged = await modifiedMember(b, A, (Bmod) => Bmod.apply(pod('evil'), { author: 'user:admin', now: 6000 }).then(() => {}))
    await refused(C.applyRemote(forged[0]!), 'user_unsigned', /user:admin wrote through node b without the user's signature/)
    await refused(A.applyRemote(forged[0]!), 'user_unsigned')
    assert.equal(C.get(podRef('evil')), undefined)
    // b's own socket user (root.b) and admin from a listed node (a) write unsigned; alice with her signature.
    const fromB = outbox(B)
    await B.apply(pod('mine'), { author: 'user:root.b', now: 6002 })
    await C.applyRemote(fromB[0]!)
    const fromA = outbox(A)
    await A.apply(pod('admins'), { author: 'user:admin', now: 6003 })
    const ev = await signed(alice, a, applyReq([pod('alices')]), 6004)
    await A.apply(pod('alices'), { author: 'user:alice', now: 6004, evidence: ev })
    for (const m of fromA) await C.applyRemote(m)
    for (const name of ['admins', 'alices', 'mine']) assert.ok(C.get(podRef(name)), name)
    // A user other than b's socket users, unsigned through b: refused.
    const out = await modifiedMember(b, C, (Bmod) => Bmod.apply(pod('evil3'), { author: 'user:alice', now: 6005 }).then(() => {}))
    await refused(C.applyRemote(out[0]!), 'user_unsigned', /user:alice wrote through node b/)
  } finally {
    await close()
  }
})

test("a user record backdated before the policy's since is refused: after its store's later records, or before its parent", async () => {
  const { A, B, C, close } = await cluster()
  try {
    const since = 3_600_000
    await A.apply(
      { apiVersion: 'orc/v1', kind: 'Cluster', metadata: { name: 'c1' }, spec: { userSignatures: { required: true, since: new Date(since).toISOString() } } },
      { author: 'user:admin', now: 4000 },
    )
    await sync(A, B)
    await sync(A, C)
    // b writes alice's pod before the policy (honest, unsigned), then its socket user's after.
    const early = outbox(B)
    await B.apply(pod('pre'), { author: 'user:alice', now: 3_000_000 })
    await B.apply(pod('later'), { author: 'user:root.b', now: 3_700_000 })
    for (const m of early) {
      await C.applyRemote(m)
      await A.applyRemote(m)
    }
    assert.ok(C.get(podRef('pre')))
    // b's own store, its policy check removed (a compromised agent), writes as alice timed 45 min
    // before its own last record: refused by every replica that knows that record.
    ;(B as any).signaturePolicy = () => undefined
    const late = outbox(B)
    await B.apply(pod('backdated'), { author: 'user:alice', now: 1_000_000 })
    await refused(C.applyRemote(late[0]!), 'user_unsigned', /its store had already written a revision timed 1970-01-01T01:01:40\.000Z/)
    assert.equal(C.get(podRef('backdated')), undefined)
    // From a fresh store (a new replica id: no earlier record of it known), an update of 'later'
    // timed before its parent: refused by the parent bound.
    const fresh = await modifiedMember(b, C, (Bmod) => Bmod.apply(pod('later', '/images/v2'), { author: 'user:alice', now: 1_000_000 }).then(() => {}))
    await refused(C.applyRemote(fresh[0]!), 'user_unsigned', /it builds on a revision timed 1970-01-01T01:01:40\.000Z/)
    await refused(A.applyRemote(fresh[0]!), 'user_unsigned')
    // Within the slack (5 min): a clock correction of an honest node is not refused.
    const skew = await modifiedMember(b, C, (Bmod) => Bmod.apply(pod('later', '/images/v3'), { author: 'user:alice', now: since - 1000 }).then(() => {}))
    await C.applyRemote(skew[0]!)
    assert.equal((C.get(podRef('later')) as any).spec.containers[0].image, '/images/v3')
  } finally {
    await close()
  }
})

test("a key is valid while it is the user's: a request signed with a rotated-away key is refused after the rotation; an unknown key waits", async () => {
  const { A, B, C, alice, close } = await cluster()
  try {
    const alice2 = await generateKeyPair('Ed25519')
    const sent = outbox(A)
    // Rotation at t = 10 min 1 s (ms 601_000).
    await A.apply(
      { apiVersion: 'orc/v1', kind: 'User', metadata: { name: 'alice' }, spec: { publicKey: keyText(alice2) } },
      { author: 'user:admin', now: 601_000 },
    )
    const rotate = sent[0]!
    // A request signed with the new key before C heard of the rotation: C may lag, not refused as forged.
    const ev2 = await signed(alice2, a, applyReq([pod('new')]), 602_000)
    await A.apply(pod('new'), { author: 'user:alice', now: 602_000, evidence: ev2 })
    await refused(C.applyRemote(sent[1]!), 'unresolved')
    await C.applyRemote(rotate)
    await C.applyRemote(sent[1]!)
    assert.ok(C.get(podRef('new')))
    // The old key, 20 minutes after the rotation: refused (a member holding an old signed request).
    const old = await signed(alice, b, applyReq([pod('late')]), 1_801_000)
    const out = await modifiedMember(b, C, (Bmod) => Bmod.apply(pod('late'), { author: 'user:alice', now: 1_801_000, evidence: old }).then(() => {}))
    assert.ok(decodeUpdateMessage(out[0]!).records[0]!.u, 'the modified store attached it')
    await refused(C.applyRemote(out[0]!), 'user_signature', /not user:alice's/)
    void B
  } finally {
    await close()
  }
})

test('a replica that restarts still refuses a replay (the requests it holds are read back from its log)', async () => {
  const { A, alice, close } = await cluster()
  const dir = await mkdtemp(join(tmpdir(), 'orc-ev-'))
  try {
    const v1 = await signed(alice, a, applyReq([pod('web')]), 5000)
    await A.apply(pod('web'), { author: 'user:alice', now: 5001, evidence: v1 })
    let C = await evStore(c, [], dir)
    await sync(A, C)
    await C.close()
    C = await evStore(c, [], dir)
    try {
      assert.ok(C.get(podRef('web')))
      const replay = await modifiedMember(a, C, async (A2) => {
        await A2.apply(pod('web', '/images/v2'), { author: 'user:alice', now: 5002 })
        await A2.apply(pod('web'), { author: 'user:alice', now: 5003, evidence: v1 })
      })
      await C.applyRemote(replay[0]!)
      await refused(C.applyRemote(replay[1]!), 'user_signature', /a replay/)
    } finally {
      await C.close()
    }
  } finally {
    await close()
    await rm(dir, { recursive: true, force: true })
  }
})

test("a new replica's sync accepts signed records before the User revision that gave the key, and the first admin key before admin's rotation", async () => {
  const { A, C, admin, alice, close } = await cluster()
  try {
    const ev = await signed(alice, a, applyReq([pod('web')]), 5000)
    await A.apply(pod('web'), { author: 'user:alice', now: 5000, evidence: ev })
    // admin, with the first admin key (cluster.json), then `orc user rotate admin` at 700 s.
    const adminReq = { method: 'POST', path: '/v1/apply', body: { objects: [pod('adm')] } }
    await A.apply(pod('adm'), { author: 'user:admin', now: 6000, evidence: await signed(admin, a, adminReq, 6000, 2) })
    const admin2 = await generateKeyPair('Ed25519')
    await A.apply(
      { apiVersion: 'orc/v1', kind: 'User', metadata: { name: 'admin' }, spec: { publicKey: keyText(admin2) } },
      { author: 'user:admin', now: 700_000 },
    )
    await sync(A, C)
    // A fresh replica gets everything in one message, the records in an order that puts the signed
    // ones before the User revisions (a join's sync sends each writer's records in turn).
    const E = await evStore(c, [keyText(admin)])
    try {
      const { yUpdate, records } = decodeUpdateMessage(await C.encodeMissing(E.encodeSyncState()))
      const users = records.filter((r) => r.k.startsWith('User/'))
      const reordered = [...records.filter((r) => !r.k.startsWith('User/')), ...users]
      assert.ok(reordered.findIndex((r) => r.u !== undefined) < reordered.findIndex((r) => r.k === 'User//alice'))
      await E.applyRemote(encodeUpdateMessage(yUpdate, reordered))
      assert.ok(E.get(podRef('web')) && E.get(podRef('adm')))
      // The first admin key 20 minutes after the rotation: no longer admin's.
      const lateReq = { method: 'POST', path: '/v1/apply', body: { objects: [pod('late')] } }
      const lateEv = await signed(admin, b, lateReq, 1_900_000, 3)
      const out = await modifiedMember(b, E, (Bmod) => Bmod.apply(pod('late'), { author: 'user:admin', now: 1_900_000, evidence: lateEv }).then(() => {}), [
        keyText(admin),
      ])
      await refused(E.applyRemote(out[0]!), 'user_signature', /not user:admin's/)
    } finally {
      await E.close()
    }
  } finally {
    await close()
  }
})

test("a signed apply over a merged head keeps its author's changes beside the full copy: judged by those, not by the merged lifecycle fields", async () => {
  // Which side's revision a merge keeps as the head depends on the replicas' random ids: tried
  // until it is the side that did not write the status (the case a full copy alone got wrong).
  for (let attempt = 0; attempt < 16; attempt++) {
    const { A, B, C, alice, close } = await cluster()
    try {
      const m = { ...pod('m'), spec: { ...pod('m').spec, placement: { node: 'b' } } }
      await A.apply(m, { author: 'user:alice', now: 5000 })
      for (const s of [B, C]) await sync(A, s)
      // A partition: b's lifecycle reports the pod running; on c, alice relabels it.
      const fromC = outbox(C)
      await B.patch(podRef('m'), [{ path: ['status', 'phase'], value: 'Running' }], { author: 'controller:lifecycle', now: 5001 })
      await C.patch(podRef('m'), [{ path: ['metadata', 'labels', 'tier'], value: 'x' }], { author: 'user:alice', now: 5002 })
      await sync(C, B)
      await sync(B, C)
      const head = B.get(podRef('m'))!.metadata.revisionId!
      if (!head.startsWith(C.replicaId)) continue
      // A has c's side only; b applies alice's signed manifest over its merged head.
      for (const u of fromC) await A.applyRemote(u)
      const next = { ...m, metadata: { ...m.metadata, labels: { ...m.metadata.labels, tier: 'z' } } }
      const ev = await signed(alice, b, applyReq([next], 'relabel'), 5003)
      const sent = outbox(B)
      await B.apply(next, { author: 'user:alice', reason: 'relabel', now: 5004, evidence: ev })
      const rec = decodeUpdateMessage(sent[0]!).records[0]!
      assert.ok(rec.u !== undefined && rec.f !== undefined && rec.c !== undefined, 'evidence, the merged copy and the changes')
      await sync(B, A)
      assert.equal(A.get(podRef('m'))?.metadata.labels?.tier, 'z')
      assert.equal(A.get(podRef('m'))?.status?.phase, 'Running')
      return
    } finally {
      await close()
    }
  }
  assert.fail('no attempt kept c’s revision as the head')
})
