/**
 * Who may do what (RBAC-light): the pure decision, from a role's rules and a request's target.
 * Roles are the built-in ones below plus `Role` objects; `RoleBinding` objects give roles to users.
 * The agent checks every API request with it (agent/authz.ts); a replica can check an incoming
 * revision's author with `userMay` against its own copy of the store.
 */

import type { RoleRule } from './kinds/rbac.ts'
import type { OrcObject } from './object.ts'

export type Verb = 'get' | 'list' | 'apply' | 'delete' | 'admin'

/** What a request touches. `kind` absent: no object kind (node status, members…); `namespace` absent: every namespace. */
export interface Target {
  kind?: string
  namespace?: string
  /** A part of an object with its own right (`Pod/logs`, `Secret/reveal`); `history` is covered by the kind itself. */
  sub?: string
}

/**
 * A remote API request as its user signed it (src/mesh/rpc.ts, apiSigningDigest with the client's
 * time `at`): the digest's inputs, the key (base64url protobuf) and the signature (base64url). A
 * write it makes carries it in its revision records, so every replica can check the user asked for
 * it (docs/security.md, "Users' signatures on their writes").
 */
export interface SignedRequest {
  method: string
  path: string
  query: Record<string, string>
  body: unknown
  /** The server's challenge (base64url). */
  nonce: string
  /** The server's peer id. */
  peer: string
  /** The client's time, ms. */
  at: number
  key: string
  sig: string
}

const SIGNED_REQUEST_FIELDS: Record<keyof SignedRequest, 'string' | 'object' | 'number' | 'any'> = {
  method: 'string',
  path: 'string',
  query: 'object',
  body: 'any',
  nonce: 'string',
  peer: 'string',
  at: 'number',
  key: 'string',
  sig: 'string',
}

/**
 * What is wrong with a signed request from an untrusted source (a record's evidence, a forwarded
 * request), undefined when nothing is: its fields (no others), their types and their sizes. Whether
 * the signature verifies is the caller's to check.
 */
export function signedRequestProblem(v: unknown): string | undefined {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return 'malformed'
  const u = v as Record<string, unknown>
  for (const k of Object.keys(u)) if (!(k in SIGNED_REQUEST_FIELDS)) return `unknown field ${k}`
  for (const [k, t] of Object.entries(SIGNED_REQUEST_FIELDS)) {
    const f = u[k]
    if (t === 'any') continue
    const ok =
      t === 'object' ? f !== null && typeof f === 'object' && !Array.isArray(f) && Object.values(f).every((q) => typeof q === 'string') : typeof f === t
    if (!ok) return `${k} malformed`
  }
  if ((u.method as string).length > 16 || (u.path as string).length > 4096 || (u.nonce as string).length > 64 || (u.peer as string).length > 128)
    return 'malformed'
  if ((u.key as string).length > 512 || (u.sig as string).length > 200 || !Number.isSafeInteger(u.at)) return 'malformed'
  return undefined
}

/** Who makes a request, as the transport authenticated it (never taken from the request). */
export type Principal =
  /**
   * `via`: the unix socket, the remote API (signing key → user), or forwarded by member `peer` on the
   * user's behalf. `signed`: the user's signed request (remote API, and forwarded with it).
   */
  | { kind: 'user'; name: string; via: 'socket' | 'remote' | 'forwarded'; peer?: string; signed?: SignedRequest }
  /** Another member asking for itself over the member API (no user behind it). */
  | { kind: 'node'; peerId: string }

/** The author a principal's writes carry in history: `user:NAME`. A request can never write as `controller:*`. */
export function authorOf(p: Principal): string {
  return p.kind === 'user' ? `user:${p.name}` : `node:${p.peerId}`
}

/** Kinds whose writes give power over others: `edit` may not write them. */
export const PROTECTED_KINDS = ['Role', 'RoleBinding', 'User', 'SecurityPolicy', 'Cluster'] as const

/** The cluster's first user: the key made with the cluster (`admin.credential`); always bound to `admin`. */
export const ADMIN_USER = 'admin'

const all = ['*']
export const BUILTIN_ROLES: Readonly<Record<string, readonly RoleRule[]>> = {
  admin: [{ verbs: ['*'], kinds: all, namespaces: all }],
  edit: [
    { verbs: ['get', 'list'], kinds: all, namespaces: all },
    { verbs: ['apply', 'delete'], kinds: all, exceptKinds: [...PROTECTED_KINDS], namespaces: all },
  ],
  // Logs are not in view: programs print secrets to them. A Secret's stored form (keys, sizes, value
  // hashes; values sealed) is, but opening its values (`Secret/reveal`, --show-secrets) is not.
  view: [{ verbs: ['get', 'list'], kinds: all, exceptKinds: ['Pod/logs', 'Secret/reveal'], namespaces: all }],
  // The root of a node that joined: runs workloads like `edit`, but cannot change membership, users,
  // grants or the cluster (docs/security.md, "Identities and roles").
  'node-admin': [
    { verbs: ['get', 'list'], kinds: all, namespaces: all },
    { verbs: ['apply', 'delete'], kinds: all, exceptKinds: [...PROTECTED_KINDS], namespaces: all },
  ],
}

