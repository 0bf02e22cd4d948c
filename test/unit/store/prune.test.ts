import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import { MemoryLevel } from 'memory-level'
import { openStore, type Store } from '../../../src/store/store.ts'
import { pod, seededBytes, tempStore } from '../../helpers/store.ts'

const ref = (name: string) => ({ kind: 'Pod', namespace: 'default', name })

async function relabel(s: Store, name: string, v: number, now: number, who = 'user:alice'): Promise<void> {
  const p = pod(name, '/img/app')
  p.metadata.labels.v = String(v)
  await s.apply(p, { author: who, now })
}

test('a field overwritten many times costs memory for its live value only once pruned, and nothing readable changes', async () => {
  const t = await tempStore({ randomBytes: seededBytes(3), stability: () => [] })
  try {
    let now = 0
    for (let r = 0; r < 30; r++) for (let i = 0; i < 20; i++) await relabel(t.store, `p${i}`, r, ++now)
    await t.store.patch(ref('p3'), [{ path: ['status', 'phase'], value: 'Running' }], { author: 'controller:lifecycle', now: ++now })
    const before = t.store.docStats().structs
    const digest = t.store.stateDigest()
    const history = await t.store.history(ref('p7'))
    const res = t.store.pruneTombstones()
    const after = t.store.docStats().structs
    // 20 objects × 29 overwrites × 2 entries (label and system metadata) were tombstones
    assert.ok(res.pruned >= 20 * 29 * 2, `pruned ${res.pruned}`)
    assert.ok(after < before / 4, `structs ${before} -> ${after}`)
    assert.equal(t.store.stateDigest(), digest, 'current state unchanged')
    assert.deepEqual(await t.store.history(ref('p7')), history, 'history unchanged')
    assert.equal(((await t.store.at(ref('p7'), 3)).metadata.labels as any).v, '2', 'old revisions still readable')
    // the snapshot written from the pruned document is what a restart loads
    await t.store.snapshot()
    await t.store.close()
    const again = await openStore({ dir: t.dir, randomBytes: seededBytes(4), stability: () => [] })
    try {
      assert.equal(again.stateDigest(), digest)
      assert.ok(again.docStats().structs <= after + 5, `after restart ${again.docStats().structs} structs`)
      await relabel(again, 'p7', 99, ++now)
      assert.equal((again.get(ref('p7'))!.metadata.labels as any).v, '99')
      assert.equal(again.get(ref('p7'))!.metadata.revision, 31)
    } finally {
      await again.close()
    }
  } finally {
    await t.cleanup().catch(() => {})
  }
})

test('without a stability source, or while a replica is ahead or unknown, nothing is pruned', async () => {
  const A = await tempStore({ randomBytes: seededBytes(5) })
  const B = await tempStore({ randomBytes: seededBytes(6) })
  try {
    for (let r = 0; r < 5; r++) await relabel(A.store, 'x', r, r)
    assert.deepEqual(A.store.pruneTombstones(), { pruned: 0, skipped: 'no stability source' })
    A.store.setStability(() => null)
    assert.equal(A.store.pruneTombstones().pruned, 0)
    // B holds a write A has not seen: A must not prune against B's report
    await B.store.applyRemote(await A.store.encodeMissing(B.store.encodeSyncState()))
    await relabel(B.store, 'x', 50, 50, 'user:bob')
    A.store.setStability(() => [B.store.encodeSyncState()])
    assert.equal(A.store.pruneTombstones().skipped, 'a replica holds updates this one does not have yet')
    A.store.setStability(() => [new Uint8Array([1, 2, 3])])
    assert.equal(A.store.pruneTombstones().skipped, 'a replica state is unreadable')
  } finally {
    await A.cleanup()
    await B.cleanup()
  }
})

test('a replica that never saw the pruned chain receives the live values, and later concurrent edits still merge', async () => {
  const A = await tempStore({ randomBytes: seededBytes(11), stability: () => [] })
  const B = await tempStore({ randomBytes: seededBytes(12) })
  try {
    for (let r = 0; r < 10; r++) await relabel(A.store, 'web', r, r)
    assert.ok(A.store.pruneTombstones().pruned > 0)
    await B.store.applyRemote(await A.store.encodeMissing(B.store.encodeSyncState()))
    assert.equal(B.store.stateDigest(), A.store.stateDigest())
    // concurrent: both relabel, and a controller sets status on B
    await relabel(A.store, 'web', 100, 100)
    await relabel(B.store, 'web', 200, 100, 'user:bob')
    await B.store.patch(ref('web'), [{ path: ['status', 'phase'], value: 'Running' }], { author: 'controller:lifecycle', now: 101 })
    for (let k = 0; k < 2; k++) {
      await A.store.applyRemote(await B.store.encodeMissing(A.store.encodeSyncState()))
      await B.store.applyRemote(await A.store.encodeMissing(B.store.encodeSyncState()))
    }
    assert.equal(A.store.stateDigest(), B.store.stateDigest())
    assert.equal((A.store.get(ref('web'))!.status as any).phase, 'Running')
    assert.ok(['100', '200'].includes((A.store.get(ref('web'))!.metadata.labels as any).v))
  } finally {
    await A.cleanup()
    await B.cleanup()
  }
})

