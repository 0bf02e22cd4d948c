import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import type { Store } from '../../../src/store/store.ts'
import { pod, seededBytes, tempStore } from '../../helpers/store.ts'

type Op =
  | { t: 'apply'; name: string; image: number }
  | { t: 'label'; name: string; v: number }
  | { t: 'status'; name: string; phase: string }
  | { t: 'delete'; name: string }

const names = ['a', 'b', 'c']
const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ t: fc.constant('apply' as const), name: fc.constantFrom(...names), image: fc.integer({ min: 0, max: 5 }) }),
  fc.record({ t: fc.constant('label' as const), name: fc.constantFrom(...names), v: fc.integer({ min: 0, max: 5 }) }),
  fc.record({ t: fc.constant('status' as const), name: fc.constantFrom(...names), phase: fc.constantFrom('Running', 'Failed') }),
  fc.record({ t: fc.constant('delete' as const), name: fc.constantFrom(...names) }),
)

async function run(s: Store, op: Op, now: number, who: string): Promise<void> {
  const ref = { kind: 'Pod', namespace: 'default', name: op.name }
  const cur = s.get(ref)
  try {
    if (op.t === 'apply') await s.apply(pod(op.name, `/img/${op.image}`), { author: who, now })
    else if (op.t === 'label' && cur) {
      await s.apply({ ...pod(op.name, (cur.spec as any).containers[0].image), metadata: { name: op.name, labels: { v: String(op.v) } } }, { author: who, now })
    } else if (op.t === 'status' && cur) await s.patch(ref, [{ path: ['status', 'phase'], value: op.phase }], { author: 'controller:lifecycle', now })
    else if (op.t === 'delete' && cur) await s.delete(ref, { author: who, now })
  } catch (err) {
    if (!(err as Error).message.includes('not found')) throw err
  }
}

async function historyOf(s: Store) {
  return (await s.allRevisions()).map((r) => `${r.id} ${r.key} #${r.number} ${r.op} ${r.author}`)
}

// Two stores share a start, diverge (concurrent edits of one object, concurrent creation of the
// same name, delete vs update), then exchange their gossip messages in a random order with
// duplicates and finish with anti-entropy. Both must hold identical state and identical history.
test('diverged stores converge to identical state and history order, whatever the delivery order', async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.integer({ min: 1, max: 2 ** 31 - 1 }),
      fc.array(opArb, { minLength: 1, maxLength: 12 }),
      fc.array(opArb, { minLength: 1, maxLength: 12 }),
      fc.array(opArb, { maxLength: 6 }),
      async (seed, opsA, opsB, shared) => {
        const A = await tempStore({ randomBytes: seededBytes(seed), fullEvery: 3 })
        const B = await tempStore({ randomBytes: seededBytes(seed + 1), fullEvery: 3 })
        try {
          const fromA: Uint8Array[] = []
          const fromB: Uint8Array[] = []
          A.store.onLocalUpdate((u) => fromA.push(u))
          B.store.onLocalUpdate((u) => fromB.push(u))
          let now = 1000
          for (const op of shared) await run(A.store, op, now++, 'user:alice')
          await B.store.applyRemote(await A.store.encodeMissing(B.store.encodeSyncState()))
          fromA.length = 0
          for (let i = 0; i < Math.max(opsA.length, opsB.length); i++) {
            if (opsA[i]) await run(A.store, opsA[i]!, now + i, 'user:alice')
            if (opsB[i]) await run(B.store, opsB[i]!, now + i, 'user:bob')
          }
          // deliver gossip shuffled, with duplicates, deterministically from the seed
          const rnd = seededBytes(seed ^ 0x5bd1e995)
          const shuffle = (xs: Uint8Array[]) => {
            const out = [...xs, ...xs.filter((_, _i) => rnd(1)[0]! % 3 === 0)]
            for (let i = out.length - 1; i > 0; i--) {
              const j = rnd(1)[0]! % (i + 1)
              ;[out[i], out[j]] = [out[j]!, out[i]!]
            }
            return out
          }
          for (const m of shuffle(fromA)) await B.store.applyRemote(m)
          for (const m of shuffle(fromB)) await A.store.applyRemote(m)
          // anti-entropy, twice, both ways (idempotent)
          for (let k = 0; k < 2; k++) {
            await A.store.applyRemote(await B.store.encodeMissing(A.store.encodeSyncState()))
            await B.store.applyRemote(await A.store.encodeMissing(B.store.encodeSyncState()))
          }
          assert.equal(A.store.stateDigest(), B.store.stateDigest(), `state differs (seed ${seed})`)
          assert.deepEqual(await historyOf(A.store), await historyOf(B.store), `history differs (seed ${seed})`)
          for (const n of names) {
            const ref = { kind: 'Pod', namespace: 'default', name: n }
            assert.deepEqual(A.store.get(ref), B.store.get(ref))
            assert.deepEqual(await A.store.history(ref), await B.store.history(ref))
          }
        } finally {
          await A.cleanup()
          await B.cleanup()
        }
      },
    ),
    { numRuns: 40, seed: 42 },
  )
})

