// Governance of federation membership (src/agent/federation/governance.ts): how many approvals a
// change needs, which approvals count (distinct member clusters, not a removed one), and the check
// every replica runs on receipt — a removal or admission arriving without the approvals is refused
// before the store sees it. The receiving store is real; the incoming revision records are written
// by hand, as a modified agent could send them.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import {
  checkMembershipChanges,
  checkNamespaceWriters,
  JOIN_RACE_WINDOW_MS,
  MAX_GOVERNANCE_CLOCK_SKEW_MS,
  PROPOSAL_TTL_MS,
  proposalState,
  replayGovernance,
  requiredApprovals,
  sharedNamespaces,
  writersAt,
  writersMark,
  writersProposal,
} from '../../../src/agent/federation/index.ts'
import { tempStore } from '../../helpers/store.ts'

type Rec = { i: string; k: string; o: string; a: string; r: string; t: number }
let seq = 0
const rec = (k: string, o: string, a: string, r: string, t: number): Rec => ({ i: `00000000000000ff.${++seq}`, k, o, a, r, t })
const gov = (r: Rec) => ({ id: r.i, key: r.k, op: r.o, author: r.a, reason: r.r, time: r.t })
const FED = 'Federation//shared'
const P = 'remove-edge-00aa11'

test('approvals needed: any one for two clusters, a majority beyond; a setting caps at who may approve', () => {
  const table = [1, 2, 3, 4, 5, 6, 7].map((n) => [n, requiredApprovals('admit', n), requiredApprovals('remove', n)])
  assert.deepEqual(table, [
    [1, 1, 1],
    [2, 1, 1],
    [3, 2, 2],
    [4, 3, 3],
    [5, 3, 3],
    [6, 4, 4],
    [7, 4, 4],
  ])
  // A setting of 3 with three clusters: every member admits, but a removal needs the other two only.
  assert.equal(requiredApprovals('admit', 3, 3), 3)
  assert.equal(requiredApprovals('remove', 3, 3), 2)
  assert.equal(requiredApprovals('admit', 5, 1), 1)
})

test('replay: one approval per member cluster, none from outside the member list or from a removed cluster', () => {
  const members = 'cloud,edge,far,home'
  const records = [
    rec(FED, 'update', 'user:alice@home', `propose remove-edge-00aa11: remove edge; members ${members}`, 10),
    rec(FED, 'update', 'user:alice2@home', 'approve remove-edge-00aa11', 11), // home again: counts once
    rec(FED, 'update', 'user:mallory@mars', 'approve remove-edge-00aa11', 12), // not a member
    rec(FED, 'update', 'user:bob@cloud', 'approve remove-edge-00aa11', 13),
  ]
  let g = replayGovernance(records.map(gov))
  assert.equal(g.proposals[0]!.required, 3)
  assert.equal(g.proposals[0]!.passedAt, undefined, '2 of 3')
  records.push(rec(FED, 'update', 'user:fred@far', 'approve remove-edge-00aa11', 14))
  g = replayGovernance(records.map(gov))
  assert.equal(g.proposals[0]!.passedAt, 14)
  assert.deepEqual(
    g.proposals[0]!.approvals.map((a) => a.cluster),
    ['home', 'cloud', 'far'],
  )
  // Edge is removed from time 14: its approval of a later proposal does not count, nor its proposals.
  records.push(
    rec(FED, 'update', 'user:bob@cloud', 'propose remove-far-00bb22: remove far; members cloud,edge,far,home', 20),
    rec(FED, 'update', 'user:erin@edge', 'approve remove-far-00bb22', 21),
    rec(FED, 'update', 'user:alice@home', 'approve remove-far-00bb22', 22),
    rec(FED, 'update', 'user:erin@edge', 'propose admit-mars-00cc33: admit mars; members edge', 23),
  )
  g = replayGovernance(records.map(gov))
  const far = g.proposals.find((p) => p.id === 'remove-far-00bb22')!
  assert.deepEqual(
    far.approvals.map((a) => a.cluster),
    ['cloud', 'home'],
  )
  assert.equal(far.passedAt, undefined, 'edge was removed: 2 of 3')
  assert.equal(
    g.proposals.find((p) => p.id === 'admit-mars-00cc33'),
    undefined,
  )
})

