import assert from 'node:assert/strict'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import * as Y from 'yjs'
import { userMayOnReceipt } from '../../../src/agent/authz.ts'
import { decodeUpdateMessage, encodeUpdateMessage } from '../../../src/store/codec.ts'
import { openStore, type Store } from '../../../src/store/store.ts'
import { toY } from '../../../src/store/ydoc.ts'
import { pod } from '../../helpers/store.ts'
import { memStore, nodeObject, outbox, testNode, verifierOf } from './trust-helpers.ts'

const a = testNode('a')
const b = testNode('b')
const c = testNode('c')
const members = [a, b, c]
const node = (name: string) => ({ kind: 'Node', namespace: '', name })
const podRef = (name: string) => ({ kind: 'Pod', namespace: 'default', name })

async function sync(from: Store, to: Store): Promise<void> {
  await to.applyRemote(await from.encodeMissing(to.encodeSyncState()))
}

/** Three stores of one cluster, each with its own Node object, all synced. */
async function cluster(opts: Parameters<typeof memStore>[2] = {}) {
  const A = await memStore(a, members)
  const B = await memStore(b, members)
  const C = await memStore(c, members, opts)
  let t = 1000
  for (const [s, n] of [
    [A, a],
    [B, b],
    [C, c],
  ] as const) {
    await s.apply(nodeObject(n.name), { author: 'controller:node', now: t++ })
    await s.patch(node(n.name), [{ path: ['status', 'state'], value: 'Ready' }], { author: 'controller:node', now: t++ })
  }
  for (const x of [A, B, C]) for (const y of [A, B, C]) if (x !== y) await sync(x, y)
  const close = async () => {
    for (const s of [A, B, C]) await s.close()
  }
  return { A, B, C, close }
}

async function refused(p: Promise<unknown>, reason: string): Promise<void> {
  await assert.rejects(p, (err: any) => {
    assert.equal(err.code, 'forbidden', err.message)
    assert.equal(err.details.refused, reason, err.message)
    return true
  })
}

test('signed records verify on receipt: honest writes of three nodes replicate', async () => {
  const { A, B, C, close } = await cluster()
  try {
    for (const s of [A, B, C]) for (const n of members) assert.equal(s.get(node(n.name))?.status?.state, 'Ready')
    const rev = (await C.history(node('a')))[0]!
    assert.equal(rev.author, 'controller:node')
  } finally {
    await close()
  }
})

test("a node writing another node's Node status is refused on receipt by the other replicas", async () => {
  const { A, B, C, close } = await cluster()
  try {
    const sent = outbox(B)
    // B's store applies its own writes unchecked (a modified agent can always write locally).
    await B.patch(node('a'), [{ path: ['status', 'state'], value: 'NotReady' }], { author: 'controller:node', now: 5000 })
    assert.equal(sent.length, 1)
    const seen: string[] = []
    C.onRefused((reason) => seen.push(reason))
    await refused(C.applyRemote(sent[0]!), 'unauthorized')
    await refused(A.applyRemote(sent[0]!), 'unauthorized')
    assert.equal(C.get(node('a'))?.status?.state, 'Ready')
    assert.equal(A.get(node('a'))?.status?.state, 'Ready')
    assert.deepEqual(seen, ['unauthorized'])
    // Anti-entropy from B brings the same write: refused too.
    await assert.rejects(sync(B, C), /refused/)
    assert.equal(C.get(node('a'))?.status?.state, 'Ready')
  } finally {
    await close()
  }
})

