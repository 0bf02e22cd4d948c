/**
 * The agent's API as a plain request handler, independent of transport: the unix socket serves it
 * over HTTP (http.ts) and later a libp2p protocol can serve the same handler for `orc --node`.
 * Manifests are validated here, all of them before any is written, so a bad document in a batch
 * leaves the store untouched.
 */

import { createHash } from 'node:crypto'
import type { Logger } from 'pino'
import {
  byCodeUnits,
  formatRef,
  getKind,
  isPlainObject,
  normalizeManifest,
  type ObjectRef,
  OrcError,
  type OrcObject,
  type Principal,
  type Query,
  refOf,
  type SignedRequest,
} from '../model/index.ts'
import type { HistoryQuery, ObjectStore, StoredObject, WriteResult } from '../store/index.ts'
import type { ApplyResultItem, NodeInfo } from './api-types.ts'
import { type ApiHandler, createRouter, type RouteHandlers } from './router.ts'

export { type ApiErrorBody, type ApiRequest, type ApiResponse, errorBody, httpStatusOf, type Query } from '../model/index.ts'
export type { ApplyOutcome, ApplyResultItem, NodeInfo } from './api-types.ts'
export type { ApiHandler } from './router.ts'

export interface ApiComponents {
  store: ObjectStore
  node: () => NodeInfo
  clock: { now(): number }
  logger: Logger
  /** Admission check of each object before anything is written (e.g. the two-party rule of unsafe pods). */
  admit?: (obj: OrcObject, batch: readonly OrcObject[], author: string) => void | Promise<void>
  /** Admission check of a delete (a Volume that pods use is kept). */
  admitDelete?: (ref: ObjectRef) => void
  /**
   * Each applied manifest as sent, before it is validated: the form the store may hold (a Secret's
   * clear values sealed, secrets-api.ts). Throws to refuse it; nothing of the batch is written then.
   */
  prepare?: (raw: unknown, defaultNamespace: string | undefined) => unknown
  /** Wait this long (the watch route's long poll); without it a watch answers at once. */
  sleep?: (ms: number) => Promise<void>
  /** The revision `rollback` restores when none is named (default: the store's, the one before the head). */
  rollbackTarget?: (ref: ObjectRef) => Promise<string | undefined>
  /** How a rollback to revision `to` completes what it restores (a Pod's registry images pinned to the digests that revision ran). */
  rollbackRewrite?: (ref: ObjectRef, to: number | string) => Promise<((desired: Record<string, unknown>) => Record<string, unknown>) | undefined>
}

const AUTHOR = /^(user|controller):[A-Za-z0-9][-A-Za-z0-9_.@]{0,127}$/

function parseAuthor(v: unknown): string {
  if (typeof v !== 'string' || !AUTHOR.test(v)) {
    throw new OrcError('invalid', `author ${JSON.stringify(v ?? null)}: must be user:<name> or controller:<name>`)
  }
  return v
}

function parseReason(v: unknown): string | undefined {
  if (v === undefined || v === null || v === '') return undefined
  if (typeof v !== 'string' || v.length > 1024) throw new OrcError('invalid', 'reason: must be a string of at most 1024 characters')
  return v
}

/** `3` is a revision number, anything else a revision id. */
export function parseRev(v: unknown, what = 'revision'): number | string {
  if (typeof v === 'number' && Number.isInteger(v) && v > 0) return v
  if (typeof v !== 'string' || v === '') throw new OrcError('invalid', `${what}: required (a revision number like 3, or a revision id)`)
  if (/^[0-9]+$/.test(v)) {
    const n = Number(v)
    if (n < 1) throw new OrcError('invalid', `${what}: revisions are numbered from 1`)
    return n
  }
  return v
}

function list(q: Query, key: string): string[] {
  const v = q[key]
  if (v === undefined) return []
  return (Array.isArray(v) ? v : [v]).flatMap((x) => x.split(',')).filter((x) => x !== '')
}

function one(q: Query, key: string): string | undefined {
  const v = q[key]
  return Array.isArray(v) ? v[v.length - 1] : v
}

/** The longest a watch waits for a change: under the remote API's 30 s call timeout. */
const MAX_WATCH_WAIT_MS = 25_000
/** How often a waiting watch looks at the list again (it also covers federated namespaces' stores). */
const WATCH_POLL_MS = 200

/** The version of a list: every write gives an object a new revision id, a delete drops it. */
function listVersion(items: readonly StoredObject[]): string {
  const h = createHash('sha256')
  for (const o of items) h.update(`${o.metadata.namespace ?? ''}/${o.metadata.name}@${String((o.metadata as { revisionId?: string }).revisionId)}\n`)
  return h.digest('hex').slice(0, 32)
}

