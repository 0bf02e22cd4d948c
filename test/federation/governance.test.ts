// Governance of federation membership with three clusters (one node each, real LevelDB stores,
// real libp2p hosts on loopback): what a user would notice — one admin alone cannot remove another
// cluster, a second cluster's approval does, proposals survive an agent restart, a forged removal
// from a member is refused by the others, the quorum setting is itself governed.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { formatFederation } from '../../src/cli/commands/federation.ts'
import { pod } from '../helpers/store.ts'
import { waitFor } from '../mesh/helpers.ts'
import { clusterRef, inNs, ref, side, three } from './helpers.ts'

const fedRef = { kind: 'Federation', namespace: '', name: 'shared' }

test('three clusters: one admin alone cannot remove another; a second approval (after a restart) removes it', async (t) => {
  const { a, b, c } = await three(t)
  const fa = () => a.fm.get('shared')!
  const fedBefore = (await fa().store.history(fedRef)).length
  assert.equal(a.fm.status('shared').governance?.remove, 2, 'removing needs 2 of 3')

  // Removing at once is refused, and nothing is written.
  await assert.rejects(a.fm.remove('shared', 'edge', 'user:alice'), /needs 2 approvals of its 3 member clusters: orc federation propose shared remove edge/)
  assert.equal((await fa().store.history(fedRef)).length, fedBefore)

  // A proposal: pending with home's approval; edge is still in, everywhere.
  const { proposal } = await a.fm.propose('shared', 'remove', 'edge', 'user:alice')
  assert.equal(proposal.state, 'pending')
  assert.deepEqual(
    proposal.approvals.map((x) => x.author),
    ['user:alice@home'],
  )
  await assert.rejects(a.fm.approve('shared', proposal.id, 'user:alice2'), /approved proposal .* already/)
  await assert.rejects(a.fm.propose('shared', 'remove', 'edge', 'user:alice'), /is pending already/)
  await waitFor('cloud lists the proposal', () => (b.fm.status('shared').governance?.proposals ?? []).some((p) => p.id === proposal.id), 30_000)
  for (const s of [a, b, c]) assert.ok(s.fm.get('shared')!.store.get(clusterRef('edge')), 'edge is still in')
  await c.api.apply(inNs('shared', pod('from-edge')), { author: 'user:erin', now: Date.now() })
  await waitFor('edge still replicates to home', () => a.api.get(ref('shared', 'from-edge')) !== undefined, 30_000)

  // Proposals are in the document: cloud's agent restarts and still has it, then approves.
  await b.restart()
  await waitFor('cloud runs the federation again', () => b.fm.get('shared') !== undefined, 30_000)
  const afterRestart = b.fm.status('shared').governance!.proposals.find((p) => p.id === proposal.id)
  assert.equal(afterRestart?.state, 'pending')
  assert.match(formatFederation(b.fm.status('shared')), new RegExp(`${proposal.id} +remove edge +1/2 +user:alice@home +pending`))
  await waitFor('cloud reconnected to home', () => (b.fm.status('shared').clusters ?? []).some((x) => x.name === 'home' && x.connected > 0), 30_000)
  const approved = await b.fm.approve('shared', proposal.id, 'user:bob')
  assert.equal(approved.proposal.state, 'passed')
  assert.deepEqual(
    approved.proposal.approvals.map((x) => `${x.cluster}:${x.author}`),
    ['home:user:alice@home', 'cloud:user:bob@cloud'],
  )

  // Edge is out on home and cloud; edge learns it and stops.
  await waitFor('home drops edge', () => !(a.fm.status('shared').clusters ?? []).some((x) => x.name === 'edge'), 30_000)
  await waitFor('edge learns it was removed', () => c.fm.get('shared') === undefined, 30_000)
  assert.deepEqual(
    b.fm
      .status('shared')
      .clusters!.map((x) => x.name)
      .sort(),
    ['cloud', 'home'],
  )
  const hist = await fa().store.history(clusterRef('edge'))
  assert.equal(hist.at(-1)!.reason, `cluster edge removed from the federation (proposal ${proposal.id})`)
  assert.equal(hist.at(-1)!.author, 'user:bob@cloud')
  // The approvals are revisions of the Federation object, attributed to each cluster's admin.
  const fedHist = await fa().store.history(fedRef)
  assert.ok(fedHist.some((h) => h.reason.startsWith(`propose ${proposal.id}: remove edge; members cloud,edge,home`) && h.author === 'user:alice@home'))
  assert.ok(fedHist.some((h) => h.reason === `approve ${proposal.id}` && h.author === 'user:bob@cloud'))
  // Home's writes no longer reach edge.
  await a.api.apply(inNs('shared', pod('after-removal')), { author: 'user:alice', now: Date.now() })
  await waitFor('cloud has it', () => b.api.get(ref('shared', 'after-removal')) !== undefined, 30_000)
  assert.equal(c.api.get(ref('shared', 'after-removal')), undefined)
  // Two clusters now: either admin alone decides again.
  assert.equal(a.fm.status('shared').governance?.remove, 1)
})

