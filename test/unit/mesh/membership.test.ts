import assert from 'node:assert/strict'
import { test } from 'node:test'
import { decideInbound, decideOutbound, type GatePolicy } from '../../../src/mesh/gater.ts'
import { chooseConnections, MembershipTable } from '../../../src/mesh/membership.ts'
import { PeerScores } from '../../../src/mesh/score.ts'
import { seededRandom } from '../../mesh/helpers.ts'

test('a quiet member goes alive → suspect → dead, and back to alive when heard', () => {
  const t = new MembershipTable('self', { suspectAfterMs: 5_000, deadAfterMs: 30_000 })
  t.upsert({ peerId: 'self', name: 'me', addresses: [] }, 0)
  t.upsert({ peerId: 'b', name: 'b', addresses: ['/ip4/1.2.3.4/tcp/1'] }, 0)
  t.heard('b', 1_000)
  assert.deepEqual(t.tick(5_999), [])
  assert.deepEqual(t.tick(6_000), [{ peerId: 'b', name: 'b', from: 'alive', to: 'suspect' }])
  assert.deepEqual(t.tick(31_000), [{ peerId: 'b', name: 'b', from: 'suspect', to: 'dead' }])
  assert.deepEqual(t.heard('b', 40_000), { peerId: 'b', name: 'b', from: 'dead', to: 'alive' })
  const view = t.view(40_500)
  assert.deepEqual(
    view.map((v) => [v.peerId, v.state, v.lastSeen]),
    [
      ['b', 'alive', 40_000],
      ['self', 'alive', 40_500],
    ],
  )
})

test('small clusters connect all-to-all; large ones a bounded random subset keeping existing links', () => {
  const peers = Array.from({ length: 100 }, (_, i) => `p${i}`)
  assert.equal(chooseConnections({ candidates: peers.slice(0, 10), connected: new Set(), fullMeshMax: 16, degree: 8, random: seededRandom(1) }).length, 10)
  const chosen = chooseConnections({ candidates: peers, connected: new Set(['p5', 'p6']), fullMeshMax: 16, degree: 8, random: seededRandom(1) })
  assert.equal(chosen.length, 8)
  assert.ok(chosen.includes('p5') && chosen.includes('p6'))
  assert.equal(new Set(chosen).size, 8)
})

test('garbage costs score; at the threshold the peer is banned for a while, then forgiven', () => {
  const s = new PeerScores({ banThreshold: -100, banMs: 1_000 })
  assert.equal(s.penalise('p', 50, 0), false)
  assert.equal(s.penalise('p', 50, 0), true)
  assert.equal(s.isBanned('p', 999), true)
  assert.equal(s.isBanned('p', 1_000), false)
  assert.equal(s.score('p'), 0)
})

test('score comes back with time: garbage now and then never bans, two within minutes do', () => {
  // Threshold -100 over banMs 10 min: 100 points back per 10 minutes.
  const s = new PeerScores({ banThreshold: -100, banMs: 600_000 })
  for (let i = 0; i < 10; i++) assert.equal(s.penalise('slow', 50, i * 300_000), false, `bad message ${i + 1}, five minutes apart`)
  assert.equal(s.score('slow', 9 * 300_000), -50)
  assert.equal(s.score('slow', 9 * 300_000 + 300_000), 0, 'back to clean five minutes later')
  assert.equal(s.penalise('fast', 50, 0), false)
  assert.equal(s.penalise('fast', 50, 10_000), true, 'two within seconds: banned')
  assert.equal(s.isBanned('fast', 10_000 + 599_999), true)
  assert.equal(s.isBanned('fast', 10_000 + 600_000), false)
  // A peer that keeps sending garbage is banned again after its ban.
  assert.equal(s.penalise('fast', 50, 610_001), false)
  assert.equal(s.penalise('fast', 50, 610_002), true)
})

test('the gater admits members, strangers only on probation while a join is open, never banned peers', async () => {
  let open = false
  const slots = new Set<string>()
  const policy: GatePolicy = {
    isRemoved: (p) => p === 'gone',
    isMember: (p) => p === 'm' || p === 'bad',
    isCredentialPeer: (p) => p === 'cli',
    isBanned: (p) => p === 'bad',
    mayDial: (p) => p === 'issuer',
    acceptsStrangers: () => open,
    startProbation: (p) => (slots.size < 1 || slots.has(p) ? (slots.add(p), true) : false),
  }
  assert.equal(await decideInbound(policy, 'm'), 'allow')
  assert.equal(await decideInbound(policy, 'bad'), 'deny')
  assert.equal(await decideInbound(policy, 'x'), 'deny')
  open = true
  assert.equal(await decideInbound(policy, 'x'), 'probation')
  assert.equal(await decideInbound(policy, 'y'), 'deny') // slots full
  assert.equal(await decideInbound(policy, 'cli'), 'allow') // the remote CLI needs no slot
  assert.equal(await decideInbound(policy, 'gone'), 'deny') // removed: refused even with a slot free
  slots.clear()
  assert.equal(await decideInbound(policy, 'gone'), 'deny')
  assert.equal(decideOutbound(policy, 'gone'), 'deny')
  assert.equal(decideOutbound(policy, 'issuer'), 'allow')
  assert.equal(decideOutbound(policy, 'x'), 'deny')
  assert.equal(decideOutbound(policy, 'bad'), 'deny')
})
