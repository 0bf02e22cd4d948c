import type { RolloutProgress } from '../model/index.ts'
import { OrcError } from '../model/index.ts'
import { canonicalJson, hashString } from './hash.ts'
import { matchLabels, matchSelector } from './selector.ts'
import { tolerationFor } from './state.ts'
import type { NodeView, PodView } from './view.ts'

/**
 * Rollout math for a PinnedDeployment: two templates, `previous` and `next`, and how many replicas
 * run `next`. Pod names are stable: `<deployment>-<template hash>-<ordinal>`, so changing the split
 * adds or removes the highest ordinals only, and promoting `next` keeps its pods as they are (their
 * template, hence their names, do not change).
 */
export interface PodTemplate {
  labels?: Record<string, string>
  spec: Record<string, unknown>
}

export interface PinnedDeploymentSpec {
  replicas: number
  previous: PodTemplate
  next?: PodTemplate
  /** Exactly how many replicas run `next`. */
  nextReplicas?: number
  /** Share of replicas that run `next`, rounded up (1% of 3 replicas is one canary). */
  nextPercent?: number
}

export type RolloutVersion = 'previous' | 'next'

export interface DesiredPod {
  name: string
  version: RolloutVersion
  ordinal: number
  templateHash: string
  /** Template labels plus `orc/deployment` and `orc/template`. */
  labels: Record<string, string>
  template: PodTemplate
}

export const DEPLOYMENT_LABEL = 'orc/deployment'
export const TEMPLATE_LABEL = 'orc/template'

/** 8 hex digits identifying a template's content, whatever its key order. */
export function templateHash(t: PodTemplate): string {
  return hashString(canonicalJson(t)).toString(16).padStart(8, '0')
}

function checkCount(v: number | undefined, what: string, max = Infinity): void {
  if (v !== undefined && (!Number.isInteger(v) || v < 0 || v > max)) {
    throw new OrcError('invalid', `${what} must be a whole number from 0${max === Infinity ? '' : ` to ${max}`}, got ${v}`, { [what]: v })
  }
}

export function validateRollout(spec: PinnedDeploymentSpec): void {
  checkCount(spec.replicas, 'replicas')
  checkCount(spec.nextReplicas, 'nextReplicas', spec.replicas)
  checkCount(spec.nextPercent, 'nextPercent', 100)
  if (spec.nextReplicas !== undefined && spec.nextPercent !== undefined) {
    throw new OrcError('invalid', 'set either nextReplicas or nextPercent, not both', {})
  }
}

/** Replicas per version. Without a `next` template (or one equal to `previous`) all are previous. */
export function rolloutCounts(spec: PinnedDeploymentSpec): { previous: number; next: number } {
  validateRollout(spec)
  if (!spec.next || templateHash(spec.next) === templateHash(spec.previous)) return { previous: spec.replicas, next: 0 }
  const next =
    spec.nextReplicas !== undefined
      ? spec.nextReplicas
      : spec.nextPercent !== undefined
        ? Math.min(spec.replicas, Math.ceil((spec.replicas * spec.nextPercent) / 100))
        : 0
  return { previous: spec.replicas - next, next }
}

/** The pods a PinnedDeployment wants, previous first, each by ordinal. */
export function desiredRolloutPods(deployment: string, spec: PinnedDeploymentSpec): DesiredPod[] {
  const counts = rolloutCounts(spec)
  const out: DesiredPod[] = []
  const add = (version: RolloutVersion, template: PodTemplate, n: number) => {
    const h = templateHash(template)
    for (let i = 0; i < n; i++) {
      out.push({
        name: `${deployment}-${h}-${i}`,
        version,
        ordinal: i,
        templateHash: h,
        labels: { ...template.labels, [DEPLOYMENT_LABEL]: deployment, [TEMPLATE_LABEL]: h },
        template,
      })
    }
  }
  add('previous', spec.previous, counts.previous)
  if (spec.next && counts.next > 0) add('next', spec.next, counts.next)
  return out
}

export interface RolloutStatus {
  replicas: number
  desired: { previous: number; next: number }
  /** Existing pods per version (by template label), and how many of those are ready. */
  current: { previous: number; next: number; ready: { previous: number; next: number } }
  /** Pods to create and to delete to reach the desired split. */
  create: string[]
  remove: string[]
  done: boolean
}

