/**
 * Serves the API handler over HTTP on a unix socket. The socket is created mode 0600 (under a
 * umask, so there is no window where others could connect), inside a 0700 data dir: only the
 * owner — root for a system agent — can talk to the agent.
 */
import { chmodSync, existsSync, lstatSync, unlinkSync } from 'node:fs'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { createConnection } from 'node:net'
import type { Logger } from 'pino'
import { errorResponse, OrcError, type Principal, type Query } from '../model/index.ts'
import type { ApiHandler } from './router.ts'

/** Largest request body: a batch apply of many objects (each at most 256 KiB). */
export const MAX_REQUEST_BYTES = 64 * 1024 * 1024

export interface SocketServer {
  readonly path: string
  close(): Promise<void>
}

function socketAnswers(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection(path)
    s.once('connect', () => {
      s.destroy()
      resolve(true)
    })
    s.once('error', () => resolve(false))
  })
}

function readBody(req: IncomingMessage, limit: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    req.on('data', (c: Buffer) => {
      size += c.length
      if (size > limit) {
        reject(new OrcError('too_large', `request body is larger than ${limit} bytes`, { limit }))
        req.destroy()
        return
      }
      chunks.push(c)
    })
    req.on('end', () => {
      if (size === 0) return resolve(undefined)
      try {
        resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')))
      } catch (err) {
        reject(new OrcError('parse', `request body is not valid JSON: ${(err as Error).message}`))
      }
    })
    req.on('error', reject)
  })
}

function queryOf(url: URL): Query {
  const q: Query = {}
  for (const [k, v] of url.searchParams) {
    const prev = q[k]
    q[k] = prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v]
  }
  return q
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body)
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) })
  res.end(text)
}

/**
 * `principal`: who a request on this socket is (read at each request). Whoever can open the socket
 * is root of this machine (0600), so the socket speaks as the machine's user (agent.ts).
 */
export async function serveOnSocket(
  handler: ApiHandler,
  path: string,
  opts: { logger: Logger; maxBodyBytes?: number; principal?: () => Principal },
): Promise<SocketServer> {
  const limit = opts.maxBodyBytes ?? MAX_REQUEST_BYTES
  if (existsSync(path)) {
    if (!lstatSync(path).isSocket()) throw new OrcError('conflict', `${path} exists and is not a socket; remove it or choose another --socket`)
    if (await socketAnswers(path)) throw new OrcError('locked', `another agent is serving ${path}`, { socket: path })
    unlinkSync(path) // left behind by an agent that did not stop cleanly
  }
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://orc')
    readBody(req, limit)
      .then((body) =>
        handler({ method: req.method ?? 'GET', path: url.pathname, query: queryOf(url), body, ...(opts.principal ? { principal: opts.principal() } : {}) }),
      )
      .then(
        (r) => send(res, r.status, r.body),
        // The body could not be read (too large, not JSON): the router never saw the request.
        (err) => {
          const e = errorResponse(err)
          send(res, e.status, e.body)
        },
      )
      .catch((err) => opts.logger.error({ err }, 'send response'))
  })
  server.keepAliveTimeout = 5000
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err) => reject(new OrcError('unavailable', `listen on ${path}: ${err.message}`, { socket: path }, err)))
    // bind() happens synchronously inside listen(), so the umask covers the socket's creation.
    const old = process.umask(0o177)
    try {
      server.listen(path, () => resolve())
    } finally {
      process.umask(old)
    }
  })
  chmodSync(path, 0o600)
  return {
    path,
    async close() {
      await new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      })
      try {
        unlinkSync(path)
      } catch {
        // already gone
      }
    },
  }
}
