/**
 * Users and who-am-I (`orc user …`, `orc whoami`). A user is a `User` object holding the public half
 * of an Ed25519 key; its role is a `RoleBinding` of the same name. `add` and `rotate` make a key
 * pair here and answer the private half once, inside a remote credential (`orccred1.…`, with the
 * cluster id and PSK as before); it is stored nowhere. Removing or rotating a user makes its old
 * credential useless at once on every node that has replicated the change (cluster.ts `keyOwner`).
 */

import { encodeRemoteCredential, newUserKey } from '../mesh/index.ts'
import {
  ADMIN_USER,
  API_VERSION,
  authorOf,
  BUILTIN_ROLES,
  byCodeUnits,
  isPlainObject,
  NODE_ROOT_PREFIX,
  OrcError,
  type Principal,
  rolesOf,
  USER_NAME,
  userExpiresAt,
} from '../model/index.ts'
import type { ObjectStore } from '../store/index.ts'
import type { RouteHandlers } from './router.ts'
import type { UserCredential, UserView } from './routes.ts'

export interface UserRoutesComponents {
  store: ObjectStore
  now(): number
  random(n: number): Uint8Array
  /** The cluster's id and PSK, for the credential; undefined on an agent without the mesh. */
  cluster: (() => { clusterId: string; psk: Uint8Array }) | undefined
}

function principalText(p: Principal | undefined): Principal {
  if (p === undefined) throw new OrcError('forbidden', 'the request has no authenticated principal')
  return p
}

/** Keys are given at most ten years. */
const MAX_KEY_LIFETIME_MS = 10 * 365 * 86_400_000

/** `spec.expiresAt` for a new key from the request (`expiresInMs` or `expiresAt`), or undefined (never). */
export function keyExpiryOf(b: Record<string, unknown>, now: number): string | undefined {
  const { expiresInMs, expiresAt } = b
  if (expiresInMs !== undefined && expiresAt !== undefined) throw new OrcError('invalid', 'give either expiresInMs or expiresAt, not both')
  let at: number
  if (expiresInMs !== undefined) {
    if (typeof expiresInMs !== 'number' || !Number.isInteger(expiresInMs) || expiresInMs <= 0) {
      throw new OrcError('invalid', `expiresInMs ${JSON.stringify(expiresInMs)}: a positive whole number of milliseconds`)
    }
    at = now + expiresInMs
  } else if (expiresAt !== undefined) {
    const ms = typeof expiresAt === 'string' ? Date.parse(expiresAt) : Number.NaN
    if (!Number.isFinite(ms)) throw new OrcError('invalid', `expiresAt ${JSON.stringify(expiresAt)}: not a time (like 2027-01-31T12:00:00Z)`)
    if (ms <= now) throw new OrcError('invalid', `expiresAt ${String(expiresAt)} is not in the future`)
    at = ms
  } else return undefined
  if (at - now > MAX_KEY_LIFETIME_MS) throw new OrcError('invalid', 'a key may be given at most ten years (3650d)')
  return new Date(at).toISOString()
}

function reasonOf(b: Record<string, unknown>): string | undefined {
  return typeof b.reason === 'string' && b.reason !== '' ? b.reason.slice(0, 1024) : undefined
}

