/**
 * Users' signatures on their writes (docs/security.md, "Users' signatures on their writes"). A
 * write a user asked for over the remote API carries the request as the user signed it (`u` of its
 * revision record, under the node's signature). Every replica checks, before it merges the record:
 * the user's signature, that the key was that user's at the request's time, that the request asked
 * for this record (operation, object, content), and that no other record used the same request for
 * the same object. Pure functions and the small state they need; the store calls them.
 */
import {
  deepEqual,
  findKind,
  isPlainObject,
  keyOf,
  nodeRootUser,
  normalizeManifest,
  type OwnershipTable,
  refOf,
  refOfKey,
  type SignedRequest,
  splitPath,
  valueAtPath,
} from '../model/index.ts'
import type { RevisionRecord } from './codec.ts'
import type { ObjectsView } from './trust.ts'

/**
 * How far a record's time may be from the time the user signed its request (either way: the
 * client's and the node's clocks differ). Also how long a key stays valid around a rotation.
 */
export const EVIDENCE_WINDOW_MS = 10 * 60_000

/** What the store is given to check users' evidence (the agent wires src/mesh/rpc.ts). */
export interface UserEvidenceOptions {
  /** Does the signature of a signed request verify with the key it names? Synchronous. */
  verify(s: SignedRequest): boolean
  /**
   * Keys a user holds outside its User object: the cluster's first admin key (cluster.json) is the
   * user `admin`'s until the first User `admin` revision (UserKeyHistory.validAt bounds it by that).
   */
  bootstrapKeys?(user: string, objects: ObjectsView): readonly string[]
  /** This node's name: its local socket's users write without a user signature (unsignedRefused). */
  self?(): string | undefined
}

/** The Cluster's `spec.userSignatures` (src/model/kinds/cluster.ts), as the checks read it. */
export interface UserSignaturePolicy {
  required: boolean
  /** Records timed before this (ms) are not held to it. */
  since: number
  /** Nodes whose local socket speaks as `user:admin` (their root holds the admin credential). */
  adminSocketNodes: readonly string[]
}

/** The policy the cluster's Cluster object states, or undefined (off). */
export function userSignaturePolicy(objects: ObjectsView): UserSignaturePolicy | undefined {
  for (const c of objects.list('Cluster')) {
    const us = (c as { spec?: { userSignatures?: { required?: boolean; since?: string; adminSocketNodes?: string[] } } }).spec?.userSignatures
    if (us?.required !== true) continue
    const since = us.since === undefined ? 0 : Date.parse(us.since)
    return { required: true, since: Number.isFinite(since) ? since : 0, adminSocketNodes: us.adminSocketNodes ?? [] }
  }
  return undefined
}

/**
 * Why a `user:*` record without evidence is refused under the policy (undefined: it may go). The
 * local socket's users write without a user signature: `root.NODE` from its own node, `admin` from
 * the nodes the policy lists.
 */
export function unsignedRefused(
  r: Pick<RevisionRecord, 'a' | 't'>,
  signerNode: string | undefined,
  policy: UserSignaturePolicy | undefined,
): string | undefined {
  if (policy === undefined || !r.a.startsWith('user:') || r.t < policy.since) return undefined
  const user = r.a.slice(5)
  if (signerNode !== undefined && (user === nodeRootUser(signerNode) || (user === 'admin' && policy.adminSocketNodes.includes(signerNode)))) return undefined
  return `${r.a} wrote through node ${signerNode ?? '<unknown>'} without the user's signature, and the cluster requires users' signatures (Cluster spec.userSignatures)`
}

/**
 * How far before a node's own earlier record a user record of that node may be timed and still
 * count as before the policy's `since` (clock corrections of an honest node).
 */
export const BACKDATE_SLACK_MS = 5 * 60_000

/** A node's latest-timed record so far: its time and its sequence number. */
export interface ReplicaTime {
  t: number
  seq: number
}

/**
 * Why a user record timed before the policy's `since` (so not held to it) is refused as backdated
 * (undefined: not backdated by what this replica knows). Two bounds, each beyond
 * BACKDATE_SLACK_MS:
 * - its store had already written, under a lower sequence number, a record timed at or after
 *   `since`: a store numbers its records in the order it writes them;
 * - the revision it builds on is timed at or after `since`: a revision cannot predate its parent.
 */
