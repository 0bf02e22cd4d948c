import assert from 'node:assert/strict'
import { test } from 'node:test'
import * as encoding from 'lib0/encoding'
import * as Y from 'yjs'
import { OrcError } from '../../../src/model/index.ts'
import { decodeUpdateMessage, encodeUpdateMessage } from '../../../src/store/codec.ts'
import type { Store } from '../../../src/store/store.ts'
import { pod } from '../../helpers/store.ts'
import { memStore, nodeObject, outbox, testNode } from './trust-helpers.ts'

// Regression cases of the trust fuzz test (test/unit/store/trust-fuzz.test.ts; docs/security.md,
// "Yjs deletions are bound to signed records"): each takes an honest message of A, changes its Yjs
// update the way the failing seed's mutation did, and delivers it to C before the honest one. C must
// refuse it and stay unchanged, and after the honest message hold exactly what D holds, which got
// only the honest messages.

const a = testNode('a')
const b = testNode('b')
const c = testNode('c')
const members = [a, b, c]
const podRef = (name: string) => ({ kind: 'Pod', namespace: 'default', name })

/** A Yjs (v1) update of these structs and deletions, as Yjs itself writes one. */
function encodeYjs(structs: ReadonlyArray<Y.Item | Y.GC | Y.Skip>, deletions: ReadonlyArray<[number, number, number]>): Uint8Array {
  const enc = new Y.UpdateEncoderV1()
  const byClient = new Map<number, Array<Y.Item | Y.GC | Y.Skip>>()
  for (const s of structs) {
    let l = byClient.get(s.id.client)
    if (!l) byClient.set(s.id.client, (l = []))
    l.push(s)
  }
  encoding.writeVarUint(enc.restEncoder, byClient.size)
  for (const [client, l] of byClient) {
    encoding.writeVarUint(enc.restEncoder, l.length)
    enc.writeClient(client)
    encoding.writeVarUint(enc.restEncoder, l[0]!.id.clock)
    for (const s of l) s.write(enc, 0)
  }
  const ds = new Map<number, Array<[number, number]>>()
  for (const [client, clock, len] of deletions) {
    let l = ds.get(client)
    if (!l) ds.set(client, (l = []))
    l.push([clock, len])
  }
  encoding.writeVarUint(enc.restEncoder, ds.size)
  for (const [client, l] of ds) {
    enc.resetDsCurVal()
    encoding.writeVarUint(enc.restEncoder, client)
    encoding.writeVarUint(enc.restEncoder, l.length)
    for (const [clock, len] of l) {
      enc.writeDsClock(clock)
      enc.writeDsLen(len)
    }
  }
  return enc.toUint8Array()
}

/** The deletions of a Yjs update as [client, clock, length]. */
function deletionsOf(u: Uint8Array): Array<[number, number, number]> {
  const out: Array<[number, number, number]> = []
  for (const [client, items] of Y.decodeUpdate(u).ds.clients) for (const d of items) out.push([client, d.clock, d.len])
  return out
}

/** A Yjs update's structs and deletions as text. */
function describe(u: Uint8Array): string {
  const { structs } = Y.decodeUpdate(u)
  return JSON.stringify(
    [
      structs.map((x) => [
        x.constructor.name,
        x.id,
        x.length,
        ...(x instanceof Y.Item ? [x.origin, x.rightOrigin, x.parent, x.parentSub, x.content.constructor.name, x.content.getContent()] : []),
      ]),
      deletionsOf(u),
    ],
    (_, v) => (v instanceof Y.AbstractType ? 'type' : v),
  )
}

/** Message `msg` with its Yjs update rewritten by `edit` (its structs, in order, and its deletions); the records unchanged. */
function mutate(msg: Uint8Array, edit: (structs: Array<Y.Item | Y.GC | Y.Skip>, ds: Array<[number, number, number]>) => void): Uint8Array {
  const { yUpdate, records } = decodeUpdateMessage(msg)
  const structs = Y.decodeUpdate(yUpdate).structs
  const ds = deletionsOf(yUpdate)
  // The encoder writes what Yjs wrote (unchanged, the same structs and deletions when decoded).
  assert.equal(describe(encodeYjs(structs, ds)), describe(yUpdate))
  edit(structs, ds)
  return encodeUpdateMessage(encodeYjs(structs, ds), records)
}

