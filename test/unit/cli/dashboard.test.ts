// The dashboard server without a browser: who may use it (token, Host), what it passes on to the
// API client and what it refuses, and the live stream's snapshot-then-changes. A recording client
// stands in for the agent; test/cluster/dashboard.test.ts drives the real thing in Chromium.

import assert from 'node:assert/strict'
import { request } from 'node:http'
import { test } from 'node:test'
import type { ClientRequest } from '../../../src/cli/client.ts'
import { type Dashboard, startDashboard } from '../../../src/cli/dashboard/server.ts'
import type { ApiCaller } from '../../../src/cli/remote.ts'
import { OrcError } from '../../../src/model/index.ts'

interface Call {
  method: string
  path: string
  req: ClientRequest
}

class RecordingClient implements ApiCaller {
  calls: Call[] = []
  answers = new Map<string, (req: ClientRequest) => unknown>()
  async call<T>(method: string, path: string, req: ClientRequest = {}): Promise<T> {
    this.calls.push({ method, path, req })
    const a = this.answers.get(`${method} ${path}`)
    if (a === undefined) throw new OrcError('not_found', `no answer for ${method} ${path}`)
    return (await a(req)) as T
  }
}

function get(
  port: number,
  path: string,
  headers: Record<string, string> = {},
  method = 'GET',
  body?: string,
): Promise<{ status: number; headers: Record<string, unknown>; text: string }> {
  return new Promise((resolve, reject) => {
    const r = request({ host: '127.0.0.1', port, path, method, headers: { host: `127.0.0.1:${port}`, ...headers }, agent: false }, (res) => {
      let text = ''
      res.on('data', (d: Buffer) => (text += d.toString()))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }))
    })
    r.on('error', reject)
    if (body !== undefined) r.write(body)
    r.end()
  })
}

async function withDashboard(fn: (d: Dashboard, client: RecordingClient, token: string) => Promise<void>): Promise<void> {
  const client = new RecordingClient()
  const token = 'T'.repeat(43)
  const d = await startDashboard({ client, token, watchWaitMs: 50, membersPollMs: 50 })
  try {
    await fn(d, client, token)
  } finally {
    await d.close()
  }
}

test('the page and its assets are served from 127.0.0.1 with a strict CSP; the printed URL carries the token in its fragment', async () => {
  await withDashboard(async (d, _c, token) => {
    assert.match(d.url, new RegExp(`^http://127\\.0\\.0\\.1:${d.port}/#token=${token}$`))
    const page = await get(d.port, '/')
    assert.equal(page.status, 200)
    assert.match(page.text, /<script type="module" src="\/app.js">/)
    assert.match(String(page.headers['content-security-policy']), /script-src 'self'/)
    assert.equal(page.headers['referrer-policy'], 'no-referrer')
    const app = await get(d.port, '/app.js')
    assert.equal(app.status, 200)
    assert.match(String(app.headers['content-type']), /javascript/)
    assert.ok(app.text.length > 10_000, 'Preact, htm and the pages are in one module')
    assert.doesNotMatch(app.text, /https?:\/\/(unpkg|cdn|esm\.sh)/, 'nothing loaded from a CDN')
    assert.equal((await get(d.port, '/style.css')).status, 200)
    assert.equal((await get(d.port, '/nope.js')).status, 404)
  })
})

test('a request for another Host (DNS rebinding) or without the token is refused before the client is called', async () => {
  await withDashboard(async (d, c, token) => {
    c.answers.set('GET /v1/status', () => ({ ok: true }))
    const rebound = await get(d.port, '/api/v1/status', { host: `evil.example:${d.port}`, 'x-orc-token': token })
    assert.equal(rebound.status, 421)
    assert.equal((await get(d.port, '/', { host: 'evil.example' })).status, 421)
    const none = await get(d.port, '/api/v1/status')
    assert.equal(none.status, 401)
    assert.match(JSON.parse(none.text).message, /token in the URL that `orc dashboard` printed/)
    assert.equal((await get(d.port, '/api/v1/status', { 'x-orc-token': `${token}x` })).status, 401)
    // The token in a query counts only for the event streams (EventSource sets no header).
    assert.equal((await get(d.port, `/api/v1/status?token=${token}`)).status, 401)
    assert.equal(c.calls.length, 0)
    const ok = await get(d.port, '/api/v1/status', { 'x-orc-token': token, host: `localhost:${d.port}` })
    assert.equal(ok.status, 200, ok.text)
    assert.deepEqual(JSON.parse(ok.text), { ok: true })
  })
})

test('only the routes the page uses are passed on, with their query; errors keep the agent code', async () => {
  await withDashboard(async (d, c, token) => {
    const h = { 'x-orc-token': token }
    c.answers.set('GET /v1/objects/Pod/default/web/history', (req) => ({ revisions: [], query: req.query }))
    const hist = await get(d.port, '/api/v1/objects/Pod/default/web/history?excludeAuthor=controller%3A', h)
    assert.equal(hist.status, 200, hist.text)
    assert.deepEqual(JSON.parse(hist.text).query, { excludeAuthor: 'controller:' })
    for (const [method, path] of [
      ['GET', '/api/v1/cluster/credential'],
      ['GET', '/api/v1/cluster/tokens'],
      ['POST', '/api/v1/down'],
      ['POST', '/api/v1/apply'],
      ['DELETE', '/api/v1/objects/Pod/default/web'],
      ['POST', '/api/v1/pods/default/web/exec'],
    ] as const) {
      const r = await get(d.port, path, { ...h, 'content-type': 'application/json' }, method, '{}')
      assert.equal(r.status, 404, `${method} ${path}: ${r.text}`)
    }
    assert.equal(c.calls.length, 1, 'nothing but the history call reached the client')
    c.answers.set('GET /v1/objects/Pod/default/gone', () => {
      throw new OrcError('forbidden', 'user:viewer may not get pods')
    })
    const denied = await get(d.port, '/api/v1/objects/Pod/default/gone', h)
    assert.equal(denied.status, 403)
    assert.equal(JSON.parse(denied.text).message, 'user:viewer may not get pods')
  })
})

