/**
 * One router for the route table (routes.ts): it parses a path once, finds the route, extracts its
 * params and turns any error into its wire answer once. Components hand in handlers by route name;
 * a route without a handler is not served here (an agent without the mesh has no `/v1/members`).
 */
import type { Logger } from 'pino'
import { type ApiRequest, type ApiResponse, errorResponse, OrcError, type Query } from '../model/index.ts'
import { type Method, matchPattern, type ParamsOf, patternOf, type ResponseOf, ROUTES, type RouteName, splitPath } from './routes.ts'

export type ApiHandler = (req: ApiRequest) => Promise<ApiResponse>

export interface RouteCall<N extends RouteName> {
  params: ParamsOf<N>
  query: Query
  /** As sent: untrusted, each handler checks what it reads. */
  body: unknown
  /** The request as received, for passing on unchanged (forwarding). */
  req: ApiRequest
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
}

interface Bound {
  name: RouteName
  method: Method
  pattern: string[]
  status: number
  handler: RouteHandler<RouteName>
}

export function createRouter(handlers: RouteHandlers, opts: RouterOptions = {}): ApiHandler {
  const bound: Bound[] = []
  for (const name of Object.keys(ROUTES) as RouteName[]) {
    const handler = handlers[name] as RouteHandler<RouteName> | undefined
    if (handler === undefined) continue
    const spec = ROUTES[name] as { method: Method; path: string; status?: number }
    bound.push({ name, method: spec.method, pattern: patternOf(spec.path), status: spec.status ?? 200, handler })
  }
  const notFound = opts.notFound ?? ((m: string, path: string) => new OrcError('not_found', `no such API route: ${m} ${path}`))

  async function dispatch(req: ApiRequest, m: string): Promise<ApiResponse> {
    const segments = splitPath(req.path).segments()
    for (const r of bound) {
      if (r.method !== m) continue
      const params = matchPattern(r.pattern, segments)
      if (params === undefined) continue
      const out = await r.handler({ params: params as ParamsOf<RouteName>, query: req.query ?? {}, body: req.body, req })
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
