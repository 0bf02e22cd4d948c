/**
 * The CLI's side of the local API: JSON over HTTP on the agent's unix socket. API errors come back
 * as OrcErrors with the agent's code, message and details, so the CLI reports them unchanged.
 */
import { Agent, request } from 'node:http'
import { errorOfResponse, OrcError } from '../model/index.ts'

export interface ClientRequest {
  query?: Record<string, string | number | boolean | string[] | undefined>
  body?: unknown
}

export interface ApiClientOptions {
  /**
   * Keep connections open between calls (an `http.Agent` with `keepAlive`): for long-lived callers
   * (the dashboard, benchmarks, integrations) that make many calls. Without one, every call opens
   * its own connection and closes it, so a CLI process exits as soon as its work is done.
   *
   * The call closes that connection itself, after the answer: it does not ask the agent to
   * (`connection: close`). When the agent closed first, a client that had written a large body
   * could see `write EPIPE` before it had read the answer already on the socket (5 of 120 applies of
   * a 300 KB pod on a loaded machine), and reported that instead of the agent's error.
   */
  agent?: Agent
}

export class ApiClient {
  constructor(
    readonly socketPath: string,
    private readonly opts: ApiClientOptions = {},
  ) {}

  async call<T = unknown>(method: string, path: string, req: ClientRequest = {}): Promise<T> {
    const qs = new URLSearchParams()
    for (const [k, v] of Object.entries(req.query ?? {})) {
      if (v === undefined) continue
      for (const x of Array.isArray(v) ? v : [v]) qs.append(k, String(x))
    }
    const q = qs.toString()
    const url = q !== '' ? `${path}?${q}` : path
    const payload = req.body === undefined ? undefined : JSON.stringify(req.body)
    const own = this.opts.agent === undefined ? new Agent({ keepAlive: true, maxSockets: 1 }) : undefined
    const { status, text } = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const r = request(
        {
          socketPath: this.socketPath,
          method,
          path: url,
          agent: this.opts.agent ?? own,
          headers: {
            ...(payload !== undefined ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } : {}),
          },
        },
        (res) => {
          const chunks: Buffer[] = []
          res.on('data', (c: Buffer) => chunks.push(c))
          res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }))
          res.on('error', reject)
        },
      )
      r.on('error', (err) => reject(this.connectError(err as NodeJS.ErrnoException)))
      if (payload !== undefined) r.write(payload)
      r.end()
    }).finally(() => own?.destroy())
    let body: unknown
    try {
      body = text === '' ? undefined : JSON.parse(text)
    } catch {
      throw new OrcError('internal', `agent at ${this.socketPath} sent a response that is not JSON (HTTP ${status})`)
    }
    if (status >= 400) throw errorOfResponse(status, body, `agent answered HTTP ${status}`)
    return body as T
  }

  private connectError(err: NodeJS.ErrnoException): OrcError {
    const sock = this.socketPath
    switch (err.code) {
      case 'ENOENT':
      case 'ECONNREFUSED':
        return new OrcError(
          'unavailable',
          `no orc agent is listening at ${sock} (start one with 'orc up', or point --socket or ORC_SOCKET at its socket)`,
          { socket: sock },
          err,
        )
      case 'EACCES':
      case 'EPERM':
        return new OrcError('forbidden', `permission denied on ${sock}: only the agent's owner may use it (try sudo)`, { socket: sock }, err)
      default:
        return new OrcError('unavailable', `connect to the orc agent at ${sock}: ${err.message}`, { socket: sock }, err)
    }
  }
}