/** A (writer), C (receives the forged message first) and D (the honest messages only), synced. */
async function replicas() {
  const A = await memStore(a, members, { seed: 1 })
  const C = await memStore(c, members, { seed: 3 })
  const D = await memStore(testNode('d'), members, { seed: 4 })
  await A.apply(nodeObject('a'), { author: 'controller:node', now: 1 })
  for (const s of [C, D]) await s.applyRemote(await A.encodeMissing(s.encodeSyncState()))
  const sent = outbox(A)
  let now = 100
  /** One write of A; its message, already delivered to D. */
  const write = async (w: (now: number) => Promise<unknown>): Promise<Uint8Array> => {
    sent.length = 0
    await w(now++)
    assert.equal(sent.length, 1)
    await D.applyRemote(sent[0]!)
    return sent[0]!
  }
  /** A write of A that C (and D) hold already: the history a test starts from. */
  const given = async (w: (now: number) => Promise<unknown>): Promise<void> => {
    await C.applyRemote(await write(w))
  }
  /** Pod `name` created and deleted, on C too: its tombstone, and its fields garbage-collected there. */
  const givenDeleted = async (name: string): Promise<void> => {
    await given((now) => A.apply(pod(name), { author: 'user:alice', now }))
    await given((now) => A.delete(podRef(name), { author: 'user:alice', now }))
  }
  const close = async () => {
    for (const s of [A, C, D]) await s.close()
  }
  return { A, C, D, write, given, givenDeleted, close }
}

const snapshot = (s: Store) => `${s.stateDigest()}\n${s.syncDigest()}`

/** C refuses `forged` (and is unchanged), then merges `honest` and equals D. */
async function refusedThenHonest(C: Store, D: Store, forged: Uint8Array, honest: Uint8Array, refused: string | RegExp): Promise<void> {
  const before = snapshot(C)
  await assert.rejects(C.applyRemote(forged), (err: unknown) => {
    assert.ok(err instanceof OrcError, String(err))
    assert.equal(err.code, 'forbidden')
    assert.match(err.message, refused instanceof RegExp ? refused : new RegExp(refused))
    return true
  })
  assert.equal(snapshot(C), before, 'a refused message changed C')
  await C.applyRemote(honest)
  assert.equal(C.stateDigest(), D.stateDigest(), 'C differs from the replica that got only the honest messages')
}

test('seeds 1 and 7: a delete whose Yjs deletions are stretched over the tombstone it brings and content not written yet is refused; the tombstone then arrives', async () => {
  const { A, C, D, write, close } = await replicas()
  try {
    const created = await write((now) => A.apply(pod('p7', '/images/i1'), { author: 'user:alice', now }))
    await C.applyRemote(created)
    const deleted = await write((now) => A.delete(podRef('p7'), { author: 'user:alice', now }))
    // The fuzz's mutation 14: one byte of the update flipped, the length of its last deletion 3 → 91.
    const forged = mutate(deleted, (_, ds) => {
      const last = ds.at(-1)!
      last[2] = 91
    })
    await refusedThenHonest(C, D, forged, deleted, 'deletion of content the message itself brings')
    assert.equal(C.get(podRef('p7')), undefined)
    assert.ok(C.stateDigest().includes('"Pod/default/p7"'), "C holds p7's tombstone")
  } finally {
    await close()
  }
})

test("seed 4: a message whose Yjs content cannot be merged yet (a gap in its writer's clocks) is refused, not merged with its deletions alone", async () => {
  const { A, C, D, close } = await replicas()
  const B = await memStore(b, members, { seed: 2 })
  try {
    await B.applyRemote(await A.encodeMissing(B.encodeSyncState()))
    const fromA = outbox(A)
    await A.apply(pod('p1'), { author: 'user:alice', now: 200 })
    for (const s of [B, C, D]) await s.applyRemote(fromA[0]!)
    const fromB = outbox(B)
    // B's first write does not reach C (a lost gossip message, or one C refused); its second, an
    // update of A's object, deletes structs C holds (the object's system metadata, its label).
    await B.apply({ ...pod('other') }, { author: 'user:alice', now: 201 })
    await B.apply({ ...pod('p1'), metadata: { name: 'p1', labels: { v: '1' } } }, { author: 'user:alice', now: 202 })
    const [first, second] = fromB
    for (const m of [first!, second!]) await D.applyRemote(m)
    const before = snapshot(C)
    await assert.rejects(C.applyRemote(second!), (err: unknown) => err instanceof OrcError && err.details.refused === 'unresolved')
    assert.equal(snapshot(C), before, 'a refused message changed C')
    assert.equal(C.get(podRef('p1'))?.metadata.labels?.app, 'p1')
    for (const m of [first!, second!]) await C.applyRemote(m)
    assert.equal(C.stateDigest(), D.stateDigest())
    assert.deepEqual(C.get(podRef('p1'))?.metadata.labels, { v: '1' })
  } finally {
    await B.close()
    await close()
  }
})