function refFromPath(kindText: string, ns: string, name: string): ObjectRef {
  const def = getKind(kindText)
  const namespace = ns === '_' ? '' : ns
  if (def.namespaced && namespace === '') throw new OrcError('invalid', `${def.kind} is namespaced; a namespace is required`)
  return { kind: def.kind, namespace: def.namespaced ? namespace : '', name }
}

function describe(ref: ObjectRef): string {
  return ref.namespace ? `${formatRef(ref)} in namespace ${ref.namespace}` : formatRef(ref)
}

/**
 * The error for a request no route matches. Each case keeps the answer the API gave before the
 * route table: an unknown kind is reported before an unknown object sub-route, and federation
 * paths name themselves.
 */
export function routeNotFound(m: string, path: string, seg: string[]): OrcError {
  if (seg[0] !== 'v1') return new OrcError('not_found', `no such API path ${path}`)
  if (seg[1] === 'objects' && seg.length >= 5) refFromPath(seg[2]!, seg[3]!, seg[4]!)
  if (seg[1] === 'federations' && seg.length >= 3) return new OrcError('not_found', `no such federation route: ${m} /${seg.join('/')}`)
  return new OrcError('not_found', `no such API route: ${m} ${path}`)
}

/**
 * The user's signed request (remote API) as a write's evidence: the store puts it in the records it
 * asks for (docs/security.md, "Users' signatures on their writes").
 */
function evidenceOf(p: Principal | undefined): { evidence?: SignedRequest } {
  return p?.kind === 'user' && p.signed !== undefined ? { evidence: p.signed } : {}
}