/**
 * The local root of a joined node is the user `root.NODE` (`orc user add` keeps the prefix). Not
 * `root@NODE`: an `@` in an author names a federation's cluster (`user:alice@home`).
 */
export const NODE_ROOT_PREFIX = 'root.'

export function nodeRootUser(nodeName: string): string {
  return `${NODE_ROOT_PREFIX}${nodeName}`
}

function kindMatches(rule: RoleRule, t: Target): boolean {
  const kinds = rule.kinds ?? all
  if (t.kind === undefined) return kinds.includes('*')
  const name = t.sub !== undefined && t.sub !== 'history' ? `${t.kind}/${t.sub}` : t.kind
  const except = rule.exceptKinds ?? []
  if (except.includes(t.kind) || except.includes(name)) return false
  return kinds.includes('*') || kinds.includes(name)
}

function namespaceMatches(rule: RoleRule, t: Target): boolean {
  const nss = rule.namespaces ?? all
  if (nss.includes('*')) return true
  return t.namespace !== undefined && nss.includes(t.namespace)
}

/** True when one of `rules` allows `verb` on `target`. */
export function allows(rules: readonly RoleRule[], verb: Verb, target: Target): boolean {
  return rules.some((r) => (r.verbs.includes('*') || r.verbs.includes(verb)) && kindMatches(r, target) && namespaceMatches(r, target))
}

/** What `userMay` reads: a store, or anything that lists objects by kind. */
export interface RbacSource {
  list(kind: string): readonly OrcObject[]
}

/** The names of the roles `user` holds: its bindings, plus the implicit ones (admin → admin, root.NODE → node-admin). */
export function rolesOf(src: RbacSource, user: string): string[] {
  const roles = new Set<string>()
  if (user === ADMIN_USER) roles.add('admin')
  if (user.startsWith(NODE_ROOT_PREFIX)) roles.add('node-admin')
  for (const b of src.list('RoleBinding')) {
    const spec = b.spec as { role?: unknown; users?: unknown } | undefined
    if (typeof spec?.role === 'string' && Array.isArray(spec.users) && spec.users.includes(user)) roles.add(spec.role)
  }
  return [...roles]
}

/** The rules of role `name`: a built-in one (which a stored Role cannot redefine), else the stored Role's. */
export function rulesOf(src: RbacSource, name: string): readonly RoleRule[] {
  const builtin = BUILTIN_ROLES[name]
  if (builtin !== undefined) return builtin
  const role = src.list('Role').find((r) => r.metadata.name === name)
  const rules = (role?.spec as { rules?: unknown } | undefined)?.rules
  return Array.isArray(rules) ? (rules as RoleRule[]) : []
}

/**
 * May `user` (a name, without `user:`) do `verb` on `kind` in `namespace` (`''` for cluster-scoped
 * objects; undefined for every namespace)? For checks on receipt: the author `user:NAME` of a
 * revision against the replica's own copy of the roles.
 */
export function userMay(src: RbacSource, user: string, verb: Verb, kind: string | undefined, namespace: string | undefined, sub?: string): boolean {
  const target: Target = { ...(kind !== undefined ? { kind } : {}), ...(namespace !== undefined ? { namespace } : {}), ...(sub !== undefined ? { sub } : {}) }
  return rolesOf(src, user).some((r) => allows(rulesOf(src, r), verb, target))
}

/**
 * When `user`'s key stopped (or stops) being accepted: its User object's `spec.expiresAt` in ms,
 * undefined when it has none (or no User object: the cluster's first admin key never expires).
 */
export function userExpiresAt(src: RbacSource, user: string): number | undefined {
  const u = src.list('User').find((o) => o.metadata.name === user)
  const at = (u?.spec as { expiresAt?: unknown } | undefined)?.expiresAt
  if (typeof at !== 'string') return undefined
  const ms = Date.parse(at)
  return Number.isFinite(ms) ? ms : undefined
}

/** Whether `user`'s credential had expired at `now` (ms). */
export function userExpired(src: RbacSource, user: string, now: number): boolean {
  const at = userExpiresAt(src, user)
  return at !== undefined && now >= at
}
