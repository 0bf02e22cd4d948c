// Calls to the dashboard server (src/cli/dashboard/server.ts). The token comes from the URL's
// fragment that `orc dashboard` printed; it is kept in sessionStorage (this origin, this tab) and
// sent back in a header, or in the query of the event streams (EventSource cannot set headers).

const KEY = 'orc-dashboard-token'
const CALL_TIMEOUT_MS = 20_000

export function takeToken() {
  // `#token=T` (the printed URL), or a page with it: `#/pods?token=T`.
  const m = /(?:^#|[?&])token=([A-Za-z0-9_-]+)/.exec(location.hash)
  if (m) {
    sessionStorage.setItem(KEY, m[1])
    const rest = location.hash.replace(m[0], m[0].startsWith('#') ? '#' : '')
    history.replaceState(null, '', `${location.pathname}${rest === '#' ? '#/' : rest}`)
  }
  return sessionStorage.getItem(KEY)
}

export class ApiError extends Error {
  constructor(status, body) {
    super(body?.message ?? `HTTP ${status}`)
    this.status = status
    this.code = body?.code
  }
}

function queryString(query) {
  const qs = new URLSearchParams()
  for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined && v !== '') qs.append(k, String(v))
  const s = qs.toString()
  return s === '' ? '' : `?${s}`
}

export async function api(path, { method = 'GET', query, body } = {}) {
  const headers = { 'x-orc-token': sessionStorage.getItem(KEY) ?? '' }
  if (body !== undefined) headers['content-type'] = 'application/json'
  let res
  try {
    // A call that hangs (a stalled connection) becomes an error on the page, not a stale view.
    res = await fetch(`/api${path}${queryString(query)}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
    })
  } catch (err) {
    if (err?.name === 'TimeoutError') throw new Error(`no answer from the dashboard within ${CALL_TIMEOUT_MS / 1000} s (${method} ${path})`)
    throw new Error(`the dashboard cannot be reached (${method} ${path}): ${err?.message ?? err}`)
  }
  const data = await res.json().catch(() => ({}))
  if (!res.ok) throw new ApiError(res.status, data)
  return data
}

/** An event stream: handlers by event name, each given the parsed data. */
export function stream(path, query, handlers) {
  const es = new EventSource(`/api${path}${queryString({ ...query, token: sessionStorage.getItem(KEY) ?? '' })}`)
  for (const [event, fn] of Object.entries(handlers)) {
    if (event === 'open' || event === 'error') es.addEventListener(event, fn)
    else es.addEventListener(event, (e) => fn(JSON.parse(e.data)))
  }
  return es
}

/** A path segment of an API path. */
export const seg = encodeURIComponent
