import assert from 'node:assert/strict'
import { join } from 'node:path'
import { test } from 'node:test'
import { defaultOwnership, MAX_OBJECT_BYTES, OrcError, OwnershipTable } from '../../../src/model/index.ts'
import { openStore } from '../../../src/store/store.ts'
import { pod, seededBytes, tempDir, tempStore } from '../../helpers/store.ts'

const web = { kind: 'Pod', namespace: 'default', name: 'web' }
const alice = (now: number, reason = '') => ({ author: 'user:alice', now, reason })

function rejectsWith(code: string, re: RegExp) {
  return (err: unknown) => {
    assert.ok(err instanceof OrcError, `expected OrcError, got ${err}`)
    assert.equal(err.code, code, err.message)
    assert.match(err.message, re)
    return true
  }
}

test('apply creates, updates in place and survives a restart exactly', async () => {
  const t = tempDir()
  const dir = join(t.dir, 'db')
  let s = await openStore({ dir })
  const r1 = await s.apply(pod('web'), alice(1000, 'first'))
  assert.equal(r1.revision?.number, 1)
  assert.equal(r1.revision?.op, 'create')
  const r2 = await s.apply(pod('web', '/images/v2'), alice(2000, 'new image'))
  assert.equal(r2.revision?.number, 2)
  assert.equal(r2.object?.metadata.uid, r1.object?.metadata.uid, 'an update keeps the object identity')
  const noop = await s.apply(pod('web', '/images/v2'), alice(3000))
  assert.equal(noop.revision, null, 'an apply that changes nothing records no revision')
  const before = s.get(web)
  await s.close()
  s = await openStore({ dir })
  assert.deepEqual(s.get(web), before)
  assert.equal((s.get(web)!.spec as any).containers[0].image, '/images/v2')
  const r3 = await s.apply(pod('web', '/images/v3'), alice(4000))
  assert.equal(r3.revision?.number, 3, 'numbering continues after restart')
  assert.notEqual(r3.revision?.id, r2.revision?.id)
  await s.close()
  t.cleanup()
})

test('history: filter by author (include, exclude, controller: prefix) and time', async () => {
  const { store, cleanup } = await tempStore()
  await store.apply(pod('web'), alice(1000))
  await store.patch(web, [{ path: ['status', 'phase'], value: 'Running' }], { author: 'controller:lifecycle', now: 2000 })
  await store.apply(pod('web', '/i/2'), { author: 'user:bob', now: 3000, reason: 'bump' })
  await store.patch(web, [{ path: ['status', 'node'], value: 'n1' }], { author: 'controller:scheduler', now: 4000 })
  const all = await store.history(web)
  assert.deepEqual(
    all.map((r) => [r.number, r.author]),
    [
      [1, 'user:alice'],
      [2, 'controller:lifecycle'],
      [3, 'user:bob'],
      [4, 'controller:scheduler'],
    ],
  )
  assert.deepEqual(
    (await store.history(web, { authors: ['user:bob'] })).map((r) => r.number),
    [3],
  )
  assert.deepEqual(
    (await store.history(web, { authors: ['user:bob', 'user:alice'] })).map((r) => r.number),
    [1, 3],
  )
  assert.deepEqual(
    (await store.history(web, { excludeAuthors: ['controller:'] })).map((r) => r.number),
    [1, 3],
  )
  assert.deepEqual(
    (await store.history(web, { since: 2000, until: 3000 })).map((r) => r.number),
    [2, 3],
  )
  assert.equal(all[2]!.reason, 'bump')
  await cleanup()
})

