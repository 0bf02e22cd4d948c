/**
 * `orc dashboard`: a local HTTP server for the browser, and a thin proxy from it to the CLI's API
 * client (the unix socket, or a remote node with the user's credential). Every request the page
 * makes is an API call made as the user who started the dashboard, so the agent checks it against
 * that user's roles as it checks `orc` commands; the dashboard adds no listener on nodes and no
 * login of its own.
 *
 * Only the page opened from the printed URL may use it: the URL's fragment carries a random token
 * (never sent in a Referer or to the server by the browser itself); the page sends it back in a
 * header (and in the query of its two event streams, which cannot set headers). A Host other than
 * the loopback address and port is refused (DNS rebinding), and only the routes the page uses are
 * passed on (docs/dashboard.md, "Security").
 */
import { randomBytes, timingSafeEqual } from 'node:crypto'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { matchPattern, patternOf, ROUTES, type RouteName, type RouteSpec } from '../../agent/index.ts'
import { httpStatusOf, OrcError } from '../../model/index.ts'
import type { ClientRequest } from '../client.ts'
import type { ApiCaller } from '../remote.ts'
import { type Asset, loadDashboardAssets } from './assets.ts'
import { type EventStream, followLogs, watchKinds } from './streams.ts'
import { clusterMap, podPage } from './views.ts'

/** The API routes the page may call through the proxy; every other path is refused here. */
export const PROXIED_ROUTES: readonly RouteName[] = [
  'status',
  'whoami',
  'listObjects',
  'getObject',
  'history',
  'revision',
  'diff',
  'rollback',
  'podLogs',
  'podPlacement',
  'events',
  'members',
  'network',
  'top',
  'federations',
]

const MAX_BODY_BYTES = 64 * 1024

export interface DashboardOptions {
  client: ApiCaller
  /** Default 127.0.0.1; the dashboard is for the user's own machine. */
  host?: string
  /** Default 0: a free port. */
  port?: number
  /** Default: 32 random bytes. */
  token?: string
  now?: () => number
  /** How long one watch long-poll of the agent waits for a change (ms; default 10 000). */
  watchWaitMs?: number
  /** How often the members (liveness) are read for the live view (ms; default 2 000). */
  membersPollMs?: number
}

export interface Dashboard {
  /** The page's address with its token: what to open. */
  url: string
  port: number
  close(): Promise<void>
}

export async function startDashboard(opts: DashboardOptions): Promise<Dashboard> {
  const assets = await loadDashboardAssets()
  const token = opts.token ?? randomBytes(32).toString('base64url')
  const host = opts.host ?? '127.0.0.1'
  const now = opts.now ?? (() => Date.now())
  const ctx: Ctx = {
    client: opts.client,
    token: Buffer.from(token),
    assets,
    now,
    watchWaitMs: opts.watchWaitMs ?? 10_000,
    membersPollMs: opts.membersPollMs ?? 2_000,
    hosts: new Set(),
  }
  const server = createServer((req, res) => {
    handle(ctx, req, res).catch((err) => sendError(res, err))
  })
  // Event streams stay open; close() ends them.
  const open = new Set<ServerResponse>()
  server.on('request', (_req, res: ServerResponse) => {
    open.add(res)
    res.on('close', () => open.delete(res))
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(
        err.code === 'EADDRINUSE'
          ? new OrcError('conflict', `port ${opts.port} on ${host} is in use: choose another --port, or leave it out for a free one`, {}, err)
          : new OrcError('unavailable', `listen on ${host}:${opts.port ?? 0}: ${err.message}`, {}, err),
      ),
    )
    server.listen(opts.port ?? 0, host, () => resolve())
  })
  const port = (server.address() as AddressInfo).port
  const shown = host.includes(':') ? `[${host}]` : host
  for (const h of [shown, 'localhost', '127.0.0.1', '[::1]']) ctx.hosts.add(`${h}:${port}`)
  return {
    url: `http://${shown}:${port}/#token=${token}`,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const res of open) res.destroy()
        server.close(() => resolve())
      }),
  }
}

interface Ctx {
  client: ApiCaller
  token: Buffer
  assets: Map<string, Asset>
  now: () => number
  watchWaitMs: number
  membersPollMs: number
  /** Host headers this server answers to. */
  hosts: Set<string>
}

const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'cache-control': 'no-store',
}

async function handle(ctx: Ctx, req: IncomingMessage, res: ServerResponse): Promise<void> {
  if (!ctx.hosts.has(req.headers.host ?? '')) {
    return sendJson(res, 421, { code: 'forbidden', message: `host ${JSON.stringify(req.headers.host ?? '')} is not this dashboard (open its 127.0.0.1 URL)` })
  }
  const url = new URL(req.url ?? '/', 'http://dashboard.invalid')
  const method = req.method ?? 'GET'
  if (!url.pathname.startsWith('/api/')) {
    const asset = method === 'GET' ? ctx.assets.get(url.pathname === '/index.html' ? '/' : url.pathname) : undefined
    if (!asset) return sendJson(res, 404, { code: 'not_found', message: `no page ${url.pathname}` })
    res.writeHead(200, { ...SECURITY_HEADERS, 'content-type': asset.type })
    res.end(asset.body)
    return
  }
  if (!authorized(ctx, req, url)) {
    return sendJson(res, 401, {
      code: 'forbidden',
      message: 'this dashboard needs the token in the URL that `orc dashboard` printed: open that URL',
    })
  }
  // The page's own views, composed from several API calls.
  const dash = url.pathname.slice('/api/dash/'.length).split('/').map(decodeURIComponent)
  if (url.pathname.startsWith('/api/dash/') && method === 'GET') {
    if (dash[0] === 'map' && dash.length === 1) return sendJson(res, 200, await clusterMap(ctx.client, ctx.now()))
    if (dash[0] === 'pod' && dash.length === 3) return sendJson(res, 200, await podPage(ctx.client, dash[1]!, dash[2]!, ctx.now()))
    if (dash[0] === 'watch' && dash.length === 1) {
      const kinds = (url.searchParams.get('kinds') ?? 'Pod,Node').split(',').filter(Boolean)
      return watchKinds(ctx.client, kinds, openStream(req, res), { waitMs: ctx.watchWaitMs, membersPollMs: ctx.membersPollMs, now: ctx.now })
    }
    if (dash[0] === 'logs' && dash.length === 3) {
      const container = url.searchParams.get('container') ?? undefined
      return followLogs(ctx.client, { ns: dash[1]!, name: dash[2]! }, container, openStream(req, res))
    }
  }
  if (url.pathname.startsWith('/api/v1/')) return proxy(ctx, req, res, method, url)
  return sendJson(res, 404, { code: 'not_found', message: `no dashboard API ${method} ${url.pathname}` })
}

