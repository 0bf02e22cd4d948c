// Sharing a namespace after create, and unsharing it, with three clusters (one node each, real
// LevelDB stores, real libp2p hosts on loopback): what a user would notice — one cluster alone
// cannot share a namespace (two of three must approve), a share forged by a member is refused by
// the others, a passed share replicates the namespace to every cluster and puts each cluster's own
// objects in it to sleep, an unshare gives each cluster copies in its own scope and wakes its own
// objects; bad requests are refused with the reason and write nothing.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { pod } from '../helpers/store.ts'
import { waitFor } from '../mesh/helpers.ts'
import { inNs, ref, three } from './helpers.ts'

const fedRef = { kind: 'Federation', namespace: '', name: 'shared' }

test('three clusters: a namespace shared after create once two approve (a forged share is refused), then unshared with kept copies', async (t) => {
  const { a, b, c } = await three(t)
  const all = [a, b, c]
  const fa = a.fm.get('shared')!
  const fb = b.fm.get('shared')!
  const fc = c.fm.get('shared')!
  // Home has a pod of its own in `web` before it is shared.
  await a.api.apply(inNs('web', pod('early')), { author: 'user:alice', now: Date.now() })

  // Refused with the reason, nothing written.
  const fedBefore = (await fa.store.history(fedRef)).length
  await assert.rejects(a.fm.propose('shared', 'share-namespace', 'default', 'user:alice'), /namespace default holds every object applied without -n/)
  await assert.rejects(a.fm.propose('shared', 'share-namespace', 'shared', 'user:alice'), /namespace shared is already shared in federation shared/)
  await assert.rejects(a.fm.propose('shared', 'share-namespace', 'Web_1', 'user:alice'), /namespace: must be a DNS label/)
  await assert.rejects(a.fm.propose('shared', 'unshare-namespace', 'web', 'user:alice'), /namespace web is not shared in federation shared/)
  await assert.rejects(a.fm.propose('shared', 'unshare-namespace', 'shared', 'user:alice'), /the only namespace federation shared shares/)
  await assert.rejects(
    a.fm.propose('shared', 'share', 'web', 'user:alice'),
    /action: must be admit, remove, quorum, share-namespace, unshare-namespace or set-writers/,
  )
  assert.equal((await fa.store.history(fedRef)).length, fedBefore)

  // Home proposes: one approval of two, nothing shared yet.
  const { proposal } = await a.fm.propose('shared', 'share-namespace', 'web', 'user:alice')
  assert.deepEqual([proposal.state, proposal.approvals.length, proposal.required], ['pending', 1, 2])
  await assert.rejects(a.fm.propose('shared', 'share-namespace', 'web', 'user:alice'), /is pending already/)
  await waitFor('cloud and edge have the proposal', () =>
    [b, c].every((s) => (s.fm.status('shared').governance?.proposals ?? []).some((p) => p.id === proposal.id)),
  )
  for (const s of all) assert.equal(s.fm.scopeOf('web'), undefined)

  // A modified home agent writes the share as if it had passed: cloud and edge refuse it, and
  // nobody (home included: it reads the proposals, not the field) shares `web`.
  await fa.store.patch(fedRef, [{ path: ['spec', 'namespaces'], value: ['shared', 'web'] }], {
    author: 'user:alice@home',
    reason: `share namespace web (proposal ${proposal.id})`,
    now: Date.now(),
  })
  await fa.mesh.syncNow().catch(() => undefined)
  await c.api.apply(inNs('shared', pod('edge-after-forgery')), { author: 'user:erin', now: Date.now() })
  await waitFor('cloud still gets edge writes', () => b.api.get(ref('shared', 'edge-after-forgery')) !== undefined, 30_000)
  for (const f of [fb, fc]) assert.deepEqual(f.store.get(fedRef)?.spec?.namespaces, ['shared'], 'the forged share was refused')
  for (const s of all) assert.deepEqual(s.fm.status('shared').namespaces, ['shared'])
  assert.ok(a.api.get(ref('web', 'early')), "home's own pod in web is still its own")

  // Cloud approves: passed; every cluster shares `web`.
  const passed = await b.fm.approve('shared', proposal.id, 'user:bob')
  assert.equal(passed.proposal.state, 'passed')
  await waitFor('every cluster shares web', () => all.every((s) => s.fm.status('shared').namespaces?.includes('web') && s.fm.scopeOf('web')), 30_000)
  for (const s of all) assert.deepEqual(s.fm.status('shared').namespaces, ['shared', 'web'])
  // Cloud's write of spec.namespaces (it completed the proposal) is accepted by every replica.
  await waitFor('every replica has the mirror', () =>
    [fa, fb, fc].every((f) => JSON.stringify(f.store.get(fedRef)?.spec?.namespaces) === JSON.stringify(['shared', 'web'])),
  )
  // Each cluster's record of the federation follows (what its other nodes follow): status.namespaces.
  for (const s of all)
    await waitFor('the cluster record lists web', () => JSON.stringify(s.store.get(fedRef)?.status?.namespaces) === JSON.stringify(['shared', 'web']))
  // Home's own pod in web is dormant (hidden behind the federation's scope), not deleted.
  assert.equal(a.api.get(ref('web', 'early')), undefined)
  assert.ok(a.store.get(ref('web', 'early')))
  // A pod applied in web on edge reaches home and cloud.
  await c.api.apply(inNs('web', pod('from-edge')), { author: 'user:erin', now: Date.now() })
  await waitFor('home and cloud have edge’s pod in web', () => [a, b].every((s) => s.api.get(ref('web', 'from-edge')) !== undefined), 30_000)
  assert.equal(a.store.get(ref('web', 'from-edge')), undefined, 'in the federation’s document, not home’s own scope')
  const hist = await a.api.history(ref('web', 'from-edge'))
  assert.equal(hist[0]!.author, 'user:erin@edge')
  // The other kinds a shared namespace holds, applied on edge too: each cluster keeps them on unshare.
  const erin = { author: 'user:erin', now: Date.now() }
  const others = [
    { apiVersion: 'orc/v1', kind: 'Config', metadata: { name: 'settings', namespace: 'web' }, spec: { data: { mode: 'fast' } } },
    { apiVersion: 'orc/v1', kind: 'Service', metadata: { name: 'front', namespace: 'web' }, spec: { selector: { app: 'from-edge' }, ports: [{ port: 80 }] } },
    {
      apiVersion: 'orc/v1',
      kind: 'CronJob',
      metadata: { name: 'nightly', namespace: 'web' },
      spec: { schedule: '0 3 * * *', jobTemplate: { spec: { template: { spec: { containers: [{ name: 'm', image: '/images/app' }] } } } } },
    },
  ]
  for (const o of others) await c.api.apply(o as never, erin)
  const refOf = (o: { kind: string; metadata: { name: string } }) => ({ kind: o.kind, namespace: 'web', name: o.metadata.name })
  await waitFor(
    'home and cloud have edge’s Config, Service and CronJob',
    () => [a, b].every((s) => others.every((o) => s.api.get(refOf(o)) !== undefined)),
    30_000,
  )

  // Edge's agent is down while cloud proposes the unshare and home approves; when edge starts again
  // it learns the unshare from the document and catches up. Every cluster keeps a copy in its own scope.
  await c.fm.stop()
  const un = await b.fm.propose('shared', 'unshare-namespace', 'web', 'user:bob')
  assert.equal(un.proposal.state, 'pending')
  await waitFor('home has the unshare proposal', () => (a.fm.status('shared').governance?.proposals ?? []).some((p) => p.id === un.proposal.id))
  assert.equal((await a.fm.approve('shared', un.proposal.id, 'user:alice')).proposal.state, 'passed')
  await waitFor('home and cloud no longer share web', () => [a, b].every((s) => !s.fm.status('shared').namespaces?.includes('web')), 30_000)
  await c.restart()
  await waitFor('no cluster shares web any more', () => all.every((s) => !s.fm.status('shared').namespaces?.includes('web')), 30_000)
  for (const s of all) {
    await waitFor('a kept copy of edge’s pod in the cluster’s own scope', () => s.store.get(ref('web', 'from-edge')) !== undefined, 30_000)
    const kept = await s.store.history(ref('web', 'from-edge'))
    assert.match(kept.at(-1)!.reason, /^kept from federation shared \(namespace web unshared\)/)
    assert.equal(s.fm.scopeOf('web'), undefined)
    for (const o of others) {
      const copy = s.store.get(refOf(o))
      assert.ok(copy, `${o.kind.toLowerCase()}/${o.metadata.name} kept in the cluster's own scope`)
      assert.deepEqual(copy.spec, o.spec)
      assert.equal(s.api.get(refOf(o))?.metadata.revisionId, copy.metadata.revisionId)
    }
  }
  for (const s of all)
    await waitFor('the cluster record drops web', () => JSON.stringify(s.store.get(fedRef)?.status?.namespaces) === JSON.stringify(['shared']))
  // Home's own pod is its own again; the namespace's objects stay in the document, unused.
  assert.ok(a.api.get(ref('web', 'early')))
  assert.ok(fa.store.get(ref('web', 'from-edge')))
  // Writes to web stay in each cluster now.
  await b.api.apply(inNs('web', pod('cloud-only')), { author: 'user:bob', now: Date.now() })
  await b.api.apply(inNs('shared', pod('after-unshare')), { author: 'user:bob', now: Date.now() })
  await waitFor('home gets cloud’s later write in shared', () => a.api.get(ref('shared', 'after-unshare')) !== undefined, 30_000)
  assert.equal(a.api.get(ref('web', 'cloud-only')), undefined)
  assert.equal(fb.store.get(ref('web', 'cloud-only')), undefined)

  // Shared again (cloud proposes, edge approves): the document's objects of web come back as they
  // were, and each cluster's own objects there (kept copies, home's pod, cloud's new one) sleep again.
  const again = await b.fm.propose('shared', 'share-namespace', 'web', 'user:bob')
  await waitFor('edge has the second share', () => (c.fm.status('shared').governance?.proposals ?? []).some((p) => p.id === again.proposal.id))
  assert.equal((await c.fm.approve('shared', again.proposal.id, 'user:erin')).proposal.state, 'passed')
  await waitFor('every cluster shares web again', () => all.every((s) => s.fm.status('shared').namespaces?.includes('web')), 30_000)
  for (const s of all) {
    const doc = s.fm.get('shared')!.store.get(ref('web', 'from-edge'))
    assert.ok(doc)
    assert.equal(s.api.get(ref('web', 'from-edge'))?.metadata.revisionId, doc.metadata.revisionId, 'the document’s object, not the kept copy')
    assert.notEqual(s.store.get(ref('web', 'from-edge'))?.metadata.revisionId, doc.metadata.revisionId)
    assert.equal(s.api.get(ref('web', 'cloud-only')), undefined)
  }
  assert.equal(a.api.get(ref('web', 'early')), undefined)
  assert.ok(a.store.get(ref('web', 'early')))
})