test('at, diff and rollback reconstruct old contents and record who rolled back from where', async () => {
  const { store, cleanup } = await tempStore({ fullEvery: 4 })
  for (let i = 1; i <= 10; i++) await store.apply(pod('web', `/images/v${i}`), alice(i * 1000))
  for (let i = 1; i <= 10; i++) {
    const o = await store.at(web, i)
    assert.equal((o.spec as any).containers[0].image, `/images/v${i}`, `revision ${i}`)
    assert.equal(o.metadata.revision, i)
  }
  const d = await store.diff(web, 2, 5)
  assert.deepEqual(
    d.map((c) => c.path.join('.')),
    ['spec.containers'],
  )
  await store.patch(web, [{ path: ['status', 'phase'], value: 'Running' }], { author: 'controller:lifecycle', now: 11000 })
  const rb = await store.rollback(web, { to: 3, author: 'user:carol', now: 12000, reason: 'bad release' })
  assert.equal(rb.revision?.op, 'rollback')
  assert.equal(rb.revision?.author, 'user:carol')
  assert.equal(rb.revision?.rollbackTo, (await store.history(web))[2]!.id)
  assert.equal(rb.revision?.rollbackFrom, (await store.history(web))[10]!.id)
  assert.equal((rb.object!.spec as any).containers[0].image, '/images/v3')
  assert.equal((rb.object!.status as any).phase, 'Running', 'rollback leaves controller-owned fields alone')
  // rollback without --to goes to the revision before the head
  const rb2 = await store.rollback(web, { author: 'user:carol', now: 13000 })
  assert.equal((rb2.object!.spec as any).containers[0].image, '/images/v10')
  await assert.rejects(
    store.rollback(web, { to: 99, author: 'user:carol', now: 1 }),
    rejectsWith('not_found', /pod\/web has no revision 99 \(it has revisions 1–13\)/),
  )
  const h = await store.history(web)
  assert.equal(h.length, 13, 'a refused rollback writes nothing')
  await cleanup()
})

test('field ownership: users cannot write controller fields, controllers cannot write user fields', async () => {
  const { store, cleanup } = await tempStore()
  await store.apply(pod('web'), alice(1))
  await store.patch(web, [{ path: ['status', 'phase'], value: 'Running' }], { author: 'controller:lifecycle', now: 2 })
  await store.patch(web, [{ path: ['status', 'node'], value: 'n1' }], { author: 'controller:scheduler', now: 3 })
  // a user apply without status keeps the controller's status
  const r = await store.apply(pod('web', '/i/2'), alice(4))
  assert.deepEqual(r.object!.status, { phase: 'Running', node: 'n1' })
  // a user apply that changes status is refused, naming field and owner
  await assert.rejects(
    store.apply({ ...pod('web', '/i/2'), status: { phase: 'Failed', node: 'n1' } }, alice(5)),
    rejectsWith('forbidden', /^pod\/web: status\.phase is owned by controller:lifecycle; user:alice may not change it$/),
  )
  // restating the current status unchanged is fine (manifests from `orc get -o yaml` round-trip)
  assert.equal((await store.apply({ ...pod('web', '/i/2'), status: { phase: 'Running', node: 'n1' } }, alice(6))).revision, null)
  await assert.rejects(
    store.patch(web, [{ path: ['status', 'node'], value: 'n2' }], { author: 'controller:lifecycle', now: 7 }),
    rejectsWith('forbidden', /status\.node is owned by controller:scheduler/),
  )
  await assert.rejects(
    store.patch(web, [{ path: ['spec', 'policy'], value: 'ha' }], { author: 'controller:lifecycle', now: 8 }),
    rejectsWith('forbidden', /spec\.policy is owned by users; controller:lifecycle may not change it/),
  )
  // a controller replacing all of status may not drop the scheduler's field under it
  await assert.rejects(
    store.patch(web, [{ path: ['status'], value: { phase: 'Done' } }], { author: 'controller:lifecycle', now: 9 }),
    rejectsWith('forbidden', /status\.node is owned by controller:scheduler/),
  )
  assert.equal((await store.history(web)).length, 4, 'refused writes record nothing')
  assert.deepEqual(store.get(web)!.status, { phase: 'Running', node: 'n1' })
  await cleanup()
})

test('the controller that created an object may maintain its user fields (a node writes its own Node)', async () => {
  const { store, cleanup } = await tempStore()
  const node = { apiVersion: 'orc/v1', kind: 'Node', metadata: { name: 'n1', labels: { site: 'home' } } }
  await store.apply(node as any, { author: 'controller:node', now: 1 })
  await store.apply({ ...node, metadata: { name: 'n1', labels: { site: 'lab' } } } as any, { author: 'controller:node', now: 2 })
  await store.patch({ kind: 'Node', namespace: '', name: 'n1' }, [{ path: ['status', 'state'], value: 'Ready' }], { author: 'controller:node', now: 3 })
  // another controller may not touch the node's user fields
  await assert.rejects(
    store.patch({ kind: 'Node', namespace: '', name: 'n1' }, [{ path: ['spec', 'unschedulable'], value: true }], { author: 'controller:scheduler', now: 4 }),
    rejectsWith('forbidden', /^node\/n1: spec\.unschedulable is owned by users; controller:scheduler may not change it$/),
  )
  assert.equal(store.get({ kind: 'Node', namespace: '', name: 'n1' })!.metadata.labels!.site, 'lab')
  await cleanup()
})