test('replay: the quorum is changed by a passed proposal and applies to later ones; malformed reasons are ignored', () => {
  const records = [
    rec(FED, 'update', 'user:alice@home', 'propose quorum-1-00dd44: quorum 1; members cloud,edge,home', 10),
    rec(FED, 'update', 'user:bob@cloud', 'approve quorum-1-00dd44', 11),
    rec(FED, 'update', 'user:alice@home', `propose ${P}: remove edge; members cloud,edge,home`, 12),
    rec(FED, 'update', 'user:alice@home', 'propose bogus: remove cloud; members home', 13),
    rec(FED, 'update', 'user:alice@home', 'propose quorum-x-00ee55: quorum 0; members cloud,edge,home', 14),
  ]
  const g = replayGovernance(records.map(gov))
  assert.equal(g.quorum, 1)
  assert.deepEqual(
    g.proposals.map((p) => [p.id, p.required, p.passedAt !== undefined]),
    [
      ['quorum-1-00dd44', 2, true],
      [P, 1, true],
    ],
  )
})

/** This replica's clock in the checks below: later than every record's date. */
const NOW = 1_000_000
const check = (update: Parameters<typeof checkMembershipChanges>[0], store: Parameters<typeof checkMembershipChanges>[1]) =>
  checkMembershipChanges(update, store, NOW)

async function receiver(t: { after(fn: () => Promise<void>): void }) {
  const { store, cleanup } = await tempStore()
  t.after(cleanup)
  const w = (author: string, reason: string) => ({ author, reason, now: 1_000 })
  await store.apply(
    { apiVersion: 'orc/v1', kind: 'Federation', metadata: { name: 'shared' }, spec: { id: 'ab'.repeat(16), namespaces: ['shared'], creator: 'home' } },
    w('controller:federation@home', 'federation created'),
  )
  for (const c of ['home', 'cloud', 'edge'])
    await store.apply(
      { apiVersion: 'orc/v1', kind: 'Cluster', metadata: { name: c }, spec: { id: Buffer.from(c.padEnd(16, '0')).toString('hex') } },
      w(`controller:federation@${c}`, 'cluster joined'),
    )
  return store
}

test('on receipt: a removal without a passed proposal is refused; with the approvals in the same update it is accepted', async (t) => {
  const store = await receiver(t)
  await assert.rejects(
    check([rec('Cluster//edge', 'delete', 'user:alice@home', 'gone', 2_000)], store),
    (e: any) => e.code === 'forbidden' && /cluster edge deleted by user:alice@home without a removal proposal/.test(e.message),
  )
  const removal = rec('Cluster//edge', 'delete', 'user:alice@home', `cluster edge removed from the federation (proposal ${P})`, 2_002)
  await assert.rejects(check([removal], store), (e: any) => e.code === 'unavailable' && /names proposal .* not known here/.test(e.message))
  // A proposal that leaves cloud out of its member list (so that one approval would do) is refused
  // on its own, whatever its date: this replica knows cloud is a member.
  const underListed = rec(FED, 'update', 'user:alice@home', `propose ${P}: remove edge; members edge,home`, 2_000)
  await assert.rejects(check([underListed], store), (e: any) => e.code === 'unavailable' && /leaves out cloud, which is a member here/.test(e.message))
  const backdated = rec(FED, 'update', 'user:alice@home', `propose ${P}: remove edge; members edge,home`, 1)
  await assert.rejects(check([backdated, removal], store), /leaves out cloud/)
  // With the full list, home's approval alone is one of two; cloud's passes it.
  const proposal = rec(FED, 'update', 'user:alice@home', `propose ${P}: remove edge; members cloud,edge,home`, 2_000)
  await check([proposal], store)
  await assert.rejects(check([proposal, removal], store), /has 1 of 2 approvals/)
  await check([proposal, rec(FED, 'update', 'user:bob@cloud', `approve ${P}`, 2_001), removal], store)
  // A cluster deleting its own object (leaving) needs nobody; other updates are not looked at.
  await check([rec('Cluster//cloud', 'delete', 'controller:federation@cloud', 'cluster left the federation', 2_000)], store)
  await check([rec('Cluster//cloud', 'update', 'controller:cluster@cloud', 'node summaries', 2_000)], store)
})

