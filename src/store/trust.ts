/**
 * Signed history and the checks a replica makes on receipt (docs/security.md, "Signed history and
 * checks on receipt"). A revision record is signed by the node that wrote it over a canonical
 * header that includes a hash of its content; a receiving replica verifies the signature, that the
 * signer is a member, that the content passes the kind's schema and that the signer had the right
 * to the change (authorize), before it merges anything.
 */
import { createHash } from 'node:crypto'
import {
  applyChanges,
  type Change,
  deepEqual,
  diffValues,
  formatPath,
  isPlainObject,
  keyOf,
  normalizeManifest,
  type OrcObject,
  type OwnershipTable,
  refOf,
  refOfKey,
  touchedPaths,
  USERS,
  valueAtPath,
} from '../model/index.ts'
import { decodeChanges, type RevisionRecord } from './codec.ts'
import { evidenceHash } from './evidence-shape.ts'

/** Signs this replica's revision records: the node's key. `id` is what verifiers look the key up by (the peer id). */
export interface RecordSigner {
  id: string
  sign(data: Uint8Array): Uint8Array
}

/** Who may sign: the current members' keys (removed peers are not members). */
export interface RecordVerifier {
  /**
   * The member with this signer id, or undefined when it is not a member. A removed peer may be
   * returned with the time of its removal: its records made before it verify, later ones do not.
   */
  member(id: string): { node?: string; removedAt?: number } | undefined
  verify(id: string, data: Uint8Array, signature: Uint8Array): boolean
  /**
   * Many signatures at once, the same answers as `verify` each (a worker thread beside this one
   * takes a share): the store uses it for large messages, a join's sync of thousands of records.
   */
  verifyMany?(checks: readonly SignatureCheck[]): Promise<boolean[]>
}

/** One signature to check: the signer id, the bytes signed, the signature. */
export interface SignatureCheck {
  id: string
  data: Uint8Array
  signature: Uint8Array
}

/** What the authorisation hook is told about the signer. */
export interface SignerInfo {
  id: string
  /** The signer's node name, when known. */
  node?: string
}

export type Verb = 'create' | 'update' | 'delete'

/** Objects by kind as a replica sees them while it checks a message: its own, overlaid with the message's. */
export interface ObjectsView {
  list(kind: string): readonly OrcObject[]
}

/**
 * May this user do `verb` on `kind` in `namespace` ('' for cluster-scoped kinds)? Wired to RBAC by
 * the agent. `objects` holds this replica's objects overlaid with what the message's earlier records
 * write, so a RoleBinding and the write it allows can arrive in one message.
 */
/** May `user` do `verb` on `kind` in `namespace`, in a record written at `at` (ms, the record's time: an expired credential's writes are refused)? */
export type UserMay = (user: string, verb: Verb, kind: string, namespace: string, objects: ObjectsView, at: number) => boolean

/**
 * Whether a verified record is within its signer's rights. `before` is the object's content on
 * this replica before the message (undefined when absent), `after` the record's resulting content
 * (undefined for a delete, or when it cannot be known: a compacted record). Returns the reason for
 * a refusal, or undefined.
 */
export type Authorize = (
  record: RevisionRecord,
  ctx: {
    before: Record<string, unknown> | undefined
    after: Record<string, unknown> | undefined
    /** The changes it makes, when known exactly (a delta record; a full copy whose parent content is known). */
    changes: Change[] | undefined
    createdBy: string | undefined
    /**
     * `before` is not the content its writer built on (the record's parent is not the head here:
     * the writer had not seen a concurrent write this replica holds).
     */
    concurrent?: boolean
    signer: SignerInfo
    /**
     * For a pod: the nodes this replica has seen it bound or pinned to, including the record's own
     * message and the content it builds on (a binding may move while its old node still reports).
     */
    boundTo?: ReadonlySet<unknown>
    /** What userMay reads (the replica's objects overlaid with the message's). */
    objects: ObjectsView
  },
) => string | undefined

export interface TrustOptions {
  signer?: RecordSigner
  verifier?: RecordVerifier
  authorize?: Authorize
  userMay?: UserMay
}

const te = new TextEncoder()

