/**
 * One router for the route table (routes.ts): it parses a path once, finds the route, extracts its
 * params and turns any error into its wire answer once. Components hand in handlers by route name;
 * a route without a handler is not served here (an agent without the mesh has no `/v1/members`).
 */
import type { Logger } from 'pino'
import { type ApiRequest, type ApiResponse, authorOf, errorResponse, isPlainObject, OrcError, type Principal, type Query, splitPath } from '../model/index.ts'
import { type Method, matchPattern, type ParamsOf, type Permission, patternOf, type ResponseOf, ROUTES, type RouteName } from './routes.ts'

export type ApiHandler = (req: ApiRequest) => Promise<ApiResponse>

export interface RouteCall<N extends RouteName> {
  params: ParamsOf<N>
  query: Query
  /** As sent: untrusted, each handler checks what it reads. */
  body: unknown
  /** The request as received, for passing on unchanged (forwarding). */
  req: ApiRequest
  /** Who asks (set by the transport); undefined only on a router without `authorize`. */
  principal?: Principal
}

/** What `authorize` sees of a request: the route, its permission and the parts a check resolves. */
export interface AuthorizeCall {
  name: RouteName
  permission: Permission
  principal: Principal
  params: Record<string, string>
  query: Query
  body: unknown
}

/** An answer passed on as it is (a member's answer to a forwarded request), status and all. */
export class Passthrough {
  constructor(readonly response: ApiResponse) {}
}

export type RouteHandler<N extends RouteName> = (call: RouteCall<N>) => Promise<ResponseOf<N> | Passthrough> | ResponseOf<N>
export type RouteHandlers = { [N in RouteName]?: RouteHandler<N> }

/** Handlers of several components as one set; a route bound twice is a wiring mistake. */
export function combineHandlers(...parts: RouteHandlers[]): RouteHandlers {
  const out: Record<string, unknown> = {}
  for (const part of parts) {
    for (const [name, h] of Object.entries(part)) {
      if (h === undefined) continue
      if (name in out) throw new Error(`route ${name} has two handlers`)
      out[name] = h
    }
  }
  return out as RouteHandlers
}

export interface RouterOptions {
  logger?: Pick<Logger, 'error' | 'debug'>
  /** The error for a request no route matches (default: not_found naming method and path). */
  notFound?: (method: string, path: string, segments: string[]) => OrcError
  /**
   * Checks every request before its handler runs (throws `forbidden`); with it, a request without a
   * principal is refused, and a write's author is the principal's (a body `author` naming anyone
   * else is refused). Without it (tests of a single handler) nothing is checked.
   */
  authorize?: (call: AuthorizeCall) => void
}

/** The body a write's handler sees: its `author` is the principal's, whatever the request said. */
function authoredBody(body: unknown, principal: Principal): Record<string, unknown> {
  const b = isPlainObject(body) ? body : {}
  const author = authorOf(principal)
  if (b.author !== undefined && b.author !== author) {
    throw new OrcError(
      'forbidden',
      `author ${JSON.stringify(b.author)} refused: the author of a change is who makes it (${author}, from your credential); a request cannot name another`,
      { author: b.author, principal: author },
    )
  }
  return { ...b, author }
}

interface Bound {
  name: RouteName
  method: Method
  pattern: string[]
  status: number
  handler: RouteHandler<RouteName>
  permission: Permission
}

export function createRouter(handlers: RouteHandlers, opts: RouterOptions = {}): ApiHandler {
  const bound: Bound[] = []
  for (const name of Object.keys(ROUTES) as RouteName[]) {
    const handler = handlers[name] as RouteHandler<RouteName> | undefined
    if (handler === undefined) continue
    const spec = ROUTES[name] as { method: Method; path: string; status?: number; permission: Permission }
    bound.push({ name, method: spec.method, pattern: patternOf(spec.path), status: spec.status ?? 200, handler, permission: spec.permission })
  }
  const notFound = opts.notFound ?? ((m: string, path: string) => new OrcError('not_found', `no such API route: ${m} ${path}`))

  async function dispatch(req: ApiRequest, m: string): Promise<ApiResponse> {
    const segments = splitPath(req.path).segments()
    for (const r of bound) {
      if (r.method !== m) continue
      const params = matchPattern(r.pattern, segments)
      if (params === undefined) continue
      const query = req.query ?? {}
      let body = req.body
      const principal = req.principal
      if (opts.authorize !== undefined) {
        if (principal === undefined) throw new OrcError('forbidden', `${m} ${splitPath(req.path).pathname}: the request has no authenticated principal`)
        opts.authorize({ name: r.name, permission: r.permission, principal, params, query, body })
        if (m !== 'GET') body = authoredBody(body, principal)
      }
      const out = await r.handler({ params: params as ParamsOf<RouteName>, query, body, req: { ...req, body }, principal })
      return out instanceof Passthrough ? out.response : { status: r.status, body: out }
    }
    throw notFound(m, req.path, segments)
  }

  return async (req) => {
    const m = req.method.toUpperCase()
    try {
      return await dispatch(req, m)
    } catch (err) {
      const res = errorResponse(err)
      if (res.status >= 500) opts.logger?.error({ err, method: req.method, path: req.path }, 'request failed')
      else opts.logger?.debug({ code: res.body!.error.code, method: req.method, path: req.path, msg2: res.body!.error.message }, 'request refused')
      return res
    }
  }
}
