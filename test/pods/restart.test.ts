/** An agent restart re-adopts the containers it left running: no duplicates, no restarts. */

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { pidsRunning, podManifest, skipReason, startTestAgent, waitFor } from './helpers.ts'

test('after an agent restart, running pods are adopted, not started twice; a pod deleted meanwhile is stopped', { skip: skipReason() }, async () => {
  const a = await startTestAgent()
  try {
    await a.orc(['apply', '-f', '-'], podManifest('keep1', a.image, 'exec sleep 4711'))
    await a.orc(['apply', '-f', '-'], podManifest('keep2', a.image, 'exec sleep 4712', { restartPolicy: 'Never' }))
    await waitFor('both running', () => pidsRunning(['sleep', '4711']).length === 1 && pidsRunning(['sleep', '4712']).length === 1)
    const before = [pidsRunning(['sleep', '4711'])[0], pidsRunning(['sleep', '4712'])[0]]
    const revBefore = (await a.pod('keep1'))!.metadata.revision

    await a.stop()
    assert.deepEqual([pidsRunning(['sleep', '4711'])[0], pidsRunning(['sleep', '4712'])[0]], before, 'pods outlive their agent')

    await a.start()
    await waitFor('agent adopted its pods', () => /pod adopted after agent restart[\s\S]*pod adopted after agent restart/.test(a.output()))
    assert.deepEqual(pidsRunning(['sleep', '4711']), [before[0]], 'same process, no duplicate')
    assert.deepEqual(pidsRunning(['sleep', '4712']), [before[1]], 'same process, no duplicate')
    const p1 = (await a.pod('keep1'))!
    assert.equal(p1.status.phase, 'Running')
    assert.equal(p1.status.containers[0].restarts, 0)
    assert.equal(p1.status.containers[0].pid, (await a.pod('keep1'))!.status.containers[0].pid)
    assert.equal(p1.metadata.revision, revBefore, 'adoption wrote no new revision')
    const get = await a.orc(['get', 'pods'])
    assert.match(get.stdout, /keep1\s+1\/1\s+Running\s+n1/)

    // The adopted container is watched again: killing it is noticed and Always restarts it.
    process.kill(before[0]!, 'SIGKILL')
    await waitFor('keep1 restarted by policy', async () => {
      const p = await a.pod('keep1')
      return p?.status?.containers?.[0]?.restarts === 1 && p.status.phase === 'Running' && pidsRunning(['sleep', '4711']).length === 1
    })
    assert.notEqual(pidsRunning(['sleep', '4711'])[0], before[0])
    await a.orc(['delete', 'pod/keep1'])
    await a.orc(['delete', 'pod/keep2'])
    await waitFor('all gone', () => pidsRunning(['sleep', '4711']).length + pidsRunning(['sleep', '4712']).length === 0)
  } finally {
    await a.stop()
    a.remove()
  }
})
