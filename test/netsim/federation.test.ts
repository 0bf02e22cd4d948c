// The federation scenario at CI size (5 clusters × 20 nodes, fixed seed): whole-cluster cuts and
// heals, a lost cluster, a three-way split. Checked: the federation document converges everywhere
// after each heal, no private object leaves its cluster, no shared pod runs twice once views
// agree, every ha pod of the lost cluster is re-placed in a cluster its placement.clusters allows
// (within suspectAfter + haAfter + 3 heartbeats), and no best-effort pod moves.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { runChecked } from './helpers.ts'

test('federation of 5 clusters × 20 nodes, seed 7: partitions between clusters, invariants hold', async () => {
  const r = await runChecked('federation', 100, 7)
  assert.equal(r.figures['nodes per cluster'], 20)
  assert.ok((r.figures['ha pods on lost cluster-1'] as number) > 0, 'the scenario lost no ha pods: it tested nothing')
  assert.equal(r.figures['ha re-placed outside placement.clusters'], 0)
  assert.equal(r.figures['best-effort pods moved'], 0)
  assert.ok((r.figures['private writes'] as number) > 0, 'no private writes: the leak check tested nothing')
  assert.equal(r.figures['private objects seen outside their cluster'], 0)
  assert.equal(r.figures['pods running at end'], r.figures['shared pods'])
  for (const k of ['converged after cut of cluster-0 healed (s)', 'converged after 3-way split healed (s)', 'converged after cluster-1 returned (s)']) {
    assert.equal(typeof r.figures[k], 'number', `${k}: ${r.figures[k]}`)
  }
})