/** The object routes: status, apply, list, get, delete, history, revisions, diff, rollback. */
export function objectRoutes(c: ApiComponents) {
  const log = c.logger

  function logWrite(ref: ObjectRef, res: WriteResult | { revision: { number: number; op: string } | null }, author: string): void {
    const rev = res.revision
    if (rev) log.info({ kind: ref.kind, ns: ref.namespace, name: ref.name, rev: rev.number, op: rev.op, author }, 'object written')
    else log.debug({ kind: ref.kind, ns: ref.namespace, name: ref.name, author }, 'object unchanged')
  }

  function getObject(ref: ObjectRef): StoredObject {
    const obj = c.store.get(ref)
    if (!obj) throw new OrcError('not_found', `${describe(ref)} not found`, { ...ref })
    return obj
  }

  const refOfParams = (p: { kind: string; ns: string; name: string }) => refFromPath(p.kind, p.ns, p.name)
  const listOf = (kind: string, q: Query) => {
    const def = getKind(kind)
    const all = one(q, 'all') === '1' || one(q, 'all') === 'true'
    const ns = def.namespaced && !all ? one(q, 'namespace') || 'default' : undefined
    const items = c.store
      .list(def.kind, ns)
      .sort((a, b) => byCodeUnits(a.metadata.namespace ?? '', b.metadata.namespace ?? '') || byCodeUnits(a.metadata.name, b.metadata.name))
    return { kind: def.kind, items }
  }
  const bodyOf = (b: unknown) => (isPlainObject(b) ? b : {})

  return {
    status: () => {
      const counts: Record<string, number> = {}
      for (const kind of ['Pod', 'Node', 'Cluster']) counts[kind] = c.store.list(kind).length
      const node = c.node()
      return { node, objects: c.store.count(), counts, uptimeSeconds: Math.max(0, Math.round((c.clock.now() - node.startedAt) / 1000)) }
    },
    apply: async ({ body, principal }) => {
      if (!isPlainObject(body) || !Array.isArray(body.objects)) {
        throw new OrcError('invalid', 'apply: body must be { objects: [...], author, reason }')
      }
      const author = parseAuthor(body.author)
      const reason = parseReason(body.reason)
      const evidence = evidenceOf(principal)
      const defaultNamespace = typeof body.namespace === 'string' && body.namespace !== '' ? body.namespace : undefined
      // Validate everything first: one bad document must not leave half a batch applied.
      const objects = body.objects.map((raw, index) => {
        try {
          const obj = normalizeManifest(c.prepare ? c.prepare(raw, defaultNamespace) : raw, { defaultNamespace })
          c.store.planApply(obj, { author, reason, now: c.clock.now() })
          return obj
        } catch (err) {
          if (err instanceof OrcError) throw new OrcError(err.code, err.message, { ...err.details, index }, err.cause)
          throw err
        }
      })
      for (const [index, obj] of objects.entries()) {
        try {
          await c.admit?.(obj, objects, author)
        } catch (err) {
          if (err instanceof OrcError) throw new OrcError(err.code, err.message, { ...err.details, index }, err.cause)
          throw err
        }
      }
      const results: ApplyResultItem[] = []
      for (const [index, obj] of objects.entries()) {
        const ref = refOf(obj)
        const existed = c.store.get(ref) !== undefined
        let res: WriteResult
        try {
          res = await c.store.apply(obj, { author, reason, now: c.clock.now(), ...evidence })
        } catch (err) {
          if (err instanceof OrcError) {
            throw new OrcError(err.code, err.message, { ...err.details, index, applied: results }, err.cause)
          }
          throw err
        }
        logWrite(ref, res, author)
        results.push({
          kind: ref.kind,
          namespace: ref.namespace,
          name: ref.name,
          outcome: res.revision === null ? 'unchanged' : existed ? 'configured' : 'created',
          revision: res.revision?.number ?? res.object?.metadata.revision ?? null,
        })
      }
      return { results }
    },
    listObjects: ({ params, query: q }) => listOf(params.kind, q),
    watchObjects: async ({ params, query: q }) => {
      const known = one(q, 'known')
      const w = Number(one(q, 'waitMs') ?? 10_000)
      const waitMs = Number.isFinite(w) ? Math.max(0, Math.min(w, MAX_WATCH_WAIT_MS)) : 10_000
      const deadline = c.clock.now() + waitMs
      for (;;) {
        const { kind, items } = listOf(params.kind, q)
        const version = listVersion(items)
        if (version !== known) return { kind, version, items }
        if (c.sleep === undefined || c.clock.now() >= deadline) return { kind, version }
        await c.sleep(Math.min(WATCH_POLL_MS, Math.max(1, deadline - c.clock.now())))
      }
    },
    getObject: ({ params }) => ({ object: getObject(refOfParams(params)) }),
    deleteObject: async ({ params, body, principal }) => {
      const ref = refOfParams(params)
      const b = bodyOf(body)
      getObject(ref)
      const author = parseAuthor(b.author)
      c.admitDelete?.(ref)
      const revision = await c.store.delete(ref, { author, reason: parseReason(b.reason), now: c.clock.now(), ...evidenceOf(principal) })
      logWrite(ref, { revision }, author)
      return { revision }
    },
    history: async ({ params, query: q }) => {
      const ref = refOfParams(params)
      const hq: HistoryQuery = {}
      const authors = list(q, 'author')
      const excl = list(q, 'excludeAuthor')
      if (authors.length) hq.authors = authors
      if (excl.length) hq.excludeAuthors = excl
      const since = one(q, 'since')
      if (since !== undefined) {
        const n = Number(since)
        if (!Number.isFinite(n)) throw new OrcError('invalid', `since: must be a time in ms since the epoch; got ${JSON.stringify(since)}`)
        hq.since = n
      }
      return { revisions: await c.store.history(ref, hq) }
    },
    revision: async ({ params }) => {
      const ref = refOfParams(params)
      return { object: await c.store.at(ref, parseRev(params.rev)) }
    },
    diff: async ({ params, query: q }) => {
      const ref = refOfParams(params)
      return { changes: await c.store.diff(ref, parseRev(one(q, 'from'), 'from'), parseRev(one(q, 'to'), 'to')) }
    },
    rollback: async ({ params, body }) => {
      const ref = refOfParams(params)
      const b = bodyOf(body)
      getObject(ref)
      const author = parseAuthor(b.author)
      const to = b.to === undefined || b.to === null || b.to === '' ? await c.rollbackTarget?.(ref) : parseRev(b.to, 'to')
      // What the rollback restores is admitted like an apply of it (a pod's unsafe features need
      // their grant now, a Secret's values a key this cluster still holds).
      if (to !== undefined && c.admit) {
        const target = (await c.store.at(ref, to)) as unknown as OrcObject
        await c.admit(target, [target], author)
      }
      const rewrite = to !== undefined ? await c.rollbackRewrite?.(ref, to) : undefined
      const res = await c.store.rollback(ref, {
        author,
        reason: parseReason(b.reason),
        now: c.clock.now(),
        ...(to !== undefined ? { to } : {}),
        ...(rewrite !== undefined ? { rewrite } : {}),
      })
      logWrite(ref, res, author)
      return res
    },
  } satisfies RouteHandlers
}

/** The object routes alone, as one handler (tests, and an agent's core). */
export function createApiHandler(c: ApiComponents): ApiHandler {
  return createRouter(objectRoutes(c), { logger: c.logger, notFound: routeNotFound })
}
