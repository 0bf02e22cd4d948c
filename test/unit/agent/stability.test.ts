import assert from 'node:assert/strict'
import { test } from 'node:test'
import { gatherReports, parseStabilityAnswer, pruneClusterTombstones, stabilityAnswer } from '../../../src/agent/stability.ts'
import type { Store } from '../../../src/store/store.ts'
import { pod, seededBytes, tempStore } from '../../helpers/store.ts'

async function relabel(s: Store, v: number) {
  const p = pod('web')
  p.metadata.labels.v = String(v)
  await s.apply(p, { author: 'user:alice', now: v })
}

test('a node prunes only when every member answered and none knows a member it does not', async () => {
  const A = await tempStore({ randomBytes: seededBytes(1) })
  const B = await tempStore({ randomBytes: seededBytes(2) })
  try {
    for (let v = 0; v < 20; v++) await relabel(A.store, v)
    await B.store.applyRemote(await A.store.encodeMissing(B.store.encodeSyncState()))
    const answerOfB = (members: string[]) => stabilityAnswer({ store: B.store, selfPeerId: 'pB', members: () => members })
    const deps = (ask: (p: string) => Promise<unknown>, members = ['pA', 'pB']) => ({ store: A.store, selfPeerId: 'pA', members: () => members, ask })

    assert.deepEqual(await gatherReports(deps(async () => ({}), ['pA'])), [], 'alone: no reports needed')
    assert.match(String(await gatherReports(deps(async () => Promise.reject(new Error('timeout'))))), /member pB: did not answer \(timeout\)/)
    assert.match(String(await gatherReports(deps(async () => ({ report: 5, members: [] })))), /member pB: report is not a bounded base64 string/)
    assert.match(String(await gatherReports(deps(async () => answerOfB(['pA', 'pC'])))), /member pB knows member pC, this node does not yet/)
    assert.match(String(await gatherReports(deps(async () => ({ report: null, members: ['pA', 'pB'] })))), /member pB has writes in flight/)

    const before = A.store.docStats().structs
    const res = await pruneClusterTombstones(deps(async () => answerOfB(['pA'])))
    assert.ok(res.pruned > 0, JSON.stringify(res))
    assert.ok(A.store.docStats().structs < before)
    assert.equal(A.store.stateDigest(), B.store.stateDigest())
  } finally {
    await A.cleanup()
    await B.cleanup()
  }
})

test('answers from peers are validated', () => {
  assert.equal(parseStabilityAnswer(null), 'answer is not an object')
  assert.equal(parseStabilityAnswer({ report: null, members: 'x' }), 'members is not a bounded list of peer ids')
  assert.deepEqual(parseStabilityAnswer({ report: 'AA==', members: ['p'] }), { report: 'AA==', members: ['p'] })
})