// The strongest check: the same random run twice — replicas writing concurrently, syncing at
// random, a replica joining midway — once with every replica pruning whenever the (exactly known)
// states of all other replicas allow it, once never pruning. Ids are seeded, so both runs create
// identical Yjs items; pruning is correct only if every replica ends in the same state as in the
// run without it.
type Step =
  | { t: 'label'; who: number; name: number; v: number }
  | { t: 'status'; who: number; name: number; phase: number }
  | { t: 'delete'; who: number; name: number }
  | { t: 'sync'; from: number; to: number }
  | { t: 'prune'; who: number; gather: boolean }
  | { t: 'gossip' }

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ t: fc.constant('label' as const), who: fc.nat(3), name: fc.nat(2), v: fc.nat(9) }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('status' as const), who: fc.nat(3), name: fc.nat(2), phase: fc.nat(2) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('delete' as const), who: fc.nat(3), name: fc.nat(2) }) },
  { weight: 3, arbitrary: fc.record({ t: fc.constant('sync' as const), from: fc.nat(3), to: fc.nat(3) }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('prune' as const), who: fc.nat(3), gather: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('gossip' as const) }) },
)

async function world(seed: number, steps: Step[], prune: boolean): Promise<{ digests: string[]; pruned: number; skippedBehind: number }> {
  const stores: Store[] = []
  const open = async (i: number) =>
    openStore({
      dir: `mem-${i}`,
      db: new MemoryLevel<string, Uint8Array>({ keyEncoding: 'utf8', valueEncoding: 'view' }),
      randomBytes: seededBytes(seed + i * 7919),
      sync: false,
    })
  // replicas 0–2 exist from the start; replica 3 joins after a third of the steps, from replica 0
  for (let i = 0; i < 3; i++) stores.push(await open(i))
  const joinAt = Math.floor(steps.length / 3)
  const sync = async (from: Store, to: Store) => {
    await to.applyRemote(await from.encodeMissing(to.encodeSyncState()))
  }
  let pruned = 0
  let skippedBehind = 0
  let now = 0
  try {
    for (const [n, s] of steps.entries()) {
      if (n === joinAt) {
        const j = await open(3)
        await sync(stores[0]!, j)
        stores.push(j)
      }
      const live = stores.length
      const who = (s.t === 'sync' ? s.from : s.t === 'gossip' ? 0 : s.who) % live
      const st = stores[who]!
      now++
      try {
        if (s.t === 'label') await relabel(st, `o${s.name}`, s.v, now, `user:u${who}`)
        else if (s.t === 'status' && st.get(ref(`o${s.name}`)))
          await st.patch(ref(`o${s.name}`), [{ path: ['status', 'phase'], value: ['Pending', 'Running', 'Failed'][s.phase] }], {
            author: 'controller:lifecycle',
            now,
          })
        else if (s.t === 'delete' && st.get(ref(`o${s.name}`))) await st.delete(ref(`o${s.name}`), { author: `user:u${who}`, now })
        else if (s.t === 'sync' && s.to % live !== who) await sync(st, stores[s.to % live]!)
        else if (s.t === 'gossip') {
          for (const a of stores) for (const b of stores) if (a !== b) await sync(a, b)
        } else if (s.t === 'prune') {
          // both runs (sometimes) gather the others' updates here; only one prunes
          if (s.gather) for (const x of stores) if (x !== st) await sync(x, st)
          if (prune) {
            st.setStability(() => stores.filter((x) => x !== st).map((x) => x.encodeSyncState()))
            const res = st.pruneTombstones()
            pruned += res.pruned
            if (res.skipped?.startsWith('a replica holds')) skippedBehind++
          }
        }
      } catch (err) {
        if (!(err as Error).message.includes('not found')) throw err
      }
    }
    for (let round = 0; round < 2; round++) for (const a of stores) for (const b of stores) if (a !== b) await sync(a, b)
    return { digests: stores.map((s) => s.stateDigest()), pruned, skippedBehind }
  } finally {
    for (const s of stores) await s.close()
  }
}