test('one federation per namespace: a cluster that shares a namespace in another federation does not approve sharing it, and keeps it there if the share passes', async (t) => {
  const { a, b, c } = await three(t)
  // Cloud is also in a federation of its own that shares `other`.
  await b.fm.create({ name: 'second', namespaces: ['other'], author: 'user:bob' })
  await assert.rejects(b.fm.propose('shared', 'share-namespace', 'other', 'user:bob'), /namespace other is already shared in federation second/)
  const { proposal } = await a.fm.propose('shared', 'share-namespace', 'other', 'user:alice')
  await waitFor('cloud and edge have the proposal', () =>
    [b, c].every((s) => (s.fm.status('shared').governance?.proposals ?? []).some((p) => p.id === proposal.id)),
  )
  await assert.rejects(
    b.fm.approve('shared', proposal.id, 'user:bob'),
    /namespace other is already shared in federation second: a namespace is shared by one federation at most/,
  )
  assert.equal((await c.fm.approve('shared', proposal.id, 'user:erin')).proposal.state, 'passed')
  await waitFor('home and edge share other in federation shared', () => [a, c].every((s) => s.fm.scopeOf('other')?.federation === 'shared'), 30_000)
  // Cloud keeps it in `second` (its log says so); its view of `shared` leaves it out.
  await waitFor('cloud has the passed share', () => b.fm.status('shared').governance?.proposals.find((p) => p.id === proposal.id)?.state === 'passed')
  assert.equal(b.fm.scopeOf('other')?.federation, 'second')
  assert.deepEqual(b.fm.status('shared').namespaces, ['shared'])
})

