// Who may write a Volume's status on receipt (store/trust.ts): only the node holding its data.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { defaultOwnership } from '../../../src/model/index.ts'
import { defaultAuthorize } from '../../../src/store/index.ts'

const authorize = defaultAuthorize(defaultOwnership(), () => true)
const vol = (status?: Record<string, unknown>) => ({
  kind: 'Volume',
  metadata: { name: 'data', namespace: 'default' },
  spec: { size: '1Gi' },
  ...(status ? { status } : {}),
})
const judge = (signerNode: string, before: Record<string, unknown>, after: Record<string, unknown>, kind = 'Volume') =>
  authorize(
    { i: 'x.1', k: `${kind}/default/data`, s: 2, o: 'update', a: 'controller:volume', r: 'attached', t: 1 },
    {
      before,
      after,
      changes: [{ op: 'set', path: ['status'], value: (after as { status?: unknown }).status }],
      createdBy: 'user:admin',
      signer: { id: `peer-${signerNode}`, node: signerNode },
      objects: { get: () => undefined, list: () => [] } as never,
    },
  )

test('the first attach places a volume on the writing node; afterwards only that node writes its status', () => {
  assert.equal(judge('a', vol(), vol({ node: 'a', phase: 'Attached' })), undefined)
  assert.equal(judge('a', vol({ node: 'a' }), vol({ node: 'a', phase: 'Available' })), undefined)
  assert.match(judge('b', vol({ node: 'a' }), vol({ node: 'a', phase: 'Available' })) ?? '', /node b may not write volume\/data, which lives on node a/)
  assert.match(judge('b', vol(), vol({ node: 'a' })) ?? '', /node b may not place volume\/data on node a/)
  assert.match(judge('a', vol(), vol({ node: 'a' }), 'Pod') ?? '', /writes Volumes only|owned by/)
})
