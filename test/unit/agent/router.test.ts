import assert from 'node:assert/strict'
import { test } from 'node:test'
import { routeNotFound } from '../../../src/agent/api.ts'
import { combineHandlers, createRouter } from '../../../src/agent/router.ts'
import { pathOf, patternOf, ROUTES, type RouteName } from '../../../src/agent/routes.ts'
import { OrcError } from '../../../src/model/index.ts'

test('every route declares a permission, and no two routes of one method can match the same path', () => {
  const names = Object.keys(ROUTES) as RouteName[]
  for (const n of names) assert.ok(ROUTES[n].permission.verb, `${n} has no permission`)
  const clash = (a: string[], b: string[]) => a.length === b.length && a.every((s, i) => s.startsWith(':') || b[i]!.startsWith(':') || s === b[i])
  for (const [i, a] of names.entries()) {
    for (const b of names.slice(i + 1)) {
      if (ROUTES[a].method !== ROUTES[b].method) continue
      const pa = patternOf(ROUTES[a].path)
      const pb = patternOf(ROUTES[b].path)
      // The router takes the first match: an overlap would make the later route unreachable for some paths.
      assert.ok(!clash(pa, pb), `${a} and ${b} overlap`)
    }
  }
})

test('the router extracts decoded params, answers with the route status, and maps errors to their wire form', async () => {
  const h = createRouter(
    {
      getObject: ({ params }) => ({ object: { apiVersion: 'orc/v1', kind: params.kind, metadata: { name: params.name, namespace: params.ns } } as never }),
      down: () => ({ node: 'n1', pid: 1, network: {} as never }),
      listObjects: () => {
        throw new OrcError('conflict', 'busy', { why: 'test' })
      },
    },
    { notFound: routeNotFound },
  )
  const got = await h({ method: 'get', path: pathOf('getObject', { kind: 'Pod', ns: 'a b', name: 'x/y' }) + '?q=1' })
  assert.deepEqual(got, { status: 200, body: { object: { apiVersion: 'orc/v1', kind: 'Pod', metadata: { name: 'x/y', namespace: 'a b' } } } })
  assert.equal((await h({ method: 'POST', path: '/v1/down' })).status, 202)
  assert.deepEqual(await h({ method: 'GET', path: '/v1/objects/pods' }), {
    status: 409,
    body: { error: { code: 'conflict', message: 'busy', details: { why: 'test' } } },
  })
  const err = async (method: string, path: string) => {
    const r = await h({ method, path })
    return [r.status, (r.body as { error: { message: string } }).error.message]
  }
  assert.deepEqual(await err('PUT', '/v1/status'), [404, 'no such API route: PUT /v1/status'])
  assert.deepEqual(await err('GET', '/v2/status'), [404, 'no such API path /v2/status'])
  assert.deepEqual(await err('GET', '/v1/federations/lab/nope'), [404, 'no such federation route: GET /v1/federations/lab/nope'])
  assert.equal((await err('GET', '/v1/objects/gizmos/default/x/nope'))[0], 400, 'an unknown kind is named before an unknown sub-route')
  assert.deepEqual(await err('GET', '/v1/objects/%E0%A4%A/default/x'), [500, 'internal error: URI malformed'])
})

test('a route bound by two components is refused at wiring time', () => {
  assert.throws(() => combineHandlers({ clock: () => ({ now: 1 }) }, { clock: () => ({ now: 2 }) }), /route clock has two handlers/)
})
