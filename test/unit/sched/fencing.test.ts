import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import { decideFence, fenceWindowMs, MIN_FENCE_WINDOW_MS, plan, quorumNeeded, quorumState } from '../../../src/sched/index.ts'
import { node, pod, view } from './helpers.ts'

const NOW = 10_000_000_000
const SEC = 1000
const majority = { fenceQuorum: 0 }
const margin = { fenceMarginSeconds: 3 }

test('quorum: a majority of the nodes not forgotten, this one included; fenceQuorum overrides it', () => {
  assert.equal(quorumNeeded(1, majority), 1)
  assert.equal(quorumNeeded(2, majority), 2)
  assert.equal(quorumNeeded(3, majority), 2)
  assert.equal(quorumNeeded(4, majority), 3)
  assert.equal(quorumNeeded(5, majority), 3)
  assert.equal(quorumNeeded(2, { fenceQuorum: 1 }), 1)
  assert.equal(quorumNeeded(3, { fenceQuorum: 9 }), 3)
  const q = quorumState(
    [
      { name: 'b', lastSeen: NOW - 1 * SEC },
      { name: 'c', lastSeen: NOW - 40 * SEC },
      { name: 'gone', forgotten: true },
    ],
    NOW,
    majority,
  )
  assert.deepEqual(q, { size: 3, needed: 2, heard: 2, lastQuorumAt: NOW - 1 * SEC })
})

test('quorum: the last quorum is when the (needed - 1)-th most recently heard other node was heard', () => {
  const others = [40, 3, 12, 7].map((s, i) => ({ name: `n${i}`, lastSeen: NOW - s * SEC }))
  // 5 nodes, 3 needed: this one plus the two heard most recently (3 s and 7 s ago).
  assert.equal(quorumState(others, NOW, majority).lastQuorumAt, NOW - 7 * SEC)
  // never heard anyone since the agent started: never had a quorum
  assert.equal(quorumState([{ name: 'b' }, { name: 'c' }], NOW, majority).lastQuorumAt, Number.NEGATIVE_INFINITY)
  // alone in its cluster, or fencing turned off: always a quorum
  assert.equal(quorumState([], NOW, majority).lastQuorumAt, NOW)
  assert.equal(quorumState([{ name: 'b' }], NOW, { fenceQuorum: 1 }).lastQuorumAt, NOW)
})

test('fence: an ha pod stops haAfter - margin after the last quorum (SIGTERM its grace earlier), never sooner than the floor', () => {
  const at = (s: number) => ({ size: 3, needed: 2, heard: 1, lastQuorumAt: NOW - s * SEC })
  // haAfter 30 s, margin 3 s: killed 27 s after the last quorum, SIGTERM 10 s (the grace) before.
  assert.equal(fenceWindowMs(30 * SEC, margin), 27 * SEC)
  assert.equal(decideFence(at(16.9), NOW, 30 * SEC, 10 * SEC, margin).run, true)
  const d = decideFence(at(17), NOW, 30 * SEC, 10 * SEC, margin)
  assert.equal(d.run, false)
  assert.match(d.reason, /fenced: this node has not heard a quorum \(2 of 3 nodes\) for 17s/)
  // A short haAfter cannot fence before the floor: missed heartbeats on a loaded machine are not a partition.
  assert.equal(fenceWindowMs(2 * SEC, margin), MIN_FENCE_WINDOW_MS)
  assert.equal(decideFence(at(4.9), NOW, 2 * SEC, 10 * SEC, margin).run, true)
  assert.equal(decideFence(at(5), NOW, 2 * SEC, 10 * SEC, margin).run, false)
  assert.equal(decideFence({ size: 3, needed: 2, heard: 1, lastQuorumAt: Number.NEGATIVE_INFINITY }, NOW, 30 * SEC, 10 * SEC, margin).run, false)
})

test('property: the copy is dead (SIGKILL) margin before any other node may move the pod', () => {
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 3600 }), fc.integer({ min: 0, max: 120_000 }), fc.integer({ min: 0, max: 10 }), (haAfter, grace, m) => {
      const window = fenceWindowMs(haAfter * SEC, { fenceMarginSeconds: m })
      // Others move the pod haAfter after they last heard this node; this node stops it `window` after it last heard them.
      if (haAfter * SEC - m * SEC >= MIN_FENCE_WINDOW_MS) assert.equal(window, haAfter * SEC - m * SEC)
      const q = { size: 3, needed: 2, heard: 1, lastQuorumAt: NOW }
      assert.equal(decideFence(q, NOW + window, haAfter * SEC, grace, { fenceMarginSeconds: m }).run, false)
    }),
    { seed: 7, numRuns: 300 },
  )
})

test('a node without a quorum moves no ha pod off a lost node; with one it does', () => {
  const p = pod('web', { node: 'lost', policy: 'ha' })
  const v = view([node('lost', { state: 'dead', since: NOW - 60 * SEC }), node('ok')], [p], NOW)
  assert.equal(plan(v).length, 2)
  const ops = plan({ ...v, noQuorum: 'hears 1 of 3 nodes' })
  assert.deepEqual(ops, [])
})

test('fence: a pod not running here starts only after a quorum was heard for the settle time; a running one keeps running', () => {
  const q = (heardSince?: number) => ({ size: 3, needed: 2, heard: 2, lastQuorumAt: NOW - 1 * SEC, ...(heardSince !== undefined ? { heardSince } : {}) })
  assert.equal(decideFence(q(NOW - 2 * SEC), NOW, 30 * SEC, 10 * SEC, margin, true).run, false)
  assert.match(decideFence(q(NOW - 2 * SEC), NOW, 30 * SEC, 10 * SEC, margin, true).reason, /waits to hear a quorum/)
  assert.equal(decideFence(q(NOW - 5 * SEC), NOW, 30 * SEC, 10 * SEC, margin, true).run, true)
  assert.equal(decideFence(q(undefined), NOW, 30 * SEC, 10 * SEC, margin, true).run, false)
  assert.equal(decideFence(q(NOW - 2 * SEC), NOW, 30 * SEC, 10 * SEC, margin, false).run, true, 'a running copy is not stopped for it')
  // alone in its cluster: nothing to wait for
  assert.equal(decideFence({ size: 1, needed: 1, heard: 1, lastQuorumAt: NOW }, NOW, 30 * SEC, 10 * SEC, margin, true).run, true)
})

test('bad fencing options in a Cluster are refused with the field named', async () => {
  const { normalizeManifest } = await import('../../../src/model/index.ts')
  const cluster = (scheduling: Record<string, unknown>) => ({
    apiVersion: 'orc/v1',
    kind: 'Cluster',
    metadata: { name: 'default' },
    spec: { id: 'ab'.repeat(8), scheduling },
  })
  assert.throws(() => normalizeManifest(cluster({ fenceQuorum: -1 })), /spec\.scheduling\.fenceQuorum: must be >= 0/)
  assert.throws(() => normalizeManifest(cluster({ fenceMarginSeconds: 'soon' })), /spec\.scheduling\.fenceMarginSeconds/)
  assert.doesNotThrow(() => normalizeManifest(cluster({ fenceQuorum: 1, fenceMarginSeconds: 5 })))
})