test('the lifecycle: status of a pod never bound to the writer refused; the old node of an ha move still reports; its spec refused; a scheduler binding elsewhere refused', async () => {
  const { A, B, C, close } = await cluster()
  try {
    await A.apply(pod('web'), { author: 'user:alice', now: 6000 })
    await A.patch(podRef('web'), [{ path: ['status', 'node'], value: 'a' }], { author: 'controller:scheduler', now: 6001 })
    await sync(A, B)
    await sync(A, C)
    // B reports on a pod bound to a, never to b (a modified agent faking a pod's phase): refused.
    const forging = outbox(B)
    await B.patch(podRef('web'), [{ path: ['status', 'phase'], value: 'Failed' }], { author: 'controller:lifecycle', now: 6002 })
    // Refused as lagging (a binding to b this replica has not received would allow it): repaired
    // from the author, never merged while no binding to b is known.
    await refused(C.applyRemote(forging[0]!), 'unresolved')
    assert.equal(C.get(podRef('web'))?.status?.phase, undefined)
    // (B's own store holds its forgery: a fresh replica of b goes on.)
    const B1 = await memStore(b, members)
    await sync(C, B1)
    // The ha move: B binds the pod to itself and reports on it; the old node a, which has not heard
    // of the move yet, still reports on its copy: both accepted (its signature names a).
    const sent = outbox(B1)
    await B1.patch(podRef('web'), [{ path: ['status', 'node'], value: 'b' }], { author: 'controller:scheduler', now: 6003 })
    await B1.patch(podRef('web'), [{ path: ['status', 'phase'], value: 'Running' }], { author: 'controller:lifecycle', now: 6004 })
    for (const m of sent) await C.applyRemote(m)
    assert.equal(C.get(podRef('web'))?.status?.phase, 'Running')
    // The lifecycle owns status fields only: a forged record changing the spec under its name is refused.
    const { yUpdate, records } = decodeUpdateMessage(sent[1]!)
    const forged = { ...records[0]!, c: [['s', ['spec', 'terminationGracePeriodSeconds'], 99]] as (typeof records)[0]['c'] }
    delete forged.g
    delete forged.h
    const { signRecord } = await import('../../../src/store/trust.ts')
    signRecord(forged, b.signer, forged.y!, forged.yc!)
    const C2 = await memStore(c, members)
    try {
      await sync(A, C2)
      await C2.applyRemote(sent[0]!)
      await refused(C2.applyRemote(encodeUpdateMessage(yUpdate, [forged])), 'unauthorized')
    } finally {
      await C2.close()
    }
    const fromOld = outbox(A)
    await A.patch(podRef('web'), [{ path: ['status', 'phase'], value: 'Failed' }], { author: 'controller:lifecycle', now: 6005 })
    await C.applyRemote(fromOld[0]!)
    await sync(C, A)
    await sync(A, C)
    assert.equal(C.stateDigest(), A.stateDigest(), 'concurrent status writes of A and B merge the same everywhere')
    await B1.close()
    // B binding a pod to a third node is refused; binding one to itself is not.
    const B2 = await memStore(b, members)
    try {
      await sync(C, B2)
      const sent2 = outbox(B2)
      await A.apply(pod('free'), { author: 'user:alice', now: 6005 })
      await sync(A, B2)
      await sync(A, C)
      await B2.patch(podRef('free'), [{ path: ['status', 'node'], value: 'b' }], { author: 'controller:scheduler', now: 6006 })
      await C.applyRemote(sent2[0]!)
      assert.equal(C.get(podRef('free'))?.status?.node, 'b')
      await B2.patch(podRef('web'), [{ path: ['status', 'node'], value: 'c' }], { author: 'controller:scheduler', now: 6004 })
      await refused(C.applyRemote(sent2[1]!), 'unauthorized')
    } finally {
      await B2.close()
    }
  } finally {
    await close()
  }
})

test('a replica that knows no binding of a pod does not judge its lifecycle status (it would refuse it in every reply; chaos seed 1952584088)', async () => {
  const { A, B, C, close } = await cluster()
  try {
    await A.apply(pod('unknown'), { author: 'user:alice', now: 6500 })
    await sync(A, B)
    await sync(A, C)
    const fromB = outbox(B)
    await B.patch(podRef('unknown'), [{ path: ['status', 'phase'], value: 'Running' }], { author: 'controller:lifecycle', now: 6501 })
    await C.applyRemote(fromB[0]!)
    assert.equal(C.get(podRef('unknown'))?.status?.phase, 'Running')
  } finally {
    await close()
  }
})

test('the nodes a pod was bound to are kept on disk: after a restart the old node of a move still reports on its copy', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'orc-bound-'))
  t.after(() => rm(dir, { recursive: true, force: true }))
  const onDisk = () => openStore({ dir, sync: false, signer: c.signer, verifier: verifierOf(members) })
  const A = await memStore(a, members)
  const B = await memStore(b, members)
  let C = await onDisk()
  try {
    await A.apply(pod('db'), { author: 'user:alice', now: 8000 })
    await A.patch(podRef('db'), [{ path: ['status', 'node'], value: 'a' }], { author: 'controller:scheduler', now: 8001 })
    await sync(A, B)
    await sync(A, C)
    await B.patch(podRef('db'), [{ path: ['status', 'node'], value: 'b' }], { author: 'controller:scheduler', now: 8002 })
    await sync(B, C)
    await C.close()
    C = await onDisk()
    // C restarted knowing only that db is bound to b now; a, which ran it before, reports on its copy.
    const fromOld = outbox(A)
    await A.patch(podRef('db'), [{ path: ['status', 'phase'], value: 'Failed' }], { author: 'controller:lifecycle', now: 8003 })
    await C.applyRemote(fromOld[0]!)
    assert.equal(C.get(podRef('db'))?.status?.node, 'b')
    // A node it was never bound to is still refused after the restart.
    const D = await memStore(c, members)
    try {
      await sync(B, D)
      await sync(A, D)
      const fromC = outbox(D)
      await D.patch(podRef('db'), [{ path: ['status', 'phase'], value: 'Running' }], { author: 'controller:lifecycle', now: 8004 })
      const other = await memStore(a, members)
      try {
        await sync(B, other)
        await sync(A, other)
        await refused(other.applyRemote(fromC[0]!), 'unresolved')
      } finally {
        await other.close()
      }
    } finally {
      await D.close()
    }
  } finally {
    for (const s of [A, B, C]) await s.close()
  }
})

