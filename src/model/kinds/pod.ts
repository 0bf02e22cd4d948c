import { isRegistryReference, parseReference } from '../image-reference.ts'
import { defineKind, type ObjectOfKind } from '../kind.ts'
import type { Infer, Issue } from '../schema.ts'
import { s } from '../schema.ts'
import { age, createdAt, dnsName, labelsSchema, text } from './common.ts'
import { type PodCondition, probeIssues, probeSchema, readyColumn } from './probe.ts'
import { POD_RUNTIMES } from './security-policy.ts'

/**
 * Annotation orc puts on a Pod (and a PinnedDeployment, Job or CronJob) created in a namespace
 * shared with a federation: the cluster that created it, where it runs unless
 * `spec.placement.clusters` says otherwise (docs/federation.md).
 */
export const ORIGIN_CLUSTER_ANNOTATION = 'orc/cluster'

const envName = s.string({ pattern: /^[A-Za-z_][A-Za-z0-9_]*$/, patternName: 'an environment variable name' })
/** A name an environment variable may have (envFrom skips keys that are not one). */
export const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/

/** One key of a Config or Secret in the pod's namespace; `optional`: a missing one is left out instead of holding the pod Pending. */
const keyRef = s.object({
  name: s.required(dnsName),
  key: s.required(s.string({ minLength: 1, maxLength: 253 })),
  optional: s.bool(),
})
/** Exactly one source per entry (`secret` or `config`). */
const envVar = s.object({
  name: s.required(envName),
  value: s.string({ maxLength: 32768 }),
  valueFrom: s.object({ secret: keyRef, config: keyRef }),
})
/** Every key of a Config or Secret as a variable (`prefix` + key); keys that are not variable names, or hold binary data, are skipped. */
const envFromSource = s.object({
  secret: dnsName,
  config: dnsName,
  prefix: s.string({ pattern: /^[A-Za-z_][A-Za-z0-9_]*$/, patternName: 'an environment variable prefix' }),
})
/** Where a mount's files come from: a Config or a Secret (every key, or the listed ones at the listed paths). */
const dataVolumeSource = s.object({
  name: s.required(dnsName),
  items: s.array(s.object({ key: s.required(s.string({ minLength: 1, maxLength: 253 })), path: s.required(s.string({ minLength: 1, maxLength: 4096 })) }), {
    maxItems: 256,
  }),
  optional: s.bool(),
})
/**
 * A pod volume: exactly one source. `secret` and `config`: files on a tmpfs, read-only. `emptyDir`:
 * an empty directory made for the pod on its node (on the node's disk, or a tmpfs with
 * `medium: Memory`), kept across container restarts and in-place updates, removed with the pod.
 * `volume`: a persistent Volume of the pod's namespace (docs/storage.md). `hostPath`: a directory
 * of the node, only with a SecurityPolicy grant of `hostPath` (two parties).
 */
const volume = s.object({
  name: s.required(dnsName),
  secret: dataVolumeSource,
  config: dataVolumeSource,
  emptyDir: s.object({ medium: s.enum('Memory', 'Disk'), sizeLimit: s.quantity() }),
  volume: s.object({ name: s.required(dnsName) }),
  hostPath: s.object({ path: s.required(s.string({ minLength: 1, maxLength: 4096 })), type: s.enum('Directory', 'DirectoryOrCreate') }),
})
/** The volume sources this agent knows (podSpecIssues requires exactly one). */
export const VOLUME_SOURCES = ['secret', 'config', 'emptyDir', 'volume', 'hostPath'] as const
const volumeMount = s.object({
  name: s.required(dnsName),
  mountPath: s.required(s.string({ minLength: 1, maxLength: 4096 })),
  /** Config and Secret volumes are always read-only; `false` is refused for them. Others default to writable. */
  readOnly: s.bool(),
  /** A directory inside the volume to mount instead of its root (relative; made when missing). */
  subPath: s.string({ minLength: 1, maxLength: 4096 }),
})

