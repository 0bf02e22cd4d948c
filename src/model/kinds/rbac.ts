import { defineKind, type ObjectOfKind } from '../kind.ts'
import { s } from '../schema.ts'
import { age, createdAt, text } from './common.ts'

/** A user name: `user:NAME` is its principal and its author in history (no `@`: in an author it names a federation's cluster). */
export const USER_NAME = /^[a-z0-9][-a-z0-9_.]{0,62}$/
const userName = s.string({ pattern: USER_NAME, patternName: 'a user name (lower-case letters, digits, - _ .)' })
/** A time as `orc` writes it: UTC ISO 8601, to the second or finer. */
export const ISO_UTC = /^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?Z$/
const roleName = s.string({ pattern: /^[a-z0-9][-a-z0-9]{0,62}$/, patternName: 'a role name' })

/**
 * A person (or a script) that may call the API with its own key: only the public half is stored;
 * the private key was printed once by `orc user add` / `orc user rotate`.
 */
export const userKind = defineKind({
  kind: 'User',
  plural: 'users',
  aliases: ['user'],
  namespaced: false,
  spec: s.object({
    /** Ed25519 public key, base64url libp2p protobuf (as the remote API presents it). */
    publicKey: s.required(s.string({ maxLength: 512 })),
    description: s.string({ maxLength: 1024 }),
    /** When the key stops being accepted (UTC, ISO 8601); none: it does not expire. */
    expiresAt: s.string({ pattern: ISO_UTC, patternName: 'a UTC time like 2027-01-31T12:00:00Z' }),
  }),
  owned: [],
  columns: [
    { header: 'NAME', value: (o) => o.metadata.name },
    { header: 'KEY', value: (o) => text(o.spec?.publicKey.slice(-12)) },
    { header: 'EXPIRES', value: (o) => text(o.spec?.expiresAt, 'never') },
    { header: 'AGE', value: (o, now) => age(createdAt(o), now) },
  ],
})

const rule = s.object({
  /** get, list, apply, delete, admin, or `*`. */
  verbs: s.required(s.array(s.enum('get', 'list', 'apply', 'delete', 'admin', '*'), { maxItems: 8 })),
  /** Kinds (`Pod`), a kind's part (`Pod/logs`), or `*` (every kind and part). */
  kinds: s.array(s.string({ maxLength: 128 }), { maxItems: 64 }),
  /** Kinds `*` does not cover for this rule. */
  exceptKinds: s.array(s.string({ maxLength: 128 }), { maxItems: 64 }),
  /** Namespaces, or `*`; cluster-scoped objects have the namespace `''`. Default `*`. */
  namespaces: s.array(s.string({ maxLength: 63 }), { maxItems: 64 }),
})

/** What a role allows: a union of rules (verbs × kinds × namespaces). Built-in roles are in rbac.ts. */
export const roleKind = defineKind({
  kind: 'Role',
  plural: 'roles',
  aliases: ['role'],
  namespaced: false,
  spec: s.object({ rules: s.required(s.array(rule, { maxItems: 64 })), description: s.string({ maxLength: 1024 }) }),
  owned: [],
  columns: [
    { header: 'NAME', value: (o) => o.metadata.name },
    { header: 'RULES', value: (o) => String(o.spec?.rules.length ?? 0) },
    { header: 'AGE', value: (o, now) => age(createdAt(o), now) },
  ],
})

/** Gives a role to users. */
export const roleBindingKind = defineKind({
  kind: 'RoleBinding',
  plural: 'rolebindings',
  aliases: ['rolebinding', 'rb'],
  namespaced: false,
  spec: s.object({ role: s.required(roleName), users: s.required(s.array(userName, { maxItems: 1024 })) }),
  owned: [],
  columns: [
    { header: 'NAME', value: (o) => o.metadata.name },
    { header: 'ROLE', value: (o) => text(o.spec?.role) },
    { header: 'USERS', value: (o) => text(o.spec?.users.join(',')) },
    { header: 'AGE', value: (o, now) => age(createdAt(o), now) },
  ],
})

export interface User extends ObjectOfKind<typeof userKind> {}
export interface Role extends ObjectOfKind<typeof roleKind> {}
export interface RoleBinding extends ObjectOfKind<typeof roleBindingKind> {}
export type RoleRule = NonNullable<Role['spec']>['rules'][number]
