/**
 * Virtual addresses of shared services (pure; docs/federation.md, "Shared services by virtual
 * address").
 *
 * A ClusterIP service of a shared namespace gets its address in its federation's range
 * (`federationVirtualRange(federation id)`), so every node of every member cluster derives the same
 * one. Each node balances it over the endpoints **it can reach**: the ready pods of its own cluster
 * (routed by the cluster's mesh), and, only when there are none, the ready pods of other clusters
 * whose /128 this node routes (its federated routes, `planFederatedPeers`). Those are reachable only
 * from this node's own shared pods (the far end accepts no other source), so that fallback is
 * balanced for connections from them only and refused for the rest.
 *
 * Services and pods of the federation document come from other clusters: untrusted. Names must be
 * DNS labels, ports integers in range, protocols TCP or UDP, addresses parse; what fails is skipped.
 */
import { DNS_LABEL, type EndpointPod, type EndpointService, isPlainObject, serviceEndpoints } from '../../model/index.ts'
import {
  addressInPrefix,
  federationVirtualRange,
  formatPrefix,
  host128,
  type IpPrefix,
  prefixCovers,
  servicesWithSharedAddress,
  sharedServiceVirtualAddress,
  type VirtualPort,
  type VirtualService,
} from '../../net/index.ts'
import { clusterEndpointReach } from '../ingress/plan.ts'
import { type FederatedScopeInput, get } from './federation.ts'

/** At most this many services per federation are balanced (a bound on the ruleset a member cluster can make us build). */
export const MAX_SHARED_SERVICES = 4096

export interface SharedServicesPlan {
  /** The federations whose services are balanced here: id and range. */
  federations: { federation: string; id: string; range: IpPrefix }[]
  services: VirtualService[]
  /** Entries left out (malformed, colliding), for logs. */
  skipped: string[]
}

const PORT_OK = (n: unknown): n is number => typeof n === 'number' && Number.isInteger(n) && n >= 1 && n <= 65535

/** The service as the endpoint code reads it, or why not (only what the balancer needs is kept). */
function readService(raw: unknown): (EndpointService & { spec: { type?: string } }) | string {
  const name = get(raw, 'metadata', 'name')
  const namespace = get(raw, 'metadata', 'namespace')
  if (typeof name !== 'string' || !DNS_LABEL.test(name) || typeof namespace !== 'string' || !DNS_LABEL.test(namespace)) return 'bad name'
  const type = get(raw, 'spec', 'type')
  const ports = get(raw, 'spec', 'ports')
  const selector = get(raw, 'spec', 'selector')
  if (ports !== undefined && !Array.isArray(ports)) return `${namespace}/${name}: bad ports`
  const out: NonNullable<EndpointService['spec']>['ports'] = []
  for (const p of (ports ?? []).slice(0, 64)) {
    const protocol = get(p, 'protocol') ?? 'TCP'
    const port = get(p, 'port')
    const targetPort = get(p, 'targetPort')
    const pname = get(p, 'name')
    if (!PORT_OK(port) || (protocol !== 'TCP' && protocol !== 'UDP')) return `${namespace}/${name}: bad port`
    if (targetPort !== undefined && !PORT_OK(targetPort) && typeof targetPort !== 'string') return `${namespace}/${name}: bad targetPort`
    out.push({ port, protocol, ...(targetPort !== undefined ? { targetPort } : {}), ...(typeof pname === 'string' ? { name: pname } : {}) })
  }
  const sel = isPlainObject(selector) ? Object.fromEntries(Object.entries(selector).filter((e): e is [string, string] => typeof e[1] === 'string')) : undefined
  return {
    metadata: { name, namespace },
    spec: { ...(typeof type === 'string' ? { type } : {}), ports: out, ...(sel !== undefined ? { selector: sel } : {}) },
  } as EndpointService & { spec: { type?: string } }
}

/**
 * What this node balances for its federations' shared services. `self.node` is its plain name,
 * `ownCluster` its cluster's /48, `routed` the /128s of other clusters' pods its federated plan
 * routes (peers' and relays' routes).
 */