/**
 * Hash of a record's content as its writer wrote it: the changes, the full copy, or both (a write
 * over a merged head: its author's changes and the merged content after them).
 */
export function contentHash(r: Pick<RevisionRecord, 'c' | 'f'>): string {
  const body = r.c !== undefined ? (r.f !== undefined ? `b${JSON.stringify([r.c, r.f])}` : `c${JSON.stringify(r.c)}`) : `f${JSON.stringify(r.f ?? null)}`
  return createHash('sha256').update(body).digest('base64url')
}

/** Whether `r.h` is the hash of the record as written, or of its changes alone (compaction added the full copy). */
function hashMatches(r: RevisionRecord): boolean {
  if (contentHash(r) === r.h) return true
  return r.c !== undefined && r.f !== undefined && contentHash({ c: r.c }) === r.h
}

/** The bytes a record's signature covers: every header field and the content hash. */
export function signedBytes(r: RevisionRecord): Uint8Array {
  const header = [r.i, r.k, r.s, r.o, r.a, r.r, r.t, r.p ?? '', r.rt ?? '', r.rf ?? '', r.n ?? '', r.y ?? 0, r.yc ?? 0, r.h ?? '']
  // A user's evidence (`u`) is covered too, by its hash, a new object's uid (`d`) and the Yjs
  // structs the write deleted (`e`); records without them sign as before.
  if (r.d !== undefined || r.e !== undefined)
    return te.encode(JSON.stringify(['orc-rev-3', ...header, r.u === undefined ? '' : evidenceHash(r.u), r.d ?? '', r.e ?? null]))
  return te.encode(JSON.stringify(r.u === undefined ? ['orc-rev-1', ...header] : ['orc-rev-2', ...header, evidenceHash(r.u)]))
}

export function signRecord(r: RevisionRecord, signer: RecordSigner, clientId: number, clock: number): void {
  r.n = signer.id
  r.y = clientId
  r.yc = clock
  r.h = contentHash(r)
  r.g = Buffer.from(signer.sign(signedBytes(r))).toString('base64')
}

/** The signature check of a signed record; undefined when it is unsigned or its signature does not decode. */
export function signatureCheckOf(r: RevisionRecord): SignatureCheck | undefined {
  if (r.n === undefined || r.g === undefined) return undefined
  try {
    return { id: r.n, data: signedBytes(r), signature: Buffer.from(r.g, 'base64') }
  } catch {
    return undefined
  }
}

/**
 * Signature and membership (`member`: what verifier.member said of the signer). Returns a refusal
 * reason or undefined. `signatureOk`: the answer of the verifier for this record's signature check,
 * when it was asked already (verifyMany).
 */
export function verifyRecord(
  r: RevisionRecord,
  verifier: RecordVerifier,
  member: { removedAt?: number } | undefined,
  signatureOk?: boolean,
): string | undefined {
  if (r.n === undefined || r.g === undefined || r.h === undefined || r.y === undefined || r.yc === undefined) return 'unsigned'
  if (member === undefined || (member.removedAt !== undefined && r.t >= member.removedAt)) return 'not_member'
  // Compaction folds content away (x) and may add a full copy beside the changes it keeps: the
  // hash covers what the writer wrote (hashMatches).
  if (r.x !== 1 && !hashMatches(r)) return 'bad_signature'
  if (signatureOk !== undefined) return signatureOk ? undefined : 'bad_signature'
  const check = signatureCheckOf(r)
  if (check === undefined) return 'bad_signature'
  try {
    if (!verifier.verify(check.id, check.data, check.signature)) return 'bad_signature'
  } catch {
    return 'bad_signature'
  }
  return undefined
}

/**
 * The signatures of many records checked at once through `verifier.verifyMany` (records whose
 * signature does not decode are left out: verifyRecord refuses them). Undefined when the verifier
 * cannot batch.
 */
export async function verifyRecordsAtOnce(records: readonly RevisionRecord[], verifier: RecordVerifier): Promise<Map<RevisionRecord, boolean> | undefined> {
  if (verifier.verifyMany === undefined) return undefined
  const rs: RevisionRecord[] = []
  const checks: SignatureCheck[] = []
  for (const r of records) {
    const c = signatureCheckOf(r)
    if (c === undefined) continue
    rs.push(r)
    checks.push(c)
  }
  const ok = await verifier.verifyMany(checks)
  return new Map(rs.map((r, i) => [r, ok[i] === true]))
}

