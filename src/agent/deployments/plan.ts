/**
 * What the deployment controllers write, as a pure function of the store's contents: the Pods each
 * PinnedDeployment wants (created or updated), the Pods no deployment wants any more (deleted), and
 * each deployment's status. Every node computes the same writes from the same objects, so two nodes
 * that both believe they are the writer write identical content and the store's merge converges.
 */
import {
  API_VERSION,
  DEFAULT_PROGRESS_DEADLINE_SECONDS,
  isPlainObject,
  type Node,
  type ObjectRef,
  ORIGIN_CLUSTER_ANNOTATION,
  type OrcObject,
  type PinnedDeployment,
  type Pod,
  podIsReady,
  type RolloutProgress,
} from '../../model/index.ts'
import {
  canonicalJson,
  DEPLOYMENT_LABEL,
  type DeploymentPlanSpec,
  type DeploymentStatus,
  deploymentStatus,
  gateRolloutStep,
  type ObservedPod,
  type PlannedPod,
  type PodTemplate,
  planDeploymentPods,
  rolloutLimits,
  rolloutProgress,
  TEMPLATE_LABEL,
  templateHash,
} from '../../sched/index.ts'
import type { Stored } from '../../store/index.ts'
import { nodeViewOf } from '../sched/index.ts'

export const DEPLOYMENT_CONTROLLER = 'controller:deployment'
export const ROLLOUT_CONTROLLER = 'controller:rollout'

export type DeploymentWrite = { op: 'apply'; manifest: OrcObject; reason: string } | { op: 'delete'; ref: ObjectRef; reason: string }

function templateOf(t: unknown): PodTemplate {
  const o = (isPlainObject(t) ? t : {}) as { metadata?: { labels?: Record<string, string> }; spec?: Record<string, unknown> }
  return { ...(o.metadata?.labels && Object.keys(o.metadata.labels).length > 0 ? { labels: o.metadata.labels } : {}), spec: o.spec ?? {} }
}

/** The planner's spec of a stored PinnedDeployment. */
export function deploymentSpecOf(d: PinnedDeployment): DeploymentPlanSpec {
  const s: Partial<NonNullable<PinnedDeployment['spec']>> = d.spec ?? {}
  const out: DeploymentPlanSpec = { replicas: typeof s.replicas === 'number' ? s.replicas : 0, previous: templateOf(s.previous) }
  if (s.next !== undefined) out.next = templateOf(s.next)
  if (typeof s.nextReplicas === 'number') out.nextReplicas = s.nextReplicas
  if (typeof s.nextPercent === 'number') out.nextPercent = s.nextPercent
  if (s.placement?.everyNode === true) out.everyNode = true
  // An aborted rollout (status.rollout, controller:rollout): plan as if `next` were gone until the
  // user gives another next template (or promotes, or aborts it).
  if (out.next !== undefined && abortedTemplate(d) === templateHash(out.next)) {
    delete out.next
    delete out.nextReplicas
    delete out.nextPercent
  }
  return out
}

/** The `next` template hash whose rollout controller:rollout aborted, if any. */
export function abortedTemplate(d: PinnedDeployment): string | undefined {
  const r = (d.status as { rollout?: Partial<RolloutProgress> } | undefined)?.rollout
  return r?.state === 'Aborted' && typeof r.template === 'string' ? r.template : undefined
}

/** The hash of the deployment's `next` template as the user gave it (undefined: none, or equal to previous). */
export function nextTemplateOf(d: PinnedDeployment): string | undefined {
  const s: Partial<NonNullable<PinnedDeployment['spec']>> = d.spec ?? {}
  if (s.next === undefined) return undefined
  const h = templateHash(templateOf(s.next))
  return h === templateHash(templateOf(s.previous)) ? undefined : h
}

/**
 * In a federation's shared namespace nodes are `node@cluster`: an everyNode deployment has copies
 * on the nodes of the clusters its template allows (`placement.clusters`, else the cluster that
 * created the deployment), as a pod of it would be placed.
 */
function allowedNodes(d: PinnedDeployment, nodes: readonly Stored<Node>[]): readonly Stored<Node>[] {
  if (!nodes.some((n) => n.metadata.name.includes('@'))) return nodes
  const clusters = (d.spec?.previous as { spec?: { placement?: { clusters?: unknown } } } | undefined)?.spec?.placement?.clusters
  const origin = d.metadata.annotations?.[ORIGIN_CLUSTER_ANNOTATION]
  const allowed = new Set(Array.isArray(clusters) ? clusters.filter((c): c is string => typeof c === 'string') : origin !== undefined ? [origin] : [])
  return nodes.filter((n) => allowed.has(n.metadata.name.slice(n.metadata.name.lastIndexOf('@') + 1)))
}

