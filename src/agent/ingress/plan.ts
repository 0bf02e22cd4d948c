/**
 * What an ingress controller does on a node, as pure functions of the replicated objects: which
 * Ingresses name it and this node, each listen port's backend resolved to the service's ready
 * endpoints, and why an Ingress serves nothing (`orc why ingress/NAME`).
 */
import {
  type EndpointPod,
  type Ingress,
  type IngressBackend,
  type IngressNodeStatus,
  type IngressStatus,
  ingressPorts,
  type Service,
  selectorMatches,
  serviceEndpoints,
} from '../../model/index.ts'
import { addressInPrefix, type IpPrefix } from '../../net/index.ts'

/** The controller orc ships. */
export const TCP_PROXY = 'tcp-proxy'
export const INGRESS_CONTROLLER = 'controller:ingress'

export type Family = 'IPv4' | 'IPv6'

export interface NodeView {
  metadata: { name: string; labels?: Record<string, string> }
}

/** A ready endpoint: a pod address and the port the service port reaches on it. */
export interface Backend {
  pod: string
  address: string
  port: number
  /** The local address to connect from: the node's federated ingress address, for a pod in another cluster. */
  source?: string
}

/**
 * How the ingress node reaches a shared service's pods in other member clusters: from its federated
 * ingress address (`source`, undefined until it is on the interface), to the pods it routes there.
 */
export interface FederatedReach {
  source: string | undefined
  routed(address: string): boolean
}

export interface PlannedListener {
  /** `NAME/FAMILY/PORT`: one listener per Ingress, port and family. */
  key: string
  ingress: string
  port: number
  family: Family
  /** `NS/SERVICE:PORT`. */
  backend: string
  backends: Backend[]
  /** Why it has no backend to send to (no such service, no such port, no ready pod). */
  problem?: string
}

/** Whether an Ingress asks for this node: `spec.nodes` names it, `spec.nodeSelector` matches its labels, or neither is given. */
export function ingressWantsNode(ing: Ingress, node: NodeView): boolean {
  const spec = ing.spec
  if (spec?.nodes !== undefined) return spec.nodes.includes(node.metadata.name)
  if (spec?.nodeSelector !== undefined) return selectorMatches(spec.nodeSelector, node.metadata.labels)
  return true
}

function backendText(b: IngressBackend): string {
  return `${b.namespace ?? 'default'}/${b.service}:${b.port}`
}

/**
 * Whether the ingress node connects to an endpoint from its own address (its address, its pod's
 * `status.node`, the service's namespace): in a shared namespace, only pods of the node's own
 * cluster (the other member clusters accept no node's own address as a source, only shared pods'
 * and federated ingress addresses: `FederatedReach`).
 */
export type EndpointReach = (address: string, node: string | undefined, namespace: string) => boolean

/**
 * The reach of a node of the cluster whose /48 is `own`: any endpoint of a namespace that is not
 * shared; in a shared one (`clusterOf(ns)`: this cluster's name in its federation), pods bound to
 * `node@<this cluster>` with an address in `own`.
 */
export function clusterEndpointReach(own: IpPrefix, clusterOf: (ns: string) => string | undefined): EndpointReach {
  return (address, node, ns) => {
    const cluster = clusterOf(ns)
    if (cluster === undefined) return true
    try {
      return node?.endsWith(`@${cluster}`) === true && addressInPrefix(address, own)
    } catch {
      return false
    }
  }
}

/**
 * A backend's ready endpoints (those `reach` allows), or why there are none; with none that `reach`
 * allows, those of other member clusters the node routes (`across`), connected to from its
 * federated ingress address.
 */
export function resolveBackend(
  b: IngressBackend | undefined,
  services: readonly Service[],
  pods: readonly EndpointPod[],
  reach?: EndpointReach,
  across?: FederatedReach,
): { backends: Backend[]; problem?: string } {
  if (b === undefined) return { backends: [], problem: 'no backend for this port' }
  const ns = b.namespace ?? 'default'
  const svc = services.find((s) => s.metadata.name === b.service && (s.metadata.namespace ?? 'default') === ns)
  if (svc === undefined) return { backends: [], problem: `service ${ns}/${b.service} does not exist` }
  const sp = (svc.spec?.ports ?? []).find((p) => (typeof b.port === 'number' ? p.port === b.port : p.name === b.port))
  if (sp === undefined) {
    const have = (svc.spec?.ports ?? []).map((p) => (p.name ? `${p.name}=${p.port}` : String(p.port))).join(', ') || 'none'
    return { backends: [], problem: `service ${ns}/${b.service} has no port ${JSON.stringify(b.port)} (its ports: ${have})` }
  }
  if ((sp.protocol ?? 'TCP') !== 'TCP')
    return { backends: [], problem: `service ${ns}/${b.service} port ${b.port} is ${sp.protocol}; tcp-proxy forwards TCP only` }
  const eps = serviceEndpoints(svc, pods).endpoints
  const backends: Backend[] = []
  const remote: Backend[] = []
  let elsewhere = 0
  for (const e of eps) {
    if (!e.ready || e.address === undefined) continue
    const p = e.ports.find((x) => x.port === sp.port && x.protocol === 'TCP')
    if (p === undefined) continue
    if (reach !== undefined && !reach(e.address, e.node, ns)) {
      elsewhere++
      if (across?.source !== undefined && across.routed(e.address)) remote.push({ pod: e.pod, address: e.address, port: p.targetPort, source: across.source })
    } else backends.push({ pod: e.pod, address: e.address, port: p.targetPort })
  }
  if (backends.length > 0) return { backends }
  if (remote.length > 0) return { backends: remote }
  if (elsewhere > 0) {
    const why =
      across === undefined
        ? 'reached from a node serving the Ingress once its federated ingress address is routed there'
        : across.source === undefined
          ? "this node's federated ingress address is not up yet"
          : 'none routed to this node yet'
    return {
      backends,
      problem: `service ${ns}/${b.service} has no ready endpoint in this cluster (${elsewhere} in other member clusters of its federation: ${why})`,
    }
  }
  if (eps.length === 0) return { backends, problem: `service ${ns}/${b.service} selects no pod` }
  return { backends, problem: `service ${ns}/${b.service} has no ready endpoint (${eps.map((e) => `${e.pod}: ${e.reason ?? 'no port'}`).join('; ')})` }
}

