import { defineKind, type ObjectOfKind } from '../kind.ts'
import type { Infer, Issue } from '../schema.ts'
import { s } from '../schema.ts'
import { age, createdAt, dnsName, labelsSchema, text } from './common.ts'

const envName = s.string({ pattern: /^[A-Za-z_][A-Za-z0-9_]*$/, patternName: 'an environment variable name' })

const container = s.object({
  name: s.required(dnsName),
  image: s.required(s.string({ minLength: 1, maxLength: 4096 })),
  command: s.array(s.string({ maxLength: 4096 }), { maxItems: 256 }),
  args: s.array(s.string({ maxLength: 4096 }), { maxItems: 1024 }),
  env: s.array(s.object({ name: s.required(envName), value: s.string({ maxLength: 32768 }) }), { maxItems: 1024, uniqueBy: 'name' }),
  workingDir: s.string({ maxLength: 4096 }),
  ports: s.array(
    s.object({
      name: dnsName,
      containerPort: s.required(s.int({ min: 1, max: 65535 })),
      protocol: s.enum('TCP', 'UDP'),
    }),
    { maxItems: 64 },
  ),
  resources: s.object({
    requests: s.object({ cpu: s.quantity(), memory: s.quantity() }),
    limits: s.object({ cpu: s.quantity(), memory: s.quantity(), pids: s.int({ min: 1 }) }),
  }),
})

const selectorOperator = s.enum('In', 'NotIn', 'Exists', 'DoesNotExist', 'Gt', 'Lt')
/** Kubernetes-style label selector (node affinity, pod affinity terms). */
const labelSelector = s.object({
  matchLabels: labelsSchema,
  matchExpressions: s.array(
    s.object({
      key: s.required(s.string({ minLength: 1, maxLength: 317 })),
      operator: s.required(selectorOperator),
      values: s.array(s.string({ maxLength: 63 }), { maxItems: 64 }),
    }),
    { maxItems: 16 },
  ),
})
/** Pods matching `labelSelector`, per domain of `topologyKey` (a node label such as `site`, or `node`). */
const podAffinityTerm = s.object({
  labelSelector: s.required(labelSelector),
  topologyKey: s.required(s.string({ minLength: 1, maxLength: 317 })),
  namespaces: s.array(dnsName, { maxItems: 16 }),
})
const podAffinityRules = s.object({
  required: s.array(podAffinityTerm, { maxItems: 16 }),
  preferred: s.array(s.object({ weight: s.required(s.int({ min: 1, max: 100 })), term: s.required(podAffinityTerm) }), { maxItems: 16 }),
})
const affinity = s.object({
  nodeAffinity: s.object({
    /** Any one selector must match the node's labels. */
    required: s.array(labelSelector, { maxItems: 16 }),
    preferred: s.array(s.object({ weight: s.required(s.int({ min: 1, max: 100 })), selector: s.required(labelSelector) }), { maxItems: 16 }),
  }),
  podAffinity: podAffinityRules,
  podAntiAffinity: podAffinityRules,
})
const toleration = s.object({
  key: s.string({ maxLength: 253 }),
  operator: s.enum('Equal', 'Exists'),
  value: s.string({ maxLength: 63 }),
  effect: s.enum('NoSchedule', 'PreferNoSchedule', 'NoExecute'),
  tolerationSeconds: s.int({ min: 0, max: 365 * 24 * 3600 }),
})