export function plannedPods(d: PinnedDeployment, nodes: readonly Stored<Node>[]): PlannedPod[] {
  return planDeploymentPods(
    d.metadata.name,
    deploymentSpecOf(d),
    allowedNodes(d, nodes).map((n) => nodeViewOf(n, undefined, undefined)),
  )
}

/** A deployment's pod; in a shared namespace it carries the deployment's origin cluster (where it runs by default). */
export function podManifest(namespace: string, p: PlannedPod, origin?: string): OrcObject {
  return {
    apiVersion: API_VERSION,
    kind: 'Pod',
    metadata: { name: p.name, namespace, labels: p.labels, ...(origin !== undefined ? { annotations: { [ORIGIN_CLUSTER_ANNOTATION]: origin } } : {}) },
    spec: p.spec,
  }
}

/** The user-owned content the controller maintains on a pod: labels and spec. */
function sameContent(have: OrcObject, want: OrcObject): boolean {
  return (
    canonicalJson(have.metadata.labels ?? {}) === canonicalJson(want.metadata.labels ?? {}) && canonicalJson(have.spec ?? {}) === canonicalJson(want.spec ?? {})
  )
}

function podsByDeployment(pods: readonly Stored<Pod>[]): Map<string, Stored<Pod>[]> {
  const out = new Map<string, Stored<Pod>[]>()
  for (const p of pods) {
    const d = p.metadata.labels?.[DEPLOYMENT_LABEL]
    if (d === undefined) continue
    const k = `${p.metadata.namespace ?? 'default'}/${d}`
    const list = out.get(k)
    if (list) list.push(p)
    else out.set(k, [p])
  }
  return out
}

/**
 * Pod writes that bring every deployment to its desired pods: create or update what is wanted,
 * delete pods labelled for a deployment that no longer wants them (or no longer exists). Pods are
 * created before pods are deleted, so a rollout step never leaves fewer copies than asked for.
 */
export function planDeploymentWrites(
  deployments: readonly Stored<PinnedDeployment>[],
  pods: readonly Stored<Pod>[],
  nodes: readonly Stored<Node>[],
): DeploymentWrite[] {
  const owned = podsByDeployment(pods)
  const applies: DeploymentWrite[] = []
  const deletes: DeploymentWrite[] = []
  const seen = new Set<string>()
  const sorted = [...deployments].sort((a, b) => cmpKey(a, b))
  for (const d of sorted) {
    const ns = d.metadata.namespace ?? 'default'
    const key = `${ns}/${d.metadata.name}`
    seen.add(key)
    let planned: PlannedPod[]
    try {
      planned = plannedPods(d, nodes)
    } catch {
      continue // invalid split (validated on apply; a merge of concurrent edits could still produce one)
    }
    const have = new Map((owned.get(key) ?? []).map((p) => [p.metadata.name, p]))
    const wanted = new Set(planned.map((p) => p.name))
    // Replicas: readiness gates the step (maxSurge / maxUnavailable); everyNode copies are edited in place.
    const step =
      d.spec?.placement?.everyNode === true
        ? undefined
        : gateRolloutStep(
            planned.length,
            rolloutLimits(planned.length, { maxSurge: d.spec?.maxSurge, maxUnavailable: d.spec?.maxUnavailable }),
            [...have.values()].map((p) => ({ name: p.metadata.name, ready: podIsReady(p) })),
            planned.filter((p) => !have.has(p.name)).map((p) => p.name),
            [...have.keys()].filter((n) => !wanted.has(n)),
          )
    const mayCreate = step === undefined ? undefined : new Set(step.create)
    const mayRemove = step === undefined ? undefined : new Set(step.remove)
    for (const p of planned) {
      const want = podManifest(ns, p, d.metadata.annotations?.[ORIGIN_CLUSTER_ANNOTATION])
      const cur = have.get(p.name)
      if (cur && sameContent(cur, want)) continue
      if (!cur && mayCreate !== undefined && !mayCreate.has(p.name)) continue
      const what = p.node !== undefined ? `${p.version} copy for node ${p.node}` : `${p.version} replica`
      applies.push({
        op: 'apply',
        manifest: want,
        reason: `pinneddeployment/${d.metadata.name}: ${cur ? 'update' : 'create'} ${what} (template ${p.templateHash})`,
      })
    }
    for (const p of [...have.values()].sort((a, b) => cmpKey(a, b))) {
      if (wanted.has(p.metadata.name)) continue
      if (mayRemove !== undefined && !mayRemove.has(p.metadata.name)) continue
      deletes.push({
        op: 'delete',
        ref: { kind: 'Pod', namespace: ns, name: p.metadata.name },
        reason: `pinneddeployment/${d.metadata.name} no longer wants it`,
      })
    }
  }
  for (const [key, list] of [...owned].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))) {
    if (seen.has(key)) continue
    for (const p of list.sort((a, b) => cmpKey(a, b))) {
      deletes.push({
        op: 'delete',
        ref: { kind: 'Pod', namespace: key.split('/')[0]!, name: p.metadata.name },
        reason: `pinneddeployment/${key.split('/')[1]} was deleted`,
      })
    }
  }
  return [...applies, ...deletes]
}