/** The exact changes a record makes: its delta, or its full copy against known parent content; undefined when unknown. */
export function changesOf(r: RevisionRecord, base: Record<string, unknown> | undefined, baseKnown: boolean): Change[] | undefined {
  if (r.o === 'delete') return []
  if (r.c !== undefined) return decodeChanges(r.c)
  if (r.f !== undefined && (baseKnown || r.p === undefined)) return diffValues(base ?? {}, r.f)
  return undefined
}

/** The content a record results in, from the content before it; undefined for deletes and compacted records. */
export function contentAfter(r: RevisionRecord, before: Record<string, unknown> | undefined): Record<string, unknown> | undefined {
  if (r.o === 'delete') return undefined
  if (r.f !== undefined) return r.f
  if (r.c !== undefined) return applyChanges(before ?? {}, decodeChanges(r.c)) as Record<string, unknown>
  return undefined
}

/** Schema check of a record's resulting content, and that it is the object its key names. */
export function checkSchema(r: RevisionRecord, after: Record<string, unknown> | undefined): string | undefined {
  if (after === undefined) return undefined
  try {
    const obj = normalizeManifest(structuredClone(after))
    if (keyOf(refOf(obj)) !== r.k) return `content is ${keyOf(refOf(obj))}, not ${r.k}`
  } catch (err) {
    return (err as Error).message
  }
  return undefined
}

function nodeOfPod(o: Record<string, unknown> | undefined): unknown {
  const st = o?.status
  return isPlainObject(st) ? st.node : undefined
}

/** The node a pod's spec pins it to (`spec.placement.node`, the user's). */
function pinOfPod(o: Record<string, unknown> | undefined): unknown {
  const placement = isPlainObject(o?.spec) ? o.spec.placement : undefined
  return isPlainObject(placement) ? placement.node : undefined
}

/** The node a VirtualMachine's spec pins it to (`spec.node`, the user's). */
function pinOfVm(o: Record<string, unknown> | undefined): unknown {
  return isPlainObject(o?.spec) ? o.spec.node : undefined
}

/** Whether the object of `key` is one whose status only the nodes it was bound or pinned to may write (pods, VMs). */
export function tracksBinding(key: string): boolean {
  return key.startsWith('Pod/') || key.startsWith('VirtualMachine/')
}

/** The node the content of `key` (a pod or VM) is pinned to, by its user. */
export function pinOf(key: string, o: Record<string, unknown> | undefined): unknown {
  return key.startsWith('VirtualMachine/') ? pinOfVm(o) : pinOfPod(o)
}

/** The nodes the content of `key` (a pod or VM) names as where it runs: its binding and its pin (either may be absent). */
export function runsOn(key: string, o: Record<string, unknown> | undefined): unknown[] {
  return [nodeOfPod(o), pinOf(key, o)].filter((n) => typeof n === 'string' && n !== '')
}

/** The node the last of these changes that sets a pod's `status.node` (itself, or a map holding it) names. */
export function bindingOf(changes: readonly Change[] | undefined): unknown {
  let to: unknown
  for (const c of changes ?? []) {
    if (c.op !== 'set' || (c.path.length > 0 && c.path[0] !== 'status') || c.path.length > 2 || (c.path.length === 2 && c.path[1] !== 'node')) continue
    const v = valueAtPath(c.value, ['status', 'node'].slice(c.path.length))
    if (v !== undefined) to = v
  }
  return to
}

/**
 * The default node rules. Users: RBAC (`userMay`) and user-owned fields only. Controllers: only
 * fields the controller owns (or the fields of objects it created), and for the node-scoped ones
 * only what belongs to the signer's node: `controller:node` its own Node object; the lifecycle
 * controller pods bound to it; the scheduler binds pods to its own node (or unbinds its own); the
 * ingress controller writes only its own node's entry of an Ingress's status; the volume controller
 * writes the Volumes whose data is on its node, or promotes its node from a replica (volumePromotionRefused);
 * the vm controller writes the VirtualMachines pinned to its node.
 * Cluster-wide controllers (deployment, rollout, job, cronjob, cluster, federation) may act anywhere: a known gap.
 */