test('a record with a tampered signature, author or content is refused', async () => {
  const { A, C, close } = await cluster()
  try {
    const sent = outbox(A)
    await A.apply(pod('api'), { author: 'user:alice', now: 7000 })
    const { yUpdate, records } = decodeUpdateMessage(sent[0]!)
    const r = records[0]!
    const forge = (patch: Record<string, unknown>) => encodeUpdateMessage(yUpdate, [{ ...r, ...patch }])
    await refused(C.applyRemote(forge({ a: 'user:root' })), 'bad_signature')
    await refused(C.applyRemote(forge({ r: 'other reason' })), 'bad_signature')
    const sig = Buffer.from(r.g!, 'base64')
    sig[3]! ^= 1
    await refused(C.applyRemote(forge({ g: sig.toString('base64') })), 'bad_signature')
    await refused(C.applyRemote(forge({ f: { ...r.f, spec: { containers: [] } } })), 'bad_signature')
    await refused(C.applyRemote(forge({ n: 'peer-stranger' })), 'not_member')
    await refused(C.applyRemote(forge({ g: undefined })), 'unsigned')
    // Claiming the record was signed by another member fails the signature.
    await refused(C.applyRemote(forge({ n: b.id })), 'bad_signature')
    assert.equal(C.get(podRef('api')), undefined)
    assert.equal((await C.allRevisions()).filter((x) => x.key === 'Pod/default/api').length, 0)
    await C.applyRemote(sent[0]!)
    assert.ok(C.get(podRef('api')))
  } finally {
    await close()
  }
})

test('a node binding a pod to itself, then reporting its status: out of order, the report waits for the binding (lagging, not a forgery)', async () => {
  const { A, B, C, close } = await cluster()
  try {
    await A.apply(pod('pinned'), { author: 'user:alice', now: 7000 })
    await sync(A, B)
    await sync(A, C)
    const sent = outbox(B)
    await B.patch(podRef('pinned'), [{ path: ['status', 'node'], value: 'b' }], { author: 'controller:scheduler', now: 7001 })
    await B.patch(podRef('pinned'), [{ path: ['status', 'phase'], value: 'Running' }], { author: 'controller:lifecycle', now: 7002 })
    // Gossip delivers the status before the binding it builds on.
    await refused(C.applyRemote(sent[1]!), 'unresolved')
    await C.applyRemote(sent[0]!)
    await C.applyRemote(sent[1]!)
    assert.equal(C.get(podRef('pinned'))?.status?.phase, 'Running')
    assert.equal(C.get(podRef('pinned'))?.status?.node, 'b')
  } finally {
    await close()
  }
})

test('a pod pinned to a node: that node reports its status before binding it', async () => {
  const { A, B, C, close } = await cluster()
  try {
    const pinned = { ...pod('pin-b'), spec: { ...pod('pin-b').spec, placement: { node: 'b' } } }
    await A.apply(pinned, { author: 'user:alice', now: 7100 })
    await sync(A, B)
    await sync(A, C)
    const fromB = outbox(B)
    await B.patch(podRef('pin-b'), [{ path: ['status', 'phase'], value: 'Starting' }], { author: 'controller:lifecycle', now: 7101 })
    await C.applyRemote(fromB[0]!)
    assert.equal(C.get(podRef('pin-b'))?.status?.phase, 'Starting')
  } finally {
    await close()
  }
})

