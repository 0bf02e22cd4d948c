/**
 * The two-party rule for unsafe features: a pod gets `root`, `hostNetwork`, … only when it asks for
 * it (`spec.security.unsafe`; an image that is a host path asks for `hostPath`) and a second party
 * granted it: a SecurityPolicy in the pod's namespace that names the pod, written by an admin who
 * is not one of the pod's authors (or an admin's explicit `selfApprove: true`). What the policy
 * matches is what the pod's author cannot change to get in: the namespace and the pod names the
 * policy lists. Labels only narrow (a pod's author sets them): a policy with `matchLabels` and no
 * names grants nothing.
 *
 * Checked by the API before a pod is stored, and again by the lifecycle controller before it runs
 * one and whenever a SecurityPolicy changes (pods also arrive by replication, and grants are
 * revoked).
 */
import { isAbsolute, join, normalize } from 'node:path'
import { isRegistryReference } from '../../images/index.ts'
import {
  CRONJOB_LABEL,
  hostPathVolumesOf,
  JOB_LABEL,
  OrcError,
  type OrcObject,
  type Pod,
  type RbacSource,
  rolesOf,
  type SecurityPolicy,
  type UnsafeFeature,
} from '../../model/index.ts'
import { DEPLOYMENT_LABEL } from '../../sched/index.ts'
import type { ObjectStore } from '../../store/index.ts'

/** The Deployment controller's author (deployments/plan.ts; not imported: deployments imports pods). */
const DEPLOYMENT_CONTROLLER = 'controller:deployment'
/** The Job and CronJob controllers' authors (jobs/plan.ts). */
const JOB_CONTROLLER = 'controller:job'
const CRONJOB_CONTROLLER = 'controller:cronjob'

/** Unsafe features this agent can actually provide; the others are refused when a pod runs. */
export const IMPLEMENTED_UNSAFE: ReadonlySet<UnsafeFeature> = new Set<UnsafeFeature>(['root'])

/** Whether an author may approve grants: a user holding the `admin` role (the agent's default, adminByRole). */
export type IsAdmin = (author: string) => boolean
/** For unit tests of the grant rules only: any user (`user:NAME`). */
export const anyUserIsAdmin: IsAdmin = (author) => author.startsWith('user:')
/** A user of this cluster (not a federation member's, `user:NAME@CLUSTER`) bound to the `admin` role. */
export function adminByRole(src: RbacSource): IsAdmin {
  return (author) => {
    if (!author.startsWith('user:') || author.includes('@')) return false
    return rolesOf(src, author.slice('user:'.length)).includes('admin')
  }
}

/** Who is who, for the two-party check. */
export interface GrantContext {
  /** Everyone who wrote the pod (every user revision; a controller's pod: its owner's authors too). */
  podAuthors: ReadonlySet<string>
  /** The author of the policy's current content (the store's `updatedBy`, or the request's author). */
  policyAuthor(policy: SecurityPolicy): string
  isAdmin: IsAdmin
  /** The node's image stores (`<data-dir>/images` first); an image outside them is a host path. */
  imageStores: readonly string[]
}

/**
 * An image name in the node's image store (`orc image import … --name NAME`): name components with
 * an optional `:tag` (`busybox`, `team/app:1.2`), never a path (no leading `/`, no `..`).
 */