test('three clusters: a removal forged by one member (naming a proposal one short) is refused by the others; the quorum is governed too', async (t) => {
  const { a, b, c } = await three(t)
  const fa = a.fm.get('shared')!
  const fb = b.fm.get('shared')!
  const fc = c.fm.get('shared')!
  const { proposal } = await a.fm.propose('shared', 'remove', 'edge', 'user:alice')
  await waitFor('cloud and edge have the proposal', () =>
    [b, c].every((s) => (s.fm.status('shared').governance?.proposals ?? []).some((p) => p.id === proposal.id)),
  )
  // A modified home agent deletes edge's Cluster object as if the proposal had passed.
  await fa.store.delete(clusterRef('edge'), {
    author: 'user:alice@home',
    reason: `cluster edge removed from the federation (proposal ${proposal.id})`,
    now: Date.now(),
  })
  await fa.mesh.syncNow().catch(() => undefined)
  // Cloud and edge keep edge; writes between them still flow; edge stays a member everywhere but on home's forged copy.
  await c.api.apply(inNs('shared', pod('edge-after-forgery')), { author: 'user:erin', now: Date.now() })
  await waitFor('cloud still gets edge writes', () => b.api.get(ref('shared', 'edge-after-forgery')) !== undefined, 30_000)
  assert.ok(fb.store.get(clusterRef('edge')), 'cloud refused the forged removal')
  assert.ok(fc.store.get(clusterRef('edge')), 'edge refused the forged removal')
  assert.ok(!(await fb.store.history(clusterRef('edge'))).some((h) => h.op === 'delete'))
  assert.ok(fb.mesh.isMember(fc.mesh.peerId))
  assert.equal(c.fm.get('shared')?.cluster, 'edge', 'edge still runs the federation')

  // The quorum: cloud proposes 3 (every cluster); one approval is not enough, edge's makes it.
  const q = await b.fm.propose('shared', 'quorum', '3', 'user:bob')
  assert.equal(q.proposal.state, 'pending')
  await waitFor('edge has the quorum proposal', () => (c.fm.status('shared').governance?.proposals ?? []).some((p) => p.id === q.proposal.id))
  const passed = await c.fm.approve('shared', q.proposal.id, 'user:erin')
  assert.equal(passed.proposal.state, 'passed')
  assert.equal(c.fm.status('shared').governance?.quorum, 3)
  assert.equal(c.fm.status('shared').governance?.admit, 3)
  // Removing still needs only the other two (the removed cluster cannot be required to approve).
  assert.equal(c.fm.status('shared').governance?.remove, 2)
  await waitFor('cloud has quorum 3 (mirrored in spec.quorum)', () => fb.store.get(fedRef)?.spec?.quorum === 3)
  await assert.rejects(b.fm.propose('shared', 'quorum', 'seven', 'user:bob'), /quorum: a number of approvals from 1 to 99, or default/)
  await assert.rejects(b.fm.approve('shared', 'nope', 'user:bob'), /proposal: an id like/)
  await assert.rejects(b.fm.propose('shared', 'remove', 'nowhere', 'user:bob'), /cluster nowhere is not in federation shared/)
})

test('three clusters: a fourth joins only once its admission passed with two approvals', async (t) => {
  const { a, b } = await three(t)
  const d = await side(t, 'd1', 'far')
  const { token } = await a.fm.token('shared', { author: 'user:alice' })
  // The token alone does not admit: the issuer refuses the joiner (before the token is used) and nothing is written.
  await assert.rejects(d.fm.join({ token, author: 'user:dora' }), /cluster far is not admitted to federation shared: admitting a cluster needs 2 approvals/)
  assert.equal(d.fm.list().length, 0)
  assert.equal(a.fm.status('shared').governance?.proposals.filter((p) => p.action === 'admit' && p.target === 'far').length, 0)
  const { proposal } = await a.fm.propose('shared', 'admit', 'far', 'user:alice')
  assert.equal(proposal.state, 'pending')
  await waitFor('cloud has the admission proposal', () => (b.fm.status('shared').governance?.proposals ?? []).some((p) => p.id === proposal.id))
  assert.equal((await b.fm.approve('shared', proposal.id, 'user:bob')).proposal.state, 'passed')
  await waitFor('home has the approval', () => a.fm.status('shared').governance?.proposals.find((p) => p.id === proposal.id)?.state === 'passed')
  const view = await d.fm.join({ token, author: 'user:dora' })
  assert.equal(view.cluster, 'far')
  await waitFor('every member lists four clusters', () => [a, b, d].every((s) => (s.fm.status('shared').clusters ?? []).length === 4), 60_000)
  // Four clusters: a majority is three.
  assert.equal(a.fm.status('shared').governance?.remove, 3)
  await assert.rejects(a.fm.propose('shared', 'admit', 'far', 'user:alice'), /cluster far is already in federation shared/)
})