test('concurrent edits: a chain of records whose first base is not the head here is merged, not refused as bad schema', async () => {
  const { A, B, C, close } = await cluster()
  try {
    await A.apply(pod('hot'), { author: 'user:alice', now: 7200 })
    await sync(A, B)
    await sync(A, C)
    // A and B edit the same object concurrently; C hears A first.
    await A.apply(pod('hot', '/images/busybox', { terminationGracePeriodSeconds: 1 }), { author: 'user:alice', now: 7201 })
    await B.apply(pod('hot', '/images/busybox', { terminationGracePeriodSeconds: 2 }), { author: 'user:bob', now: 7202 })
    await B.apply(pod('hot', '/images/busybox', { terminationGracePeriodSeconds: 3 }), { author: 'user:bob', now: 7203 })
    await sync(A, C)
    // B's two revisions come in one message: the first builds on a head C has moved past.
    await sync(B, C)
    await sync(C, A)
    await sync(C, B)
    assert.equal(C.stateDigest(), A.stateDigest())
    assert.equal(C.stateDigest(), B.stateDigest())
    assert.equal((await C.history(podRef('hot'))).length, 4)
  } finally {
    await close()
  }
})

test('concurrent creates of one object on two nodes, then an edit of the losing copy: merged everywhere', async () => {
  const { A, B, C, close } = await cluster()
  try {
    await A.apply(pod('twin', '/images/busybox', { terminationGracePeriodSeconds: 1 }), { author: 'user:alice', now: 7300 })
    await B.apply(pod('twin', '/images/busybox', { terminationGracePeriodSeconds: 2 }), { author: 'user:bob', now: 7301 })
    await B.apply(pod('twin', '/images/busybox', { terminationGracePeriodSeconds: 3 }), { author: 'user:bob', now: 7302 })
    await sync(A, C)
    await sync(B, C)
    await sync(C, A)
    await sync(C, B)
    assert.equal(C.stateDigest(), A.stateDigest())
    assert.equal(C.stateDigest(), B.stateDigest())
  } finally {
    await close()
  }
})

test('an edit of a copy another replica has garbage-collected (it lost a concurrent create) is merged, not held back forever', async () => {
  // Whichever copy loses, C edits it in one of the two rounds: the replicas holding both copies
  // have collected the loser's fields, and the edit builds on them (Yjs discards it on arrival).
  for (const editOf of ['A', 'B'] as const) {
    const { A, B, C, close } = await cluster()
    try {
      await A.apply(pod('twin', '/images/busybox', { terminationGracePeriodSeconds: 1 }), { author: 'user:alice', now: 7300 })
      await B.apply(pod('twin', '/images/busybox', { terminationGracePeriodSeconds: 2 }), { author: 'user:bob', now: 7301 })
      const [mine, other] = editOf === 'A' ? [A, B] : [B, A]
      await sync(mine, C)
      await C.patch(podRef('twin'), [{ path: ['spec', 'terminationGracePeriodSeconds'], value: 9 }], { author: 'user:carol', now: 7302 })
      await sync(other, mine)
      await sync(mine, other)
      // C's edit reaches them before C learns of the other copy (C would then send its edit collected).
      await sync(C, mine)
      await sync(C, other)
      for (const x of [A, B, C]) for (const y of [A, B, C]) if (x !== y) await sync(x, y)
      assert.equal(A.syncDigest(), C.syncDigest(), `edit of ${editOf}'s copy`)
      assert.equal(B.syncDigest(), C.syncDigest(), `edit of ${editOf}'s copy`)
      assert.equal(A.stateDigest(), C.stateDigest())
      assert.equal(A.get(podRef('twin'))?.spec?.terminationGracePeriodSeconds, B.get(podRef('twin'))?.spec?.terminationGracePeriodSeconds)
    } finally {
      await close()
    }
  }
})

test("a scheduler's binding concurrent with the lifecycle's first status write is merged, not refused as touching the lifecycle's fields", async () => {
  const { A, B, C, close } = await cluster()
  try {
    // Pinned to b: its lifecycle writes before any binding.
    await A.apply(pod('race', undefined, { placement: { node: 'b' } }), { author: 'user:alice', now: 7400 })
    await sync(A, B)
    await sync(A, C)
    // Neither has seen the other's status map: each writes `status` whole.
    await B.patch(podRef('race'), [{ path: ['status', 'targetRevision'], value: 1 }], { author: 'controller:lifecycle', now: 7401 })
    await C.patch(podRef('race'), [{ path: ['status', 'node'], value: 'c' }], { author: 'controller:scheduler', now: 7402 })
    await sync(B, A)
    await sync(C, A)
    for (const x of [A, B, C]) for (const y of [A, B, C]) if (x !== y) await sync(x, y)
    assert.equal(A.syncDigest(), B.syncDigest())
    assert.equal(A.syncDigest(), C.syncDigest())
    // A binding to another node in a concurrent whole map is still refused.
    const sent = outbox(B)
    await A.apply(pod('race2', undefined, { placement: { node: 'c' } }), { author: 'user:alice', now: 7403 })
    await sync(A, B)
    await sync(A, C)
    await C.patch(podRef('race2'), [{ path: ['status', 'targetRevision'], value: 1 }], { author: 'controller:lifecycle', now: 7404 })
    await sync(C, A)
    await B.patch(podRef('race2'), [{ path: ['status', 'node'], value: 'c' }], { author: 'controller:scheduler', now: 7405 })
    await refused(A.applyRemote(sent.at(-1)!), 'unauthorized')
  } finally {
    await close()
  }
})

