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
  const remove = existing.filter((e) => !want.has(e.name)).map((e) => e.name).sort()
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
export function everyNodePods(workload: string, template: Pick<PodView, 'nodeSelector' | 'tolerations' | 'affinity'>, nodes: readonly NodeView[]): EveryNodePod[] {
  const out: EveryNodePod[] = []
  for (const n of nodes) {
    if (n.forgotten) continue
    const labels = n.labels ?? {}
    if (!matchLabels(labels, template.nodeSelector)) continue
    const req = template.affinity?.nodeAffinity?.required
    if (req && req.length > 0 && !req.some((s) => matchSelector(labels, s))) continue
    if ((n.taints ?? []).some((t) => t.effect !== 'PreferNoSchedule' && !tolerationFor(template.tolerations ?? [], t))) continue
    const name = `${workload}-${n.name}`
    out.push({ name: name.length <= 63 ? name : `${workload.slice(0, 54)}-${hashString(n.name).toString(16).padStart(8, '0')}`, node: n.name })
  }
  return out.sort((a, b) => (a.node < b.node ? -1 : a.node > b.node ? 1 : 0))
}
