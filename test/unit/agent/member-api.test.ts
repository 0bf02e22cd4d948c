import assert from 'node:assert/strict'
import { test } from 'node:test'
import type { ApiRequest } from '../../../src/agent/api.ts'
import { createMemberApiHandler, memberRouteAllowed } from '../../../src/agent/member-api.ts'
import { forwardTimeoutMs, type LogsProxyMember, proxiedLogs } from '../../../src/agent/pods/logs-proxy.ts'
import { createRouter } from '../../../src/agent/router.ts'

test('a member-forwarded request may only read pod logs: writes and admin routes are refused before any handler runs', async () => {
  const reached: ApiRequest[] = []
  const h = createMemberApiHandler(async (req) => {
    reached.push(req)
    return { status: 200, body: { ok: true } }
  })
  const refused: Array<[string, string]> = [
    ['POST', '/v1/apply'],
    ['PUT', '/v1/objects/Pod/default/web'],
    ['DELETE', '/v1/objects/Pod/default/web'],
    ['POST', '/v1/objects/Pod/default/web/rollback'],
    ['POST', '/v1/cluster/tokens'],
    ['GET', '/v1/cluster/credential'],
    ['POST', '/v1/cluster/nodes/b/remove'],
    ['GET', '/v1/objects/Pod/default/web'],
    ['GET', '/v1/status'],
    ['POST', '/v1/pods/default/web/logs'],
    ['GET', '/v1/pods/default/web/logs/../../../cluster/credential'],
    ['GET', '/v1/pods/default/web/logs/x'],
    ['GET', '/v1/pods/%E0%A4%A/web/logs'],
  ]
  for (const [method, path] of refused) {
    const r = await h({ method, path, body: { kind: 'Pod' } }, { peerId: 'peerB' })
    assert.equal(r.status, 403, `${method} ${path}`)
    assert.match((r.body as any).error.message, /^node-to-node request refused: members may only read pod logs/)
  }
  assert.deepEqual(reached, [], 'no refused request reached the handler')

  const ok = await h({ method: 'get', path: '/v1/pods/default/web/logs', query: { tail: '1' }, body: { sneaky: true } }, { peerId: 'peerB' })
  assert.equal(ok.status, 200)
  assert.deepEqual(
    reached,
    [{ method: 'GET', path: '/v1/pods/default/web/logs', query: { tail: '1' }, principal: { kind: 'node', peerId: 'peerB' } }],
    'only method, path and query travel on; the principal is the member node',
  )
  // Forwarded for a user: the user is the principal (re-checked by the router), the allow-list still applies.
  reached.length = 0
  await h({ method: 'GET', path: '/v1/pods/default/web/logs' }, { peerId: 'peerB', onBehalfOf: 'alice' })
  assert.deepEqual((reached as ApiRequest[]).at(-1)?.principal, { kind: 'user', name: 'alice', via: 'forwarded', peer: 'peerB' })
  assert.equal((await h({ method: 'POST', path: '/v1/apply' }, { peerId: 'peerB', onBehalfOf: 'admin' })).status, 403, 'a claimed admin gets no write')
  assert.equal(memberRouteAllowed({ method: 'GET', path: '/v1/pods/ns/x/logs?follow=1' }), true)
})

const pod = (name: string, node: string) => ({
  apiVersion: 'orc/v1',
  kind: 'Pod',
  metadata: { name, namespace: 'default', uid: 'u1' },
  spec: { placement: { node } },
  status: {},
})
const nodeObj = (name: string, status: Record<string, unknown>) => ({ apiVersion: 'orc/v1', kind: 'Node', metadata: { name }, spec: {}, status })

