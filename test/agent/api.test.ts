/** The API handler and its unix-socket server, in process, over the real store. */

import assert from 'node:assert/strict'
import { request } from 'node:http'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { pino } from 'pino'
import { type ApiHandler, createApiHandler, type SocketServer, serveOnSocket } from '../../src/agent/index.ts'
import { ApiClient } from '../../src/cli/client.ts'
import { isOrcError } from '../../src/model/index.ts'
import { type ObjectStore, openStore } from '../../src/store/index.ts'
import { tempDir } from './helpers.ts'

const pod = (name: string, labels: Record<string, string> = {}) => ({
  apiVersion: 'orc/v1',
  kind: 'Pod',
  metadata: { name, labels },
  spec: { containers: [{ name: 'main', image: 'busybox' }] },
})

describe('agent API', () => {
  const tmp = tempDir()
  let store: ObjectStore
  let handle: ApiHandler
  let server: SocketServer
  let client: ApiClient
  let t = Date.parse('2024-01-01T00:00:00Z')
  const clock = { now: () => (t += 1000) }

  before(async () => {
    store = await openStore({ dir: join(tmp.path, 'db') })
    handle = createApiHandler({
      store,
      clock,
      logger: pino({ level: 'silent' }),
      node: () => ({ name: 'n1', version: '0.0.0', dataDir: tmp.path, socket: '', pid: 1, startedAt: 0 }),
    })
    server = await serveOnSocket(handle, join(tmp.path, 'orc.sock'), { logger: pino({ level: 'silent' }), maxBodyBytes: 1 << 20 })
    client = new ApiClient(server.path)
  })
  after(async () => {
    await server.close()
    await store.close()
    tmp.remove()
  })

  it('applies a batch and reports what happened to each object', async () => {
    const r = await handle({ method: 'POST', path: '/v1/apply', body: { objects: [pod('a'), pod('b')], author: 'user:t' } })
    assert.equal(r.status, 200)
    assert.deepEqual((r.body as { results: unknown[] }).results, [
      { kind: 'Pod', namespace: 'default', name: 'a', outcome: 'created', revision: 1 },
      { kind: 'Pod', namespace: 'default', name: 'b', outcome: 'created', revision: 1 },
    ])
    const again = await client.call<{ results: { outcome: string }[] }>('POST', '/v1/apply', {
      body: { objects: [pod('a'), pod('b', { x: 'y' })], author: 'user:t' },
    })
    assert.deepEqual(
      again.results.map((x) => x.outcome),
      ['unchanged', 'configured'],
    )
  })

  it('validates the whole batch before writing any of it, and says which object failed', async () => {
    const r = await handle({
      method: 'POST',
      path: '/v1/apply',
      body: { objects: [pod('a', { changed: 'yes' }), { ...pod('c'), spec: { containers: [] } }], author: 'user:t' },
    })
    assert.equal(r.status, 400)
    const e = (r.body as { error: { code: string; message: string; details: { index: number } } }).error
    assert.equal(e.code, 'invalid')
    assert.equal(e.details.index, 1)
    assert.match(e.message, /pod\/c: spec\.containers: must have at least one container/)
    assert.deepEqual(store.get({ kind: 'Pod', namespace: 'default', name: 'a' })!.metadata.labels, {})
  })

  it('maps error codes to HTTP statuses and refuses bad authors and unknown routes', async () => {
    const cases: [Parameters<ApiHandler>[0], number, string][] = [
      [{ method: 'GET', path: '/v1/objects/pods/default/nope' }, 404, 'not_found'],
      [{ method: 'GET', path: '/v1/objects/gizmos' }, 400, 'invalid'],
      [{ method: 'POST', path: '/v1/apply', body: { objects: [pod('x')], author: 'root' } }, 400, 'invalid'],
      [{ method: 'POST', path: '/v1/apply', body: { objects: [{ ...pod('x'), status: { phase: 'Running' } }], author: 'user:t' } }, 403, 'forbidden'],
      [{ method: 'GET', path: '/v1/objects/pods/default/a/revisions/9' }, 404, 'not_found'],
      [{ method: 'PUT', path: '/v1/status' }, 404, 'not_found'],
    ]
    for (const [req, status, code] of cases) {
      const r = await handle(req)
      assert.equal(r.status, status, `${req.method} ${req.path}`)
      assert.equal((r.body as { error: { code: string } }).error.code, code)
    }
  })

  it('serves cluster-scoped objects under namespace _, lists across namespaces, and answers history queries', async () => {
    await store.apply({ apiVersion: 'orc/v1', kind: 'Node', metadata: { name: 'n1' } }, { author: 'controller:node', now: clock.now() })
    const node = await client.call<{ object: { metadata: { name: string } } }>('GET', '/v1/objects/nodes/_/n1')
    assert.equal(node.object.metadata.name, 'n1')
    await handle({ method: 'POST', path: '/v1/apply', body: { objects: [pod('z')], author: 'user:t', namespace: 'other' } })
    const all = await client.call<{ items: { metadata: { namespace: string; name: string } }[] }>('GET', '/v1/objects/pods', { query: { all: 1 } })
    assert.deepEqual(
      all.items.map((i) => `${i.metadata.namespace}/${i.metadata.name}`),
      ['default/a', 'default/b', 'other/z'],
    )
    const h = await client.call<{ revisions: { number: number }[] }>('GET', '/v1/objects/pods/default/b/history', { query: { excludeAuthor: 'user:t' } })
    assert.deepEqual(h.revisions, [])
    const d = await client.call<{ changes: unknown[] }>('GET', '/v1/objects/pods/default/b/diff', { query: { from: 1, to: 2 } })
    assert.deepEqual(d.changes, [{ op: 'set', path: ['metadata', 'labels', 'x'], value: 'y' }])
  })

  it('answers malformed and oversized bodies with an error, not a crash', async () => {
    const raw = (body: string) =>
      new Promise<{ status: number; body: { error: { code: string } } }>((resolve, reject) => {
        const r = request({ socketPath: server.path, method: 'POST', path: '/v1/apply', headers: { 'content-type': 'application/json' } }, (res) => {
          let text = ''
          res.on('data', (c) => (text += c))
          res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) }))
        })
        r.on('error', reject)
        r.end(body)
      })
    const bad = await raw('{"objects": [')
    assert.equal(bad.status, 400)
    assert.equal(bad.body.error.code, 'parse')
    await assert.rejects(
      client.call('POST', '/v1/apply', { body: { objects: [], author: 'user:t', pad: 'x'.repeat(2 << 20) } }),
      (e) => isOrcError(e, 'too_large') || isOrcError(e, 'unavailable'),
    )
    assert.equal((await client.call<{ objects: number }>('GET', '/v1/status')).objects, store.count())
  })
})
