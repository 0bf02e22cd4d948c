// compactDecoded rewrites what Yjs decoded (exact-size arrays, shared strings) in place: the
// document must read exactly the same afterwards and still merge, and `since` limits the work to
// what the last decode added.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import * as Y from 'yjs'
import { compactDecoded, toY } from '../../../src/store/ydoc.ts'

function docWith(n: number, client: number): Y.Doc {
  const d = new Y.Doc()
  d.clientID = client
  const m = d.getMap<unknown>('objects')
  for (let i = 0; i < n; i++) {
    m.set(
      `Pod/default/p${i}`,
      toY({ metadata: { name: `p${i}`, labels: { app: 'x' } }, spec: { containers: [{ name: 'main', command: ['sh', '-c', `echo ${i}`] }] } }),
    )
  }
  return d
}

test('a decoded document reads, encodes and merges the same after compaction; since skips what was there', () => {
  const src = docWith(50, 1)
  const a = new Y.Doc()
  Y.applyUpdate(a, Y.encodeStateAsUpdate(src))
  const before = JSON.stringify(a.getMap('objects').toJSON())
  assert.ok(compactDecoded(a) >= 50 * 5)
  assert.equal(JSON.stringify(a.getMap('objects').toJSON()), before)
  assert.deepEqual(Y.encodeStateAsUpdate(a), Y.encodeStateAsUpdate(src))
  // Equal keys now share one string; values are still right after later edits and a merge.
  const more = docWith(60, 2)
  const sv = Y.decodeStateVector(Y.encodeStateVector(a))
  Y.applyUpdate(a, Y.encodeStateAsUpdate(more))
  const visited = compactDecoded(a, sv)
  assert.ok(visited > 0 && visited < 110 * 6, `visited ${visited}: only client 2's structs`)
  ;(a.getMap('objects').get('Pod/default/p3') as Y.Map<unknown>).set('status', 'x')
  const b = new Y.Doc()
  Y.applyUpdate(b, Y.encodeStateAsUpdate(a))
  assert.deepEqual(b.getMap('objects').toJSON(), a.getMap('objects').toJSON())
  assert.equal((b.getMap('objects').toJSON() as any)['Pod/default/p3'].status, 'x')
  assert.deepEqual((b.getMap('objects').toJSON() as any)['Pod/default/p7'].spec.containers[0].command, ['sh', '-c', 'echo 7'])
})