function proxy(members: LogsProxyMember[], opts: { removed?: boolean; fail?: Error } = {}) {
  const objects = new Map<string, any>([
    ['Pod/default/web', pod('web', 'n2')],
    ['Pod/default/here', pod('here', 'n1')],
    ['Node//n2', nodeObj('n2', { peerId: 'P2', ...(opts.removed ? { state: 'Removed' } : {}) })],
  ])
  const forwarded: Array<{ peer: string; req: ApiRequest; timeoutMs: number }> = []
  const local: ApiRequest[] = []
  const logs = proxiedLogs(
    {
      store: { get: (ref: any) => objects.get(`${ref.kind}/${ref.namespace}/${ref.name}`) } as any,
      nodeName: 'n1',
      members: () => members,
      forward: async (peer, req, timeoutMs) => {
        forwarded.push({ peer, req, timeoutMs })
        if (opts.fail) throw opts.fail
        return { status: 200, body: { lines: ['from n2'] } }
      },
      now: () => 1_000_000,
    },
    async ({ req }) => {
      local.push(req)
      return { container: 'main', revision: 1, lines: ['local'] }
    },
  )
  const h = createRouter({ podLogs: logs })
  return { h, forwarded, local }
}

const self: LogsProxyMember = { peerId: 'P1', name: 'n1', state: 'alive', lastSeen: 1_000_000, self: true }

test('logs of a pod on another member are forwarded to it; local pods and other routes are not', async () => {
  const { h, forwarded, local } = proxy([self, { peerId: 'P2', name: 'n2', state: 'alive', lastSeen: 999_000, self: false }])
  const r = await h({ method: 'GET', path: '/v1/pods/default/web/logs', query: { tail: '1' } })
  assert.deepEqual(r, { status: 200, body: { lines: ['from n2'] } })
  assert.deepEqual(forwarded, [{ peer: 'P2', req: { method: 'GET', path: '/v1/pods/default/web/logs', query: { tail: '1' } }, timeoutMs: 30_000 }])
  await h({ method: 'GET', path: '/v1/pods/default/here/logs' })
  await h({ method: 'GET', path: '/v1/pods/default/missing/logs' })
  assert.equal((await h({ method: 'POST', path: '/v1/pods/default/web/logs' })).status, 404, 'not the logs route')
  assert.equal(local.length, 2)
  assert.equal(forwarded.length, 1)
  assert.equal(forwardTimeoutMs({ follow: '1', cursor: '10', waitMs: '10000' }), 25_000, 'a poll waits on the remote first')
  assert.equal(forwardTimeoutMs({ follow: '1', cursor: '10', waitMs: '999999' }), 45_000)
})

test("when the pod's node cannot answer, the error names the node and its state", async () => {
  const dead = proxy([self, { peerId: 'P2', name: 'n2', state: 'dead', lastSeen: 1_000_000 - 120_000, self: false }])
  const r = await dead.h({ method: 'GET', path: '/v1/pods/default/web/logs' })
  assert.equal(r.status, 503)
  assert.equal((r.body as any).error.message, 'pod/web runs on node n2, which is dead (last seen 2m ago)')
  assert.equal(dead.forwarded.length, 0, 'a dead node is not dialed')

  const suspect = proxy([self, { peerId: 'P2', name: 'n2', state: 'suspect', lastSeen: 1_000_000 - 7_000, self: false }], {
    fail: new Error('dial P2: timed out'),
  })
  const s = await suspect.h({ method: 'GET', path: '/v1/pods/default/web/logs' })
  assert.equal((s.body as any).error.message, 'pod/web runs on node n2, which is suspect (last seen 7s ago) and did not answer: dial P2: timed out')

  const removed = proxy([self], { removed: true })
  assert.match(
    ((await removed.h({ method: 'GET', path: '/v1/pods/default/web/logs' })).body as any).error.message,
    /runs on node n2, which was removed from the cluster/,
  )
  const unknown = proxy([self])
  assert.match(
    ((await unknown.h({ method: 'GET', path: '/v1/pods/default/web/logs' })).body as any).error.message,
    /runs on node n2, which is not a member this node knows/,
  )
})
