/**
 * Every API request is checked here before its handler runs (router.ts `authorize`): the route's
 * declared permission (routes.ts) is resolved to targets — `:kind` from the path, `*` to each object
 * of an apply body, the namespace from the path or the query — and each target must be allowed by
 * one of the principal's roles (model/rbac.ts). A refusal names the user, verb, kind and namespace.
 */
import { ADMIN_USER, findKind, isPlainObject, OrcError, type Principal, type RbacSource, type Target, userExpired, userMay, type Verb } from '../model/index.ts'
import type { UserMay } from '../store/index.ts'
import type { AuthorizeCall } from './router.ts'
import { MEMBER_ROUTES, type RouteName } from './routes.ts'

/** Routes every authenticated user may call whatever its roles: who am I. */
const EVERYONE: readonly RouteName[] = ['whoami']

function one(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[v.length - 1] : v
}

function canonicalKind(k: string): { kind: string; namespaced: boolean | undefined } {
  const def = findKind(k)
  return def ? { kind: def.kind, namespaced: def.namespaced } : { kind: k, namespaced: undefined }
}

/** The namespace a path's `:ns` names (`_` = cluster-scoped). */
function pathNamespace(ns: string | undefined, namespaced: boolean | undefined): string | undefined {
  if (ns === undefined) return undefined
  if (namespaced === false || ns === '_') return ''
  return ns
}

/** The targets a request touches: one per object for apply, else one. */
export function targetsOf(call: Pick<AuthorizeCall, 'permission' | 'params' | 'query' | 'body'>): Target[] {
  const { permission: p, params, query } = call
  const sub = p.sub !== undefined ? { sub: p.sub } : {}
  if (p.kind === undefined) return [{ ...sub }]
  if (p.kind === ':kind') {
    const { kind, namespaced } = canonicalKind(params.kind ?? '')
    if (params.ns !== undefined) return [{ kind, namespace: pathNamespace(params.ns, namespaced) ?? '', ...sub }]
    // A list: one namespace, or all of them.
    const all = one(query.all) === '1' || one(query.all) === 'true'
    const ns = namespaced === false ? '' : all ? undefined : one(query.namespace) || 'default'
    return [{ kind, ...(ns !== undefined ? { namespace: ns } : {}), ...sub }]
  }
  if (p.kind === '*') {
    const body = call.body
    if (isPlainObject(body) && Array.isArray(body.objects)) {
      const dflt = typeof body.namespace === 'string' && body.namespace !== '' ? body.namespace : 'default'
      return body.objects.map((o) => {
        const raw = isPlainObject(o) ? o : {}
        const { kind, namespaced } = canonicalKind(typeof raw.kind === 'string' ? raw.kind : '')
        const meta = isPlainObject(raw.metadata) ? raw.metadata : {}
        const ns = namespaced === false ? '' : typeof meta.namespace === 'string' && meta.namespace !== '' ? meta.namespace : dflt
        return { kind, namespace: ns, ...sub }
      })
    }
    // Events: of every kind, in one namespace or all.
    const ns = one(query.namespace)
    return [{ ...(ns ? { namespace: ns } : {}), ...sub }]
  }
  const { kind, namespaced } = canonicalKind(p.kind)
  const ns = namespaced === false ? '' : pathNamespace(params.ns, namespaced)
  return [{ kind, ...(ns !== undefined ? { namespace: ns } : {}), ...sub }]
}

/** Said with a refused `--show-secrets`: what would allow it. */
const REVEAL_HINT = ' (it opens the values; roles admin and edit grant Secret/reveal, view does not)'

function describe(t: Target): string {
  const kind = t.kind === undefined ? 'any kind' : t.sub !== undefined ? `${t.kind}/${t.sub}` : t.kind
  const ns = t.namespace === undefined ? 'every namespace' : t.namespace === '' ? 'cluster scope' : `namespace ${t.namespace}`
  return `${kind} in ${ns}`
}

export interface AuthorizerComponents {
  /** The roles and bindings as this node sees them. */
  store: RbacSource
}

/** The router's `authorize`: throws `forbidden` when the principal may not make the request. */
export function createAuthorizer(c: AuthorizerComponents): (call: AuthorizeCall) => void {
  return (call) => {
    const p: Principal = call.principal
    if (p.kind === 'node') {
      // A member asking for itself: only what the member API needs between nodes.
      if (MEMBER_ROUTES.includes(call.name)) return
      throw new OrcError('forbidden', `node ${p.peerId} may not call ${call.name}: a member without a user may only call ${MEMBER_ROUTES.join(', ')}`, {
        peer: p.peerId,
        route: call.name,
      })
    }
    if (EVERYONE.includes(call.name)) return
    // Stopping an agent from its own machine's socket: its root can stop the process anyway.
    if (call.name === 'down' && p.via === 'socket') return
    const verb: Verb = call.permission.verb
    for (const t of targetsOf(call)) {
      if (userMay(c.store, p.name, verb, t.kind, t.namespace, t.sub)) continue
      throw new OrcError('forbidden', `user:${p.name} may not ${verb} ${describe(t)}${t.sub === 'reveal' ? REVEAL_HINT : ''}`, {
        user: p.name,
        verb,
        ...(t.kind !== undefined ? { kind: t.kind } : {}),
        ...(t.namespace !== undefined ? { namespace: t.namespace } : {}),
        ...(t.sub !== undefined ? { sub: t.sub } : {}),
      })
    }
  }
}

/**
 * Users' rights on receipt (the store's checks of every incoming record): the replica's roles and
 * bindings, overlaid with the message's own; a record written after its author's key expired is
 * refused. Not for admin: root of the first node acts as admin over its socket whatever became of
 * the admin key.
 */
export const userMayOnReceipt: UserMay = (user, verb, kind, namespace, objects, at) =>
  (user === ADMIN_USER || !userExpired(objects, user, at)) && userMay(objects, user, RECEIPT_VERBS[verb], kind, namespace)
const RECEIPT_VERBS = { create: 'apply', update: 'apply', delete: 'delete' } as const