test('a rollback needs a reason and JSON; the author is never taken from the page', async () => {
  await withDashboard(async (d, c, token) => {
    const h = { 'x-orc-token': token, 'content-type': 'application/json' }
    c.answers.set('POST /v1/objects/Pod/default/web/rollback', (req) => ({ object: null, revision: { number: 7 }, body: req.body }))
    const path = '/api/v1/objects/Pod/default/web/rollback'
    const noReason = await get(d.port, path, h, 'POST', JSON.stringify({ to: 2, reason: '  ' }))
    assert.equal(noReason.status, 400)
    assert.match(JSON.parse(noReason.text).message, /needs a reason/)
    const form = await get(d.port, path, { ...h, 'content-type': 'application/x-www-form-urlencoded' }, 'POST', 'to=2&reason=x')
    assert.equal(form.status, 415)
    const bad = await get(d.port, path, h, 'POST', '{nope')
    assert.equal(bad.status, 400)
    assert.equal(c.calls.length, 0)
    const ok = await get(d.port, path, h, 'POST', JSON.stringify({ to: 2, reason: ' undo v3 ', author: 'user:someone-else' }))
    assert.equal(ok.status, 200, ok.text)
    assert.deepEqual(JSON.parse(ok.text).body, { reason: 'undo v3', to: 2 })
  })
})

test('the live stream sends the list once, then only what changed; members when their state changes', async () => {
  await withDashboard(async (d, c, token) => {
    const pod = (name: string, rev: string) => ({ kind: 'Pod', metadata: { namespace: 'default', name, revisionId: rev } })
    const lists = [
      { version: 'v1', items: [pod('a', '1'), pod('b', '1')] },
      { version: 'v2', items: [pod('a', '2'), pod('c', '1')] },
    ]
    let n = 0
    c.answers.set('GET /v1/watch/Pod', (req) => {
      const q = req.query ?? {}
      if (q.known === undefined) return { kind: 'Pod', ...lists[0] }
      if (q.known === 'v1' && n++ === 0) return { kind: 'Pod', ...lists[1] }
      return new Promise((r) => setTimeout(() => r({ kind: 'Pod', version: String(q.known) }), 50))
    })
    c.answers.set('GET /v1/members', () => ({ self: 'x', members: [{ name: 'x', state: 'alive', self: true }] }))
    const events: { event: string; data: any }[] = []
    await new Promise<void>((resolve, reject) => {
      const r = request(
        { host: '127.0.0.1', port: d.port, path: `/api/dash/watch?kinds=Pod&token=${token}`, headers: { host: `127.0.0.1:${d.port}` }, agent: false },
        (res) => {
          assert.equal(res.headers['content-type'], 'text/event-stream; charset=utf-8')
          let buf = ''
          res.on('data', (chunk: Buffer) => {
            buf += chunk.toString()
            let i: number
            while ((i = buf.indexOf('\n\n')) >= 0) {
              const block = buf.slice(0, i)
              buf = buf.slice(i + 2)
              const ev = /^event: (.+)$/m.exec(block)
              const data = /^data: (.+)$/m.exec(block)
              if (ev && data) events.push({ event: ev[1]!, data: JSON.parse(data[1]!) })
            }
            if (events.some((e) => e.event === 'change') && events.some((e) => e.event === 'members')) {
              r.destroy()
              resolve()
            }
          })
        },
      )
      r.on('error', (err) => (err.message.includes('aborted') ? resolve() : reject(err)))
      r.end()
    })
    const snap = events.find((e) => e.event === 'snapshot')!
    assert.deepEqual(
      snap.data.items.map((o: any) => o.metadata.name),
      ['a', 'b'],
    )
    const change = events.find((e) => e.event === 'change')!
    assert.deepEqual(
      change.data.upserts.map((o: any) => `${o.metadata.name}@${o.metadata.revisionId}`),
      ['a@2', 'c@1'],
    )
    assert.deepEqual(change.data.removed, ['default/b'])
    assert.equal(events.filter((e) => e.event === 'change').length, 1, 'an unchanged list sends nothing')
    assert.equal(events.find((e) => e.event === 'members')!.data.members[0].name, 'x')
  })
})

test('a --port already taken is named, with what to do', async () => {
  await withDashboard(async (d) => {
    await assert.rejects(startDashboard({ client: new RecordingClient(), port: d.port }), (err: OrcError) => {
      assert.equal(err.code, 'conflict')
      assert.equal(err.message, `port ${d.port} on 127.0.0.1 is in use: choose another --port, or leave it out for a free one`)
      return true
    })
  })
})