test('seed 12: an update relayed without a deletion it signed, or with one it did not sign, is refused', async () => {
  const { A, C, D, write, close } = await replicas()
  try {
    const created = await write((now) => A.apply(pod('p6'), { author: 'user:alice', now }))
    const labelled = await write((now) => A.apply({ ...pod('p6'), metadata: { name: 'p6', labels: { v: '6' } } }, { author: 'user:alice', now }))
    for (const m of [created, labelled]) await C.applyRemote(m)
    const honest = await write((now) => A.apply(pod('p6'), { author: 'user:alice', now }))
    const objects = (C as unknown as { doc: { doc: Y.Doc } }).doc.doc.getMap<Y.Map<unknown>>('objects')
    const obj = objects.get('Pod/default/p6')!
    const labelV = ((obj.get('metadata') as Y.Map<unknown>).get('labels') as Y.Map<unknown>)._map.get('v')!.id
    const containers = (obj.get('spec') as Y.Map<unknown>)._map.get('containers')!.id
    // The label the update removes, left out: the seed's flipped byte moved that deletion elsewhere.
    const without = mutate(honest, (_, ds) => {
      const i = ds.findIndex(([client, clock, len]) => client === labelV.client && clock <= labelV.clock && labelV.clock < clock + len)
      assert.ok(i >= 0)
      const [client, clock, len] = ds[i]!
      ds.splice(i, 1)
      if (clock < labelV.clock) ds.push([client, clock, labelV.clock - clock])
      if (labelV.clock + 1 < clock + len) ds.push([client, labelV.clock + 1, clock + len - labelV.clock - 1])
    })
    await assert.rejects(C.applyRemote(without), /comes without the Yjs deletions it signed/)
    // A field the update does not change (its containers), deleted beside.
    const extra = mutate(honest, (_, ds) => {
      ds.push([containers.client, containers.clock, 1])
    })
    await refusedThenHonest(C, D, extra, honest, 'spec.containers is not one a revision of the message signed')
    assert.deepEqual(C.get(podRef('p6'))?.metadata.labels, { app: 'p6' })
    assert.equal((C.get(podRef('p6')) as any)?.spec.containers.length, 1)
  } finally {
    await close()
  }
})

test('seed 18: a re-create whose field is placed in the tombstone the same message replaces is refused', async () => {
  const { A, C, D, write, givenDeleted, close } = await replicas()
  try {
    await givenDeleted('p4')
    const recreated = await write((now) => A.apply(pod('p4', '/images/i3'), { author: 'user:alice', now }))
    const forged = mutate(recreated, (structs) => {
      const map = structs[0] as Y.Item
      const field = structs[1] as Y.Item
      // Its parent: the new object map → the tombstone map the new one replaces (its origin).
      assert.ok(map.origin !== null && field.parent !== null)
      field.parent = map.origin
    })
    await refusedThenHonest(C, D, forged, recreated, 'lands in a map the same message deletes')
    assert.equal(C.get(podRef('p4'))?.apiVersion, 'orc/v1')
  } finally {
    await close()
  }
})

test('seed 1, round 2878: a delete whose tombstone metadata is placed on garbage-collected content (Yjs would discard it) is refused', async () => {
  const { A, C, D, write, given, givenDeleted, close } = await replicas()
  try {
    // A deleted object's fields: garbage-collected content on C (GC structs once their map is gone).
    await givenDeleted('gone')
    await given((now) => A.apply(pod('p4'), { author: 'user:alice', now }))
    const deleted = await write((now) => A.delete(podRef('p4'), { author: 'user:alice', now }))
    const store = (C as unknown as { doc: { doc: Y.Doc } }).doc.doc.store
    let gc: Y.ID | undefined
    for (const l of store.clients.values()) for (const s of l) if (s instanceof Y.GC) gc ??= s.id
    assert.ok(gc !== undefined, 'C holds garbage-collected content')
    const forged = mutate(deleted, (structs) => {
      const sys = structs.find((s) => s instanceof Y.Item && s.parentSub === '~') as Y.Item
      sys.parent = gc!
    })
    await refusedThenHonest(C, D, forged, deleted, "builds on content gone here, though the revision builds on this replica's head")
  } finally {
    await close()
  }
})