export function planSharedServices(
  scopes: readonly FederatedScopeInput[],
  self: { node: string; ownCluster: IpPrefix; routed: ReadonlySet<string> },
): SharedServicesPlan {
  const skipped: string[] = []
  const federations: SharedServicesPlan['federations'] = []
  const services: VirtualService[] = []
  for (const s of [...scopes].sort((a, b) => (a.federation < b.federation ? -1 : a.federation > b.federation ? 1 : 0))) {
    if (s.id === undefined || s.id === '' || s.namespaces === undefined || s.services === undefined) continue
    const range = federationVirtualRange(s.id)
    if (prefixCovers(self.ownCluster, range)) {
      skipped.push(`${s.federation}: its virtual range ${formatPrefix(range)} lies in this cluster's ${formatPrefix(self.ownCluster)}`)
      continue
    }
    federations.push({ federation: s.federation, id: s.id, range })
    const me = `${self.node}@${s.cluster}`
    const shared = new Set(s.namespaces)
    // A pod of this cluster (bound to one of its nodes, an address in its /48), as the ingress judges it.
    const inOwnCluster = clusterEndpointReach(self.ownCluster, () => s.cluster)
    // Pods of the shared namespaces; this node's own (the sources a remote fallback serves).
    const pods: EndpointPod[] = []
    const sources: string[] = []
    for (const p of s.pods) {
      const ns = get(p, 'metadata', 'namespace')
      const name = get(p, 'metadata', 'name')
      if (typeof ns !== 'string' || !shared.has(ns) || typeof name !== 'string') continue
      pods.push(p as EndpointPod)
      const phase = get(p, 'status', 'phase')
      const ipv6 = get(p, 'status', 'network', 'ipv6')
      if (get(p, 'status', 'node') === me && typeof ipv6 === 'string' && phase !== 'Succeeded' && phase !== 'Failed') {
        const h = host128(ipv6)
        if (h !== undefined && addressInPrefix(ipv6, self.ownCluster)) sources.push(h.slice(0, -4))
      }
    }
    sources.sort()
    const out: VirtualService[] = []
    for (const raw of s.services) {
      if (out.length >= MAX_SHARED_SERVICES) {
        skipped.push(`${s.federation}: more than ${MAX_SHARED_SERVICES} shared services`)
        break
      }
      if (!shared.has(String(get(raw, 'metadata', 'namespace')))) continue
      const svc = readService(raw)
      if (typeof svc === 'string') {
        skipped.push(`${s.federation}: service ${svc}`)
        continue
      }
      const address = sharedServiceVirtualAddress(svc, s.id)
      if (address === undefined) continue
      const eps = serviceEndpoints(svc, pods).endpoints.filter((e) => e.ready && e.address !== undefined)
      const ports: VirtualPort[] = (svc.spec?.ports ?? []).map((p) => {
        const protocol = p.protocol ?? 'TCP'
        const near: VirtualPort['backends'] = []
        const far: VirtualPort['backends'] = []
        for (const e of eps) {
          const ep = e.ports.find((x) => x.port === p.port && x.protocol === protocol)
          if (ep === undefined || !PORT_OK(ep.targetPort)) continue
          const h = host128(e.address!)
          if (h === undefined) continue
          const addr = h.slice(0, -4)
          if (inOwnCluster(addr, e.node, svc.metadata.namespace ?? 'default')) near.push({ address: addr, port: ep.targetPort })
          else if (self.routed.has(h)) far.push({ address: addr, port: ep.targetPort })
        }
        // Own cluster first; the other clusters' endpoints only when it has none.
        if (near.length > 0 || far.length === 0) return { protocol, port: p.port, backends: near }
        return { protocol, port: p.port, backends: far, sources: [...sources] }
      })
      out.push({ key: `${svc.metadata.namespace}/${svc.metadata.name}`, address, ports })
    }
    const { kept, shared: dup } = servicesWithSharedAddress(out)
    for (const d of dup) skipped.push(`${s.federation}: service ${d} has the virtual address of another`)
    services.push(...kept)
  }
  return { federations, services, skipped }
}
