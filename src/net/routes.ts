/**
 * Route tables as data (pure): normalisation, diffing desired against actual, and applying a diff.
 * Drivers read the kernel's routes (`ip -j route show`), diff, and issue only the needed commands.
 */
import { canonicalIp, canonicalPrefix, type IpFamily, parsePrefix } from './ip.ts'

export interface Route {
  /** Destination prefix (`fd12::/64`, `10.0.0.0/8`, `fd12::5` = /128). Host bits are ignored. */
  dst: string
  dev: string
  via?: string
  metric?: number
  /** Routing table id; undefined = main. */
  table?: number
}

export interface RouteDiff {
  add: Route[]
  remove: Route[]
  /** Same destination (and table), different device/gateway/metric: `ip route replace`. */
  replace: Route[]
}

export function routeFamily(r: Route): IpFamily {
  return r.dst.includes(':') ? 6 : 4
}

/** Canonical form: masked prefix text, canonical gateway, no undefined-vs-missing differences. */
export function normalizeRoute(r: Route): Route {
  const out: Route = { dst: canonicalPrefix(r.dst), dev: r.dev }
  if (r.via !== undefined) out.via = canonicalIp(r.via)
  // The kernel gives IPv6 routes metric 1024 when none is asked for: the same route either way.
  if (r.metric !== undefined && !(routeFamily(r) === 6 && r.metric === 1024)) out.metric = r.metric
  if (r.table !== undefined) out.table = r.table
  return out
}

/** Identity of a route in a table: destination and table (the kernel's replace key). */
export function routeKey(r: Route): string {
  return `${canonicalPrefix(r.dst)}@${r.table ?? 'main'}`
}

function sameRoute(a: Route, b: Route): boolean {
  return a.dev === b.dev && a.via === b.via && a.metric === b.metric
}

/**
 * What to do to turn `actual` into `desired`. Both are normalised first; when `desired` holds two
 * routes with the same key, the first wins (a table can hold only one). The output is sorted by
 * key so plans print the same way every time.
 */
export function diffRoutes(desired: readonly Route[], actual: readonly Route[]): RouteDiff {
  const want = new Map<string, Route>()
  for (const r of desired) {
    const k = routeKey(r)
    if (!want.has(k)) want.set(k, normalizeRoute(r))
  }
  const have = new Map<string, Route>()
  for (const r of actual) {
    const k = routeKey(r)
    if (!have.has(k)) have.set(k, normalizeRoute(r))
  }
  const add: Route[] = []
  const replace: Route[] = []
  const remove: Route[] = []
  for (const k of [...want.keys()].sort()) {
    const w = want.get(k)!
    const h = have.get(k)
    if (h === undefined) add.push(w)
    else if (!sameRoute(w, h)) replace.push(w)
  }
  for (const k of [...have.keys()].sort()) if (!want.has(k)) remove.push(have.get(k)!)
  return { add, remove, replace }
}

export function isEmptyDiff(d: RouteDiff): boolean {
  return d.add.length === 0 && d.remove.length === 0 && d.replace.length === 0
}

/** Apply a diff to a route list as the kernel would (pure; used by fakes and property tests). */
export function applyRouteDiff(actual: readonly Route[], diff: RouteDiff): Route[] {
  const table = new Map<string, Route>()
  for (const r of actual) {
    const k = routeKey(r)
    if (!table.has(k)) table.set(k, normalizeRoute(r))
  }
  for (const r of diff.remove) table.delete(routeKey(r))
  for (const r of [...diff.add, ...diff.replace]) table.set(routeKey(r), normalizeRoute(r))
  return [...table.values()]
}

/** `ip route` arguments for one route (after `ip [-6] route replace|del`). */
export function routeArgs(r: Route, protocol?: number): string[] {
  const args = [canonicalPrefix(r.dst), 'dev', r.dev]
  if (r.via !== undefined) args.push('via', r.via)
  if (r.metric !== undefined) args.push('metric', String(r.metric))
  if (r.table !== undefined) args.push('table', String(r.table))
  if (protocol !== undefined) args.push('proto', String(protocol))
  return args
}

/** One entry of `ip -j route show` output (the fields we read). */
export interface IpRouteJson {
  dst: string
  dev?: string
  gateway?: string
  metric?: number
  table?: string
}

/** Convert `ip -j [-6] route show` entries to Routes; `dev` fills in when filtered by device. */
export function routesFromIpJson(entries: readonly IpRouteJson[], family: IpFamily, dev?: string): Route[] {
  const out: Route[] = []
  for (const e of entries) {
    const d = e.dev ?? dev
    if (d === undefined) continue
    const r: Route = { dst: canonicalPrefix(formatDst(e.dst, family)), dev: d }
    if (e.gateway !== undefined) r.via = canonicalIp(e.gateway)
    if (e.metric !== undefined) r.metric = e.metric
    if (e.table !== undefined && e.table !== 'main') r.table = Number(e.table)
    out.push(normalizeRoute(r))
  }
  return out
}

function formatDst(dst: string, family: IpFamily): string {
  const p = parsePrefix(dst, family)
  return `${dst === 'default' ? (family === 6 ? '::' : '0.0.0.0') : dst.split('/')[0]}/${p.len}`
}