test("a write over a merged head is judged by its author's changes, not by what the merge brought (chaos seed 1429252850)", async () => {
  const { A, B, C, close } = await cluster()
  try {
    await A.apply(pod('merged'), { author: 'user:alice', now: 7500 })
    for (const s of [B, C]) await sync(A, s)
    await B.patch(podRef('merged'), [{ path: ['status', 'node'], value: 'b' }], { author: 'controller:scheduler', now: 7501 })
    await B.patch(podRef('merged'), [{ path: ['status', 'phase'], value: 'Running' }], { author: 'controller:lifecycle', now: 7502 })
    for (const s of [A, C]) await sync(B, s)
    // A partition: B's lifecycle fences its copy, while C takes the pod and starts it.
    const fromB = outbox(B)
    const fromC = outbox(C)
    await B.patch(podRef('merged'), [{ path: ['status', 'reason'], value: 'fenced: no quorum' }], { author: 'controller:lifecycle', now: 7503 })
    await C.patch(podRef('merged'), [{ path: ['status', 'node'], value: 'c' }], { author: 'controller:scheduler', now: 7504 })
    await C.patch(podRef('merged'), [{ path: ['status', 'phase'], value: 'Starting' }], { author: 'controller:lifecycle', now: 7505 })
    // B and C hear each other (anti-entropy); A hears only the side whose revision the merge keeps as the head.
    await sync(C, B)
    await sync(B, C)
    const head = B.get(podRef('merged'))!.metadata.revisionId
    assert.equal(C.get(podRef('merged'))!.metadata.revisionId, head)
    const [winner, loser, winnerUpdates] = head?.startsWith(C.replicaId) ? [C, B, fromC] : [B, C, fromB]
    for (const u of winnerUpdates) await A.applyRemote(u)
    assert.equal(A.get(podRef('merged'))!.metadata.revisionId, head)
    // The other side's scheduler binds the pod to its node: its record's parent is the head A has,
    // and its full copy holds the merged status, with the other side's fields A has not merged yet.
    const me = loser === B ? 'b' : 'c'
    await loser.patch(
      podRef('merged'),
      [
        { path: ['status', 'node'], value: me },
        { path: ['status', 'scheduling'], value: { node: me, at: 'now', by: me } },
      ],
      { author: 'controller:scheduler', now: 7506 },
    )
    // Anti-entropy from that side brings its branch and the binding in one message.
    await sync(loser, A)
    assert.equal(A.get(podRef('merged'))?.status?.node, me)
    assert.equal(A.get(podRef('merged'))?.status?.reason, 'fenced: no quorum')
    for (const x of [A, B, C]) for (const y of [A, B, C]) if (x !== y) await sync(x, y)
    assert.equal(A.syncDigest(), B.syncDigest())
    assert.equal(A.syncDigest(), C.syncDigest())
    assert.notEqual(winner, loser)
  } finally {
    await close()
  }
})

test("a peer's full copy merged beside a concurrent local write: the next write's history holds both", async () => {
  const { A, B, C, close } = await cluster()
  try {
    await A.apply(pod('copies'), { author: 'user:alice', now: 7600 })
    await A.patch(podRef('copies'), [{ path: ['metadata', 'labels', 'from-a'], value: 'yes' }], { author: 'user:alice', now: 7601 })
    // Two records in one message: B and C hold no single revision's content, so their next writes are full copies.
    await sync(A, C)
    await sync(A, B)
    const fromB = outbox(B)
    const fromC = outbox(C)
    await B.patch(podRef('copies'), [{ path: ['metadata', 'labels', 'from-b'], value: 'yes' }], { author: 'user:alice', now: 7602 })
    await C.patch(podRef('copies'), [{ path: ['metadata', 'labels', 'from-c'], value: 'yes' }], { author: 'user:alice', now: 7603 })
    for (const u of fromC) await B.applyRemote(u)
    for (const u of fromB) await C.applyRemote(u)
    // On the side whose own write lost the head, the other's full copy is the head, merged beside its own write.
    const head = B.get(podRef('copies'))!.metadata.revisionId!
    const loser = head.startsWith(C.replicaId) ? B : C
    const res = await loser.patch(podRef('copies'), [{ path: ['metadata', 'labels', 'later'], value: 'yes' }], { author: 'user:alice', now: 7604 })
    const labels = (await loser.at(podRef('copies'), res.revision!.id)).metadata.labels
    assert.deepEqual({ ...labels }, { app: 'copies', 'from-a': 'yes', 'from-b': 'yes', 'from-c': 'yes', later: 'yes' })
  } finally {
    await close()
  }
})

