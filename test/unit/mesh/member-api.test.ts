import assert from 'node:assert/strict'
import { test } from 'node:test'
import { memoryChannelPair } from '../../../src/mesh/framing.ts'
import { callMemberApi, serveMemberApi } from '../../../src/mesh/member-api.ts'

test('member api: request (with its body) and a large answer travel in frames below the limit', async () => {
  const [c, s] = memoryChannelPair(64 * 1024)
  const seen: unknown[] = []
  const lines = Array.from({ length: 5000 }, (_, i) => `line ${i} ${'x'.repeat(40)}`)
  const served = serveMemberApi(
    s,
    async (req, ctx) => {
      seen.push({ req, ctx })
      return { status: 200, body: { lines } }
    },
    'peerA',
    64 * 1024,
  )
  const r = await callMemberApi(c, { method: 'GET', path: '/v1/pods/default/x/logs', query: { tail: '5000' }, body: { session: 1 } })
  await served
  assert.equal(r.status, 200)
  assert.deepEqual((r.body as any).lines, lines)
  // The body travels; which routes may take one is the agent's allow list (agent/member-api.ts).
  assert.deepEqual(seen, [{ req: { method: 'GET', path: '/v1/pods/default/x/logs', query: { tail: '5000' }, body: { session: 1 } }, ctx: { peerId: 'peerA' } }])
})

test('member api: a refusal travels as status and error body; an oversized answer is refused by the caller', async () => {
  const [c, s] = memoryChannelPair()
  const served = serveMemberApi(s, async () => ({ status: 403, body: { error: { code: 'forbidden', message: 'no' } } }), 'peerA', 1 << 20)
  assert.deepEqual(await callMemberApi(c, { method: 'POST', path: '/v1/apply' }), { status: 403, body: { error: { code: 'forbidden', message: 'no' } } })
  await served
  const [c2, s2] = memoryChannelPair()
  void serveMemberApi(s2, async () => ({ status: 200, body: 'y'.repeat(10_000) }), 'peerA', 4096).catch(() => undefined)
  await assert.rejects(callMemberApi(c2, { method: 'GET', path: '/x' }, 1000), /larger than 1000 bytes/)
})