/** Marks an authorisation refusal that came from the user's roles (a replica may lack a binding yet). */
export const ROLE_DENIED = 'role: '
/**
 * Marks a node-rule refusal that a binding this replica has not received yet would lift (a pod's
 * status from a node it was bound to by a write not here yet): refused as lagging, and repaired
 * from the author (honest-fuzz: a lifecycle's write over a concurrent binding it won).
 */
export const BINDING_UNKNOWN = 'binding: '

const LIFECYCLE = 'controller:lifecycle'
export const SCHEDULER = 'controller:scheduler'

export function defaultAuthorize(ownership: OwnershipTable, userMay: UserMay): Authorize {
  return (r, { before, after, changes, createdBy, concurrent, signer, boundTo, objects }) => {
    const { kind, namespace, name } = refOfKey(r.k)
    const verb: 'create' | 'update' | 'delete' = r.o === 'delete' ? 'delete' : before === undefined ? 'create' : 'update'
    const isUser = r.a.startsWith('user:')
    if (isUser && !userMay(r.a.slice(5), verb, kind, namespace ?? '', objects, r.t)) return `${ROLE_DENIED}${r.a} may not ${verb} ${kind.toLowerCase()}/${name}`
    // Field ownership, as the writer's store checks it.
    const creator = createdBy ?? r.a
    // A record's changes carry no old values: take them from the content before, so setting a whole
    // map (the lifecycle writes `status` whole) touches only the fields whose value differs.
    // A concurrent write that sets a whole map (its writer had no such map yet) is judged by the
    // fields it states: the fields it would drop are ones its writer never saw (a concurrent write
    // made them), and Yjs keeps one of the two maps either way.
    const oldOf = (c: Change): unknown => {
      const old = valueAtPath(before, c.path)
      return concurrent && c.op === 'set' ? restrictTo(old, c.value) : old
    }
    const paths = r.o === 'delete' || changes === undefined ? [] : touchedPaths(changes.map((c) => (c.old === undefined ? { ...c, old: oldOf(c) } : c)))
    // The lifecycle's status writes may carry the binding it last saw (`status.node`, and the
    // scheduler's `status.scheduling` beside it): a whole status map, or a full copy judged against
    // a head here that merged a concurrent binding. Refusing them stalls honest nodes during ha
    // moves (chaos test); a known gap (docs/security.md).
    const lifecycleOfPod = r.a === LIFECYCLE && kind === 'Pod'
    for (const p of paths) {
      if (lifecycleOfPod && p[0] === 'status' && (p[1] === 'node' || p[1] === 'scheduling')) continue
      const owner = ownership.ownerOf(kind, p)
      const ok = owner === USERS ? isUser || r.a === creator : owner === r.a
      if (!ok) return `${kind.toLowerCase()}/${name}: ${formatPath(p)} is owned by ${owner === USERS ? 'users' : owner}; ${r.a} may not change it`
    }
    if (isUser) return undefined
    const mine = signer.node
    switch (r.a) {
      case 'controller:node':
        // Another node's Node: only what `orc node forget` and `orc node remove` write (a known gap:
        // any node may mark any other forgotten or removed; see docs/security.md).
        if (kind === 'Node' && name !== mine) {
          if (r.o === 'delete' || changes === undefined) return `node ${mine ?? signer.id} may not write node/${name}`
          const other = paths.find((p) => !(p[0] === 'status' && ['forgotten', 'state', 'removedAt'].includes(p[1] ?? '')))
          if (other !== undefined) return `node ${mine ?? signer.id} may not write ${formatPath(other)} of node/${name}`
          const state = isPlainObject(after?.status) ? after.status.state : undefined
          if (paths.some((p) => p[1] === 'state') && state !== 'Removed') return `node ${mine ?? signer.id} may not set the state of node/${name}`
        }
        return undefined
      case LIFECYCLE: {
        // A pod's status is written by the node that runs it: a node this replica has seen it bound
        // or pinned to (`boundTo`: on disk, so a restart does not forget it; with the bindings of
        // the message itself and of the content the record builds on). A node that ran the pod
        // before a move still reports on its copy, and a receiver that merged a concurrent binding
        // judges against that one: both are in the set, since it holds every node, not the last.
        if (kind !== 'Pod') return undefined
        if (mine !== undefined && boundTo?.has(mine)) return undefined
        // This replica knows no binding or pin of the pod at all (a node that restarted and is catching
        // up): it cannot judge, and a refusal here would be repeated in every anti-entropy reply that
        // carries the record (chaos seed 1952584088: one node refused a status write 177 times and did
        // not converge). Judged only against bindings this replica knows.
        if (boundTo === undefined || boundTo.size === 0) return undefined
        const where = [...(boundTo ?? [])].map(String)
        return `${BINDING_UNKNOWN}node ${mine ?? signer.id} may not write the status of pod/${name}: it was never bound to that node (${where.length > 0 ? `bound to ${where.join(', ')}` : 'not bound'} as far as this replica knows)`
      }
      case 'controller:volume': {
        // A Volume's status is written by the node holding its data (docs/storage.md): the one
        // status.node names, before or after the write (the first attach places it).
        if (kind !== 'Volume') return `controller:volume writes Volumes only, not ${kind.toLowerCase()}/${name}`
        const placed = (o: Record<string, unknown> | undefined) => (isPlainObject(o?.status) ? o.status.node : undefined)
        const to = after !== undefined ? placed(after) : undefined
        const from = placed(before)
        if (from !== undefined && from !== mine) {
          // A promotion: a replica's node makes itself the primary for the ha pod bound to it.
          const why = volumePromotionRefused(before, after, mine, namespace ?? 'default', name, objects.list('Pod'), objects.list('VirtualMachine'))
          if (why !== undefined) return `node ${mine ?? signer.id} may not write volume/${name}, which lives on node ${String(from)}: ${why}`
          return undefined
        }
        if (to !== undefined && to !== mine && to !== from) return `node ${mine ?? signer.id} may not place volume/${name} on node ${String(to)}`
        return undefined
      }
      case 'controller:vm': {
        // A VirtualMachine's status is written by the node it is pinned (spec.node) or bound
        // (status.node) to — as the lifecycle's pod status: a node this replica has seen it bound
        // or pinned to (`boundTo`), so the old node of a moved `ha` VM may finish a write under way.
        if (kind !== 'VirtualMachine') return `controller:vm writes VirtualMachines only, not ${kind.toLowerCase()}/${name}`
        const nodes = new Set([...(boundTo ?? []), ...runsOn(r.k, before), ...runsOn(r.k, after)])
        if (mine !== undefined && nodes.has(mine)) return undefined
        const at = runsOn(r.k, after)[0] ?? runsOn(r.k, before)[0]
        return `node ${mine ?? signer.id} may not write virtualmachine/${name}, which runs on node ${at === undefined ? '<none>' : String(at)}`
      }
      case 'controller:ingress': {
        // An ingress controller reports on the node it runs on: `status.nodes.<its node>` only.
        if (kind !== 'Ingress') return undefined
        const other = paths.find((p) => !(p[0] === 'status' && p[1] === 'nodes' && p[2] !== undefined && p[2] === mine))
        if (other !== undefined) return `node ${mine ?? signer.id} may not write ${formatPath(other)} of ingress/${name}`
        return undefined
      }
      case SCHEDULER: {
        if (kind !== 'Pod' && kind !== 'VirtualMachine') return undefined
        // Where it binds the pod (or VM): from its content after, or (built on content unknown here) its changes.
        const to = after !== undefined ? nodeOfPod(after) : bindingOf(changes)
        if (to !== undefined && to !== mine && to !== nodeOfPod(before))
          return `node ${mine ?? signer.id} may not bind ${kind === 'Pod' ? 'pod' : 'virtualmachine'} ${name} to ${String(to)}`
        return undefined
      }
      default:
        return undefined
    }
  }
}