test('ownership table refuses a second owner for a field', () => {
  const t = new OwnershipTable()
  t.claim({ kind: 'Pod', path: 'status', owner: 'controller:lifecycle' })
  assert.throws(
    () => t.claim({ kind: 'Pod', path: 'status', owner: 'controller:other' }),
    /Pod field status is already owned by controller:lifecycle; controller:other cannot also own it/,
  )
  assert.equal(defaultOwnership().ownerOf('Pod', ['status', 'node', 'x']), 'controller:scheduler')
  assert.equal(defaultOwnership().ownerOf('Pod', ['status', 'phase']), 'controller:lifecycle')
  assert.equal(defaultOwnership().ownerOf('Pod', ['spec', 'containers']), 'users')
})

test('bad input is refused with a clear error and changes nothing', async () => {
  const { store, cleanup } = await tempStore()
  await store.apply(pod('web'), alice(1))
  const before = store.get(web)
  const bad: [unknown, string, RegExp][] = [
    [{ ...pod('web'), spec: { containers: [{ name: 'main' }] } }, 'invalid', /spec\.containers\[0\]\.image: required/],
    [{ ...pod('web'), spec: { containers: [{ name: 'main', image: 'x' }], colour: 'red' } }, 'invalid', /spec\.colour: unknown field/],
    [
      { ...pod('web'), spec: { containers: [{ name: 'main', image: 'x', ports: [{ containerPort: 70000 }] }] } },
      'invalid',
      /spec\.containers\[0\]\.ports\[0\]\.containerPort: must be <= 65535/,
    ],
    [{ ...pod('web'), kind: 'Gadget' }, 'invalid', /unknown kind "Gadget"/],
    [{ ...pod('Web_1') }, 'invalid', /metadata\.name: must be a DNS label/],
    [{ ...pod('web'), apiVersion: 'v1' }, 'invalid', /apiVersion: must be orc\/v1/],
    [pod('web', 'x', { policy: 'always' }), 'invalid', /spec\.policy: must be one of ha, best-effort; got "always"/],
  ]
  for (const [m, code, re] of bad) await assert.rejects(store.apply(m as any, alice(2)), rejectsWith(code, re))
  const huge = pod('web')
  huge.metadata.annotations = Object.fromEntries(Array.from({ length: 8 }, (_, i) => [`a${i}`, 'x'.repeat(60000)]))
  await assert.rejects(store.apply(huge, alice(3)), rejectsWith('too_large', new RegExp(`the limit is ${MAX_OBJECT_BYTES}`)))
  await assert.rejects(store.apply(pod('web'), { author: 'alice', now: 4 }), rejectsWith('invalid', /author "alice": must be user:<name> or controller:<name>/))
  assert.deepEqual(store.get(web), before)
  assert.equal((await store.history(web)).length, 1)
  await cleanup()
})

test('delete is a revision; history outlives it; re-create continues the numbering', async () => {
  const { store, cleanup } = await tempStore()
  await store.apply(pod('web'), alice(1))
  const del = await store.delete(web, { author: 'user:bob', now: 2, reason: 'cleanup' })
  assert.equal(del.op, 'delete')
  assert.equal(store.get(web), undefined)
  assert.equal(store.list('Pod').length, 0)
  await assert.rejects(store.delete(web, alice(3)), rejectsWith('not_found', /pod\/web not found/))
  const again = await store.apply(pod('web'), alice(4))
  assert.equal(again.revision?.number, 3)
  assert.deepEqual(
    (await store.history(web)).map((r) => r.op),
    ['create', 'delete', 'create'],
  )
  // rolling back to before the delete works from the tombstone too
  await store.delete(web, alice(5))
  const rb = await store.rollback(web, { to: 1, author: 'user:alice', now: 6 })
  assert.ok(rb.object)
  await cleanup()
})