test("seeds 2 and 6: another uid in a create's or an update's system metadata is refused", async () => {
  const { A, C, D, write, close } = await replicas()
  try {
    const created = await write((now) => A.apply(pod('p3'), { author: 'user:alice', now }))
    const otherUid = (structs: Array<Y.Item | Y.GC | Y.Skip>) => {
      const sys = structs.find(
        (s) => s instanceof Y.Item && s.content instanceof Y.ContentAny && (s.content.arr[0] as { uid?: string })?.uid !== undefined,
      ) as Y.Item
      const v = (sys.content as Y.ContentAny).arr[0] as { uid: string }
      // The seed's flipped byte: one hex digit of the uid.
      ;(sys.content as Y.ContentAny).arr[0] = { ...v, uid: `${v.uid[0] === 'b' ? 'c' : 'b'}${v.uid.slice(1)}` }
    }
    await refusedThenHonest(C, D, mutate(created, otherUid), created, 'system metadata names another uid')
    const updated = await write((now) => A.patch(podRef('p3'), [{ path: ['metadata', 'labels', 'v'], value: '5' }], { author: 'user:alice', now }))
    await refusedThenHonest(C, D, mutate(updated, otherUid), updated, 'names a creation not received here|names another')
    assert.equal(C.get(podRef('p3'))?.metadata.uid, A.get(podRef('p3'))?.metadata.uid)
  } finally {
    await close()
  }
})

test('a relayed update whose new value arrives deleted, or whose content is sent as a garbage-collected range, is refused (the write made to vanish)', async () => {
  const { A, C, D, write, given, close } = await replicas()
  try {
    await given((now) => A.apply(pod('p5'), { author: 'user:alice', now }))
    const labelled = (v: string) => write((now) => A.patch(podRef('p5'), [{ path: ['metadata', 'labels', 'v'], value: v }], { author: 'user:alice', now }))
    const first = await labelled('9')
    const deleted = mutate(first, (structs) => {
      const it = structs.find((s) => s instanceof Y.Item && s.content instanceof Y.ContentAny && s.content.arr[0] === '9') as Y.Item
      it.content = new Y.ContentDeleted(1) as never
    })
    await refusedThenHonest(C, D, deleted, first, 'arrives deleted, and no other revision deletes it')
    const second = await labelled('3')
    const collected = mutate(second, (structs) => {
      const length = structs.reduce((n, x) => n + x.length, 0)
      structs.splice(0, structs.length, new Y.GC(structs[0]!.id, length))
    })
    await refusedThenHonest(C, D, collected, second, 'arrives garbage-collected, and no other revision of it deletes it')
    assert.equal(C.get(podRef('p5'))?.metadata.labels?.v, '3')
  } finally {
    await close()
  }
})

test('honest deletions merge: a whole map replaced, an object deleted and re-created, concurrent writes of one field', async () => {
  const A = await memStore(a, members, { seed: 11 })
  const B = await memStore(b, members, { seed: 12 })
  const C = await memStore(c, members, { seed: 13 })
  try {
    await A.apply(nodeObject('a'), { author: 'controller:node', now: 1 })
    await B.apply(nodeObject('b'), { author: 'controller:node', now: 2 })
    const sync = async (x: Store, y: Store) => y.applyRemote(await x.encodeMissing(y.encodeSyncState()))
    for (const [x, y] of [
      [A, B],
      [B, A],
      [A, C],
      [B, C],
    ] as const)
      await sync(x, y)
    const fromA = outbox(A)
    const fromB = outbox(B)
    await A.apply(pod('w'), { author: 'user:alice', now: 10 })
    await A.patch(podRef('w'), [{ path: ['metadata', 'labels'], value: { v: '1' } }], { author: 'user:alice', now: 11 })
    await A.delete(podRef('w'), { author: 'user:alice', now: 12 })
    await A.apply(pod('w', '/images/again'), { author: 'user:alice', now: 13 })
    for (const m of fromA.splice(0)) await C.applyRemote(m)
    await sync(A, B)
    // Concurrent writes of one field: each replica deletes the loser when it merges the other's.
    await A.patch(podRef('w'), [{ path: ['metadata', 'labels', 'v'], value: 'a' }], { author: 'user:alice', now: 20 })
    await B.patch(podRef('w'), [{ path: ['metadata', 'labels', 'v'], value: 'b' }], { author: 'user:alice', now: 20 })
    for (const m of fromB.splice(0)) await C.applyRemote(m)
    for (const m of fromA.splice(0)) await C.applyRemote(m)
    await sync(A, B)
    await sync(B, A)
    await sync(A, C)
    assert.equal(C.stateDigest(), A.stateDigest())
    assert.equal(B.stateDigest(), A.stateDigest())
    assert.equal((C.get(podRef('w')) as any)?.spec.containers[0].image, '/images/again')
    // A replica that joins late gets it all in one sync (overwritten entries arrive deleted).
    const E = await memStore(testNode('e'), members, { seed: 14 })
    try {
      await sync(A, E)
      assert.equal(E.stateDigest(), A.stateDigest())
    } finally {
      await E.close()
    }
  } finally {
    for (const s of [A, B, C]) await s.close()
  }
})