/** Compare the desired split with existing pods (by name) — for `orc rollout status`. */
export function rolloutStatus(deployment: string, spec: PinnedDeploymentSpec, existing: readonly { name: string; ready?: boolean }[]): RolloutStatus {
  const desired = desiredRolloutPods(deployment, spec)
  const want = new Map(desired.map((d) => [d.name, d]))
  const have = new Set(existing.map((e) => e.name))
  const prevHash = templateHash(spec.previous)
  const nextHash = spec.next ? templateHash(spec.next) : undefined
  const current = { previous: 0, next: 0, ready: { previous: 0, next: 0 } }
  for (const e of existing) {
    const v: RolloutVersion | undefined = e.name.startsWith(`${deployment}-${prevHash}-`)
      ? 'previous'
      : nextHash !== undefined && e.name.startsWith(`${deployment}-${nextHash}-`)
        ? 'next'
        : undefined
    if (!v) continue
    current[v]++
    if (e.ready) current.ready[v]++
  }
  const create = desired.filter((d) => !have.has(d.name)).map((d) => d.name)
  const remove = existing
    .filter((e) => !want.has(e.name))
    .map((e) => e.name)
    .sort()
  const counts = rolloutCounts(spec)
  return {
    replicas: spec.replicas,
    desired: counts,
    current,
    create,
    remove,
    done: create.length === 0 && remove.length === 0 && current.ready.previous === counts.previous && current.ready.next === counts.next,
  }
}

/** `orc rollout set`: a new split (exactly one of the two). */
export function setRollout(spec: PinnedDeploymentSpec, split: { nextReplicas: number } | { nextPercent: number }): PinnedDeploymentSpec {
  if (!spec.next) throw new OrcError('conflict', 'rollout has no next template to shift replicas to', {})
  const { nextReplicas: _r, nextPercent: _p, ...rest } = spec
  const out: PinnedDeploymentSpec = { ...rest, ...split }
  validateRollout(out)
  return out
}

/** `orc rollout promote`: next becomes previous for all replicas. */
export function promoteRollout(spec: PinnedDeploymentSpec): PinnedDeploymentSpec {
  if (!spec.next) throw new OrcError('conflict', 'rollout has no next template to promote', {})
  return { replicas: spec.replicas, previous: spec.next }
}

/** `orc rollout abort`: drop next; every replica runs previous. */
export function abortRollout(spec: PinnedDeploymentSpec): PinnedDeploymentSpec {
  return { replicas: spec.replicas, previous: spec.previous }
}

export interface EveryNodePod {
  name: string
  /** The pin (`spec.placement.node`). */
  node: string
}

/**
 * `placement.everyNode: true`: one pod per eligible node, pinned to it. Eligible: not forgotten,
 * nodeSelector and required node affinity match, NoSchedule/NoExecute taints tolerated. Cordoned and
 * unreachable nodes keep theirs (like DaemonSets); resources are checked by placement, which leaves
 * a pod that does not fit pending with the reason.
 */
export function everyNodePods(
  workload: string,
  template: Pick<PodView, 'nodeSelector' | 'tolerations' | 'affinity'>,
  nodes: readonly NodeView[],
): EveryNodePod[] {
  const out: EveryNodePod[] = []
  const used = new Set<string>()
  // In name order, so that which of two colliding names gets the hashed form is the same everywhere.
  for (const n of [...nodes].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
    if (n.forgotten) continue
    const labels = n.labels ?? {}
    if (!matchLabels(labels, template.nodeSelector)) continue
    const req = template.affinity?.nodeAffinity?.required
    if (req && req.length > 0 && !req.some((s) => matchSelector(labels, s))) continue
    if ((n.taints ?? []).some((t) => t.effect !== 'PreferNoSchedule' && !tolerationFor(template.tolerations ?? [], t))) continue
    // A node of a federation is `node@cluster`: its copy is `<workload>-<node>-<cluster>`.
    const name = `${workload}-${n.name.replace('@', '-')}`
    const fits = name.length <= 63 && !used.has(name)
    const chosen = fits ? name : `${workload.slice(0, 54)}-${hashString(n.name).toString(16).padStart(8, '0')}`
    used.add(chosen)
    out.push({ name: chosen, node: n.name })
  }
  return out.sort((a, b) => (a.node < b.node ? -1 : a.node > b.node ? 1 : 0))
}

/** A PinnedDeployment as the planner needs it: the rollout split, plus one copy per node when `everyNode`. */
export interface DeploymentPlanSpec extends PinnedDeploymentSpec {
  /** `spec.placement.everyNode`: one pod per eligible node instead of `replicas`. */
  everyNode?: boolean
}

export interface PlannedPod {
  name: string
  version: RolloutVersion
  templateHash: string
  /** Template labels plus `orc/deployment` and `orc/template`. */
  labels: Record<string, string>
  /** The template's pod spec, with `placement.node` set for an everyNode pod. */
  spec: Record<string, unknown>
  /** everyNode: the node this copy is pinned to. */
  node?: string
}