const container = s.object({
  name: s.required(dnsName),
  image: s.required(s.string({ minLength: 1, maxLength: 4096 })),
  command: s.array(s.string({ maxLength: 4096 }), { maxItems: 256 }),
  args: s.array(s.string({ maxLength: 4096 }), { maxItems: 1024 }),
  env: s.array(envVar, { maxItems: 1024, uniqueBy: 'name' }),
  envFrom: s.array(envFromSource, { maxItems: 64 }),
  volumeMounts: s.array(volumeMount, { maxItems: 64, uniqueBy: 'mountPath' }),
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
  /** Health probes (probe.ts): startup gates the others, readiness sets Ready, liveness restarts. */
  startupProbe: probeSchema,
  readinessProbe: probeSchema,
  livenessProbe: probeSchema,
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
/** Also a VirtualMachine's `spec.affinity.nodeAffinity` (virtual-machine.ts). */
export const nodeAffinitySchema = s.object({
  /** Any one selector must match the node's labels. */
  required: s.array(labelSelector, { maxItems: 16 }),
  preferred: s.array(s.object({ weight: s.required(s.int({ min: 1, max: 100 })), selector: s.required(labelSelector) }), { maxItems: 16 }),
})
const affinity = s.object({
  nodeAffinity: nodeAffinitySchema,
  podAffinity: podAffinityRules,
  podAntiAffinity: podAffinityRules,
})
/** Also a VirtualMachine's `spec.tolerations`. */
export const tolerationSchema = s.object({
  key: s.string({ maxLength: 253 }),
  operator: s.enum('Equal', 'Exists'),
  value: s.string({ maxLength: 63 }),
  effect: s.enum('NoSchedule', 'PreferNoSchedule', 'NoExecute'),
  tolerationSeconds: s.int({ min: 0, max: 365 * 24 * 3600 }),
})

/** Rules of selectors and tolerations the schema cannot say (`In` needs values, …); a VM's too. */
export function schedulingIssues(spec: unknown, base: string): Issue[] {
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
  // A pin to node@cluster names its cluster: placement.clusters, if given, must allow it.
  const pinCluster = typeof pl.node === 'string' && pl.node.includes('@') ? pl.node.slice(pl.node.indexOf('@') + 1) : undefined
  if (pinCluster !== undefined && Array.isArray(pl.clusters) && pl.clusters.length > 0 && !pl.clusters.includes(pinCluster))
    issues.push({ path: `${base}.placement.node`, rule: `pinned to a node of cluster ${pinCluster}, which is not in placement.clusters` })
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
  if (Array.isArray(containers)) containers.forEach((c, i) => issues.push(...probeIssues(c, `${base}.containers[${i}]`)))
  // A registry reference must parse (a store name or a path is checked where it is used).
  if (Array.isArray(containers))
    containers.forEach((c, i) => {
      const image = (c as { image?: unknown } | undefined)?.image
      if (typeof image !== 'string' || !isRegistryReference(image)) return
      try {
        parseReference(image)
      } catch (err) {
        issues.push({ path: `${base}.containers[${i}].image`, rule: (err as Error).message })
      }
    })
  return [...issues, ...dataRefIssues(spec, base), ...schedulingIssues(spec, base)]
}

/** A mount path: absolute, no `.` or `..` component, not `/` nor a path the sandbox owns. */
function mountPathIssue(p: string): string | undefined {
  if (!p.startsWith('/')) return 'an absolute path'
  const parts = p.split('/').filter((x) => x !== '')
  if (parts.length === 0) return 'not /'
  if (parts.some((x) => x === '.' || x === '..')) return 'no . or .. component'
  if (['proc', 'dev', 'sys'].includes(parts[0]!)) return `not under /${parts[0]} (the sandbox's own)`
  return undefined
}

/** A file path inside a volume (`items[].path`): relative, no `.`/`..` component. */
function itemPathIssue(p: string): string | undefined {
  if (p.startsWith('/')) return 'a relative path'
  if (p.split('/').some((x) => x === '' || x === '.' || x === '..')) return 'no empty, . or .. component'
  return undefined
}

/** Rules of env `valueFrom`, `envFrom`, `volumes` and `volumeMounts` that the schema cannot say. */
function dataRefIssues(spec: unknown, base: string): Issue[] {
  const issues: Issue[] = []
  const sp = (spec ?? {}) as Record<string, any>
  const volumes: any[] = Array.isArray(sp.volumes) ? sp.volumes : []
  const names = new Set<string>()
  volumes.forEach((v, i) => {
    const p = `${base}.volumes[${i}]`
    if (typeof v?.name === 'string') names.add(v.name)
    const sources = VOLUME_SOURCES.filter((k) => v?.[k] !== undefined)
    if (sources.length !== 1)
      issues.push({ path: p, rule: `exactly one source (${VOLUME_SOURCES.join(', ')}); got ${sources.length === 0 ? 'none' : sources.join(', ')}` })
    if (v?.hostPath !== undefined && typeof v.hostPath.path === 'string') {
      const hp = v.hostPath.path as string
      if (!hp.startsWith('/') || hp.split('/').some((x: string) => x === '.' || x === '..'))
        issues.push({ path: `${p}.hostPath.path`, rule: 'an absolute path with no . or .. component' })
      else if (hp.split('/').filter((x: string) => x !== '').length === 0) issues.push({ path: `${p}.hostPath.path`, rule: 'not / (name a directory)' })
    }
    if (v?.emptyDir?.sizeLimit !== undefined && v.emptyDir.medium !== 'Memory' && sources.length === 1)
      issues.push({ path: `${p}.emptyDir.sizeLimit`, rule: 'only with medium: Memory (a tmpfs of that size); a disk emptyDir has no hard limit' })
    for (const k of sources) {
      const items: any[] = Array.isArray(v[k]?.items) ? v[k].items : []
      const paths = new Set<string>()
      items.forEach((it, j) => {
        if (typeof it?.path !== 'string') return
        const bad = itemPathIssue(it.path)
        if (bad) issues.push({ path: `${p}.${k}.items[${j}].path`, rule: bad })
        if (paths.has(it.path)) issues.push({ path: `${p}.${k}.items[${j}].path`, rule: `path ${it.path} is given twice` })
        paths.add(it.path)
      })
    }
  })
  const containers: any[] = Array.isArray(sp.containers) ? sp.containers : []
  containers.forEach((c, ci) => {
    const cp = `${base}.containers[${ci}]`
    ;(Array.isArray(c?.env) ? c.env : []).forEach((e: any, i: number) => {
      const p = `${cp}.env[${i}]`
      const from = e?.valueFrom
      if (from === undefined && e?.value === undefined) issues.push({ path: p, rule: 'value or valueFrom is required' })
      if (from !== undefined && e?.value !== undefined) issues.push({ path: p, rule: 'value and valueFrom: give one' })
      if (from !== undefined && (from.secret === undefined) === (from.config === undefined))
        issues.push({ path: `${p}.valueFrom`, rule: 'exactly one of secret or config' })
    })
    ;(Array.isArray(c?.envFrom) ? c.envFrom : []).forEach((e: any, i: number) => {
      if ((e?.secret === undefined) === (e?.config === undefined)) issues.push({ path: `${cp}.envFrom[${i}]`, rule: 'exactly one of secret or config' })
    })
    ;(Array.isArray(c?.volumeMounts) ? c.volumeMounts : []).forEach((m: any, i: number) => {
      const p = `${cp}.volumeMounts[${i}]`
      if (typeof m?.name === 'string' && !names.has(m.name)) issues.push({ path: `${p}.name`, rule: `no volume named ${m.name} in ${base}.volumes` })
      if (typeof m?.mountPath === 'string') {
        const bad = mountPathIssue(m.mountPath)
        if (bad) issues.push({ path: `${p}.mountPath`, rule: bad })
      }
      const v = volumes.find((x) => x?.name === m?.name)
      if (m?.readOnly === false && (v?.secret !== undefined || v?.config !== undefined))
        issues.push({ path: `${p}.readOnly`, rule: 'Config and Secret volumes are read-only' })
      if (typeof m?.subPath === 'string') {
        const bad = itemPathIssue(m.subPath)
        if (bad) issues.push({ path: `${p}.subPath`, rule: `${bad} inside the volume` })
        if (v?.secret !== undefined || v?.config !== undefined)
          issues.push({ path: `${p}.subPath`, rule: 'not for Config and Secret volumes (use items to choose files)' })
      }
    })
  })
  return issues
}

/** The Configs and Secrets a pod spec names (env, envFrom, volumes): `secret/NAME`, `config/NAME`, sorted. */
export function dataRefsOf(spec: unknown): string[] {
  const out = new Set<string>()
  const sp = (spec ?? {}) as Record<string, any>
  for (const c of Array.isArray(sp.containers) ? sp.containers : []) {
    for (const e of Array.isArray(c?.env) ? c.env : []) {
      if (typeof e?.valueFrom?.secret?.name === 'string') out.add(`secret/${e.valueFrom.secret.name}`)
      if (typeof e?.valueFrom?.config?.name === 'string') out.add(`config/${e.valueFrom.config.name}`)
    }
    for (const e of Array.isArray(c?.envFrom) ? c.envFrom : []) {
      if (typeof e?.secret === 'string') out.add(`secret/${e.secret}`)
      if (typeof e?.config === 'string') out.add(`config/${e.config}`)
    }
  }
  for (const v of Array.isArray(sp.volumes) ? sp.volumes : []) {
    if (typeof v?.secret?.name === 'string') out.add(`secret/${v.secret.name}`)
    if (typeof v?.config?.name === 'string') out.add(`config/${v.config.name}`)
  }
  return [...out].sort()
}

/** The persistent Volumes a pod spec names (`spec.volumes[].volume.name`), each once, sorted. */
export function volumeRefsOf(spec: unknown): string[] {
  const sp = (spec ?? {}) as Record<string, any>
  const out = new Set<string>()
  for (const v of Array.isArray(sp.volumes) ? sp.volumes : []) if (typeof v?.volume?.name === 'string') out.add(v.volume.name)
  return [...out].sort()
}

/** The host directories a pod spec mounts (`spec.volumes[].hostPath.path`): each needs a hostPath grant. */
export function hostPathVolumesOf(spec: unknown): string[] {
  const sp = (spec ?? {}) as Record<string, any>
  return (Array.isArray(sp.volumes) ? sp.volumes : []).flatMap((v: any) => (typeof v?.hostPath?.path === 'string' ? [v.hostPath.path as string] : []))
}

/** The one container spec of a manifest (the runtime's `ContainerRunSpec` is what the agent makes of it). */
export type Container = Infer<typeof container>
export type PodVolume = Infer<typeof volume>
export type VolumeMount = Infer<typeof volumeMount>
export type LabelSelector = Infer<typeof labelSelector>
export type PodAffinityTerm = Infer<typeof podAffinityTerm>
export type Toleration = Infer<typeof tolerationSchema>

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
  /** Started (its startup probe passed, or it has none) and its readiness probe passes (or it has none). */
  ready?: boolean
  /** Why it last ended before a restart: `liveness probe failed: …`, `exit 1`. */
  lastTermination?: { reason: string; at: string; exitCode?: number; signal?: string }
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
  /** The revision of each Config and Secret the running copy uses (`secret/db`: 7): a change restarts the pod. */
  configRefs?: Record<string, number>
  /**
   * The digest each registry image resolved to for spec revision `revision` (docs/images.md): a
   * tag is resolved once per spec revision, and any node running that revision runs this digest.
   */
  images?: PodImagePin[]
  /** `Ready` (probe.ts, podIsReady): what rollouts and services read. */
  conditions?: PodCondition[]
}

export type PodImagePin = { name: string; image: string; digest: string; revision: number }

const podSpec = s.object({
  containers: s.required(s.array(container, { maxItems: 32, uniqueBy: 'name' })),
  /** Files the containers mount (`containers[].volumeMounts`). */
  volumes: s.array(volume, { maxItems: 64, uniqueBy: 'name' }),
  /**
   * Secrets of the pod's namespace holding registry credentials (`username`, `password`, and
   * optionally `server`, `ca.crt`, `tls`): the node uses them to pull the pod's registry images
   * (docs/images.md). Never given to the containers.
   */
  imagePullSecrets: s.array(dnsName, { maxItems: 16 }),
  restartPolicy: s.enum('Always', 'OnFailure', 'Never'),
  policy: s.enum('ha', 'best-effort'),
  /** ha pods: rebind after the node has been unreachable this long (default: the cluster's, 30 s). */
  haAfterSeconds: s.int({ min: 1, max: 30 * 24 * 3600 }),
  runtime: s.enum(...POD_RUNTIMES),
  terminationGracePeriodSeconds: s.int({ min: 0, max: 3600 }),
  nodeSelector: labelsSchema,
  /**
   * `node`: pin to one node (in a shared namespace, `node@cluster` names a node of any member
   * cluster; a bare name is a node of the pod's cluster). `clusters` (shared namespaces of a federation): the member clusters
   * the pod may run in — absent, only the cluster that created it. `preferClusters`: most
   * preferred first, among those allowed.
   */
  placement: s.object({
    node: s.string({
      pattern: /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(@[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)?$/,
      patternName: 'a node name (a DNS label), or node@cluster in a shared namespace',
    }),
    clusters: s.array(dnsName, { maxItems: 64 }),
    preferClusters: s.array(dnsName, { maxItems: 64 }),
  }),
  /** Node affinity, pod affinity and anti-affinity (spread across nodes or a label such as `site`). */
  affinity,
  /** Node taints (`Node.spec.taints`) this pod accepts. */
  tolerations: s.array(tolerationSchema, { maxItems: 64 }),
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
    { header: 'READY', value: (o) => readyColumn(o) },
    { header: 'STATUS', value: (o) => text(o.status?.phase, 'Pending') },
    { header: 'NODE', value: (o) => text(o.status?.node ?? o.spec?.placement?.node) },
    { header: 'IP', value: (o) => text(o.status?.network?.ipv6, '<none>'), wide: true },
    { header: 'POLICY', value: (o) => text(o.spec?.policy, 'best-effort'), wide: true },
    // The registry digests the running revision pinned (docs/images.md), short like `docker images`.
    {
      header: 'IMAGE DIGEST',
      value: (o) => {
        const pins = (o.status?.images ?? []).filter((p) => typeof p?.digest === 'string')
        return pins.length === 0 ? '<none>' : pins.map((p) => String(p.digest).slice(0, 19)).join(',')
      },
      wide: true,
    },
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