test('on receipt: a cluster object created without a passed admission is refused, for a member and for a joiner receiving the whole document', async (t) => {
  const store = await receiver(t)
  const mars = rec('Cluster//mars', 'create', 'controller:federation@mars', 'cluster joined the federation', 3_000)
  await assert.rejects(check([mars], store), /cluster mars \(controller:federation@mars\) is not admitted/)
  const admit = rec(FED, 'update', 'user:alice@home', 'propose admit-mars-00ff66: admit mars; members cloud,edge,home', 2_000)
  await assert.rejects(check([admit, mars], store), /not admitted/, 'one of two approvals')
  await check([admit, rec(FED, 'update', 'user:erin@edge', 'approve admit-mars-00ff66', 2_500), mars], store)

  // A joiner (empty store) gets the whole document: the creator's own object needs no admission, the others do.
  const { store: empty, cleanup } = await tempStore()
  t.after(cleanup)
  const created = rec(FED, 'create', 'controller:federation@home', 'federation created', 1)
  const home = rec('Cluster//home', 'create', 'controller:federation@home', 'cluster joined the federation', 2)
  const cloud = rec('Cluster//cloud', 'create', 'controller:federation@cloud', 'cluster joined the federation', 5)
  const admitCloud = rec(FED, 'update', 'user:alice@home', 'propose admit-cloud-001122: admit cloud; members home', 4)
  await check([created, home, admitCloud, cloud], empty)
  await assert.rejects(check([created, home, cloud], empty), /cluster cloud .* is not admitted/)
  // Admitted, then removed: coming back needs an admission passed after the removal.
  const removed = rec('Cluster//cloud', 'delete', 'user:alice@home', 'cluster cloud removed from the federation (proposal remove-cloud-003344)', 7)
  const removeCloud = rec(FED, 'update', 'user:alice@home', 'propose remove-cloud-003344: remove cloud; members cloud,home', 6)
  const back = rec('Cluster//cloud', 'create', 'controller:federation@cloud', 'cluster joined the federation', 9)
  await assert.rejects(check([created, home, admitCloud, cloud, removeCloud, removed, back], empty), /not admitted: no admission of it passed since it went/)
  const readmit = rec(FED, 'update', 'user:alice@home', 'propose admit-cloud-005566: admit cloud; members home', 8)
  await check([created, home, admitCloud, cloud, removeCloud, removed, readmit, back], empty)
})

test('on receipt: a proposal, approval or membership change dated beyond the clock skew is refused (it would keep an admission open)', async (t) => {
  const store = await receiver(t)
  const later = NOW + MAX_GOVERNANCE_CLOCK_SKEW_MS + 1
  // An admission whose approval is dated far ahead would pass "after" every removal to come.
  const admit = rec(FED, 'update', 'user:alice@home', 'propose admit-mars-00ff66: admit mars; members cloud,edge,home', 2_000)
  const approve = rec(FED, 'update', 'user:erin@edge', 'approve admit-mars-00ff66', later)
  await assert.rejects(
    check([admit, approve], store),
    (e: any) =>
      e.code === 'invalid' && /approve|Federation\/\/shared/.test(e.message) && /more than 10 min ahead of this node's clock: refused/.test(e.message),
  )
  const mars = rec('Cluster//mars', 'create', 'controller:federation@mars', 'cluster joined the federation', later)
  await assert.rejects(check([mars], store), /Cluster\/\/mars by controller:federation@mars is dated .* ahead/)
  // Within the skew it is the approvals that decide, as before.
  await check([admit, rec(FED, 'update', 'user:erin@edge', 'approve admit-mars-00ff66', NOW + MAX_GOVERNANCE_CLOCK_SKEW_MS)], store)
  // Other records of the document are not dated-checked here (a node summary from a fast clock).
  await check([rec('Cluster//cloud', 'update', 'controller:cluster@cloud', 'node summaries', later)], store)
})