/**
 * Why node `me` may not promote itself to primary of Volume NS/NAME (undefined: it may). It may when
 * the write makes `me` the primary (`status.node`), `me` kept a replica before (`status.replicas`),
 * and an `ha` pod bound to `me` names the volume, or an `ha` VirtualMachine bound to `me` has it as a
 * disk (the scheduler moved it there because the primary was lost). A node can only promote itself,
 * and only where the volume's writer now runs.
 */
export function volumePromotionRefused(
  before: Record<string, unknown> | undefined,
  after: Record<string, unknown> | undefined,
  me: string | undefined,
  namespace: string,
  name: string,
  pods: readonly OrcObject[],
  vms: readonly OrcObject[] = [],
): string | undefined {
  if (me === undefined) return 'the signer is no node'
  const st = (o: Record<string, unknown> | undefined) => (isPlainObject(o?.status) ? o.status : {})
  if (after === undefined || st(after).node !== me) return 'only a promotion of the writing node itself is allowed'
  const reps = st(before).replicas
  if (!isPlainObject(reps) || !(me in reps)) return `node ${me} keeps no replica of it`
  const haHere = (o: Record<string, any>) => (o.metadata?.namespace ?? 'default') === namespace && o.spec?.policy === 'ha' && st(o).node === me
  const bound = pods.some((p) => {
    const o = p as unknown as Record<string, any>
    if (!haHere(o)) return false
    const vols: unknown[] = Array.isArray(o.spec?.volumes) ? o.spec.volumes : []
    return vols.some((v) => isPlainObject(v) && isPlainObject(v.volume) && v.volume.name === name)
  })
  // An ha VM: unpinned (a pinned one never moves), bound here, with the volume as a disk.
  const vmBound = vms.some((v) => {
    const o = v as unknown as Record<string, any>
    if (!haHere(o) || (typeof o.spec?.node === 'string' && o.spec.node !== '')) return false
    const disks: unknown[] = Array.isArray(o.spec?.disks) ? o.spec.disks : []
    return disks.some((d) => isPlainObject(d) && isPlainObject(d.volume) && d.volume.name === name)
  })
  if (!bound && !vmBound) return `no ha pod or ha vm using it is bound to node ${me}`
  return undefined
}

