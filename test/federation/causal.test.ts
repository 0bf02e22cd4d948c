// Causal metadata in federation governance, with three clusters (one node each, real LevelDB
// stores, real libp2p hosts on loopback): what a user would notice — the writers of a shared
// namespace change while it stays shared (`set-writers`), and a write a cluster made under the
// writers it knew is not lost when they changed meanwhile (here: its clock runs 4 minutes ahead, so
// its write is dated after the change, and edge, down while it all happened, receives both at once);
// and a proposal written in the moment a cluster joined, by a cluster that had not heard of the
// joiner, is accepted by every replica, the joiner's included.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { proposeReason } from '../../src/agent/federation/governance.ts'
import { pod } from '../helpers/store.ts'
import { waitFor } from '../mesh/helpers.ts'
import { clusterRef, inNs, ref, three } from './helpers.ts'

const fedRef = { kind: 'Federation', namespace: '', name: 'shared' }

test('three clusters: the writers of a shared namespace change without unsharing it; a write cloud made under the writers it knew reaches edge, down meanwhile', async (t) => {
  const { a, b, c } = await three(t)
  const writersOf = (s: typeof a, ns: string) => s.fm.status('shared').writers?.[ns]?.join()
  // Refused with the reason, nothing written.
  const fedBefore = (await a.fm.get('shared')!.store.history(fedRef)).length
  await assert.rejects(
    a.fm.propose('shared', 'set-writers', 'docs', 'user:alice', { writers: ['home'] }),
    /namespace docs is not shared in federation shared .*share it with --writers instead/,
  )
  await assert.rejects(a.fm.propose('shared', 'set-writers', 'shared', 'user:alice'), /writers: set-writers names the member clusters/)
  await assert.rejects(a.fm.propose('shared', 'set-writers', 'shared', 'user:alice', { writers: ['mars'] }), /writers: mars is not a member cluster/)
  assert.equal((await a.fm.get('shared')!.store.history(fedRef)).length, fedBefore)

  // docs shared, written by home and cloud (home proposes, edge approves); then a quorum of 1, so
  // that home alone changes the writers while edge is down (home proposes, cloud approves).
  const share = (await a.fm.propose('shared', 'share-namespace', 'docs', 'user:alice', { writers: ['home', 'cloud'] })).proposal
  await waitFor('edge has the share', () => (c.fm.status('shared').governance?.proposals ?? []).some((p) => p.id === share.id), 30_000)
  assert.equal((await c.fm.approve('shared', share.id, 'user:erin')).proposal.state, 'passed')
  await waitFor('every cluster shares docs, written by cloud and home', () => [a, b, c].every((s) => writersOf(s, 'docs') === 'cloud,home'), 60_000)
  const q = (await a.fm.propose('shared', 'quorum', '1', 'user:alice')).proposal
  await waitFor('cloud has the quorum proposal', () => (b.fm.status('shared').governance?.proposals ?? []).some((p) => p.id === q.id), 30_000)
  assert.equal((await b.fm.approve('shared', q.id, 'user:bob')).proposal.state, 'passed')
  await waitFor('home and edge have quorum 1', () => [a, c].every((s) => s.fm.status('shared').governance?.quorum === 1), 30_000)

  // Edge's agent stops. Cloud's clock runs 4 minutes ahead: its user writes in docs, under the
  // writers cloud knows (the share's), and its record says so.
  await c.fm.stop()
  const ahead = Date.now() + 4 * 60_000
  await b.api.apply(inNs('docs', pod('draft')), { author: 'user:bob', reason: 'draft', now: ahead })
  const fb = b.fm.get('shared')!
  assert.equal((await fb.store.history(ref('docs', 'draft'))).at(-1)!.reason, `draft [writers ${share.id}]`)
  await waitFor('home has cloud’s draft', () => a.api.get(ref('docs', 'draft')) !== undefined, 30_000)
  // A user's reason may not carry the mark itself (it would be judged against what it names).
  await assert.rejects(
    b.api.apply(inNs('docs', pod('sly')), { author: 'user:bob', reason: `x [writers ${share.id}]`, now: ahead }),
    /reason: ends with \[writers PROPOSAL\], the mark orc adds itself/,
  )

  // Home changes the writers to home's users only: it passes at once (quorum 1), dated before the draft.
  const set = (await a.fm.propose('shared', 'set-writers', 'docs', 'user:alice', { writers: ['home'] })).proposal
  assert.deepEqual([set.state, set.writers], ['passed', ['home']])
  assert.ok(set.passedAt! < ahead)
  await assert.rejects(a.fm.propose('shared', 'set-writers', 'docs', 'user:alice', { writers: ['home'] }), /is written by the users of home already/)
  await waitFor('cloud has the new writers', () => writersOf(b, 'docs') === 'home', 30_000)
  // docs stays shared everywhere; cloud's users now read it only.
  assert.ok(b.fm.scopeOf('docs'))
  await assert.rejects(
    b.api.apply(inNs('docs', pod('late')), { author: 'user:bob', now: Date.now() }),
    /namespace docs of federation shared is written by the users of home only: cluster cloud reads it/,
  )
  await a.api.apply(inNs('docs', pod('page')), { author: 'user:alice', now: Date.now() })

  // Edge comes back: it receives the change and cloud's draft (dated after it, made under the
  // writers cloud knew) and keeps both, and home's later page.
  await c.restart()
  await waitFor(
    'edge has the new writers, cloud’s draft and home’s page',
    () => writersOf(c, 'docs') === 'home' && c.api.get(ref('docs', 'draft')) !== undefined && c.api.get(ref('docs', 'page')) !== undefined,
    60_000,
  )
  const fc = c.fm.get('shared')!
  assert.equal(fc.store.get(ref('docs', 'late')), undefined)
})

test('three clusters: a proposal written in the moment a cluster joined, by a cluster that had not heard of it, is accepted by every replica, the joiner’s included', async (t) => {
  const { a, b, c } = await three(t)
  const fa = a.fm.get('shared')!
  // What home writes when it proposes before edge's object reached it: the members it knew (home,
  // cloud) and the newest join it had seen (cloud's), dated now, after edge joined. Two members:
  // home's own approval is the quorum, as it was for home.
  const cloudJoin = (await fa.store.history(clusterRef('cloud'))).filter((h) => h.op === 'create').at(-1)!.id
  const id = 'share-namespace-news-0a0b0c'
  await fa.store.patch(fedRef, [{ path: ['spec', 'proposals', id], value: { action: 'share-namespace', target: 'news', members: ['cloud', 'home'] } }], {
    author: 'user:alice@home',
    reason: proposeReason(id, 'share-namespace', 'news', ['cloud', 'home'], undefined, cloudJoin),
    now: Date.now(),
  })
  // Cloud and edge (which both know edge is a member) take it and the share it passed; home's
  // later writes reach them.
  await waitFor(
    'every cluster has the passed proposal and shares news',
    () =>
      [a, b, c].every(
        (s) => s.fm.status('shared').governance?.proposals.find((p) => p.id === id)?.state === 'passed' && s.fm.status('shared').namespaces.includes('news'),
      ),
    60_000,
  )
  await a.api.apply(inNs('news', pod('headline')), { author: 'user:alice', now: Date.now() })
  await waitFor('cloud and edge have home’s pod in news', () => [b, c].every((s) => s.api.get(ref('news', 'headline')) !== undefined), 30_000)
})
