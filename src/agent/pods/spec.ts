/**
 * What the lifecycle controller reads from a Pod object: its containers as runtime specs, its
 * restart policy and grace period, and whether it belongs to this node. Pure functions of the
 * object, so they are tested without a store.
 */
import { createHash } from 'node:crypto'
import { type Cluster, isPlainObject, type Pod, type PodSpec, PROBE_KINDS, type Probe, parseQuantity, type UnsafeFeature } from '../../model/index.ts'
import { type ContainerResources, type ContainerRunSpec, type RuntimeKind, resourcesFromLimits } from '../../runtime/index.ts'
import type { ContainerProbeSpec } from './container-probes.ts'

export type RestartPolicy = NonNullable<PodSpec['restartPolicy']>

/**
 * A manifest's container (model `Container`) as the runtime takes it: the runtime's own run spec,
 * less what the agent adds per start (id, log dir, network, uid, fence …).
 */
export type PodContainerSpec = { name: string; probes?: ContainerProbeSpec } & Pick<
  ContainerRunSpec,
  'image' | 'command' | 'args' | 'env' | 'workingDir' | 'resources'
>

function count(v: unknown, min: number, max: number): number | undefined {
  return typeof v === 'number' && Number.isInteger(v) && v >= min && v <= max ? v : undefined
}

/** One probe as the node runs it: exec with a command, or tcpSocket or httpGet with a valid port (else none), numbers in range. */
function probeOf(v: unknown): Probe | undefined {
  if (!isPlainObject(v)) return undefined
  const out: Probe = {}
  const tcp = v.tcpSocket
  const http = v.httpGet
  const exec = v.exec
  const command = isPlainObject(exec) ? strings(exec.command) : undefined
  if (command !== undefined && command.length > 0) out.exec = { command }
  else if (isPlainObject(tcp) && count(tcp.port, 1, 65535) !== undefined) out.tcpSocket = { port: tcp.port as number }
  else if (isPlainObject(http) && count(http.port, 1, 65535) !== undefined) {
    const headers = Array.isArray(http.httpHeaders)
      ? http.httpHeaders.filter((h): h is { name: string; value: string } => isPlainObject(h) && typeof h.name === 'string' && typeof h.value === 'string')
      : []
    out.httpGet = {
      port: http.port as number,
      ...(typeof http.path === 'string' && http.path.startsWith('/') ? { path: http.path } : {}),
      ...(http.scheme === 'HTTPS' ? { scheme: 'HTTPS' as const } : {}),
      ...(headers.length > 0 ? { httpHeaders: headers } : {}),
    }
  } else return undefined
  for (const [k, min, max] of [
    ['initialDelaySeconds', 0, 3600],
    ['periodSeconds', 1, 3600],
    ['timeoutSeconds', 1, 3600],
    ['successThreshold', 1, 100],
    ['failureThreshold', 1, 100],
  ] as const) {
    const n = count(v[k], min, max)
    if (n !== undefined) out[k] = n
  }
  return out
}

/** The probes of a container that this node can run (PROBE_KINDS). */
export function probesOf(c: unknown): ContainerProbeSpec | undefined {
  if (!isPlainObject(c)) return undefined
  const out: ContainerProbeSpec = {}
  for (const k of PROBE_KINDS) {
    const p = probeOf(c[k])
    if (p !== undefined) out[k] = p
  }
  return Object.keys(out).length > 0 ? out : undefined
}

export interface PodSpecView {
  containers: PodContainerSpec[]
  restartPolicy: RestartPolicy
  runtime: RuntimeKind
  graceMs: number
  unsafe: UnsafeFeature[]
  pin?: string
}

export const DEFAULT_GRACE_SECONDS = 10

function strings(v: unknown): string[] | undefined {
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : undefined
}

// The pod may come from another node, unchecked against its schema (#17): lists are filtered for
// strings and numbers tested, as before the kinds were typed, so garbage cannot reach the runtime.
export function podSpecOf(obj: Pod): PodSpecView {
  const spec: Partial<PodSpec> = obj.spec ?? {}
  const grace = spec.terminationGracePeriodSeconds
  const pin = spec.placement?.node
  return {
    containers: (spec.containers ?? []).map((c) => {
      const out: PodContainerSpec = { name: String(c.name), image: String(c.image) }
      const command = strings(c.command)
      const args = strings(c.args)
      if (command && command.length > 0) out.command = command
      if (args && args.length > 0) out.args = args
      // valueFrom and envFrom are resolved on the node before each start (refs.ts).
      if (Array.isArray(c.env)) out.env = Object.fromEntries(c.env.filter((e) => e.valueFrom === undefined).map((e) => [e.name, e.value ?? '']))
      if (typeof c.workingDir === 'string') out.workingDir = c.workingDir
      const limits = c.resources?.limits
      if (limits) out.resources = resourcesFromLimits(limits)
      const probes = probesOf(c)
      if (probes) out.probes = probes
      return out
    }),
    restartPolicy: spec.restartPolicy ?? 'Always',
    runtime: spec.runtime ?? 'sandbox',
    graceMs: (typeof grace === 'number' ? grace : DEFAULT_GRACE_SECONDS) * 1000,
    unsafe: (strings(spec.security?.unsafe) ?? []) as UnsafeFeature[],
    ...(typeof pin === 'string' ? { pin } : {}),
  }
}

/** Identity of a spec: a change of it restarts the pod in place. */
export function specHash(obj: Pod): string {
  return createHash('sha256')
    .update(JSON.stringify(obj.spec ?? {}))
    .digest('hex')
    .slice(0, 16)
}

/** The runtime's container id: unique per pod (uid) and container. */
export function containerIdOf(podUid: string, container: string): string {
  return `${podUid}.${container}`
}

/**
 * Does this pod run on `node`? A pin (`spec.placement.node`) decides alone; otherwise the
 * scheduler's binding (`status.node`).
 */
export function assignedTo(obj: Pod, node: string): boolean {
  const pin = obj.spec?.placement?.node
  // In a federation's scope this node is node@cluster, and a bare pin names a node of the pod's
  // cluster, which its binder resolved (federation/scheduling.ts, qualifiedPin): its binding decides.
  if (typeof pin === 'string' && pin !== '' && node.includes('@') && !pin.includes('@')) return obj.status?.node === node
  if (typeof pin === 'string' && pin !== '') return pin === node
  return obj.status?.node === node
}

/** What a pod's container may use when it sets no limit (docs/security.md, "Pods and grants"). */
export const DEFAULT_POD_PIDS = 1024
export const DEFAULT_POD_MEMORY = '1Gi'

/**
 * The default limits of a container that sets none: `Cluster.spec.podDefaults` (a later Cluster
 * object's fields win, as with scheduling), else 1,024 processes and 1 GiB; 0 turns one off.
 */
export function podDefaultResourcesOf(clusters: readonly Cluster[]): ContainerResources {
  let pids: number = DEFAULT_POD_PIDS
  let memory: string | number = DEFAULT_POD_MEMORY
  for (const c of clusters) {
    const d = c.spec?.podDefaults
    if (!isPlainObject(d)) continue
    if (typeof d.pids === 'number' && Number.isInteger(d.pids) && d.pids >= 0) pids = d.pids
    if (typeof d.memory === 'string' || typeof d.memory === 'number') memory = d.memory
  }
  const out: ContainerResources = {}
  if (pids > 0) out.pids = pids
  try {
    const bytes = Math.floor(parseQuantity(memory))
    if (bytes > 0) out.memoryBytes = bytes
  } catch {
    out.memoryBytes = Math.floor(parseQuantity(DEFAULT_POD_MEMORY))
  }
  return out
}