/** `old` with only the map keys `shape` has, at every level where both are maps. */
function restrictTo(old: unknown, shape: unknown): unknown {
  if (!isPlainObject(old) || !isPlainObject(shape)) return old
  const out: Record<string, unknown> = {}
  for (const k of Object.keys(shape)) if (k in old) out[k] = restrictTo(old[k], shape[k])
  return out
}

const SYS_FIELDS = new Set(['uid', 'seq', 'rev', 'createdAt', 'createdBy', 'updatedAt', 'updatedBy', 'deleted'])

/** A struct's content against the value the record says is at its path (plain objects are nested maps in the document). */
function sameShape(expected: unknown, content: 'values' | 'map' | 'other', values: readonly unknown[] | undefined): boolean {
  if (expected === undefined) return false
  if (isPlainObject(expected)) return content === 'map'
  return content === 'values' && values !== undefined && values.length === 1 && deepEqual(values[0], expected)
}

/**
 * Does a new Yjs struct hold what its covering record says? `path` is the field path inside the
 * object ([] for the object's own map, ['~'] for its system metadata). A record writes its object's
 * map (create, delete's tombstone), the system metadata naming it, and the values of its changes
 * (or of its full copy). Compacted records cannot be compared (their content is gone): accepted.
 */
/** structMatches' answer for system metadata naming a creation this replica holds no record of. */
export const UNKNOWN_CREATION = 'system metadata names a creation not received here'

