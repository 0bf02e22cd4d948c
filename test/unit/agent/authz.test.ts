// Every request checked against its principal's roles, and the author derived from the principal:
// the object routes behind the router as the agent wires them (authorize = createAuthorizer).
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { pino } from 'pino'
import { objectRoutes, routeNotFound } from '../../../src/agent/api.ts'
import { createAuthorizer } from '../../../src/agent/authz.ts'
import { combineHandlers, createRouter } from '../../../src/agent/router.ts'
import type { ApiRequest, Principal } from '../../../src/model/index.ts'
import type { Store } from '../../../src/store/store.ts'
import { pod, tempStore } from '../../helpers/store.ts'

const user = (name: string, via: 'socket' | 'remote' = 'remote'): Principal => ({ kind: 'user', name, via })
const binding = (name: string, role: string) => ({ apiVersion: 'orc/v1', kind: 'RoleBinding', metadata: { name }, spec: { role, users: [name] } })

describe('authorisation on every request', () => {
  let store: Store
  let cleanup: () => Promise<void>
  let h: (req: ApiRequest) => Promise<{ status: number; body?: any }>
  let t = Date.parse('2024-01-01T00:00:00Z')
  const reached: string[] = []

  before(async () => {
    ;({ store, cleanup } = await tempStore())
    const now = { now: () => (t += 1000) }
    const routes = combineHandlers(objectRoutes({ store, clock: now, logger: pino({ level: 'silent' }), node: () => ({}) as any }), {
      removeNode: ({ params }) => {
        reached.push(`remove ${params.name}`)
        return { node: params.name, peerId: 'p', removed: true as const }
      },
      down: () => {
        reached.push('down')
        return { stopping: true } as any
      },
      clock: () => ({ now: 1 }),
      podLogs: () => ({ container: 'main', revision: null, lines: ['hello'] }),
    })
    h = createRouter(routes, { notFound: routeNotFound, authorize: createAuthorizer({ store }) })
    for (const [name, role] of [
      ['vera', 'view'],
      ['eddie', 'edit'],
    ]) {
      await store.apply(binding(name!, role!), { author: 'user:admin', now: t })
    }
  })
  after(() => cleanup())

  const apply = (p: Principal, objects: unknown[], extra: Record<string, unknown> = {}) =>
    h({ method: 'POST', path: '/v1/apply', body: { objects, ...extra }, principal: p })

  it('a request without a principal is refused', async () => {
    const r = await h({ method: 'GET', path: '/v1/objects/pods' })
    assert.equal(r.status, 403)
  })

  it('a view user cannot apply; the refusal names the user, verb, kind and namespace', async () => {
    const r = await apply(user('vera'), [pod('v1')])
    assert.equal(r.status, 403)
    assert.equal(r.body.error.message, 'user:vera may not apply Pod in namespace default')
    assert.deepEqual(r.body.error.details, { user: 'vera', verb: 'apply', kind: 'Pod', namespace: 'default' })
    assert.equal((await h({ method: 'GET', path: '/v1/objects/pods', principal: user('vera') })).status, 200, 'but may list')
    assert.equal(store.get({ kind: 'Pod', namespace: 'default', name: 'v1' }), undefined)
  })

  it('the author is the principal: history shows user:NAME, a body author naming anyone else is refused', async () => {
    assert.equal((await apply(user('eddie'), [pod('web')], { reason: 'first' })).status, 200)
    const hist = await store.history({ kind: 'Pod', namespace: 'default', name: 'web' })
    assert.equal(hist[0]!.author, 'user:eddie')
    const forged = await apply(user('eddie'), [{ ...pod('web'), status: { node: 'forged' } }], { author: 'controller:scheduler' })
    assert.equal(forged.status, 403)
    assert.match(forged.body.error.message, /^author "controller:scheduler" refused: the author of a change is who makes it \(user:eddie/)
    // Without the forged author the field stays the scheduler's.
    const own = await apply(user('eddie'), [{ ...pod('web'), status: { node: 'forged' } }])
    assert.equal(own.status, 403)
    assert.match(own.body.error.message, /status\.node is owned by controller:scheduler; user:eddie may not change it/)
    assert.equal(store.get({ kind: 'Pod', namespace: 'default', name: 'web' })?.status?.node, undefined)
    const del = await h({ method: 'DELETE', path: '/v1/objects/pods/default/web', body: { author: 'controller:lifecycle' }, principal: user('admin') })
    assert.equal(del.status, 403, 'a delete cannot name a controller either')
  })

  it('an edit user cannot write roles, bindings, users or policies, remove a node, or stop an agent remotely', async () => {
    const admin = binding('eddie', 'admin')
    const r = await apply(user('eddie'), [pod('ok'), admin])
    assert.equal(r.status, 403)
    assert.equal(r.body.error.message, 'user:eddie may not apply RoleBinding in cluster scope')
    assert.equal(store.get({ kind: 'Pod', namespace: 'default', name: 'ok' }), undefined, 'nothing of the batch is written')
    const sp = { apiVersion: 'orc/v1', kind: 'SecurityPolicy', metadata: { name: 'root', namespace: 'default' }, spec: { allow: ['root'] } }
    assert.equal((await apply(user('eddie'), [sp])).status, 403)
    const rm = await h({ method: 'POST', path: '/v1/cluster/nodes/a/remove', principal: user('eddie') })
    assert.equal(rm.status, 403)
    assert.equal(rm.body.error.message, 'user:eddie may not admin Node in cluster scope')
    assert.equal((await h({ method: 'POST', path: '/v1/down', principal: user('eddie') })).status, 403)
    assert.equal((await h({ method: 'POST', path: '/v1/down', principal: user('vera') })).status, 403)
    assert.deepEqual(reached, [])
    // The admin may; a node's root may stop its own agent from its socket, not remove nodes.
    assert.equal((await h({ method: 'POST', path: '/v1/down', principal: user('admin') })).status, 202)
    assert.equal((await h({ method: 'POST', path: '/v1/cluster/nodes/a/remove', principal: user('root.b', 'socket') })).status, 403)
    assert.equal((await h({ method: 'POST', path: '/v1/down', principal: user('root.b', 'socket') })).status, 202)
    assert.equal((await h({ method: 'POST', path: '/v1/down', principal: user('root.b', 'remote') })).status, 403)
  })

  it('a request a member forwards for a user is checked against that user here', async () => {
    const fwd = (name: string): Principal => ({ kind: 'user', name, via: 'forwarded', peer: 'peerB' })
    const logs = (p: Principal) => h({ method: 'GET', path: '/v1/pods/default/web/logs', principal: p })
    assert.equal((await logs(fwd('eddie'))).status, 200)
    const r = await logs(fwd('vera'))
    assert.equal(r.status, 403)
    assert.equal(r.body.error.message, 'user:vera may not get Pod/logs in namespace default')
    assert.equal((await logs(fwd('nobody'))).status, 403, 'a user this node does not know has no rights')
  })

  it('a member node without a user may call only the member routes', async () => {
    const node: Principal = { kind: 'node', peerId: 'peerB' }
    assert.equal((await h({ method: 'GET', path: '/v1/clock', principal: node })).status, 200)
    assert.equal((await h({ method: 'GET', path: '/v1/objects/pods', principal: node })).status, 403)
    assert.equal((await apply(node, [pod('n')])).status, 403)
  })
})