function cmpKey(a: { metadata: OrcObject['metadata'] }, b: { metadata: OrcObject['metadata'] }): number {
  const x = `${a.metadata.namespace ?? ''}/${a.metadata.name}`
  const y = `${b.metadata.namespace ?? ''}/${b.metadata.name}`
  return x < y ? -1 : x > y ? 1 : 0
}

/** How a pod of a deployment is doing, for the per-version counts. */
export function observePod(p: Pod): ObservedPod {
  const st = p.status ?? {}
  const node = st.node ?? p.spec?.placement?.node
  const phase = st.phase
  const containers = Array.isArray(st.containers) ? st.containers : []
  const running = typeof node === 'string' && node !== '' && (phase === 'Running' || phase === 'Starting')
  const o: ObservedPod = {
    name: p.metadata.name,
    running,
    // The Ready condition (probes); a status without one: every container running.
    ready: running && containers.length > 0 && podIsReady(p),
  }
  const t = p.metadata.labels?.[TEMPLATE_LABEL]
  if (t !== undefined) o.template = t
  return o
}

/** A deployment's status now: desired, created, running and ready per version. */
export function statusOf(d: PinnedDeployment, pods: readonly Stored<Pod>[], nodes: readonly Stored<Node>[]): DeploymentStatus {
  const ns = d.metadata.namespace ?? 'default'
  const mine = pods.filter((p) => (p.metadata.namespace ?? 'default') === ns && p.metadata.labels?.[DEPLOYMENT_LABEL] === d.metadata.name)
  return deploymentStatus(deploymentSpecOf(d), plannedPods(d, nodes), mine.map(observePod))
}

/**
 * What `status` of the PinnedDeployment holds. No node names, and the only time is when the rollout
 * last progressed (or was aborted): equal views write equal status between progress steps.
 */
export function storedStatus(s: DeploymentStatus, rollout?: RolloutProgress): Record<string, unknown> {
  return { replicas: s.replicas, previous: s.previous, next: s.next, done: s.done, rollout }
}

/** The rollout record this pass: progress of the user's `next` template, or its abort past the deadline. */
export function rolloutRecord(d: PinnedDeployment, s: DeploymentStatus, pods: readonly Stored<Pod>[], now: number): RolloutProgress | undefined {
  const next = nextTemplateOf(d)
  const prev = (d.status as { rollout?: RolloutProgress } | undefined)?.rollout
  const v = s.next
  const marker = `previous ${s.previous.created}/${s.previous.ready} next ${v?.created ?? 0}/${v?.ready ?? 0} of ${v?.desired ?? 0}`
  const deadline = (typeof d.spec?.progressDeadlineSeconds === 'number' ? d.spec.progressDeadlineSeconds : DEFAULT_PROGRESS_DEADLINE_SECONDS) * 1000
  const notReady = () => {
    const list = pods
      .filter((p) => p.metadata.labels?.[TEMPLATE_LABEL] === next && !podIsReady(p))
      .map((p) => {
        const c = (p.status?.conditions ?? []).find((x) => x?.type === 'Ready')
        return `pod/${p.metadata.name} not Ready (${c?.message ?? c?.reason ?? String(p.status?.phase ?? 'Pending')})`
      })
    return list.length > 0 ? list.join('; ') : 'the next pods were not created'
  }
  return rolloutProgress(prev, next === undefined ? undefined : { template: next, marker, done: s.done }, now, deadline, notReady)
}