test('pruning never changes what any replica converges to (random concurrent runs with a late joiner)', async () => {
  let totalPruned = 0
  let skippedBehind = 0
  await fc.assert(
    fc.asyncProperty(fc.integer({ min: 1, max: 2 ** 30 }), fc.array(stepArb, { minLength: 10, maxLength: 80 }), async (seed, steps) => {
      const ref = await world(seed, steps, false)
      const got = await world(seed, steps, true)
      totalPruned += got.pruned
      skippedBehind += got.skippedBehind
      for (const d of got.digests) assert.equal(d, got.digests[0], `pruned replicas disagree (seed ${seed})`)
      assert.equal(got.digests[0], ref.digests[0], `pruning changed the converged state (seed ${seed})`)
    }),
    { numRuns: 60, seed: 7 },
  )
  assert.ok(totalPruned > 100, `the runs exercised pruning (${totalPruned} tombstones pruned)`)
  assert.ok(skippedBehind > 10, `the runs exercised a replica that is behind another (${skippedBehind})`)
})

// The case the "this replica is behind" rule exists for: B overwrote a field concurrently with A,
// C has A's value but not yet B's. Every replica holds A's value, yet C must not prune the chain
// under it: B's write still has to find its origin on C, and where B's client id orders after A's,
// B's value is the one every replica keeps.
test('a replica missing a concurrent write does not prune the chain that write is ordered against', async () => {
  let concurrentWon = 0
  for (let seed = 1; seed <= 12; seed++) {
    const mk = (i: number) =>
      openStore({
        dir: `mem-${i}`,
        db: new MemoryLevel<string, Uint8Array>({ keyEncoding: 'utf8', valueEncoding: 'view' }),
        randomBytes: seededBytes(seed * 31 + i),
        sync: false,
      })
    const [A, B, C] = [await mk(0), await mk(1), await mk(2)]
    const sync = async (from: Store, to: Store) => to.applyRemote(await from.encodeMissing(to.encodeSyncState()))
    try {
      await relabel(A, 'k', 0, 1)
      await sync(A, B)
      await sync(A, C)
      await relabel(A, 'k', 1, 2) // L
      await relabel(B, 'k', 2, 2, 'user:bob') // Z, concurrent with L
      await sync(A, B)
      await sync(A, C) // C has L, not Z
      C.setStability(() => [A.encodeSyncState(), B.encodeSyncState()])
      C.pruneTombstones()
      for (let r = 0; r < 2; r++) for (const x of [A, B, C]) for (const y of [A, B, C]) if (x !== y) await sync(x, y)
      assert.equal(C.stateDigest(), B.stateDigest(), `seed ${seed}`)
      assert.equal(A.stateDigest(), B.stateDigest(), `seed ${seed}`)
      const k = B.get(ref('k'))
      assert.ok(k, `the object is still readable (seed ${seed})`)
      if ((k.metadata.labels as any).v === '2') concurrentWon++
    } finally {
      for (const s of [A, B, C]) await s.close()
    }
  }
  assert.ok(concurrentWon > 0, 'some seed ordered the concurrent write last')
})

test('a stability report holds only what is on disk', async () => {
  const A = await tempStore({ randomBytes: seededBytes(41) })
  const B = await tempStore({ randomBytes: seededBytes(42), stability: () => [] })
  try {
    await relabel(A.store, 'x', 1, 1)
    const settled = A.store.encodeStabilityReport()
    assert.ok(settled, 'nothing in flight: a report is available')
    const writing = relabel(A.store, 'x', 2, 2) // in the document now, on disk only when awaited
    const during = A.store.encodeStabilityReport()
    assert.ok(during === null || Buffer.from(during).equals(Buffer.from(settled!)), 'an in-flight write is not reported')
    await writing
    const after = A.store.encodeStabilityReport()!
    assert.ok(!Buffer.from(after).equals(Buffer.from(settled!)), 'the durable write is reported')
    // B pruning against A's report: A has B's nothing, B has A's everything
    await B.store.applyRemote(await A.store.encodeMissing(B.store.encodeSyncState()))
    assert.ok(B.store.pruneTombstones([after]).pruned > 0)
    assert.equal(B.store.stateDigest(), A.store.stateDigest())
  } finally {
    await A.cleanup()
    await B.cleanup()
  }
})