type TemplateConstraints = Pick<PodView, 'nodeSelector' | 'tolerations' | 'affinity'>

function constraintsOf(t: PodTemplate): TemplateConstraints {
  const s = t.spec as Partial<Record<keyof TemplateConstraints, unknown>>
  return {
    ...(s.nodeSelector ? { nodeSelector: s.nodeSelector as PodView['nodeSelector'] } : {}),
    ...(s.tolerations ? { tolerations: s.tolerations as PodView['tolerations'] } : {}),
    ...(s.affinity ? { affinity: s.affinity as PodView['affinity'] } : {}),
  }
}

/**
 * Every pod a PinnedDeployment wants, as a pure function of its spec and the nodes in the store, so
 * that every node computes the same set (same names, same content) and concurrent writers converge.
 *
 * - replicas: `<name>-<template hash>-<ordinal>` (see desiredRolloutPods), spread by the scheduler.
 * - everyNode: `<name>-<node>`, pinned to the node; the nodes eligible for `previous` count as the
 *   replicas, and the first `next` of them by name run `next` (the pod is edited in place, so a
 *   node's copy keeps its name through a rollout and `orc history pod/…` shows the switch).
 */
export function planDeploymentPods(deployment: string, spec: DeploymentPlanSpec, nodes: readonly NodeView[]): PlannedPod[] {
  const label = (t: PodTemplate, h: string) => ({ ...t.labels, [DEPLOYMENT_LABEL]: deployment, [TEMPLATE_LABEL]: h })
  if (!spec.everyNode) {
    return desiredRolloutPods(deployment, spec).map((d) => ({
      name: d.name,
      version: d.version,
      templateHash: d.templateHash,
      labels: d.labels,
      spec: structuredClone(d.template.spec),
    }))
  }
  const eligible = everyNodePods(deployment, constraintsOf(spec.previous), nodes)
  const split = rolloutCounts({
    ...spec,
    replicas: eligible.length,
    ...(spec.nextReplicas !== undefined ? { nextReplicas: Math.min(spec.nextReplicas, eligible.length) } : {}),
  })
  return eligible.map((e, i) => {
    const version: RolloutVersion = i < split.next ? 'next' : 'previous'
    const t = version === 'next' ? spec.next! : spec.previous
    const h = templateHash(t)
    const podSpec = structuredClone(t.spec)
    podSpec.placement = { ...(podSpec.placement as Record<string, unknown> | undefined), node: e.node }
    return { name: e.name, version, templateHash: h, labels: label(t, h), spec: podSpec, node: e.node }
  })
}

/** Per version: pods wanted, pods that exist, copies running on a node, copies ready. */
export interface VersionCounts {
  template: string
  desired: number
  created: number
  running: number
  ready: number
}

export interface DeploymentStatus {
  replicas: number
  previous: VersionCounts
  next?: VersionCounts
  /** Pods to create and pods to delete to reach the desired set (names, sorted). */
  create: string[]
  remove: string[]
  /** Every wanted pod exists and is ready, and no other pod of the deployment is left. */
  done: boolean
}

/** What one existing pod of a deployment looks like to the status computation. */
export interface ObservedPod {
  name: string
  /** Its `orc/template` label. */
  template?: string
  /** A copy runs on some node (phase Starting or Running). */
  running?: boolean
  /** Running with every container up. */
  ready?: boolean
}

/** Status of a deployment from its plan and the pods that exist (by the `orc/template` label). */
export function deploymentStatus(spec: DeploymentPlanSpec, planned: readonly PlannedPod[], existing: readonly ObservedPod[]): DeploymentStatus {
  const prevHash = templateHash(spec.previous)
  const nextHash = spec.next ? templateHash(spec.next) : undefined
  const count = (h: string): VersionCounts => {
    const mine = existing.filter((e) => e.template === h)
    return {
      template: h,
      desired: planned.filter((p) => p.templateHash === h).length,
      created: mine.length,
      running: mine.filter((e) => e.running).length,
      ready: mine.filter((e) => e.ready).length,
    }
  }
  const want = new Set(planned.map((p) => p.name))
  const have = new Set(existing.map((e) => e.name))
  const create = planned
    .filter((p) => !have.has(p.name))
    .map((p) => p.name)
    .sort()
  const remove = existing
    .filter((e) => !want.has(e.name))
    .map((e) => e.name)
    .sort()
  const previous = count(prevHash)
  const next = nextHash !== undefined && nextHash !== prevHash ? count(nextHash) : undefined
  const readyOk = previous.ready === previous.desired && (next === undefined || next.ready === next.desired)
  // Pods of an older template still existing are in `remove`; `created` counts by template, so a
  // pod being switched in place (everyNode) shows under the version it runs now.
  return {
    replicas: planned.length,
    previous,
    ...(next ? { next } : {}),
    create,
    remove,
    done:
      create.length === 0 && remove.length === 0 && readyOk && previous.created === previous.desired && (next === undefined || next.created === next.desired),
  }
}