test('a second store on the same data dir is refused; a corrupted database is refused and left untouched', async () => {
  const { store, dir, cleanup } = await tempStore()
  await store.apply(pod('web'), alice(1))
  await assert.rejects(openStore({ dir }), rejectsWith('locked', /in use by another orc process/))
  await store.close()
  const { readdirSync, readFileSync, writeFileSync } = await import('node:fs')
  const manifest = readdirSync(dir).find((f) => f.startsWith('MANIFEST-'))!
  const bytes = readFileSync(join(dir, manifest))
  const garbage = Buffer.from(bytes)
  for (let i = 0; i < garbage.length; i += 7) garbage[i] = garbage[i]! ^ 0x5a
  writeFileSync(join(dir, manifest), garbage)
  await assert.rejects(openStore({ dir }), rejectsWith('corrupt', /open store .*: .*(corrupt|Corruption)/i))
  assert.deepEqual(readFileSync(join(dir, manifest)), garbage, 'the refused open does not rewrite the damaged file')
  await cleanup()
})

test('compaction bounds history: old contents folded, metadata kept, kept revisions exact', async () => {
  const { store, cleanup } = await tempStore({ fullEvery: 16 })
  for (let i = 1; i <= 120; i++) await store.apply(pod('web', `/images/v${i}`), { author: i % 2 ? 'user:alice' : 'user:bob', now: i * 1000, reason: `r${i}` })
  const res = await store.compact(1_000_000, { keepRevisions: 20, keepNewerThanMs: 10_000 })
  assert.equal(res.revisionsCompacted, 100)
  const h = await store.history(web)
  assert.equal(h.length, 120, 'revision metadata is never lost')
  assert.equal(h[0]!.reason, 'r1')
  assert.equal(h[0]!.compacted, true)
  assert.equal(h[100]!.compacted, false)
  await assert.rejects(store.at(web, 50), rejectsWith('not_found', /revision 50 .* was compacted: its author, reason and time remain/))
  for (const n of [101, 107, 120]) assert.equal(((await store.at(web, n)).spec as any).containers[0].image, `/images/v${n}`)
  // revisions newer than keepNewerThanMs are kept even beyond keepRevisions
  await store.compact(125_000, { keepRevisions: 5, keepNewerThanMs: 10_000 })
  assert.equal(((await store.at(web, 116)).spec as any).containers[0].image, '/images/v116')
  await assert.rejects(store.at(web, 110), /compacted/)
  await cleanup()
})

test('garbage from a peer is refused and changes nothing', async () => {
  const { store, cleanup } = await tempStore({ randomBytes: seededBytes(3) })
  await store.apply(pod('web'), alice(1))
  const digest = store.stateDigest()
  const garbage = [new Uint8Array([1, 2, 3]), new Uint8Array(0), new TextEncoder().encode('{"hello":1}'), new Uint8Array(100).fill(255)]
  for (const g of garbage) await assert.rejects(store.applyRemote(g), rejectsWith('invalid', /replication message/))
  assert.equal(store.stateDigest(), digest)
  await assert.rejects(store.encodeMissing(new Uint8Array([9, 9])), rejectsWith('invalid', /sync state/))
  await cleanup()
})

test('a database whose log lost records is refused, not served short', async () => {
  const { readdirSync, readFileSync, writeFileSync, statSync } = await import('node:fs')
  for (const variant of ['early', 'middle']) {
    const { store, dir, cleanup } = await tempStore()
    for (let i = 0; i < 40; i++) await store.apply(pod(`p${i}`), alice(i))
    await store.close()
    const log = readdirSync(dir)
      .filter((f) => f.endsWith('.log'))
      .sort()
      .pop()!
    const bytes = readFileSync(join(dir, log))
    assert.ok(statSync(join(dir, log)).size > 1000, 'writes are in the LevelDB log')
    const at = variant === 'early' ? 10 : Math.floor(bytes.length / 2)
    for (let i = at; i < at + 50; i++) bytes[i] = bytes[i]! ^ 0xff
    writeFileSync(join(dir, log), bytes)
    await assert.rejects(openStore({ dir }), rejectsWith('corrupt', /open store .*(records are missing|no readable records|no format marker)/))
    await cleanup()
  }
})

