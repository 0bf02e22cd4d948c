import { defineKind, type ObjectOfKind } from '../kind.ts'
import type { Issue } from '../schema.ts'
import { s } from '../schema.ts'
import { age, createdAt, labelsSchema, text } from './common.ts'
import { podKind, podSpecIssues } from './pod.ts'

/**
 * PinnedDeployment: replicas of a pod template, rolled out between two explicitly pinned templates.
 * `previous` is what runs; `next` is the new version, given `nextReplicas` (or `nextPercent`) of the
 * replicas. `orc rollout set|promote|abort` edit these fields like any user write, so history,
 * attribution and `orc rollback` work as for every object. `placement.everyNode` runs one copy per
 * eligible node instead of `replicas` (agents such as log shippers).
 */
const template = s.object({
  metadata: s.object({ labels: labelsSchema }),
  spec: s.required(podKind.spec),
})

/** Pod names are `<name>-<8 hex>-<ordinal>` and must stay DNS labels (≤ 63). */
export const MAX_DEPLOYMENT_NAME = 50
export const MAX_REPLICAS = 1000

/** Written by controller:rollout (src/sched/rollout.ts, DeploymentStatus). */
export type PinnedDeploymentStatus = {
  replicas?: number
  /** The rollout of `next` (controller:rollout): progressing, or aborted when its pods stayed not Ready past the deadline. */
  rollout?: RolloutProgress
  previous?: { ready?: number; [field: string]: unknown }
  next?: { ready?: number; [field: string]: unknown }
  [field: string]: unknown
}

export interface RolloutProgress {
  /** The `next` template (hash) this is about. */
  template: string
  state: 'Progressing' | 'Complete' | 'Aborted'
  /** Counts of pods per version; a change is progress. */
  marker: string
  /** When the marker last changed (the progress deadline counts from here). */
  lastProgress: string
  reason?: string
  abortedAt?: string
}

/** Kubernetes' default progress deadline. */
export const DEFAULT_PROGRESS_DEADLINE_SECONDS = 600

export const pinnedDeploymentKind = defineKind({
  kind: 'PinnedDeployment',
  plural: 'pinneddeployments',
  aliases: ['pinneddeployment', 'pdeploy', 'pd'],
  namespaced: true,
  spec: s.object({
    /** Number of pods (ignored with placement.everyNode). */
    replicas: s.int({ min: 0, max: MAX_REPLICAS }),
    previous: s.required(template),
    next: template,
    /** How many replicas run `next` … */
    nextReplicas: s.int({ min: 0, max: MAX_REPLICAS }),
    /** … or which share of them, rounded up (10 % of 3 replicas is one pod). */
    nextPercent: s.int({ min: 0, max: 100 }),
    placement: s.object({ everyNode: s.bool() }),
    /**
     * Pods above `replicas` a rollout may create before old ones go (default 25% of replicas,
     * rounded up, at least 1) …
     */
    maxSurge: s.int({ min: 0, max: MAX_REPLICAS }),
    /** … and Ready pods below `replicas` it may leave while it goes (default 25%, rounded down). */
    maxUnavailable: s.int({ min: 0, max: MAX_REPLICAS }),
    /** A rollout whose pods make no progress (created, Ready) for this long is aborted (default 600). */
    progressDeadlineSeconds: s.int({ min: 1, max: 7 * 24 * 3600 }),
  }),
  status: s.open<PinnedDeploymentStatus>(),
  owned: [{ path: 'status', owner: 'controller:rollout' }],
  columns: [
    { header: 'NAME', value: (o) => o.metadata.name },
    {
      header: 'READY',
      value: (o) => {
        const st = o.status ?? {}
        const ready = (st.previous?.ready ?? 0) + (st.next?.ready ?? 0)
        return `${ready}/${typeof st.replicas === 'number' ? st.replicas : text(o.spec?.replicas, '?')}`
      },
    },
    {
      header: 'NEXT',
      value: (o) => {
        if (o.spec?.next === undefined) return '-'
        const r = o.spec.nextReplicas
        const p = o.spec.nextPercent
        return r !== undefined ? String(r) : p !== undefined ? `${String(p)}%` : '0'
      },
    },
    { header: 'MODE', value: (o) => (o.spec?.placement?.everyNode === true ? 'every-node' : 'replicas'), wide: true },
    { header: 'AGE', value: (o, now) => age(createdAt(o), now) },
  ],
  check(obj) {
    const issues: Issue[] = []
    const spec = obj.spec ?? ({} as PinnedDeploymentSpec)
    const everyNode = spec.placement?.everyNode === true
    if (obj.metadata.name.length > MAX_DEPLOYMENT_NAME) {
      issues.push({ path: 'metadata.name', rule: `must be at most ${MAX_DEPLOYMENT_NAME} characters (pod names add a template hash and an ordinal)` })
    }
    if (!everyNode && spec.replicas === undefined) issues.push({ path: 'spec.replicas', rule: 'required (or set spec.placement.everyNode: true)' })
    if (spec.nextReplicas !== undefined && spec.nextPercent !== undefined)
      issues.push({ path: 'spec.nextPercent', rule: 'set either nextReplicas or nextPercent, not both' })
    if (spec.maxSurge === 0 && spec.maxUnavailable === 0)
      issues.push({ path: 'spec.maxUnavailable', rule: 'maxSurge and maxUnavailable cannot both be 0 (a rollout could never start)' })
    if (spec.next === undefined) {
      for (const f of ['nextReplicas', 'nextPercent'] as const)
        if (spec[f] !== undefined && spec[f] !== 0) issues.push({ path: `spec.${f}`, rule: 'needs spec.next (the template to roll out)' })
    }
    if (!everyNode && typeof spec.nextReplicas === 'number' && typeof spec.replicas === 'number' && spec.nextReplicas > spec.replicas) {
      issues.push({ path: 'spec.nextReplicas', rule: `must be <= spec.replicas (${spec.replicas})` })
    }
    for (const v of ['previous', 'next'] as const) {
      const t = spec[v]
      if (t === undefined) continue
      issues.push(...podSpecIssues(t.spec, `spec.${v}.spec`))
      const labels = t.metadata?.labels ?? {}
      for (const k of ['orc/deployment', 'orc/template'])
        if (k in labels) issues.push({ path: `spec.${v}.metadata.labels[${JSON.stringify(k)}]`, rule: 'is set by orc' })
      const pin = t.spec.placement?.node
      if (everyNode && pin !== undefined)
        issues.push({ path: `spec.${v}.spec.placement.node`, rule: 'cannot be set with placement.everyNode (each copy is pinned to its node)' })
    }
    return issues
  },
})

// An interface (not an alias) so that type errors name it.
export interface PinnedDeployment extends ObjectOfKind<typeof pinnedDeploymentKind> {}
export type PinnedDeploymentSpec = NonNullable<PinnedDeployment['spec']>
export type PodTemplate = PinnedDeploymentSpec['previous']