test('three clusters: a namespace shared with --writers home: cloud’s users read it, are refused writing with the reason, and a forged cloud write is refused by home and edge', async (t) => {
  const { a, b, c } = await three(t)
  const fa = a.fm.get('shared')!
  const fb = b.fm.get('shared')!
  const fc = c.fm.get('shared')!
  await assert.rejects(
    a.fm.propose('shared', 'share-namespace', 'docs', 'user:alice', { writers: ['home', 'mars'] }),
    /writers: mars is not a member cluster of federation shared \(members: cloud, edge, home\)/,
  )
  await assert.rejects(
    a.fm.propose('shared', 'admit', 'mars', 'user:alice', { writers: ['home'] }),
    /writers: only a share-namespace or set-writers proposal names/,
  )
  const { proposal } = await a.fm.propose('shared', 'share-namespace', 'docs', 'user:alice', { writers: ['home'] })
  assert.deepEqual(proposal.writers, ['home'])
  await waitFor('cloud has the proposal', () => (b.fm.status('shared').governance?.proposals ?? []).some((p) => p.id === proposal.id))
  assert.equal((await b.fm.approve('shared', proposal.id, 'user:bob')).proposal.state, 'passed')
  await waitFor('every cluster shares docs, written by home', () => [a, b, c].every((s) => s.fm.status('shared').writers?.docs?.join() === 'home'), 30_000)

  // Home's users write; every cluster reads it.
  await a.api.apply(inNs('docs', pod('page')), { author: 'user:alice', now: Date.now() })
  await waitFor('cloud and edge read home’s pod in docs', () => [b, c].every((s) => s.api.get(ref('docs', 'page')) !== undefined), 30_000)
  // Cloud's users are refused with the reason; nothing is written.
  const before = (await fb.store.history(ref('docs', 'page'))).length
  await assert.rejects(
    b.api.apply(inNs('docs', pod('mine')), { author: 'user:bob', now: Date.now() }),
    (e: any) => e.code === 'forbidden' && /namespace docs of federation shared is written by the users of home only: cluster cloud reads it/.test(e.message),
  )
  await assert.rejects(b.api.delete(ref('docs', 'page'), { author: 'user:bob', now: Date.now() }), /written by the users of home only/)
  assert.equal(b.api.get(ref('docs', 'mine')), undefined)
  assert.equal((await fb.store.history(ref('docs', 'page'))).length, before)
  // Other namespaces are not restricted: cloud still writes in shared.
  await b.api.apply(inNs('shared', pod('from-cloud')), { author: 'user:bob', now: Date.now() })
  await waitFor('home gets cloud’s pod in shared', () => a.api.get(ref('shared', 'from-cloud')) !== undefined, 30_000)

  // A modified cloud agent writes into the document directly, as its user: home and edge refuse it.
  const misbehaved = Promise.all([fa, fc].map((f) => new Promise<string>((res) => f.mesh.on('peer:misbehaved', (e: { reason: string }) => res(e.reason)))))
  await fb.store.apply(inNs('docs', pod('forged')), { author: 'user:bob@cloud', now: Date.now() })
  await fb.mesh.syncNow().catch(() => undefined)
  const reasons = await Promise.race([misbehaved, new Promise<string[]>((r) => setTimeout(() => r(['none']), 15_000))])
  for (const why of reasons) assert.match(why, /user:bob@cloud wrote Pod\/docs\/forged .* namespace docs is written by the users of home only/)
  assert.equal(fa.store.get(ref('docs', 'forged')), undefined)
  assert.equal(fc.store.get(ref('docs', 'forged')), undefined)
})