/** Rules of selectors and tolerations the schema cannot say (`In` needs values, …). */
function schedulingIssues(spec: unknown, base: string): Issue[] {
  const issues: Issue[] = []
  const sp = (spec ?? {}) as Record<string, any>
  const checkSelector = (sel: any, path: string) => {
    ;(Array.isArray(sel?.matchExpressions) ? sel.matchExpressions : []).forEach((r: any, i: number) => {
      const p = `${path}.matchExpressions[${i}].values`
      const n = Array.isArray(r?.values) ? r.values.length : 0
      if ((r?.operator === 'In' || r?.operator === 'NotIn') && n === 0) issues.push({ path: p, rule: `operator ${r.operator} needs at least one value` })
      if ((r?.operator === 'Exists' || r?.operator === 'DoesNotExist') && n > 0) issues.push({ path: p, rule: `operator ${r.operator} takes no values` })
      if ((r?.operator === 'Gt' || r?.operator === 'Lt') && (n !== 1 || !/^-?[0-9]+$/.test(String(r.values[0]))))
        issues.push({ path: p, rule: `operator ${r.operator} needs exactly one integer value` })
    })
  }
  const a = sp.affinity ?? {}
  ;(a.nodeAffinity?.required ?? []).forEach((sel: any, i: number) => checkSelector(sel, `${base}.affinity.nodeAffinity.required[${i}]`))
  ;(a.nodeAffinity?.preferred ?? []).forEach((w: any, i: number) => checkSelector(w?.selector, `${base}.affinity.nodeAffinity.preferred[${i}].selector`))
  for (const kind of ['podAffinity', 'podAntiAffinity']) {
    ;(a[kind]?.required ?? []).forEach((t: any, i: number) => checkSelector(t?.labelSelector, `${base}.affinity.${kind}.required[${i}].labelSelector`))
    ;(a[kind]?.preferred ?? []).forEach((w: any, i: number) =>
      checkSelector(w?.term?.labelSelector, `${base}.affinity.${kind}.preferred[${i}].term.labelSelector`),
    )
  }
  const pl = sp.placement ?? {}
  for (const key of ['clusters', 'preferClusters']) {
    const list = Array.isArray(pl[key]) ? pl[key] : []
    list.forEach((c: unknown, i: number) => {
      if (list.indexOf(c) !== i) issues.push({ path: `${base}.placement.${key}[${i}]`, rule: `duplicate cluster ${JSON.stringify(c)}` })
    })
  }
  if (Array.isArray(pl.clusters)) {
    if (pl.clusters.length === 0)
      issues.push({ path: `${base}.placement.clusters`, rule: 'name at least one cluster (leave it out for the cluster that creates the pod)' })
    ;(Array.isArray(pl.preferClusters) ? pl.preferClusters : []).forEach((c: unknown, i: number) => {
      if (!pl.clusters.includes(c))
        issues.push({ path: `${base}.placement.preferClusters[${i}]`, rule: `cluster ${JSON.stringify(c)} is not in placement.clusters` })
    })
  }
  ;(Array.isArray(sp.tolerations) ? sp.tolerations : []).forEach((t: any, i: number) => {
    const p = `${base}.tolerations[${i}]`
    if (t?.operator === 'Exists' && t.value !== undefined) issues.push({ path: `${p}.value`, rule: 'operator Exists takes no value' })
    if (t?.operator !== 'Exists' && (t?.key === undefined || t.key === '')) issues.push({ path: `${p}.key`, rule: 'required unless operator is Exists' })
    if (t?.tolerationSeconds !== undefined && t.effect !== 'NoExecute') issues.push({ path: `${p}.tolerationSeconds`, rule: 'only for effect NoExecute' })
  })
  return issues
}

/** Every rule of a pod spec beyond its schema; `base` is where the spec sits (`spec`, `spec.previous.spec`). */
export function podSpecIssues(spec: unknown, base: string): Issue[] {
  const issues: Issue[] = []
  const containers = (spec as Record<string, unknown> | undefined)?.containers
  if (Array.isArray(containers) && containers.length === 0) issues.push({ path: `${base}.containers`, rule: 'must have at least one container' })
  return [...issues, ...schedulingIssues(spec, base)]
}

/** The one container spec of a manifest (the runtime's `ContainerRunSpec` is what the agent makes of it). */
export type Container = Infer<typeof container>
export type LabelSelector = Infer<typeof labelSelector>
export type PodAffinityTerm = Infer<typeof podAffinityTerm>
export type Toleration = Infer<typeof toleration>

/** What a pod's lifecycle reports (src/agent/pods/worker.ts). `Unknown` is only shown, never stored. */
export type PodPhase = 'Pending' | 'Starting' | 'Running' | 'Succeeded' | 'Failed' | 'Stopping' | 'Fenced'