test('an injected in-memory database works the same (used by the simulator)', async () => {
  const { MemoryLevel } = await import('memory-level')
  const db = new MemoryLevel<string, Uint8Array>({ keyEncoding: 'utf8', valueEncoding: 'view' })
  const s = await openStore({ dir: 'mem:a', db: db as any })
  await s.apply(pod('web'), alice(1))
  await s.apply(pod('web', '/i/2'), alice(2))
  await s.close()
  const again = await openStore({ dir: 'mem:a', db: db as any })
  assert.equal((again.get(web)!.spec as any).containers[0].image, '/i/2')
  assert.equal((await again.history(web)).length, 2)
  await again.close()
})

test('change listeners hear of a write after it is durable and may write from the callback', async () => {
  const { store, cleanup } = await tempStore()
  const seen: string[][] = []
  let reacted: Promise<unknown> | undefined
  store.onChange((keys) => {
    seen.push(keys)
    // a controller reacting: the change is already in history, and writing here is allowed
    if (!reacted && keys.includes('Pod/default/web')) {
      reacted = (async () => {
        const h = await store.history(web)
        assert.equal(h.length, 1, 'the announced change is already in history')
        return store.patch(web, [{ path: ['status', 'phase'], value: 'Starting' }], { author: 'controller:lifecycle', now: 2 })
      })()
    }
  })
  await store.apply(pod('web'), alice(1))
  const res = (await reacted) as { revision: { number: number } }
  assert.equal(res.revision.number, 2)
  const h = await store.history(web)
  assert.deepEqual(
    h.map((r) => r.author),
    ['user:alice', 'controller:lifecycle'],
    'no empty duplicate revision',
  )
  assert.ok(seen.length >= 2)
  await cleanup()
})

test('a plan is applied as planned only while the object is unchanged: a write in between is planned again', async () => {
  const { store: s, cleanup } = await tempStore()
  try {
    await s.apply(pod('web', '/images/v1'), alice(1000))
    const { normalizeManifest } = await import('../../../src/model/index.ts')
    const a = normalizeManifest(pod('web', '/images/v2'))
    assert.equal(s.planApply(a, alice(2000))?.op, 'update')
    // Another write lands between the plan and the apply (another request, or a merge).
    await s.apply(pod('web', '/images/v2'), alice(2500))
    const res = await s.apply(a, alice(3000))
    assert.equal(res.revision, null, 'the stale plan (v1 → v2) was not committed over the newer write: planned again, nothing to change')
    const b = normalizeManifest(pod('web', '/images/v3'))
    assert.equal(s.planApply(b, alice(4000))?.changes.length, 1)
    const r = await s.apply(b, alice(4000))
    assert.equal(r.revision?.number, 3)
    assert.equal((s.get(web)!.spec as any).containers[0].image, '/images/v3')
    // A plan is kept for its author only.
    const c = normalizeManifest(pod('web', '/images/v4'))
    s.planApply(c, alice(5000))
    await assert.rejects(
      s.apply({ ...c, status: { phase: 'Running' } } as any, alice(5000)),
      rejectsWith('forbidden', /status.phase is owned by controller:lifecycle/),
    )
  } finally {
    await cleanup()
  }
})

// Checked by `npm run typecheck` (which CI runs): were kind names no longer checked, the two
// expected errors below would not occur and tsc would fail on the unused directives.
test('a misspelt kind in a store read does not compile; a kind known only at run time does', async () => {
  const { store: s, cleanup } = await tempStore()
  try {
    await s.apply(pod('web'), alice(1000))
    // @ts-expect-error 'Pdo' is not a kind
    assert.deepEqual(s.list('Pdo'), [])
    // @ts-expect-error 'Noed' is not a kind
    assert.equal(s.get({ kind: 'Noed', namespace: '', name: 'web' }), undefined)
    const dynamic: string = 'Pod'
    assert.equal(s.list(dynamic).length, 1)
    // A known kind gives its type: the container list is typed without a cast.
    assert.equal(s.list('Pod')[0]?.spec?.containers[0]?.image, '/images/busybox')
  } finally {
    await cleanup()
  }
})