test('one message carrying three concurrent creates of one object (a partition healed) is merged whichever copy won', async () => {
  // Seeded Yjs client ids: over these rounds the winning copy is each of the three in turn, and
  // its creation is not always the first create of the message.
  const winners = new Set<string>()
  for (let round = 0; round < 6; round++) {
    const [A, B, C] = await Promise.all([a, b, c].map((n, i) => memStore(n, members, { seed: 100 * round + i + 1 })))
    const fresh = await memStore(a, members, { seed: 100 * round + 9 })
    try {
      for (const [i, s] of [A, B, C].entries()) {
        await s.apply(pod('trio', '/images/busybox', { terminationGracePeriodSeconds: i + 1 }), { author: 'user:alice', now: 7500 + i })
        await s.patch(podRef('trio'), [{ path: ['spec', 'terminationGracePeriodSeconds'], value: 10 + i }], { author: 'user:alice', now: 7510 + i })
      }
      await sync(A, B)
      await sync(C, B)
      await sync(B, fresh)
      assert.equal(fresh.syncDigest(), B.syncDigest())
      winners.add(String(B.get(podRef('trio'))?.spec?.terminationGracePeriodSeconds))
    } finally {
      for (const s of [A, B, C, fresh]) await s.close()
    }
  }
  assert.ok(winners.size >= 2, `the rounds should see different winners: ${[...winners]}`)
})

test('a user-authored record the injected userMay denies is refused', async () => {
  const asked: string[] = []
  const { A, C, close } = await cluster({
    userMay: (user, verb, kind, ns) => {
      asked.push(`${user} ${verb} ${kind} ${ns}`)
      return user !== 'mallory'
    },
  })
  try {
    const sent = outbox(A)
    await A.apply(pod('p2'), { author: 'user:alice', now: 8000 })
    await C.applyRemote(sent[0]!)
    assert.ok(C.get(podRef('p2')))
    await A.apply(pod('p1'), { author: 'user:mallory', now: 8001 })
    await refused(C.applyRemote(sent[1]!), 'role')
    assert.equal(C.get(podRef('p1')), undefined)
    assert.ok(asked.includes('mallory create Pod default'), asked.join())
  } finally {
    await close()
  }
})

test('roles on receipt: a write is refused until its RoleBinding is here, and accepted when both come in one message', async () => {
  // The agent's wiring: the model's RBAC decision over the replica's objects and the message's.
  const { A, C, close } = await cluster({ userMay: userMayOnReceipt })
  try {
    const sent = outbox(A)
    const binding = { apiVersion: 'orc/v1', kind: 'RoleBinding', metadata: { name: 'vera-edit' }, spec: { role: 'edit', users: ['vera'] } }
    await A.apply(binding, { author: 'user:admin', now: 8100 })
    await A.apply(pod('v1'), { author: 'user:vera', now: 8101 })
    // The write alone (its binding not here yet) is refused as lagging, not merged.
    await refused(C.applyRemote(sent[1]!), 'role')
    assert.equal(C.get(podRef('v1')), undefined)
    // Anti-entropy brings both in one message: the binding in it counts for the write after it.
    await sync(A, C)
    assert.equal(C.get(podRef('v1'))?.metadata.updatedBy, 'user:vera')
    // A user with no binding at all stays refused, however it arrives.
    await A.apply(pod('w1'), { author: 'user:walt', now: 8102 })
    await refused(sync(A, C), 'role')
    assert.equal(C.get(podRef('w1')), undefined)
  } finally {
    await close()
  }
})