test('replay: a proposal withdrawn by its cluster takes no approval after; one not passed within 7 days lapses', () => {
  const W = 'remove-edge-00aa11'
  const propose = rec(FED, 'update', 'user:alice@home', `propose ${W}: remove edge; members cloud,edge,home`, 1_000)
  // Withdrawn by another cluster: ignored; by the proposer's: later approvals do not count.
  let g = replayGovernance(
    [propose, rec(FED, 'update', 'user:bob@cloud', `withdraw ${W}`, 1_500), rec(FED, 'update', 'user:bob@cloud', `approve ${W}`, 2_000)].map(gov),
  )
  assert.equal(g.proposals[0]!.passedAt, 2_000, 'a withdrawal by a cluster that did not propose is ignored')
  g = replayGovernance(
    [propose, rec(FED, 'update', 'user:carol@home', `withdraw ${W}`, 1_500), rec(FED, 'update', 'user:bob@cloud', `approve ${W}`, 2_000)].map(gov),
  )
  assert.deepEqual([g.proposals[0]!.withdrawnAt, g.proposals[0]!.passedAt, g.proposals[0]!.approvals.length], [1_500, undefined, 1])
  assert.equal(proposalState(g.proposals[0]!, 3_000), 'withdrawn')
  // A passed proposal cannot be withdrawn.
  g = replayGovernance(
    [propose, rec(FED, 'update', 'user:bob@cloud', `approve ${W}`, 2_000), rec(FED, 'update', 'user:alice@home', `withdraw ${W}`, 2_500)].map(gov),
  )
  assert.deepEqual([g.proposals[0]!.passedAt, g.proposals[0]!.withdrawnAt], [2_000, undefined])
  // Lapsed: an approval dated after the TTL does not count, and the proposal reads as expired.
  g = replayGovernance([propose, rec(FED, 'update', 'user:bob@cloud', `approve ${W}`, 1_000 + PROPOSAL_TTL_MS + 1)].map(gov))
  assert.equal(g.proposals[0]!.passedAt, undefined)
  assert.equal(proposalState(g.proposals[0]!, 1_000 + PROPOSAL_TTL_MS - 1), 'pending')
  assert.equal(proposalState(g.proposals[0]!, 1_000 + PROPOSAL_TTL_MS + 1), 'expired')
})

// Sharing one more namespace after create, or no longer sharing one: the same proposals, and a
// replica derives the shared namespaces from the passed ones only (sharedNamespaces).
const SH = 'share-namespace-web-00ab12'
const UN = 'unshare-namespace-web-00cd34'

test('replay: a share passes with the quorum and an unshare takes the namespace back; the namespaces come from the passed proposals only', () => {
  const records = [rec(FED, 'update', 'user:alice@home', `propose ${SH}: share-namespace web; members cloud,edge,home`, 10)]
  let g = replayGovernance(records.map(gov))
  assert.deepEqual([g.proposals[0]!.action, g.proposals[0]!.target, g.proposals[0]!.required], ['share-namespace', 'web', 2])
  assert.deepEqual(sharedNamespaces(['shared'], g), ['shared'], 'one approval of two: not shared')
  records.push(rec(FED, 'update', 'user:bob@cloud', `approve ${SH}`, 11))
  g = replayGovernance(records.map(gov))
  assert.equal(g.proposals[0]!.passedAt, 11)
  assert.deepEqual(sharedNamespaces(['shared'], g), ['shared', 'web'])
  // Unshared later (two approvals again); a base that still lists web (the document's mirror as a
  // joiner read it) does not bring it back: the last passed proposal decides.
  records.push(
    rec(FED, 'update', 'user:erin@edge', `propose ${UN}: unshare-namespace web; members cloud,edge,home`, 20),
    rec(FED, 'update', 'user:alice@home', `approve ${UN}`, 21),
  )
  g = replayGovernance(records.map(gov))
  assert.deepEqual(sharedNamespaces(['shared'], g), ['shared'])
  assert.deepEqual(sharedNamespaces(['shared', 'web'], g), ['shared'])
  // A malformed target (not a DNS label) is no proposal at all.
  g = replayGovernance([rec(FED, 'update', 'user:alice@home', 'propose share-namespace-x-00ef56: share-namespace Web_1; members home', 30)].map(gov))
  assert.equal(g.proposals.length, 0)
})

/**
 * Two receiving replicas: a member (the receiver above) and a joiner (an empty store), with what
 * the joiner receives before the records under test: the document from its start, the three
 * clusters admitted.
 */
async function memberAndJoiner(t: { after(fn: () => Promise<void>): void }) {
  const member = await receiver(t)
  const { store: joiner, cleanup } = await tempStore()
  t.after(cleanup)
  const history = [
    rec(FED, 'create', 'controller:federation@home', 'federation created', 1),
    rec('Cluster//home', 'create', 'controller:federation@home', 'cluster joined the federation', 2),
    rec(FED, 'update', 'user:alice@home', 'propose admit-cloud-001122: admit cloud; members home', 3),
    rec('Cluster//cloud', 'create', 'controller:federation@cloud', 'cluster joined the federation', 4),
    rec(FED, 'update', 'user:alice@home', 'propose admit-edge-001133: admit edge; members cloud,home', 5),
    rec('Cluster//edge', 'create', 'controller:federation@edge', 'cluster joined the federation', 6),
  ]
  return [
    ['member', member, [] as Rec[]],
    ['joiner', joiner, history],
  ] as const
}

