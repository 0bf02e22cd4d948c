/**
 * A Service's endpoints, derived (never stored): the pods of its namespace whose labels carry every
 * label of its selector, each with its address, whether it is ready (`podIsReady`: its Ready
 * condition, or Running with every container running when it has no probes) and the port each
 * service port reaches on it. Every node computes the same endpoints from the same replicated pods;
 * the DNS resolver, `orc get endpoints` and `orc why service/NAME` all read them from here.
 */
import { podIsReady } from './kinds/probe.ts'
import type { ServicePort } from './kinds/service.ts'

/** What is read of a pod (a stored Pod fits). */
export interface EndpointPod {
  metadata: { name: string; namespace?: string; labels?: Record<string, string> }
  spec?: { containers?: { ports?: { name?: string; containerPort: number; protocol?: 'TCP' | 'UDP' }[] }[] }
  status?: unknown
}

/** What is read of a service (a stored Service fits). */
export interface EndpointService {
  metadata: { name: string; namespace?: string }
  spec?: { selector?: Record<string, string>; ports?: ServicePort[]; type?: string }
}

export interface EndpointPort {
  /** The service port's name (absent for a lone unnamed port). */
  name?: string
  protocol: 'TCP' | 'UDP'
  /** The service's port. */
  port: number
  /** The pod's port it reaches. */
  targetPort: number
}

export interface Endpoint {
  pod: string
  node?: string
  /** The pod's IPv6 address; absent when it has none (not started, or loopback only). */
  address?: string
  ready: boolean
  /** Why it is not ready (`phase Pending`, `Ready False: ReadinessProbeFailed`, `no pod address`). */
  reason?: string
  ports: EndpointPort[]
  /** Service ports whose named targetPort this pod's containers do not declare. */
  unresolved: string[]
}

export interface ServiceEndpoints {
  service: string
  namespace: string
  /** Pods the selector matched, ready first, then by name. */
  endpoints: Endpoint[]
}

/** Whether `labels` carries every label of `selector` (an empty or absent selector selects nothing). */
export function selectorMatches(selector: Record<string, string> | undefined, labels: Record<string, string> | undefined): boolean {
  const entries = Object.entries(selector ?? {})
  if (entries.length === 0) return false
  return entries.every(([k, v]) => labels?.[k] === v)
}

function portText(p: ServicePort): string {
  return p.name ?? String(p.port)
}

/** The pod's port a service port reaches, or undefined when its named targetPort is not declared. */
export function targetPortOn(pod: EndpointPod, p: ServicePort): number | undefined {
  const t = p.targetPort ?? p.port
  if (typeof t === 'number') return t
  const protocol = p.protocol ?? 'TCP'
  for (const c of pod.spec?.containers ?? []) for (const cp of c.ports ?? []) if (cp.name === t && (cp.protocol ?? 'TCP') === protocol) return cp.containerPort
  return undefined
}

function notReadyReason(pod: EndpointPod): string {
  const st = (pod.status ?? {}) as { phase?: unknown; conditions?: { type?: unknown; status?: unknown; reason?: unknown }[] }
  const phase = typeof st.phase === 'string' ? st.phase : 'Pending'
  if (phase !== 'Running') return `phase ${phase}`
  const c = Array.isArray(st.conditions) ? st.conditions.find((x) => x?.type === 'Ready') : undefined
  if (c !== undefined) return `Ready ${String(c.status)}${typeof c.reason === 'string' ? `: ${c.reason}` : ''}`
  return 'containers not all running'
}

function addressOf(pod: EndpointPod): string | undefined {
  const v = (pod.status as { network?: { ipv6?: unknown } } | undefined)?.network?.ipv6
  return typeof v === 'string' && v.includes(':') ? v : undefined
}

/** The endpoints of one service among `pods` (any namespace: only the service's own is read). */
export function serviceEndpoints(svc: EndpointService, pods: Iterable<EndpointPod>): ServiceEndpoints {
  const namespace = svc.metadata.namespace ?? 'default'
  const ports = svc.spec?.ports ?? []
  const out: Endpoint[] = []
  for (const pod of pods) {
    if ((pod.metadata.namespace ?? 'default') !== namespace) continue
    if (!selectorMatches(svc.spec?.selector, pod.metadata.labels)) continue
    const address = addressOf(pod)
    const ready = podIsReady(pod) && address !== undefined
    const e: Endpoint = { pod: pod.metadata.name, ready, ports: [], unresolved: [] }
    const node = (pod.status as { node?: unknown } | undefined)?.node
    if (typeof node === 'string') e.node = node
    if (address !== undefined) e.address = address
    if (!ready) e.reason = podIsReady(pod) ? 'no pod address (the node has no pod network)' : notReadyReason(pod)
    for (const p of ports) {
      const targetPort = targetPortOn(pod, p)
      if (targetPort === undefined) e.unresolved.push(portText(p))
      else e.ports.push({ ...(p.name ? { name: p.name } : {}), protocol: p.protocol ?? 'TCP', port: p.port, targetPort })
    }
    out.push(e)
  }
  out.sort((a, b) => Number(b.ready) - Number(a.ready) || (a.pod < b.pod ? -1 : a.pod > b.pod ? 1 : 0))
  return { service: svc.metadata.name, namespace, endpoints: out }
}
