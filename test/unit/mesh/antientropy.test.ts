import assert from 'node:assert/strict'
import { test } from 'node:test'
import { AntiEntropyPlanner, type AntiEntropyTunables } from '../../../src/mesh/antientropy.ts'

const o: AntiEntropyTunables = { periodMs: 30_000, recoveryJitterMs: 5_000, recoveryPerPeriod: 3, maxRelayBytes: 64 * 1024, relayAfterStartMs: 30_000 }
/** Deterministic "random": always the middle of the range. */
const mid = (n: number) => Math.floor(n / 2)

test('a session that brought in new revisions is relayed; nothing new, or too big, is not', () => {
  const p = new AntiEntropyPlanner(o, mid, 0)
  assert.equal(p.sessionDone('a', { revisions: 2, receivedBytes: 1200 }, 40_000), true)
  assert.equal(p.sessionDone('a', { revisions: 0, receivedBytes: 0 }, 40_000), false)
  // Bytes that only repeated what we had (revisions 0) are not news for anyone else either.
  assert.equal(p.sessionDone('a', { revisions: 0, receivedBytes: 900 }, 40_000), false)
  assert.equal(p.sessionDone('a', { revisions: 5000, receivedBytes: 64 * 1024 + 1 }, 40_000), false)
  // In its first period a (re)started node is catching up on what the others have: not news.
  assert.equal(p.sessionDone('a', { revisions: 2, receivedBytes: 1200 }, 29_999), false)
})

test('a member back from suspect or dead is due a sync within the jitter; one going down is not', () => {
  const p = new AntiEntropyPlanner(o, mid, 0)
  p.memberChanged('a', 'alive', 'suspect', 1_000)
  assert.equal(p.pending, 0)
  p.memberChanged('a', 'suspect', 'alive', 10_000)
  p.memberChanged('b', 'dead', 'alive', 10_000)
  assert.equal(p.nextDue(), 12_500)
  assert.deepEqual(p.takeDue(12_499), [])
  assert.deepEqual(p.takeDue(12_500).sort(), ['a', 'b'])
  assert.deepEqual(p.takeDue(20_000), [], 'each is returned once')
  // Gone again before it was due: no sync.
  p.memberChanged('c', 'dead', 'alive', 20_000)
  p.memberChanged('c', 'alive', 'suspect', 21_000)
  assert.deepEqual(p.takeDue(40_000), [])
})

test('a sync that happened anyway (on connect, periodic) satisfies a due member', () => {
  const p = new AntiEntropyPlanner(o, mid, 0)
  p.memberChanged('a', 'dead', 'alive', 0)
  p.sessionDone('a', { revisions: 0, receivedBytes: 0 }, 0)
  assert.deepEqual(p.takeDue(10_000), [])
})

test('after a heal that brings hundreds back, at most recoveryPerPeriod out-of-turn syncs per period', () => {
  const p = new AntiEntropyPlanner(o, mid, 0)
  for (let i = 0; i < 500; i++) p.memberChanged(`m${i}`, 'dead', 'alive', 0)
  assert.equal(p.takeDue(5_000).length, 3)
  assert.equal(p.takeDue(6_000).length, 0)
  assert.equal(p.takeDue(15_000).length, 1, 'the bucket refills at 3 per 30 s')
  // Members that waited a whole period for budget are dropped (the periodic round covers them).
  assert.equal(p.takeDue(45_000).length, 3)
  assert.equal(p.pending, 0)
})

test('the jitter spreads recovered members over recoveryJitterMs', () => {
  let i = 0
  const seq = (n: number) => [0, n - 1, Math.floor(n / 3)][i++ % 3]!
  const p = new AntiEntropyPlanner(o, seq, 1_000)
  for (const m of ['a', 'b', 'c']) p.memberChanged(m, 'suspect', 'alive', 1_000)
  assert.deepEqual(p.takeDue(1_000), ['a'])
  assert.deepEqual(p.takeDue(1_000 + Math.floor(5_001 / 3)), ['c'])
  assert.deepEqual(p.takeDue(6_000), ['b'])
})
