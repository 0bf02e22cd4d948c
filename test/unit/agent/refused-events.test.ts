import assert from 'node:assert/strict'
import { test } from 'node:test'
import { collectEvents } from '../../../src/agent/ops/events.ts'
import { tempStore } from '../../helpers/store.ts'

// Issue #17: a peer update refused on receipt is reported as a cluster event (orc events), from the
// refusing node's status.refusedUpdates (the agent writes it, see agent.ts reportRefusal).
test('refused peer updates recorded on a Node show as UpdateRefused events', async () => {
  const { store, cleanup } = await tempStore()
  try {
    await store.apply({ apiVersion: 'orc/v1', kind: 'Node', metadata: { name: 'a' }, spec: {} } as any, { author: 'controller:node', now: 1000 })
    const at = '2026-12-04T10:00:00.000Z'
    await store.patch(
      { kind: 'Node', namespace: '', name: 'a' },
      [
        {
          path: ['status', 'refusedUpdates'],
          value: [{ at, reason: 'unauthorized', detail: 'revision x by controller:node (signed by b): node b may not write node/a', count: 3 }],
        },
      ],
      { author: 'controller:node', now: 2000 },
    )
    const events = await collectEvents(store, {})
    const e = events.find((x) => x.type === 'UpdateRefused')
    assert.ok(e, JSON.stringify(events))
    assert.equal(e.object, 'node/a')
    assert.equal(e.time, Date.parse(at))
    assert.match(e.message, /unauthorized.*node b may not write node\/a.*3 refused/)
    assert.equal((await collectEvents(store, { kind: 'Pod' })).filter((x) => x.type === 'UpdateRefused').length, 0)
  } finally {
    await cleanup()
  }
})