export const IMAGE_NAME = /^[a-z0-9][a-z0-9._-]{0,127}(\/[a-z0-9][a-z0-9._-]{0,127}){0,7}(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?$/

/**
 * Where an image reference points: a store image (a bare NAME, in the first store, or a path inside
 * one of the stores) or a host path. Lexical only (no file is touched); PodImages.resolve checks
 * symlinks on the node. `stores`: the node's own (`<data-dir>/images`) first, then any the
 * operator configured for the agent (`ORC_IMAGE_STORES`).
 */
export function imageLocation(image: string, stores: readonly string[]): { store: true; path: string } | { store: false; path: string } {
  if (IMAGE_NAME.test(image) && !image.includes('..') && stores[0] !== undefined) return { store: true, path: join(stores[0], image) }
  if (!isAbsolute(image)) return { store: false, path: image }
  const path = normalize(image)
  for (const s of stores) {
    const root = normalize(s).replace(/\/+$/, '')
    if (path.startsWith(`${root}/`) && path.length > root.length + 1) return { store: true, path }
  }
  return { store: false, path }
}

/** The pod's images that are host paths, not store images. */
export function hostPathImages(pod: Pod, imageStores: readonly string[]): string[] {
  const out: string[] = []
  for (const c of pod.spec?.containers ?? []) {
    const image = String(c.image)
    if (!isRegistryReference(image) && !imageLocation(image, imageStores).store) out.push(image)
  }
  return out
}

/** What the pod asks for: `spec.security.unsafe`, plus `hostPath` when an image is a host path or a volume a host directory. */
export function asksOf(pod: Pod, imageStores: readonly string[]): UnsafeFeature[] {
  const asks = new Set<UnsafeFeature>((pod.spec?.security?.unsafe ?? []).filter((a): a is UnsafeFeature => typeof a === 'string'))
  if (hostPathImages(pod, imageStores).length > 0 || hostPathVolumesOf(pod.spec).length > 0) asks.add('hostPath')
  return [...asks]
}

function nameMatches(pattern: string, name: string): boolean {
  return pattern.endsWith('*') ? name.startsWith(pattern.slice(0, -1)) : pattern === name
}

/** Does the policy's selector take in this pod? Names decide; labels only narrow. */
export function policySelects(policy: SecurityPolicy, pod: Pod): boolean {
  const sel = policy.spec?.selector
  const names = Array.isArray(sel?.names) ? sel.names : undefined
  const want = sel?.matchLabels
  if (names === undefined && want !== undefined) return false
  if (names !== undefined && !names.some((n) => typeof n === 'string' && nameMatches(n, pod.metadata.name))) return false
  if (!want) return true
  const have = pod.metadata.labels ?? {}
  return Object.entries(want).every(([k, v]) => have[k] === v)
}

/** Why this policy's grant does not count for the pod (second party missing), or undefined if it does. */
export function grantRefusal(policy: SecurityPolicy, ctx: GrantContext): string | undefined {
  const author = ctx.policyAuthor(policy)
  const name = `SecurityPolicy/${policy.metadata.name}`
  if (!ctx.isAdmin(author)) return `${name} was written by ${author}, who is not an admin`
  if (!ctx.podAuthors.has(author)) return undefined
  if (policy.spec?.selfApprove === true) return undefined
  return `${name} was written by ${author}, also an author of the pod: a grant needs a second party (or an admin's selfApprove: true)`
}

export interface Ungranted {
  missing: UnsafeFeature[]
  /** Policies that would have granted, and why they do not count. */
  refused: string[]
}

/** What the pod asks for that no policy of its namespace grants it, from a second party. */
export function ungranted(pod: Pod, policies: readonly SecurityPolicy[], ctx: GrantContext): Ungranted {
  const asks = asksOf(pod, ctx.imageStores)
  if (asks.length === 0) return { missing: [], refused: [] }
  const ns = pod.metadata.namespace ?? 'default'
  const granted = new Set<string>()
  const refused: string[] = []
  for (const p of policies) {
    if ((p.metadata.namespace ?? 'default') !== ns || !policySelects(p, pod)) continue
    const allow = (p.spec?.allow ?? []).filter((a) => asks.includes(a))
    if (allow.length === 0) continue
    const why = grantRefusal(p, ctx)
    if (why !== undefined) {
      refused.push(why)
      continue
    }
    for (const a of allow) granted.add(a)
  }
  return { missing: asks.filter((a) => !granted.has(a)), refused }
}

function list(items: string[]): string {
  return items.length <= 1 ? (items[0] ?? '') : `${items.slice(0, -1).join(', ')} and ${items[items.length - 1]}`
}

/** The refusal, naming what is missing, the grant needed and from whom. */
export function ungrantedError(pod: Pod, u: Ungranted, imageStores: readonly string[]): OrcError {
  const ns = pod.metadata.namespace ?? 'default'
  const { missing } = u
  const them = missing.length > 1 ? 'them' : 'it'
  const hostImages = missing.includes('hostPath') ? hostPathImages(pod, imageStores) : []
  const hostDirs = missing.includes('hostPath') && hostImages.length === 0 ? hostPathVolumesOf(pod.spec) : []
  if (hostDirs.length > 0) {
    const others = missing.filter((m) => m !== 'hostPath')
    return new OrcError(
      'forbidden',
      `pod/${pod.metadata.name} mounts host directory ${hostDirs.join(', ')} (a hostPath volume)${others.length > 0 ? ` and asks for ${list(others)}` : ''}, but no SecurityPolicy in namespace ${ns} allows ${them}${u.refused.length > 0 ? ` (${u.refused.join('; ')})` : ''} (an operator other than the pod's author must grant hostPath; or use an emptyDir or a Volume)`,
      { kind: 'Pod', namespace: ns, name: pod.metadata.name, missing, refused: u.refused },
    )
  }
  const what =
    hostImages.length > 0 ? `image ${hostImages.join(', ')}, a host path and not an image of the node's image store (${imageStores.join(', ')}),` : ''
  const asks =
    hostImages.length > 0
      ? `${what} needs hostPath${missing.length > 1 ? `; it also asks for ${list(missing.filter((m) => m !== 'hostPath'))}` : ''}`
      : `asks for ${list(missing)}`
  const hint = hostImages.length > 0 ? '; or import the image: orc image import SRC --name NAME, then image: NAME' : ''
  const refused = u.refused.length > 0 ? ` (${u.refused.join('; ')})` : ''
  return new OrcError(
    'forbidden',
    `pod/${pod.metadata.name} ${asks}, but no SecurityPolicy in namespace ${ns} allows ${them}${refused} (an operator other than the pod's author must grant ${them}${hint})`,
    { kind: 'Pod', namespace: ns, name: pod.metadata.name, missing, refused: u.refused },
  )
}

/** Throw unless every unsafe feature the pod asks for is granted by a second party. */
export function admitPod(obj: OrcObject, policies: readonly SecurityPolicy[], ctx: GrantContext): void {
  if (obj.kind !== 'Pod') return
  const pod = obj as Pod // normalizeManifest checked it against the Pod schema
  const refusal = runtimeRefusal(pod, policies)
  if (refusal) throw refusal
  const u = ungranted(pod, policies, ctx)
  if (u.missing.length > 0) throw ungrantedError(pod, u, ctx.imageStores)
}

/** A policy's own admission: `selfApprove` only from an admin; labels alone select nothing. */
export function admitPolicy(obj: OrcObject, author: string, isAdmin: IsAdmin): void {
  if (obj.kind !== 'SecurityPolicy') return
  const p = obj as SecurityPolicy
  if (p.spec?.selfApprove === true && !isAdmin(author))
    throw new OrcError('forbidden', `SecurityPolicy/${p.metadata.name}: selfApprove needs an admin; ${author} is not one`, { name: p.metadata.name })
  const sel = p.spec?.selector
  if (sel?.matchLabels !== undefined && sel.names === undefined)
    throw new OrcError(
      'invalid',
      `SecurityPolicy/${p.metadata.name}: selector.matchLabels alone would let a pod's author label a pod into the grant; list the pods in selector.names (labels then only narrow)`,
      { name: p.metadata.name },
    )
}

/**
 * Why the pod may not run under the runtime it asks for: a SecurityPolicy of its namespace that
 * selects it lists `requireRuntime` without that runtime (several such policies: every one must
 * allow it). A restriction counts whoever wrote it. Undefined when the pod may run.
 */
export function runtimeRefusal(pod: Pod, policies: readonly SecurityPolicy[]): OrcError | undefined {
  const ns = pod.metadata.namespace ?? 'default'
  const runtime = pod.spec?.runtime ?? 'sandbox'
  const against = policies.filter(
    (p) =>
      (p.metadata.namespace ?? 'default') === ns && Array.isArray(p.spec?.requireRuntime) && policySelects(p, pod) && !p.spec.requireRuntime.includes(runtime),
  )
  if (against.length === 0) return undefined
  const names = against.map((p) => `SecurityPolicy/${p.metadata.name}`)
  const want = against.map((p) => `${p.spec?.requireRuntime?.join(' or ') || 'no runtime'} (${`SecurityPolicy/${p.metadata.name}`})`)
  return new OrcError(
    'forbidden',
    `pod/${pod.metadata.name} asks for runtime ${runtime}, but namespace ${ns} requires ${list(want)} for it: set spec.runtime accordingly`,
    { kind: 'Pod', namespace: ns, name: pod.metadata.name, runtime, policies: names },
  )
}

/** Users among the authors of a history (controllers are not parties). */
export function userAuthors(revisions: readonly { author: string; op: string }[]): Set<string> {
  return new Set(revisions.filter((r) => !r.author.startsWith('controller:') && r.op !== 'delete').map((r) => r.author))
}

/**
 * Every party to a pod: the users who wrote it (its history), plus — for a pod a Deployment's
 * controller wrote — the users who wrote that PinnedDeployment, and `also` (an author about to write).
 */
export async function podAuthorsOf(store: Pick<ObjectStore, 'history'> & Partial<Pick<ObjectStore, 'get'>>, pod: Pod, also?: string): Promise<Set<string>> {
  const ns = pod.metadata.namespace ?? 'default'
  const hist = await store.history({ kind: 'Pod', namespace: ns, name: pod.metadata.name }).catch(() => [])
  const out = userAuthors(hist)
  const updatedBy = (pod.metadata as { updatedBy?: unknown }).updatedBy
  if (typeof updatedBy === 'string' && !updatedBy.startsWith('controller:')) out.add(updatedBy)
  if (also !== undefined) out.add(also)
  const owner = pod.metadata.labels?.[DEPLOYMENT_LABEL]
  if (owner !== undefined && (hist.some((r) => r.author === DEPLOYMENT_CONTROLLER) || updatedBy === DEPLOYMENT_CONTROLLER)) {
    const dh = await store.history({ kind: 'PinnedDeployment', namespace: ns, name: owner }).catch(() => [])
    for (const a of userAuthors(dh)) out.add(a)
  }
  // A Job's pod: the users who wrote the Job (and, for a CronJob's run, the CronJob).
  const job = pod.metadata.labels?.[JOB_LABEL]
  if (job !== undefined && (hist.some((r) => r.author === JOB_CONTROLLER) || updatedBy === JOB_CONTROLLER)) {
    const jh = await store.history({ kind: 'Job', namespace: ns, name: job }).catch(() => [])
    for (const a of userAuthors(jh)) out.add(a)
    const cronName = store.get?.({ kind: 'Job', namespace: ns, name: job })?.metadata.labels?.[CRONJOB_LABEL]
    if (cronName !== undefined && jh.some((r) => r.author === CRONJOB_CONTROLLER)) {
      const ch = await store.history({ kind: 'CronJob', namespace: ns, name: cronName }).catch(() => [])
      for (const a of userAuthors(ch)) out.add(a)
    }
  }
  return out
}