test("a user's record written after its key expired is refused on receipt; one written before is merged", async () => {
  const { A, C, close } = await cluster({ userMay: userMayOnReceipt })
  try {
    const sent = outbox(A)
    const expiresAt = new Date(9000).toISOString()
    await A.apply({ apiVersion: 'orc/v1', kind: 'User', metadata: { name: 'tess' }, spec: { publicKey: 'k', expiresAt } }, { author: 'user:admin', now: 8000 })
    await A.apply(
      { apiVersion: 'orc/v1', kind: 'RoleBinding', metadata: { name: 'tess' }, spec: { role: 'edit', users: ['tess'] } },
      { author: 'user:admin', now: 8001 },
    )
    await A.apply(pod('before'), { author: 'user:tess', now: 8999 })
    // admin is exempt: the first node's root acts as admin over its socket whatever its key became.
    await A.apply({ apiVersion: 'orc/v1', kind: 'User', metadata: { name: 'admin' }, spec: { publicKey: 'a', expiresAt } }, { author: 'user:admin', now: 8002 })
    await A.apply(pod('by-admin'), { author: 'user:admin', now: 9500 })
    await A.apply(pod('after'), { author: 'user:tess', now: 9000 })
    for (const m of sent.slice(0, 5)) await C.applyRemote(m)
    assert.equal(C.get(podRef('before'))?.metadata.updatedBy, 'user:tess')
    assert.equal(C.get(podRef('by-admin'))?.metadata.updatedBy, 'user:admin')
    await refused(C.applyRemote(sent[5]!), 'role')
    assert.equal(C.get(podRef('after')), undefined, 'not merged')
  } finally {
    await close()
  }
})

test('a record whose content fails the schema is refused, even when signed', async () => {
  const { A, C, close } = await cluster()
  try {
    const sent = outbox(A)
    await A.apply(pod('bad'), { author: 'user:alice', now: 9000 })
    const { yUpdate, records } = decodeUpdateMessage(sent[0]!)
    const r = { ...records[0]!, f: { ...records[0]!.f, spec: { containers: 'nope' } } }
    delete r.g
    const { signRecord } = await import('../../../src/store/trust.ts')
    signRecord(r, a.signer, r.y!, r.yc!)
    await refused(C.applyRemote(encodeUpdateMessage(yUpdate, [r])), 'schema')
    assert.equal(C.get(podRef('bad')), undefined)
  } finally {
    await close()
  }
})

test('Yjs content is bound to the records: content for another object, or with no record, is refused', async () => {
  const { A, B, C, close } = await cluster()
  try {
    // B's modified agent writes into node a's object in the document, then makes an honest write
    // of its own node: the signed record covers a Yjs range that also touches node/a.
    const doc = (B as any).doc.doc as Y.Doc
    const before = C.encodeSyncState()
    doc.transact(() => {
      ;(doc.getMap('objects').get('Node//a') as Y.Map<unknown>).set('spec', new Y.Map())
    })
    const sent = outbox(B)
    await B.patch(node('b'), [{ path: ['status', 'state'], value: 'NotReady' }], { author: 'controller:node', now: 10000 })
    const { records } = decodeUpdateMessage(sent[0]!)
    const sv = Y.encodeStateVector((C as any).doc.doc)
    await refused(C.applyRemote(encodeUpdateMessage(Y.encodeStateAsUpdate(doc, sv), records)), 'unbound')
    // The same content with no record at all.
    await refused(C.applyRemote(encodeUpdateMessage(Y.encodeStateAsUpdate(doc, sv), [])), 'unbound')
    assert.deepEqual(C.encodeSyncState(), before)
    // A's honest Yjs update passed off with B's record.
    const fromA = outbox(A)
    await A.apply(pod('x'), { author: 'user:alice', now: 10001 })
    await refused(C.applyRemote(encodeUpdateMessage(decodeUpdateMessage(fromA[0]!).yUpdate, records)), 'unbound')
    // A relaying member rewrites the values of A's write (same Yjs client, same clocks, same object).
    const aDoc = (A as any).doc.doc as Y.Doc
    const forged = new Y.Doc()
    Y.applyUpdate(forged, Y.encodeStateAsUpdate((C as any).doc.doc))
    forged.clientID = aDoc.clientID
    const honest = decodeUpdateMessage(fromA[0]!)
    forged.transact(() => {
      const m = new Y.Map<unknown>()
      forged.getMap('objects').set('Pod/default/x', m)
      const replica = new Y.Doc()
      Y.applyUpdate(replica, Y.encodeStateAsUpdate(aDoc))
      const real = (replica.getMap('objects').get('Pod/default/x') as Y.Map<unknown>).toJSON()
      real.spec.containers[0].image = '/'
      for (const [k, v] of Object.entries(real)) m.set(k, k === '~' ? v : toY(v))
    })
    const tampered = Y.encodeStateAsUpdate(forged, Y.encodeStateVector((C as any).doc.doc))
    await refused(C.applyRemote(encodeUpdateMessage(tampered, honest.records)), 'unbound')
    await C.applyRemote(fromA[0]!)
    assert.equal((C.get(podRef('x'))!.spec as any).containers[0].image, '/images/busybox')
  } finally {
    await close()
  }
})