export function backdatedUnsigned(
  r: Pick<RevisionRecord, 'a' | 't' | 'u'>,
  seq: number,
  latest: ReplicaTime | undefined,
  parentT: number | undefined,
  policy: UserSignaturePolicy | undefined,
): string | undefined {
  if (policy === undefined || r.u !== undefined || !r.a.startsWith('user:') || r.t >= policy.since) return undefined
  const at = (t: number) => new Date(t).toISOString()
  const head = `${r.a}'s revision is timed ${at(r.t)}, before the cluster required users' signatures (${at(policy.since)}), but`
  if (latest !== undefined && latest.seq < seq && latest.t >= policy.since && latest.t - r.t > BACKDATE_SLACK_MS)
    return `${head} its store had already written a revision timed ${at(latest.t)}: a backdated write without the user's signature`
  if (parentT !== undefined && parentT >= policy.since && parentT - r.t > BACKDATE_SLACK_MS)
    return `${head} it builds on a revision timed ${at(parentT)}: a backdated write without the user's signature`
  return undefined
}

/** The replay key: one signed request backs at most one record per object. */
export function replayKey(u: Pick<SignedRequest, 'nonce'>, k: string): string {
  return `${u.nonce}|${k}`
}

/**
 * The objects of the last few signed requests, by key (or why a request has none): a batch's records
 * each carry the whole request, which is normalised once, not once per record.
 */
const normalised = new Map<string, Map<string, Record<string, unknown>> | string>()

/** The object an apply body gives for key `k`, normalised as the API does (or why there is none). */
function appliedObject(u: SignedRequest, k: string): Record<string, unknown> | string {
  const id = `${u.sig}|${u.nonce}`
  let objs = normalised.get(id)
  if (objs === undefined) {
    objs = normaliseAll(u.body)
    if (normalised.size >= 16) normalised.delete(normalised.keys().next().value!)
    normalised.set(id, objs)
  }
  if (typeof objs === 'string') return objs
  return objs.get(k) ?? `the signed request does not name ${k}`
}

function normaliseAll(body: unknown): Map<string, Record<string, unknown>> | string {
  if (!isPlainObject(body) || !Array.isArray(body.objects)) return 'the signed request has no objects'
  const defaultNamespace = typeof body.namespace === 'string' && body.namespace !== '' ? body.namespace : undefined
  const out = new Map<string, Record<string, unknown>>()
  for (const raw of body.objects) {
    const kind = isPlainObject(raw) && typeof raw.kind === 'string' ? findKind(raw.kind)?.kind : undefined
    // The API seals a Secret's values before it stores them: its request holds them in the clear.
    if (kind === 'Secret') return 'a request with Secrets carries no evidence'
    let obj: Record<string, unknown>
    try {
      obj = normalizeManifest(structuredClone(raw), defaultNamespace !== undefined ? { defaultNamespace } : {}) as unknown as Record<string, unknown>
    } catch {
      return 'the signed request holds an object that does not validate'
    }
    const k = keyOf(refOf(obj as never))
    if (out.has(k)) return `the signed request names ${k} twice`
    out.set(k, obj)
  }
  return out
}

/** `o` without the fields controllers own (ownership claims of its kind). */
function withoutClaims(o: Record<string, unknown>, kind: string, ownership: OwnershipTable): Record<string, unknown> {
  const out = structuredClone(o)
  for (const claim of ownership.claims(kind)) {
    const path = claim.path.split('.')
    const parent = valueAtPath(out, path.slice(0, -1))
    if (isPlainObject(parent)) delete parent[path[path.length - 1]!]
  }
  return out
}

/**
 * Does the signed request ask for this record? Undefined when it does; else why not. What is
 * compared:
 * - the author: `body.author`, when the request names one, is the record's (the router refuses any other);
 * - the time: within EVIDENCE_WINDOW_MS of the request's;
 * - `POST /v1/apply`: a create or update of an object the body lists exactly once (by kind,
 *   namespace — the body's default namespace applies — and name), no Secret in the body; the
 *   reason is the body's; and the record's content after it (`after`, a full copy) equals that
 *   object as `normalizeManifest` (the API's validation and defaults) gives it, both without the
 *   fields controllers own (the store keeps those from the object's current content);
 * - `DELETE /v1/objects/KIND/NS/NAME`: a delete of that object, with the body's reason.
 * Any other request backs no record.
 */