test('on receipt: a share written without the quorum is refused by every replica (a member and a joiner); with the approvals it is accepted', async (t) => {
  const replicas = await memberAndJoiner(t)
  const member = replicas[0][1]
  const write = (reason: string, time: number, value = ['shared', 'web']) => ({
    ...rec(FED, 'update', 'user:alice@home', reason, time),
    c: [['s', ['spec', 'namespaces'], value]] as [string, string[], unknown][],
  })
  const propose = rec(FED, 'update', 'user:alice@home', `propose ${SH}: share-namespace web; members cloud,edge,home`, 2_000)
  const approve = rec(FED, 'update', 'user:bob@cloud', `approve ${SH}`, 2_001)
  const mirror = write(`share namespace web (proposal ${SH})`, 2_002)
  for (const [who, store, before] of replicas) {
    // spec.namespaces changed with no proposal named: a forgery (the sender is scored down).
    await assert.rejects(
      check([...before, write('edit', 2_002)], store),
      (e: any) =>
        e.code === 'forbidden' && /changes the shared namespaces \(spec\.namespaces of Federation\/\/shared\) without a passed share-namespace/.test(e.message),
      who,
    )
    // Naming a proposal with one approval of the two it needs (home's own): refused, waits for approvals.
    await assert.rejects(
      check([...before, propose, mirror], store),
      (e: any) => e.code === 'unavailable' && /sharing namespace web by user:alice@home names proposal .* has 1 of 2 approvals/.test(e.message),
      who,
    )
    await assert.rejects(check([...before, mirror], store), /names proposal .* is not known here/, who)
    // Naming a passed proposal of something else: a forgery.
    const admit = [
      rec(FED, 'update', 'user:alice@home', 'propose admit-mars-00ff66: admit mars; members cloud,edge,home', 2_000),
      rec(FED, 'update', 'user:bob@cloud', 'approve admit-mars-00ff66', 2_001),
    ]
    await assert.rejects(
      check([...before, ...admit, write('share namespace web (proposal admit-mars-00ff66)', 2_002)], store),
      (e: any) => e.code === 'forbidden' && /proposal admit-mars-00ff66 is admit mars/.test(e.message),
      who,
    )
    // With cloud's approval: accepted; the unshare too, once it passed.
    await check([...before, propose, approve, mirror], store)
    const unPropose = rec(FED, 'update', 'user:bob@cloud', `propose ${UN}: unshare-namespace web; members cloud,edge,home`, 3_000)
    const unMirror = { ...write(`unshare namespace web (proposal ${UN})`, 3_002, ['shared']), a: 'user:erin@edge' }
    await assert.rejects(
      check([...before, propose, approve, mirror, unPropose, unMirror], store),
      /unsharing namespace web by user:erin@edge names proposal .* has 1 of 2/,
      who,
    )
    await check([...before, propose, approve, mirror, unPropose, rec(FED, 'update', 'user:erin@edge', `approve ${UN}`, 3_001), unMirror], store)
  }
  // Other writes of the Federation object (a proposal's mirror under spec.proposals) are not shares.
  await check([{ ...propose, c: [['s', ['spec', 'proposals', SH], { action: 'share-namespace' }]] as [string, string[], unknown][] }], member)
})