export type ContainerStatusEntry = {
  name: string
  state: 'waiting' | 'running' | 'exited' | 'unknown'
  restarts: number
  pid?: number
  exitCode?: number
  signal?: string
  startedAt?: string
  finishedAt?: string
  reason?: string
}

/** Written by controller:lifecycle (the node running the pod) and controller:scheduler (`node`, `scheduling`). */
export type PodStatus = {
  phase?: PodPhase
  reason?: string
  node?: string
  scheduling?: { node: string; at: string; by: string; reason: string; from?: string }
  runningRevision?: number
  targetRevision?: number
  specHash?: string
  containers?: ContainerStatusEntry[]
  /** The lifecycle's unit graph (src/workflow/snapshot.ts). */
  workflow?: unknown
  network?: { ipv6?: string; loopbackOnly?: boolean; reason?: string }
}

const podSpec = s.object({
  containers: s.required(s.array(container, { maxItems: 32, uniqueBy: 'name' })),
  restartPolicy: s.enum('Always', 'OnFailure', 'Never'),
  policy: s.enum('ha', 'best-effort'),
  /** ha pods: rebind after the node has been unreachable this long (default: the cluster's, 30 s). */
  haAfterSeconds: s.int({ min: 1, max: 30 * 24 * 3600 }),
  runtime: s.enum('sandbox', 'oci'),
  terminationGracePeriodSeconds: s.int({ min: 0, max: 3600 }),
  nodeSelector: labelsSchema,
  /**
   * `node`: pin to one node. `clusters` (shared namespaces of a federation): the member clusters
   * the pod may run in — absent, only the cluster that created it. `preferClusters`: most
   * preferred first, among those allowed.
   */
  placement: s.object({
    node: dnsName,
    clusters: s.array(dnsName, { maxItems: 64 }),
    preferClusters: s.array(dnsName, { maxItems: 64 }),
  }),
  /** Node affinity, pod affinity and anti-affinity (spread across nodes or a label such as `site`). */
  affinity,
  /** Node taints (`Node.spec.taints`) this pod accepts. */
  tolerations: s.array(toleration, { maxItems: 64 }),
  /** Higher is placed first when capacity is short (default 0). */
  priority: s.int({ min: -1_000_000, max: 1_000_000 }),
  security: s.object({ unsafe: s.array(s.enum('root', 'hostNetwork', 'devices', 'hostPath', 'capabilities'), { maxItems: 8 }) }),
})

export const podKind = defineKind({
  kind: 'Pod',
  plural: 'pods',
  aliases: ['pod', 'po'],
  namespaced: true,
  spec: podSpec,
  status: s.open<PodStatus>(),
  owned: [
    { path: 'status', owner: 'controller:lifecycle' },
    { path: 'status.node', owner: 'controller:scheduler' },
    { path: 'status.scheduling', owner: 'controller:scheduler' },
  ],
  columns: [
    { header: 'NAME', value: (o) => o.metadata.name },
    { header: 'STATUS', value: (o) => text(o.status?.phase, 'Pending') },
    { header: 'NODE', value: (o) => text(o.status?.node ?? o.spec?.placement?.node) },
    { header: 'IP', value: (o) => text(o.status?.network?.ipv6, '<none>'), wide: true },
    { header: 'POLICY', value: (o) => text(o.spec?.policy, 'best-effort'), wide: true },
    // The spec revision running (or being started): status writes add revisions too; this is the
    // number users compare with `orc history`.
    { header: 'REV', value: (o) => text(o.status?.runningRevision ?? o.status?.targetRevision ?? (o.metadata as { revision?: number }).revision, '') },
    {
      header: 'RESTARTS',
      value: (o) => {
        const cs: unknown = o.status?.containers
        return String(Array.isArray(cs) ? cs.reduce((n: number, c) => n + (typeof c?.restarts === 'number' ? c.restarts : 0), 0) : 0)
      },
    },
    { header: 'AGE', value: (o, now) => age(createdAt(o), now) },
  ],
  check(obj) {
    return podSpecIssues(obj.spec, 'spec')
  },
})

// An interface (not an alias) so that type errors name it.
export interface Pod extends ObjectOfKind<typeof podKind> {}
export type PodSpec = NonNullable<Pod['spec']>