test('anti-entropy alone brings a store that missed every gossip message up to date, and survives its restart', async () => {
  const A = await tempStore({ randomBytes: seededBytes(7) })
  const B = await tempStore({ randomBytes: seededBytes(8) })
  for (let i = 0; i < 200; i++) await A.store.apply(pod(`p${i % 50}`, `/img/${i}`), { author: 'user:alice', now: i })
  const res = await B.store.applyRemote(await A.store.encodeMissing(B.store.encodeSyncState()))
  assert.equal(res.revisions, 200)
  assert.equal(B.store.stateDigest(), A.store.stateDigest())
  // the receiving side reconstructs old revisions written elsewhere
  assert.equal(((await B.store.at({ kind: 'Pod', namespace: 'default', name: 'p7' }, 2)).spec as any).containers[0].image, '/img/57')
  const again = await B.store.applyRemote(await A.store.encodeMissing(B.store.encodeSyncState()))
  assert.equal(again.revisions, 0, 'nothing is sent twice once converged')
  await A.cleanup()
  await B.cleanup()
})

test('history is never behind the objects: a replicated write is in history as soon as it is visible', async () => {
  const A = await tempStore({ randomBytes: seededBytes(21) })
  const B = await tempStore({ randomBytes: seededBytes(22) })
  const msgs: Uint8Array[] = []
  A.store.onLocalUpdate((u) => msgs.push(u))
  await A.store.apply(pod('db'), { author: 'user:bob', now: 1 })
  const ref = { kind: 'Pod', namespace: 'default', name: 'db' }
  const applying = B.store.applyRemote(msgs[0]!)
  // the document already shows it (applyRemote merges before its batch is on disk) …
  assert.ok(B.store.get(ref))
  // … and history, asked now, includes it
  const h = await B.store.history(ref)
  assert.deepEqual(
    h.map((r) => r.author),
    ['user:bob'],
  )
  await applying
  await A.cleanup()
  await B.cleanup()
})

test('a remote update is readable, and reported, as soon as it is merged, before its synced write', async () => {
  const A = await tempStore({ randomBytes: seededBytes(21) })
  const B = await tempStore({ randomBytes: seededBytes(22) })
  try {
    await A.store.apply(pod('web', '/img/1'), { author: 'user:alice', now: 1 })
    const ref = { kind: 'Pod', namespace: 'default', name: 'web' }
    const merged: Array<{ keys: string[]; readable: boolean; durableYet: boolean }> = []
    let durableYet = false
    B.store.onChange(() => (durableYet = true))
    B.store.onRemoteMerged((keys) => merged.push({ keys, readable: B.store.get(ref) !== undefined, durableYet }))
    await B.store.applyRemote(await A.store.encodeMissing(B.store.encodeSyncState()))
    assert.deepEqual(merged, [{ keys: ['Pod/default/web'], readable: true, durableYet: false }])
    assert.equal(durableYet, true)
    // Nothing new: no report.
    await B.store.applyRemote(await A.store.encodeMissing(B.store.encodeSyncState()))
    assert.equal(merged.length, 1)
  } finally {
    await A.cleanup()
    await B.cleanup()
  }
})

test('an update that builds on one not received yet is reported incomplete and shows once the gap is filled', async () => {
  const A = await tempStore({ randomBytes: seededBytes(31) })
  const B = await tempStore({ randomBytes: seededBytes(32) })
  try {
    const msgs: Uint8Array[] = []
    A.store.onLocalUpdate((u) => msgs.push(u))
    await A.store.apply(pod('first'), { author: 'user:alice', now: 1 })
    await A.store.apply(pod('second'), { author: 'user:alice', now: 2 })
    assert.equal(msgs.length, 2)
    const second = { kind: 'Pod', namespace: 'default', name: 'second' }
    // The second update alone: A's earlier one is missing, so Yjs holds it back.
    const r = await B.store.applyRemote(msgs[1]!)
    assert.equal(r.incomplete, true)
    assert.equal(B.store.get(second), undefined)
    // Anti-entropy from A fills the gap: both objects show and nothing waits any more.
    const filled = await B.store.applyRemote(await A.store.encodeMissing(B.store.encodeSyncState()))
    assert.equal(filled.incomplete, false)
    assert.ok(B.store.get(second))
    assert.ok(B.store.get({ kind: 'Pod', namespace: 'default', name: 'first' }))
  } finally {
    await A.cleanup()
    await B.cleanup()
  }
})