export function evidenceMismatch(
  r: Pick<RevisionRecord, 'k' | 'o' | 'a' | 'r' | 't'>,
  u: SignedRequest,
  after: Record<string, unknown> | undefined,
  ownership: OwnershipTable,
): string | undefined {
  if (!r.a.startsWith('user:')) return `${r.a} is not a user`
  if (Math.abs(r.t - u.at) > EVIDENCE_WINDOW_MS)
    return `written at ${new Date(r.t).toISOString()}, more than 10 minutes from the signed request (${new Date(u.at).toISOString()})`
  const body = isPlainObject(u.body) ? u.body : {}
  if (body.author !== undefined && body.author !== r.a) return `the signed request names author ${String(body.author)}`
  const reason = typeof body.reason === 'string' ? body.reason : ''
  if (reason !== r.r) return 'the reason is not the signed request’s'
  const method = u.method.toUpperCase()
  const seg = splitPath(u.path).segments()
  if (method === 'POST' && seg.length === 2 && seg[0] === 'v1' && seg[1] === 'apply') {
    if (r.o !== 'create' && r.o !== 'update') return `an apply makes no ${r.o}`
    const obj = appliedObject(u, r.k)
    if (typeof obj === 'string') return obj
    if (after === undefined) return 'the record’s content is not known here'
    const kind = refOfKey(r.k).kind
    if (!deepEqual(withoutClaims(after, kind, ownership), withoutClaims(obj, kind, ownership)))
      return `the content differs from what the signed request applies`
    return undefined
  }
  if (method === 'DELETE' && seg.length === 5 && seg[0] === 'v1' && seg[1] === 'objects') {
    if (r.o !== 'delete') return `a delete request makes no ${r.o}`
    const def = findKind(seg[2]!)
    if (def === undefined) return `the signed request names an unknown kind ${seg[2]}`
    const ns = seg[3] === '_' ? '' : seg[3]!
    const key = keyOf({ kind: def.kind, namespace: def.namespaced ? ns : '', name: seg[4]! })
    return key === r.k ? undefined : `the signed request deletes ${key}`
  }
  return `${method} ${u.path.slice(0, 100)} backs no record`
}

/** The public key a User record sets (`''` when it deletes the user or sets none), or undefined when it does not touch it. */
export function publicKeySet(r: Pick<RevisionRecord, 'k' | 'o' | 'c' | 'f'>): string | undefined {
  if (!r.k.startsWith('User/')) return undefined
  if (r.o === 'delete') return ''
  if (r.f !== undefined) {
    const k = valueAtPath(r.f, ['spec', 'publicKey'])
    return typeof k === 'string' ? k : ''
  }
  let out: string | undefined
  for (const c of r.c ?? []) {
    const path = c[1]
    if (!['spec', 'publicKey'].slice(0, path.length).every((s, i) => s === path[i]) || path.length > 2) continue
    const v = c[0] === 's' ? valueAtPath(c[2], ['spec', 'publicKey'].slice(path.length)) : undefined
    out = typeof v === 'string' ? v : ''
  }
  return out
}

/**
 * Which key each user held when: every User revision this replica holds that sets a key (or
 * deletes the user), by time. A key is valid from the revision that set it until the next revision
 * that sets another (each end widened by EVIDENCE_WINDOW_MS: a request signed just before a
 * rotation may be written just after it).
 */
export class UserKeyHistory {
  private readonly byUser = new Map<string, Array<{ key: string; from: number; id: string }>>()

  note(user: string, key: string, from: number, id: string): void {
    let l = this.byUser.get(user)
    if (!l) this.byUser.set(user, (l = []))
    if (l.some((e) => e.id === id)) return
    let i = l.length
    while (i > 0 && l[i - 1]!.from > from) i--
    l.splice(i, 0, { key, from, id })
  }

  /**
   * 'ok' when `key` was `user`'s at `at`; 'unknown' when this replica holds no revision giving it
   * that key (it may lag); 'invalid' when it knows the key but not at that time.
   */
  validAt(user: string, key: string, at: number, bootstrap: readonly string[], extra: UserKeyHistory | undefined): 'ok' | 'unknown' | 'invalid' {
    const l = [...(this.byUser.get(user) ?? []), ...(extra?.byUser.get(user) ?? [])].sort((a, b) => a.from - b.from)
    const W = EVIDENCE_WINDOW_MS
    if (bootstrap.includes(key) && (l.length === 0 || at <= l[0]!.from + W)) return 'ok'
    let seen = false
    for (let i = 0; i < l.length; i++) {
      if (l[i]!.key !== key) continue
      seen = true
      let j = i + 1
      while (j < l.length && l[j]!.key === key) j++
      const until = j < l.length ? l[j]!.from + W : Number.POSITIVE_INFINITY
      if (at >= l[i]!.from - W && at <= until) return 'ok'
    }
    return seen ? 'invalid' : 'unknown'
  }

  /** Has any user held `key`? */
  known(key: string): boolean {
    for (const l of this.byUser.values()) if (l.some((e) => e.key === key)) return true
    return false
  }
}