test('anti-entropy never sends Yjs content whose record is still in the write queue', async () => {
  const { A, C, close } = await cluster()
  try {
    for (let round = 0; round < 5; round++) {
      // Writes in A's document now, their records queued behind one another for the disk.
      const writes = Array.from({ length: 50 }, (_, i) => A.apply(pod(`q${round}-${i}`), { author: 'user:alice', now: 11000 + round * 100 + i }))
      await C.applyRemote(await A.encodeMissing(C.encodeSyncState()))
      await Promise.all(writes)
    }
    await C.applyRemote(await A.encodeMissing(C.encodeSyncState()))
    assert.equal(C.list('Pod').length, 250)
  } finally {
    await close()
  }
})

test("an ingress controller's report on its own node is accepted; one on another node's entry or another field is refused on receipt", async () => {
  const { A, B, C, close } = await cluster()
  try {
    const ing = { kind: 'Ingress', namespace: '', name: 'web' }
    await A.apply(
      {
        apiVersion: 'orc/v1',
        kind: 'Ingress',
        metadata: { name: 'web' },
        spec: { controller: 'tcp-proxy', listen: { ports: [80] }, backend: { service: 'web', port: 80 } },
      },
      { author: 'controller:node', now: 5000 },
    )
    for (const s of [B, C]) await sync(A, s)
    const sent = outbox(B)
    await B.patch(ing, [{ path: ['status', 'nodes', 'b'], value: { ready: true, backends: 1 } }], { author: 'controller:ingress', now: 5001 })
    await C.applyRemote(sent[0]!)
    assert.equal((C.get(ing)?.status as any)?.nodes?.b?.ready, true, "b's own entry is accepted")
    await B.patch(ing, [{ path: ['status', 'nodes', 'a'], value: { ready: false, reason: 'forged' } }], { author: 'controller:ingress', now: 5002 })
    await refused(C.applyRemote(sent[1]!), 'unauthorized')
    assert.equal((C.get(ing)?.status as any)?.nodes?.a, undefined, "a's entry is not b's to write")
  } finally {
    await close()
  }
})

// A join's sync carries thousands of records: their signatures are checked at once (verifyMany,
// a worker thread in the agent). One tampered record among 300 still refuses the whole message,
// with the same reason as when checked one by one, and a gossip message arriving meanwhile waits.
test('a large message is checked at once: one bad signature among 300 records refuses it all', async () => {
  const batched = { calls: 0 }
  const A = await memStore(a, members)
  const C = await memStore(c, members, { batched })
  try {
    for (let i = 0; i < 300; i++) await A.apply(pod(`p${i}`), { author: 'controller:deployment', now: 8000 + i })
    const whole = await A.encodeMissing(C.encodeSyncState())
    const { yUpdate, records } = decodeUpdateMessage(whole)
    assert.ok(records.length >= 300)
    const sig = Buffer.from(records[150]!.g!, 'base64')
    sig[7]! ^= 1
    const tampered = records.map((r, i) => (i === 150 ? { ...r, g: sig.toString('base64') } : r))
    await refused(C.applyRemote(encodeUpdateMessage(yUpdate, tampered)), 'bad_signature')
    assert.equal(batched.calls, 1, 'checked at once')
    assert.equal(C.list('Pod').length, 0, 'nothing of the refused message merged')
    // The honest message, and a later write of A's sent while it is being checked: both merge, in order.
    const sent = outbox(A)
    await A.patch(podRef('p299'), [{ path: ['metadata', 'labels', 'late'], value: 'yes' }], { author: 'controller:deployment', now: 9000 })
    const [big, late] = await Promise.all([C.applyRemote(whole), C.applyRemote(sent[0]!)])
    assert.equal(big.revisions, records.length)
    assert.equal(late.revisions, 1)
    assert.equal(C.list('Pod').length, 300)
    assert.equal(C.get(podRef('p299'))?.metadata.labels?.late, 'yes')
    assert.equal(batched.calls, 2)
  } finally {
    await A.close()
    await C.close()
  }
})
