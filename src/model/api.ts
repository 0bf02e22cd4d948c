/**
 * The one request/response envelope of orc's APIs, whichever way a call travels: HTTP on the unix
 * socket (agent/http.ts), the remote API over the mesh (mesh/rpc.ts) and the member API between
 * nodes (mesh/member-api.ts). It lives here because model is the one module all three layers may
 * import. What each route takes and answers is declared next to the route (agent/routes.ts).
 */
import { OrcError } from './errors.ts'
import type { Principal } from './rbac.ts'

/** A query as the HTTP server parses it: a repeated key keeps every value. */
export type Query = Record<string, string | string[] | undefined>

/** A query as the mesh carries it: one value per key. */
export type FlatQuery = Record<string, string>

export interface ApiRequest<Q = Query> {
  method: string
  path: string
  query?: Q
  body?: unknown
  /**
   * Who asks, as the transport authenticated it (the socket, the remote API's signing key, the
   * member API's peer). Set by the server, never read from the wire.
   */
  principal?: Principal
}

export interface ApiResponse<B = unknown> {
  status: number
  body?: B
}

/** The wire form of an error: `{ error: { code, message, details, causes } }`. */
export interface ApiErrorBody {
  error: { code: string; message: string; details: Record<string, unknown>; causes?: string[] }
}

const STATUS_BY_CODE: Record<string, number> = {
  invalid: 400,
  parse: 400,
  not_found: 404,
  conflict: 409,
  forbidden: 403,
  too_large: 413,
  locked: 423,
  corrupt: 500,
  unavailable: 503,
  internal: 500,
}

export function httpStatusOf(code: string): number {
  return STATUS_BY_CODE[code] ?? 500
}

/** Error → wire body; the cause chain travels along so `orc --debug` can show it. */
export function errorBody(err: unknown): ApiErrorBody {
  const causes: string[] = []
  let c = err instanceof Error ? err.cause : undefined
  for (let i = 0; c !== undefined && i < 10; i++) {
    causes.push(c instanceof Error ? `${c.name}: ${c.message}` : String(c))
    c = c instanceof Error ? c.cause : undefined
  }
  if (err instanceof OrcError) {
    return { error: { code: err.code, message: err.message, details: err.details, ...(causes.length ? { causes } : {}) } }
  }
  const message = err instanceof Error ? err.message : String(err)
  return {
    error: {
      code: 'internal',
      message: `internal error: ${message}`,
      details: {},
      causes: [err instanceof Error ? (err.stack ?? message) : message, ...causes],
    },
  }
}

/** An error as its `{status, body}` answer. */
export function errorResponse(err: unknown): ApiResponse<ApiErrorBody> {
  const body = errorBody(err)
  return { status: httpStatusOf(body.error.code), body }
}

/** The OrcError an error answer stands for, as a client raises it (code, message, details unchanged). */
export function errorOfResponse(_status: number, body: unknown, fallback: string): OrcError {
  const e = (body as Partial<ApiErrorBody> | undefined)?.error
  const err = new OrcError((e?.code as OrcError['code']) ?? 'internal', e?.message ?? fallback, e?.details ?? {})
  if (e?.causes?.length) (err.details as Record<string, unknown>).causes = e.causes
  return err
}

/** The path part of a request path (before `?`), and its segments decoded; throws URIError on bad escapes. */
export function splitPath(path: string): { pathname: string; segments: () => string[] } {
  const pathname = path.split('?')[0]!
  return {
    pathname,
    segments: () =>
      pathname
        .split('/')
        .filter(Boolean)
        .map((s) => decodeURIComponent(s)),
  }
}