/** How far a rollout step may go beyond and below `replicas` (Kubernetes' maxSurge / maxUnavailable). */
export interface RolloutLimits {
  maxSurge: number
  maxUnavailable: number
}

/** The limits of a deployment of `replicas` pods: given ones, else 25% up (at least 1) and 25% down. */
export function rolloutLimits(replicas: number, given: { maxSurge?: number; maxUnavailable?: number } = {}): RolloutLimits {
  const maxSurge = given.maxSurge ?? Math.max(1, Math.ceil(replicas / 4))
  const maxUnavailable = given.maxUnavailable ?? Math.floor(replicas / 4)
  // Both 0 is refused on apply; a merge could still produce it: let one pod surge.
  return maxSurge === 0 && maxUnavailable === 0 ? { maxSurge: 1, maxUnavailable: 0 } : { maxSurge, maxUnavailable }
}

export interface RolloutStep {
  /** Pods that may be created now (a prefix of the wanted ones, in their order). */
  create: string[]
  /** Pods that may be deleted now. */
  remove: string[]
  /** Why some creations or removals wait (for `orc rollout status` and logs). */
  held?: string
}

/**
 * One step of a readiness-gated rollout, as a pure function of what exists: create while the pods
 * number at most `replicas + maxSurge`; delete a Ready pod only while at least
 * `replicas - maxUnavailable` Ready pods remain (pods that are not Ready go first, and freely). A
 * new pod that never becomes Ready therefore holds the old ones in place.
 */
export function gateRolloutStep(
  replicas: number,
  limits: RolloutLimits,
  existing: readonly { name: string; ready: boolean }[],
  create: readonly string[],
  remove: readonly string[],
): RolloutStep {
  const room = Math.max(0, replicas + limits.maxSurge - existing.length)
  const created = create.slice(0, room)
  const ready = new Map(existing.map((e) => [e.name, e.ready]))
  let readyCount = existing.filter((e) => e.ready).length
  const minReady = Math.max(0, replicas - limits.maxUnavailable)
  // Not Ready first; then the highest names (ordinals) first, as a split change removes those.
  const ordered = [...remove].sort((a, b) => Number(ready.get(a) === true) - Number(ready.get(b) === true) || (a < b ? 1 : a > b ? -1 : 0))
  const removed: string[] = []
  for (const name of ordered) {
    if (ready.get(name) !== true) removed.push(name)
    else if (readyCount - 1 >= minReady) {
      removed.push(name)
      readyCount--
    }
  }
  const heldCreate = create.length - created.length
  const heldRemove = remove.length - removed.length
  const held: string[] = []
  if (heldCreate > 0) held.push(`${heldCreate} pod(s) wait for room (maxSurge ${limits.maxSurge})`)
  if (heldRemove > 0) held.push(`${heldRemove} old pod(s) wait for new pods to be Ready (maxUnavailable ${limits.maxUnavailable})`)
  return { create: created, remove: removed, ...(held.length > 0 ? { held: held.join('; ') } : {}) }
}

/**
 * The rollout record of a deployment after this pass: a new `next` template starts one; any change
 * of `marker` (pods created, Ready) is progress; a rollout that has not finished its step and made
 * no progress for `deadlineMs` is aborted, and stays aborted for that template (a new `next`, a
 * promote or an abort by the user ends it).
 */
export function rolloutProgress(
  prev: RolloutProgress | undefined,
  next: { template: string; marker: string; done: boolean } | undefined,
  now: number,
  deadlineMs: number,
  notReady: () => string,
): RolloutProgress | undefined {
  if (next === undefined) return undefined
  const at = new Date(now).toISOString()
  if (prev?.template === next.template && prev.state === 'Aborted') return prev
  if (prev?.template !== next.template || prev.marker !== next.marker)
    return { template: next.template, state: next.done ? 'Complete' : 'Progressing', marker: next.marker, lastProgress: at }
  if (next.done) return prev.state === 'Complete' ? prev : { template: prev.template, state: 'Complete', marker: prev.marker, lastProgress: prev.lastProgress }
  const since = Date.parse(prev.lastProgress)
  if (!(now - since >= deadlineMs)) return prev.state === 'Progressing' ? prev : { ...prev, state: 'Progressing' }
  return {
    ...prev,
    state: 'Aborted',
    reason: `no progress for ${Math.round(deadlineMs / 1000)}s (progressDeadlineSeconds): ${notReady()}`,
    abortedAt: at,
  }
}
