// Node-to-node requests over a real libp2p mesh: members get the allowlisted read, writes are
// refused by the serving node, and a removed member cannot reach it at all.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import type { ApiRequest } from '../../src/agent/api.ts'
import { createMemberApiHandler } from '../../src/agent/member-api.ts'
import { Fixture, waitFor } from './helpers.ts'

test('member api: a member reads logs, a member-forwarded write is refused, a removed member is cut off', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const reached: ApiRequest[] = []
  const handler = createMemberApiHandler(async (req) => {
    reached.push(req)
    return { status: 200, body: { lines: ['hi'] } }
  })
  const { mesh: a } = await fx.create('a', { memberApiHandler: handler })
  const b = await fx.join('b', a, { memberApiHandler: handler })
  await waitFor('b alive on a', () => a.members().some((m) => m.peerId === b.peerId && m.state === 'alive'))

  const ok = await b.memberRequest(a.peerId, { method: 'GET', path: '/v1/pods/default/x/logs', query: { tail: '1' } })
  assert.deepEqual(ok, { status: 200, body: { lines: ['hi'] } })
  for (const req of [
    { method: 'POST', path: '/v1/apply', body: { kind: 'Pod' } },
    { method: 'GET', path: '/v1/cluster/credential' },
    { method: 'DELETE', path: '/v1/objects/Pod/default/x' },
  ]) {
    const r = await b.memberRequest(a.peerId, req)
    assert.equal(r.status, 403, `${req.method} ${req.path}`)
    assert.match((r.body as any).error.message, /node-to-node request refused/)
  }
  assert.deepEqual(reached, [{ method: 'GET', path: '/v1/pods/default/x/logs', query: { tail: '1' }, principal: { kind: 'node', peerId: b.peerId } }])
  // A request forwarded for a user carries the user; the receiving node sees it as forwarded by b.
  await b.memberRequest(a.peerId, { method: 'GET', path: '/v1/pods/default/x/logs', principal: { kind: 'user', name: 'alice', via: 'socket' } })
  assert.deepEqual(reached.at(-1)?.principal, { kind: 'user', name: 'alice', via: 'forwarded', peer: b.peerId })
  reached.pop()

  await a.removeMember(b.peerId)
  await assert.rejects(b.memberRequest(a.peerId, { method: 'GET', path: '/v1/pods/default/x/logs' }, { timeoutMs: 3000 }), (err: Error) => {
    assert.match(err.message, /dial|request to|closed|reset|refused|EOF/i)
    return true
  })
  assert.equal(reached.length, 1, 'nothing from the removed member reached the handler')
})