/** Every listener this node should have for the Ingresses of `controller`. */
export function planIngressListeners(
  controller: string,
  node: NodeView,
  ingresses: readonly Ingress[],
  services: readonly Service[],
  pods: readonly EndpointPod[],
  reach?: EndpointReach,
  across?: FederatedReach,
): PlannedListener[] {
  const out: PlannedListener[] = []
  for (const ing of [...ingresses].sort((a, b) => (a.metadata.name < b.metadata.name ? -1 : 1))) {
    if (ing.spec?.controller !== controller || !ingressWantsNode(ing, node)) continue
    const families: Family[] = ing.spec.listen?.families?.length ? [...ing.spec.listen.families] : ['IPv4', 'IPv6']
    for (const { port, backend } of ingressPorts(ing.spec)) {
      const r = resolveBackend(backend, services, pods, reach, across)
      for (const family of families) {
        out.push({
          key: `${ing.metadata.name}/${family}/${port}`,
          ingress: ing.metadata.name,
          port,
          family,
          backend: backend ? backendText(backend) : '<none>',
          backends: r.backends,
          ...(r.problem !== undefined ? { problem: r.problem } : {}),
        })
      }
    }
  }
  return out
}

/** One node's status entry for an Ingress from its listeners and what binding them said. */
export function nodeStatusOf(
  listeners: readonly PlannedListener[],
  bound: ReadonlyMap<string, { addresses: string[] } | { error: string }>,
): Omit<IngressNodeStatus, 'updatedAt'> {
  const addresses: string[] = []
  const problems: string[] = []
  const seen = new Set<string>()
  for (const l of listeners) {
    const b = bound.get(l.key)
    if (b === undefined) problems.push(`port ${l.port} (${l.family}) not listening yet`)
    else if ('error' in b) problems.push(b.error)
    else addresses.push(...b.addresses)
    if (l.problem !== undefined && !seen.has(l.problem)) {
      seen.add(l.problem)
      problems.push(`port ${l.port}: ${l.problem}`)
    }
  }
  const backends = new Set(listeners.flatMap((l) => l.backends.map((b) => `${b.address}:${b.port}`))).size
  const out: Omit<IngressNodeStatus, 'updatedAt'> = { addresses: [...new Set(addresses)], backends, ready: problems.length === 0 }
  if (problems.length > 0) out.reason = [...new Set(problems)].join('; ')
  return out
}

/**
 * `orc why ingress/NAME`: what stands between the Ingress and traffic, as lines. Reads every node's
 * view (nodes chosen, their status entries) and resolves the backends as any node would.
 */
export function explainIngress(
  ing: Ingress,
  nodes: readonly NodeView[],
  services: readonly Service[],
  pods: readonly EndpointPod[],
  reach?: EndpointReach,
): string[] {
  const lines: string[] = []
  const spec = ing.spec
  const name = `ingress/${ing.metadata.name}`
  if (spec === undefined) return [`${name} has no spec`]
  if (spec.controller !== TCP_PROXY)
    lines.push(`${name} names controller ${JSON.stringify(spec.controller)}; orc runs ${TCP_PROXY} only, so nothing here serves it`)
  const chosen = nodes.filter((n) => ingressWantsNode(ing, n)).map((n) => n.metadata.name)
  if (chosen.length === 0) {
    if (spec.nodes !== undefined) {
      lines.push(`spec.nodes names no node of the cluster (${spec.nodes.join(', ') || 'empty'}; nodes: ${nodes.map((n) => n.metadata.name).join(', ')})`)
    } else {
      lines.push(
        `spec.nodeSelector ${Object.entries(spec.nodeSelector ?? {})
          .map(([k, v]) => `${k}=${v}`)
          .join(',')} matches no node`,
      )
    }
  } else {
    const missing = (spec.nodes ?? []).filter((n) => !nodes.some((x) => x.metadata.name === n))
    if (missing.length > 0) lines.push(`spec.nodes names nodes the cluster does not have: ${missing.join(', ')}`)
  }
  for (const { port, backend } of ingressPorts(spec)) {
    const r = resolveBackend(backend, services, pods, reach)
    if (r.problem !== undefined) lines.push(`port ${port}: ${r.problem}`)
    else lines.push(`port ${port}: ${r.backends.length} ready endpoint(s) (${r.backends.map((b) => b.pod).join(', ')})`)
  }
  const st = (ing.status as IngressStatus | undefined)?.nodes ?? {}
  for (const n of chosen) {
    const e = st[n]
    if (e === undefined) lines.push(`node ${n}: no report yet (is its agent running?)`)
    else if (e.ready === true) lines.push(`node ${n}: listening on ${(e.addresses ?? []).join(', ') || '<no address>'}, ${e.backends ?? 0} backend(s)`)
    else lines.push(`node ${n}: not ready: ${e.reason ?? 'unknown'}`)
  }
  return lines
}