export function structMatches(
  r: RevisionRecord,
  path: readonly string[],
  content: 'values' | 'map' | 'none' | 'other',
  values: readonly unknown[] | undefined,
  origin: { createdBy: string; createdAt: string; uid?: string } | undefined,
  /** Another creation of this key a verified create record made (`createdBy|createdAt`): concurrent creates each keep their own. */
  isKnownCreation: (createdBy: string, createdAt: string, uid: string) => boolean = () => false,
): string | undefined {
  if (content === 'none') return undefined
  if (content === 'other') return 'not a map or a value'
  if (path.length === 0) return content === 'map' ? undefined : 'the object is not a map'
  if (path[0] === '~') {
    const sys = values?.[0]
    if (path.length !== 1 || content !== 'values' || values!.length !== 1 || !isPlainObject(sys)) return 'system metadata malformed'
    if (sys.rev !== r.i || sys.seq !== r.s || sys.updatedBy !== r.a || (sys.deleted === true) !== (r.o === 'delete'))
      return 'system metadata names another revision'
    if (sys.updatedAt !== new Date(r.t).toISOString()) return 'system metadata has another time'
    if (Object.keys(sys).some((k) => !SYS_FIELDS.has(k))) return 'system metadata has unknown fields'
    if (typeof sys.uid !== 'string' || !/^[0-9a-f]{32}$/.test(sys.uid) || typeof sys.createdAt !== 'string' || typeof sys.createdBy !== 'string') {
      return 'system metadata malformed'
    }
    // The creator decides who may change user fields: a new object's is the record's author, an
    // existing one keeps its creator, uid and creation time (unknown here while catching up: then unchecked).
    // A new object's uid is the one its record signs (`d`; records from before it carry none).
    if (r.d !== undefined && sys.uid !== r.d) return 'system metadata names another uid'
    const created = r.o === 'create' || r.d !== undefined
    const expected = created ? { createdBy: r.a, createdAt: new Date(r.t).toISOString() } : origin
    if (expected !== undefined) {
      const same = sys.createdBy === expected.createdBy && sys.createdAt === expected.createdAt && (expected.uid === undefined || sys.uid === expected.uid)
      if (!same && created) return 'system metadata names another creation'
      if (!same && !isKnownCreation(sys.createdBy, sys.createdAt, sys.uid)) {
        // Another node's create this replica has not received yet (or a forged one): judged when it comes.
        return UNKNOWN_CREATION
      }
    }
    return undefined
  }
  if (r.o === 'delete') return 'a delete writes no content'
  if (r.x === 1 && r.c === undefined && r.f === undefined) return undefined
  if (r.c !== undefined) {
    for (const [op, p, v] of r.c) {
      if (op !== 's') continue
      const n = Math.min(p.length, path.length)
      if (!p.slice(0, n).every((seg, i) => seg === path[i])) continue
      // A deeper change: this is a map it goes through; otherwise the value (or a part of it).
      if (path.length < p.length) {
        if (content === 'map') return undefined
        continue
      }
      if (sameShape(valueAtPath(v, path.slice(p.length)), content, values)) return undefined
    }
    return 'no change of the revision sets it'
  }
  return sameShape(valueAtPath(r.f, path), content, values) ? undefined : 'differs from the revision content'
}

function isTombstone(v: unknown): boolean {
  return isPlainObject(v) && isPlainObject(v['~']) && v['~'].deleted === true && Object.keys(v).length === 1
}

/**
 * Does record `r`'s write delete the struct at `path` of its object (docs/security.md, "Yjs
 * deletions are bound per field")? A create or delete replaces the object's whole map; every write
 * replaces the system metadata (`~`); an update deletes only what its changes replace: the value
 * or map at a changed path or below it, or a value standing where a change needs a map. `changes`:
 * the record's own changes when it carries them; otherwise its full copy is compared with the
 * deleted value (`value`, undefined when that content is gone already: a sync's overwritten entry).
 * A compacted record without content cannot be compared: any field of its object.
 */
export function deletesField(
  r: RevisionRecord,
  changes: readonly Change[] | undefined,
  path: readonly string[],
  map: boolean | undefined,
  value: (() => unknown) | undefined,
): boolean {
  if (r.o === 'create' || r.o === 'delete') return true
  // A rollback writes a deleted object anew (its tombstone's map replaced), a live one in place.
  if (path.length === 0) return r.o === 'rollback' && (value === undefined || isTombstone(value()))
  if (path.length === 1 && path[0] === '~') return true
  if (changes !== undefined) {
    return changes.some((c) => {
      const n = Math.min(c.path.length, path.length)
      for (let i = 0; i < n; i++) if (c.path[i] !== path[i]) return false
      return c.path.length <= path.length || (c.op === 'set' && map !== true)
    })
  }
  if (r.f !== undefined) return value === undefined || !deepEqual(valueAtPath(r.f, path), value())
  return true
}