export function userRoutes(c: UserRoutesComponents) {
  const { store } = c
  const refOf = (name: string) => ({ kind: 'User', namespace: '', name })
  const bindingRef = (name: string) => ({ kind: 'RoleBinding', namespace: '', name })

  function needCluster(): { clusterId: string; psk: Uint8Array } {
    if (c.cluster === undefined) throw new OrcError('invalid', 'users need a cluster: this agent runs without the mesh, so nobody can call it remotely')
    return c.cluster()
  }

  function checkRole(role: string): void {
    if (BUILTIN_ROLES[role] !== undefined || store.get({ kind: 'Role', namespace: '', name: role }) !== undefined) return
    throw new OrcError('invalid', `role ${JSON.stringify(role)} does not exist (built in: ${Object.keys(BUILTIN_ROLES).join(', ')}; or a Role object)`)
  }

  async function issueKey(name: string, author: string, reason: string, description?: string, expiresAt?: string): Promise<UserCredential> {
    const cluster = needCluster()
    const { keyCredential, publicKey } = await newUserKey(c.random)
    await store.apply(
      {
        apiVersion: API_VERSION,
        kind: 'User',
        metadata: { name },
        spec: { publicKey, ...(description ? { description } : {}), ...(expiresAt ? { expiresAt } : {}) },
      },
      { author, reason: expiresAt ? `${reason} (expires ${expiresAt})` : reason, now: c.now() },
    )
    return {
      user: name,
      roles: rolesOf(store, name),
      credential: encodeRemoteCredential(cluster, keyCredential, name),
      ...(expiresAt ? { expiresAt } : {}),
    }
  }
  const expiryText = (name: string): { expiresAt?: string } => {
    const at = userExpiresAt(store, name)
    return at === undefined ? {} : { expiresAt: new Date(at).toISOString() }
  }

  return {
    whoami: ({ principal }) => {
      const p = principalText(principal)
      if (p.kind === 'node') return { user: `node:${p.peerId}`, author: authorOf(p), via: 'member', roles: [] }
      return { user: p.name, author: authorOf(p), via: p.via, roles: rolesOf(store, p.name), ...expiryText(p.name) }
    },
    users: () => {
      const names = new Set(store.list('User').map((u) => u.metadata.name))
      const users: UserView[] = store.list('User').map((u) => ({
        name: u.metadata.name,
        roles: rolesOf(store, u.metadata.name),
        key: (u.spec?.publicKey ?? '').slice(-12),
        created: u.metadata.createdAt,
        ...expiryText(u.metadata.name),
      }))
      // A cluster's first admin key (cluster.json) is the user admin until it has a User object.
      if (!names.has(ADMIN_USER) && c.cluster !== undefined) users.unshift({ name: ADMIN_USER, roles: ['admin'], key: '(cluster.json)', created: undefined })
      return { users: users.sort((a, b) => byCodeUnits(a.name, b.name)) }
    },
    addUser: async ({ body, principal }) => {
      const b = isPlainObject(body) ? body : {}
      const name = b.name
      if (typeof name !== 'string' || !USER_NAME.test(name) || name.startsWith(NODE_ROOT_PREFIX)) {
        throw new OrcError(
          'invalid',
          `user name ${JSON.stringify(name ?? null)}: lower-case letters, digits, - _ . (names starting with root. are kept for nodes' roots)`,
        )
      }
      const role = typeof b.role === 'string' && b.role !== '' ? b.role : 'view'
      checkRole(role)
      const expiresAt = keyExpiryOf(b, c.now())
      if (store.get(refOf(name)) !== undefined || name === ADMIN_USER) {
        throw new OrcError('conflict', `user ${name} exists; 'orc user rotate ${name}' gives it a new key`)
      }
      needCluster()
      const author = authorOf(principalText(principal))
      const reason = reasonOf(b) ?? `add user ${name} (${role})`
      await store.apply({ apiVersion: API_VERSION, kind: 'RoleBinding', metadata: { name }, spec: { role, users: [name] } }, { author, reason, now: c.now() })
      return issueKey(name, author, reason, typeof b.description === 'string' ? b.description : undefined, expiresAt)
    },
    rotateUser: async ({ params, body, principal }) => {
      const b = isPlainObject(body) ? body : {}
      const existing = store.get(refOf(params.name))
      if (existing === undefined && params.name !== ADMIN_USER) throw new OrcError('not_found', `user ${params.name} not found`)
      const author = authorOf(principalText(principal))
      return issueKey(
        params.name,
        author,
        reasonOf(b) ?? `rotate the key of user ${params.name}`,
        typeof existing?.spec?.description === 'string' ? existing.spec.description : undefined,
        keyExpiryOf(b, c.now()),
      )
    },
    removeUser: async ({ params, body, principal }) => {
      const b = isPlainObject(body) ? body : {}
      const name = params.name
      if (name === ADMIN_USER) throw new OrcError('invalid', `user ${ADMIN_USER} cannot be removed (the cluster would have no admin); rotate its key instead`)
      if (store.get(refOf(name)) === undefined) throw new OrcError('not_found', `user ${name} not found`)
      const opts = { author: authorOf(principalText(principal)), reason: reasonOf(b) ?? `remove user ${name}`, now: c.now() }
      await store.delete(refOf(name), opts)
      if (store.get(bindingRef(name)) !== undefined) await store.delete(bindingRef(name), opts)
      return { user: name, removed: true as const }
    },
  } satisfies RouteHandlers
}