test('a share with writers: only their users write in the namespace while it lasts; a write by another cluster’s user is refused on receipt by a member and by a joiner', async (t) => {
  const SW = 'share-namespace-docs-00ab77'
  const propose = rec(FED, 'update', 'user:alice@home', `propose ${SW}: share-namespace docs; members cloud,edge,home; writers home`, 2_000)
  const approve = rec(FED, 'update', 'user:bob@cloud', `approve ${SW}`, 2_001)
  let g = replayGovernance([propose, approve].map(gov))
  assert.deepEqual(g.proposals[0]!.writers, ['home'])
  assert.deepEqual(writersAt(g, 'docs', 2_000), undefined, 'before it passed: nobody is restricted')
  assert.deepEqual(writersAt(g, 'docs', 2_001), ['home'])
  assert.equal(writersAt(g, 'shared', 2_001), undefined)
  // Unshared later: no restriction from then on (the namespace is no longer the federation's).
  const UW = 'unshare-namespace-docs-00ab88'
  g = replayGovernance(
    [
      propose,
      approve,
      rec(FED, 'update', 'user:alice@home', `propose ${UW}: unshare-namespace docs; members cloud,edge,home`, 3_000),
      rec(FED, 'update', 'user:erin@edge', `approve ${UW}`, 3_001),
    ].map(gov),
  )
  assert.deepEqual([writersAt(g, 'docs', 2_500), writersAt(g, 'docs', 3_001)], [['home'], undefined])
  // Writers on another action, or naming a cluster outside the member list: no proposal at all.
  g = replayGovernance(
    [
      rec(FED, 'update', 'user:alice@home', 'propose admit-mars-00ab99: admit mars; members cloud,home; writers home', 10),
      rec(FED, 'update', 'user:alice@home', 'propose share-namespace-x-00abaa: share-namespace x; members cloud,home; writers mars', 11),
    ].map(gov),
  )
  assert.equal(g.proposals.length, 0)

  const cloudWrite = rec('Pod/docs/page', 'create', 'user:bob@cloud', '', 2_500)
  for (const [who, store, before] of await memberAndJoiner(t)) {
    await assert.rejects(
      checkNamespaceWriters([...before, propose, approve, cloudWrite], store),
      (e: any) => e.code === 'forbidden' && /user:bob@cloud wrote Pod\/docs\/page .* namespace docs is written by the users of home only/.test(e.message),
      who,
    )
    // A modified agent calling itself something else is judged the same.
    await assert.rejects(
      checkNamespaceWriters([...before, propose, approve, { ...cloudWrite, a: 'system:x@cloud' }], store),
      /written by the users of home only/,
      who,
    )
    // Home's users write; cloud's controllers report (a pod running in cloud); a cloud write
    // dated before the share passed (when docs was not the federation's) is not judged.
    await checkNamespaceWriters([...before, propose, approve, { ...cloudWrite, a: 'user:alice@home' }], store)
    await checkNamespaceWriters([...before, propose, approve, { ...cloudWrite, o: 'update', a: 'controller:lifecycle@cloud' }], store)
    await checkNamespaceWriters([...before, propose, approve, { ...cloudWrite, t: 2_000 }], store)
    // Without the approval (one of two) the share has not passed: nothing is restricted yet.
    await checkNamespaceWriters([...before, propose, cloudWrite], store)
  }
})

// ---- causal metadata: the membership state a proposal was judged against, the writers state a write was made under ----