function authorized(ctx: Ctx, req: IncomingMessage, url: URL): boolean {
  const header = req.headers['x-orc-token']
  // EventSource cannot set a header: the two stream endpoints take the token in their query.
  const given = typeof header === 'string' ? header : url.pathname.startsWith('/api/dash/') ? url.searchParams.get('token') : null
  if (given === null) return false
  const b = Buffer.from(given)
  return b.length === ctx.token.length && timingSafeEqual(b, ctx.token)
}

/** `/api/v1/…` → the same API call through the CLI's client, for the routes in PROXIED_ROUTES. */
async function proxy(ctx: Ctx, req: IncomingMessage, res: ServerResponse, method: string, url: URL): Promise<void> {
  let segments: string[]
  try {
    segments = url.pathname.slice('/api'.length).split('/').filter(Boolean).map(decodeURIComponent)
  } catch {
    return sendJson(res, 400, { code: 'invalid', message: `bad escape in ${url.pathname}` })
  }
  const name = PROXIED_ROUTES.find((n) => ROUTES[n].method === method && matchPattern(patternOf(ROUTES[n].path), segments) !== undefined)
  if (name === undefined) return sendJson(res, 404, { code: 'not_found', message: `the dashboard does not pass on ${method} ${url.pathname}` })
  const query: NonNullable<ClientRequest['query']> = {}
  for (const k of new Set(url.searchParams.keys())) {
    const all = url.searchParams.getAll(k)
    query[k] = all.length === 1 ? all[0] : all
  }
  let body: Record<string, unknown> | undefined
  if (method === 'POST') {
    // A form on another site cannot send this type without a CORS preflight, which is never answered.
    if (!String(req.headers['content-type'] ?? '').startsWith('application/json')) {
      return sendJson(res, 415, { code: 'invalid', message: 'send the body as application/json' })
    }
    body = await readJsonBody(req)
    if (name === 'rollback') {
      const reason = typeof body.reason === 'string' ? body.reason.trim() : ''
      if (reason === '') return sendJson(res, 400, { code: 'invalid', message: 'a rollback from the dashboard needs a reason (it is recorded in history)' })
      // The author is the credential's user, set by the agent; the page never names one.
      body = { reason, ...(body.to !== undefined ? { to: body.to as string | number } : {}) }
    }
  }
  const path = '/' + segments.map(encodeURIComponent).join('/')
  const answer = await ctx.client.call(method, path, { query, body })
  sendJson(res, (ROUTES[name] as RouteSpec).status ?? 200, answer)
}

async function readJsonBody(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = []
  let size = 0
  for await (const c of req as AsyncIterable<Buffer>) {
    size += c.length
    if (size > MAX_BODY_BYTES) throw new OrcError('too_large', `request body over ${MAX_BODY_BYTES} bytes`)
    chunks.push(c)
  }
  let v: unknown
  try {
    v = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}')
  } catch (err) {
    throw new OrcError('parse', `request body is not JSON: ${(err as Error).message}`)
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new OrcError('invalid', 'request body must be a JSON object')
  return v as Record<string, unknown>
}

function openStream(req: IncomingMessage, res: ServerResponse): EventStream {
  res.writeHead(200, { ...SECURITY_HEADERS, 'content-type': 'text/event-stream; charset=utf-8', connection: 'keep-alive' })
  res.write(': orc dashboard\n\n')
  let closed = false
  const waiters = new Set<() => void>()
  const onClose = () => {
    closed = true
    clearInterval(ping)
    for (const w of waiters) w()
  }
  // A comment now and then keeps proxies and the browser from timing the stream out.
  const ping = setInterval(() => res.write(': ping\n\n'), 15_000)
  req.on('close', onClose)
  res.on('close', onClose)
  return {
    send(event, data) {
      if (!closed) res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`)
    },
    closed: () => closed,
    idle: (ms) =>
      new Promise<void>((resolve) => {
        if (closed) return resolve()
        const done = () => {
          clearTimeout(t)
          waiters.delete(done)
          resolve()
        }
        const t = setTimeout(done, ms)
        waiters.add(done)
      }),
  }
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent) return void res.end()
  const text = JSON.stringify(body)
  res.writeHead(status, { ...SECURITY_HEADERS, 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text) })
  res.end(text)
}

function sendError(res: ServerResponse, err: unknown): void {
  const e = err instanceof OrcError ? err : new OrcError('internal', (err as Error)?.message ?? String(err))
  sendJson(res, httpStatusOf(e.code), { code: e.code, message: e.message, details: e.details })
}