test('on receipt: a proposal judged against the membership before a join (its `seen`) is accepted by a replica that already knows the joiner; a forged past state is refused', async (t) => {
  const store = await receiver(t) // home, cloud and edge joined at 1_000
  const JOIN = 2_000_000
  // This replica's clock: later than every record below.
  const check = (update: Parameters<typeof checkMembershipChanges>[0], s: typeof store) => checkMembershipChanges(update, s, JOIN + 2 * JOIN_RACE_WINDOW_MS)
  await store.apply(
    { apiVersion: 'orc/v1', kind: 'Cluster', metadata: { name: 'mars' }, spec: { id: Buffer.from('mars'.padEnd(16, '0')).toString('hex') } },
    { author: 'controller:federation@mars', reason: 'cluster joined the federation', now: JOIN },
  )
  const joinOf = async (c: string) => (await store.history({ kind: 'Cluster', namespace: '', name: c })).filter((h) => h.op === 'create').at(-1)!.id
  const edgeJoin = await joinOf('edge') // the newest join home had seen: edge's (the last of the three)
  const marsJoin = await joinOf('mars')
  const race = (seen: string, time: number, members = 'cloud,edge,home') =>
    rec(FED, 'update', 'user:alice@home', `propose ${P}: remove edge; members ${members}; seen ${seen}`, time)
  // Without causal metadata the proposal is refused, whenever it was written (the race as it was).
  await assert.rejects(
    check([rec(FED, 'update', 'user:alice@home', `propose ${P}: remove edge; members cloud,edge,home`, JOIN + 1_000)], store),
    (e: any) => e.code === 'unavailable' && /leaves out mars, which is a member here/.test(e.message),
  )
  // Written a second after mars joined, by a home that had not heard of it yet: accepted, and
  // judged against home's state (three members: home and cloud pass it).
  const proposal = race(edgeJoin, JOIN + 1_000)
  await check([proposal], store)
  const g = replayGovernance([proposal, rec(FED, 'update', 'user:bob@cloud', `approve ${P}`, JOIN + 2_000)].map(gov))
  assert.deepEqual(
    [g.proposals[0]!.members, g.proposals[0]!.required, g.proposals[0]!.seen, g.proposals[0]!.passedAt],
    [['cloud', 'edge', 'home'], 2, edgeJoin, JOIN + 2_000],
  )
  // Also a little before the join (clocks differ): mars was not a member then.
  await check([race(edgeJoin, JOIN - 1_000)], store)

  // Forged or invented states are refused:
  // a join that is no listed cluster's (not here at all, or mars's own while it is left out);
  for (const seen of ['00000000000000aa.7', marsJoin])
    await assert.rejects(
      check([race(seen, JOIN + 1_000)], store),
      (e: any) =>
        e.code === 'unavailable' &&
        new RegExp(`judged against the join ${seen.replace('.', '\\.')}, which is not the creation of a listed cluster`).test(e.message),
    )
  // a state older than the join it leaves out by more than the window, or dated far from the join;
  await assert.rejects(
    check([race(edgeJoin, JOIN + JOIN_RACE_WINDOW_MS + 1)], store),
    /leaves out mars, which is a member here \(joined before the newest join it names/,
  )
  await assert.rejects(check([race(edgeJoin, 2_000)], store), /leaves out mars/)
  // a state that leaves out a member whose join it saw (cloud joined before edge);
  await assert.rejects(check([race(edgeJoin, JOIN + 1_000, 'edge,home')], store), /leaves out cloud, mars|leaves out cloud/)
  // a proposal dated back into the window by a node that had already written later: a forgery.
  const summary = rec('Cluster//home', 'update', 'controller:cluster@home', 'node summaries', JOIN + 400_000)
  const backdated = race(edgeJoin, JOIN - 200_000)
  await assert.rejects(
    check([summary, backdated], store),
    (e: any) =>
      e.code === 'forbidden' && /is timed .* but its node had already written revision .* a backdated proposal cannot leave out a member/.test(e.message),
  )
  // Its node's writes timed before it do not matter.
  await check([rec('Cluster//home', 'update', 'controller:cluster@home', 'node summaries', JOIN - 300_000), race(edgeJoin, JOIN - 200_000)], store)
})

test('on receipt: a joiner receiving the whole document accepts a proposal written while another cluster joined', async (t) => {
  const [, [, joiner, history]] = await memberAndJoiner(t)
  const edgeJoin = history[5]!.i
  const admit = rec(FED, 'update', 'user:alice@home', 'propose admit-mars-00ff77: admit mars; members cloud,edge,home', 7)
  const approve = rec(FED, 'update', 'user:erin@edge', 'approve admit-mars-00ff77', 8)
  const mars = rec('Cluster//mars', 'create', 'controller:federation@mars', 'cluster joined the federation', 10)
  const race = rec(FED, 'update', 'user:bob@cloud', `propose ${P}: remove edge; members cloud,edge,home; seen ${edgeJoin}`, 11)
  await check([...history, admit, approve, mars, race], joiner)
  await assert.rejects(
    check([...history, admit, approve, mars, { ...race, r: `propose ${P}: remove edge; members cloud,edge,home` }], joiner),
    /leaves out mars, which is a member here/,
  )
})

test('set-writers: the writers of a shared namespace change by proposal; a write is judged against the writers state it names, so one made under the writers its cluster knew is accepted after they changed', async (t) => {
  const SW = 'share-namespace-docs-00ab77'
  const SET = 'set-writers-docs-00ab78'
  const share = [
    rec(FED, 'update', 'user:alice@home', `propose ${SW}: share-namespace docs; members cloud,edge,home; writers cloud,home`, 2_000),
    rec(FED, 'update', 'user:erin@edge', `approve ${SW}`, 2_001),
  ]
  const set = [
    rec(FED, 'update', 'user:alice@home', `propose ${SET}: set-writers docs; members cloud,edge,home; writers home`, 3_000),
    rec(FED, 'update', 'user:erin@edge', `approve ${SET}`, 3_001),
  ]
  let g = replayGovernance([...share, ...set].map(gov))
  assert.deepEqual([writersAt(g, 'docs', 2_500), writersAt(g, 'docs', 3_000), writersAt(g, 'docs', 3_001)], [['cloud', 'home'], ['cloud', 'home'], ['home']])
  assert.deepEqual(sharedNamespaces(['shared'], g), ['docs', 'shared'], 'a set-writers shares nothing')
  assert.equal(writersProposal(g, 'docs', 3_001)?.id, SET)
  // Without writers it is no proposal; after an unshare (before the next share) it sets nothing.
  g = replayGovernance([rec(FED, 'update', 'user:alice@home', 'propose set-writers-docs-00ab79: set-writers docs; members cloud,home', 10)].map(gov))
  assert.equal(g.proposals.length, 0)
  const UW = 'unshare-namespace-docs-00ab80'
  const unshare = [
    rec(FED, 'update', 'user:alice@home', `propose ${UW}: unshare-namespace docs; members cloud,edge,home`, 4_000),
    rec(FED, 'update', 'user:erin@edge', `approve ${UW}`, 4_001),
  ]
  const lateSet = [
    rec(FED, 'update', 'user:alice@home', 'propose set-writers-docs-00ab81: set-writers docs; members cloud,edge,home; writers edge', 5_000),
    rec(FED, 'update', 'user:bob@cloud', 'approve set-writers-docs-00ab81', 5_001),
  ]
  g = replayGovernance([...share, ...unshare, ...lateSet].map(gov))
  assert.equal(writersAt(g, 'docs', 6_000), undefined)
  // A namespace shared at create gets writers too.
  g = replayGovernance(
    [rec(FED, 'update', 'user:alice@home', 'propose set-writers-shared-00ab82: set-writers shared; members cloud,home; writers home', 20)].map(gov),
  )
  assert.deepEqual(writersAt(g, 'shared', 20), ['home'])

  // The mark fits the record's reason (1024 characters) whatever the user's reason.
  assert.equal(writersMark('why '.repeat(300), SET).length, 1024)
  assert.ok(writersMark('why '.repeat(300), SET).endsWith(` [writers ${SET}]`))

  // Cloud wrote at 3_500, after the change passed (3_001) by the dates, under the writers it knew
  // (the share's: cut off, or its clock ahead). Every replica, a member and a joiner, accepts it.
  const under = (id: string, o: Partial<Rec> = {}) => ({ ...rec('Pod/docs/draft', 'create', 'user:bob@cloud', writersMark('apply', id), 3_500), ...o })
  for (const [who, store, before] of await memberAndJoiner(t)) {
    const all = [...before, ...share, ...set]
    await checkNamespaceWriters([...all, under(SW)], store)
    // Naming no state it is judged by its date, as before: refused.
    await assert.rejects(
      checkNamespaceWriters([...all, under(SW, { r: 'apply' })], store),
      (e: any) => e.code === 'forbidden' && /user:bob@cloud wrote Pod\/docs\/draft .* written by the users of home only \(at its date\)/.test(e.message),
      who,
    )
    // Under the new writers cloud writes no more.
    await assert.rejects(
      checkNamespaceWriters([...all, under(SET)], store),
      /written by the users of home only \(under proposal set-writers-docs-00ab78\)/,
      who,
    )
    // Invented states: another change's proposal, one that passed after the write, one never in force.
    await assert.rejects(
      checkNamespaceWriters([...all, ...unshare, under(UW)], store),
      (e: any) => e.code === 'forbidden' && /under proposal unshare-namespace-docs-00ab80, which is unshare-namespace docs/.test(e.message),
      who,
    )
    await assert.rejects(
      checkNamespaceWriters([...all, under(SW, { t: 2_001 - MAX_GOVERNANCE_CLOCK_SKEW_MS - 1 })], store),
      (e: any) => e.code === 'forbidden' && /which passed after that write/.test(e.message),
      who,
    )
    await assert.rejects(
      checkNamespaceWriters([...all, ...unshare, ...lateSet, under('set-writers-docs-00ab81', { t: 6_000, a: 'user:erin@edge' })], store),
      (e: any) => e.code === 'forbidden' && /which was never in force/.test(e.message),
      who,
    )
    // A state not here yet, or short of approvals here: the update waits.
    await assert.rejects(checkNamespaceWriters([...all, under('set-writers-docs-00abff')], store), (e: any) => e.code === 'unavailable', who)
    await assert.rejects(
      checkNamespaceWriters([...before, ...share, set[0]!, under(SET, { a: 'user:alice@home' })], store),
      (e: any) => e.code === 'unavailable' && /has 1 of 2 approvals/.test(e.message),
      who,
    )
    // Controllers are not judged.
    await checkNamespaceWriters([...all, under(SET, { a: 'controller:lifecycle@cloud', r: 'status' })], store)
  }
})
